"""Storage judgements, pure: which mounts to scan, which scans are equivalent, targets met or not.

- Before scanning, shared mounts are grouped by (backing type, size): one scan stands for every
  mount of the same type and size (managed filesystems are provisioned per TiB, so a different
  size is a different product).
- After scanning, mounts share a table only if every bandwidth and IOPS cell differs by at most
  5%, measured as ``abs(a - b) / min(a, b)`` so the test is symmetric.
- With operator targets a mount is healthy when every cell with a target is at most 5% below it.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass, field

from clustereval.analysis.rules import rule
from clustereval.config import StorageTarget
from clustereval.records.storage import FILE_SIZES, OPS, MountScan
from clustereval.report.units import iec_df, iec_whole

EQUIVALENCE_TOLERANCE = 0.05  # the runbook's 5% rule
# a cell this far below its target is a shortfall, not run-to-run noise (the rules table's row)
TARGET_TOLERANCE = round(1 - rule("storage.fio").fraction, 6)


def cell_key(file_size_bytes: int, rw: str) -> str:
    """The key operator targets use for one cell: ``16KiB-read``, ``1GiB-write``."""
    return f"{iec_whole(file_size_bytes).replace(' ', '')}-{rw}"


# ---- before the scan: what to scan ----------------------------------------------------------


@dataclass
class Candidate:
    """A declared shared path with what ``df`` / the inventory says is behind it."""

    path: str
    fstype: str
    size_bytes: int
    source: str
    volume_mount: str = ""


@dataclass
class PlannedScan:
    scan: Candidate
    same_volume: list[str] = field(default_factory=list)  # other declared paths on the very same volume
    stands_for: list[str] = field(default_factory=list)  # other volumes of the same type and size


def names_a_volume(source: str) -> bool:
    """Whether a mount source identifies one volume (a device, ``server:/export``, ``nid@net:/fs``);
    ``tmpfs``, ``overlay`` or ``none`` are shared by unrelated mounts."""
    return "/" in source or ":" in source or "@" in source


def same_volume(source_a: str, mount_a: str, source_b: str, mount_b: str) -> bool:
    """Same backing volume: the same mount point, or the same identifying source (a bind mount, an alias)."""
    if mount_a and mount_a == mount_b:
        return True
    return names_a_volume(source_a) and source_a == source_b


def plan_scans(candidates: list[Candidate]) -> list[PlannedScan]:
    """One scan per distinct (type, size); the first declared path of each group is scanned."""
    plans: list[PlannedScan] = []
    for cand in candidates:
        same = next((p for p in plans if p.scan.fstype == cand.fstype and same_volume(
            p.scan.source, p.scan.volume_mount, cand.source, cand.volume_mount)), None)
        if same:
            same.same_volume.append(cand.path)
            continue
        alike = next((p for p in plans if p.scan.fstype == cand.fstype
                      and iec_df(p.scan.size_bytes) == iec_df(cand.size_bytes)), None)
        if alike:
            alike.stands_for.append(cand.path)
            continue
        plans.append(PlannedScan(cand))
    return plans


# ---- after the scan: which scans are equivalent ---------------------------------------------


def relative_difference(a: float, b: float) -> float:
    """``abs(a - b) / min(a, b)``; infinite when one side is zero and the other is not."""
    if a == b:
        return 0.0
    low = min(a, b)
    return math.inf if low <= 0 else abs(a - b) / low


def cell_keys() -> list[tuple[int, str]]:
    return [(size, rw) for _, size, _ in FILE_SIZES for rw in OPS]


def equivalent(a: MountScan, b: MountScan, tolerance: float = EQUIVALENCE_TOLERANCE) -> bool:
    """Every bandwidth and IOPS cell within ``tolerance``; a missing cell is never equivalent."""
    sizes = {c.file_size_bytes for c in a.cells} | {c.file_size_bytes for c in b.cells}
    keys = [(s, rw) for s in sorted(sizes) for rw in OPS] or cell_keys()
    for size, rw in keys:
        ca, cb = a.cell(size, rw), b.cell(size, rw)
        if ca is None or cb is None:
            return False
        if relative_difference(ca.bw_mib_s, cb.bw_mib_s) > tolerance:
            return False
        if relative_difference(ca.iops, cb.iops) > tolerance:
            return False
    return True


def group_by_measurement(scans: list[MountScan], tolerance: float = EQUIVALENCE_TOLERANCE) -> list[list[MountScan]]:
    """Tables: a scan joins a group only when it is equivalent to every scan already in it."""
    groups: list[list[MountScan]] = []
    for scan in scans:
        home = next((g for g in groups if all(equivalent(scan, other, tolerance) for other in g)), None)
        if home is None:
            groups.append([scan])
        else:
            home.append(scan)
    return groups


# ---- targets --------------------------------------------------------------------------------


@dataclass
class CellVerdict:
    key: str  # 16KiB-read
    file_size_bytes: int
    rw: str
    unit: str  # "MiB/s" | "IOPS"
    measured: float
    target: float

    @property
    def shortfall(self) -> float:
        """How far below the target, as a fraction of it (negative: above)."""
        return (self.target - self.measured) / self.target if self.target else 0.0

    @property
    def met(self) -> bool:
        return self.shortfall <= TARGET_TOLERANCE


@dataclass
class Judgement:
    verdict: str  # healthy | underperforming | needs_input
    target: StorageTarget | None = None
    cells: list[CellVerdict] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)  # measured cells the target gives no figure for

    @property
    def short(self) -> list[CellVerdict]:
        return [c for c in self.cells if not c.met]


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else ""


def target_for(targets: list[StorageTarget] | tuple[StorageTarget, ...], scan: MountScan) -> StorageTarget | None:
    """The operator's figures for this scan: given for the path scanned, a path on the same volume,
    or the volume's mount point (``/`` covers a scan of ``/tmp`` on the root disk)."""
    names = {_norm(scan.mount), *(_norm(p) for p in scan.same_volume)}
    if scan.volume_mount:
        names.add(_norm(scan.volume_mount))
    return next((t for t in targets if _norm(t.mount) in names), None)


def judge(scan: MountScan, target: StorageTarget | None) -> Judgement:
    """Healthy when every cell with a target is at most 5% below it; no figures -> needs input."""
    if target is None:
        return Judgement("needs_input")
    cells: list[CellVerdict] = []
    unjudged: list[str] = []
    for size, rw in cell_keys():
        cell = scan.cell(size, rw)
        if cell is None:
            continue
        key = cell_key(size, rw)
        if key in target.bw_mib_s:
            cells.append(CellVerdict(key, size, rw, "MiB/s", cell.bw_mib_s, float(target.bw_mib_s[key])))
        elif key in target.iops:
            cells.append(CellVerdict(key, size, rw, "IOPS", cell.iops, float(target.iops[key])))
        else:
            unjudged.append(key)
    if not cells:
        return Judgement("needs_input", target, [], unjudged)
    verdict = "healthy" if all(c.met for c in cells) else "underperforming"
    return Judgement(verdict, target, cells, unjudged)
