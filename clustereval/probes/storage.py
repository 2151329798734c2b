"""Parsers for what the storage phase reads on a node: ``df`` for the scanned paths (parsed by
``probes.df``, named here for the phase), and the layout tools of parallel filesystems (Lustre
``lfs``, GPFS ``mmlsfs`` / ``mmlsdisk``, BeeGFS ``beegfs-ctl --getentryinfo``, NFS ``nfsstat -m``).
Pure: text in, values out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.probes.df import DF_ARGV as _DF_ARGV
from clustereval.probes.df import parse_df as parse_df
from clustereval.records.environment import DfRow as DfRow
from clustereval.records.storage import LustreTarget

# argv of the df the phase runs (paths appended); ``probes.df`` parses it
DF_ARGV = [*_DF_ARGV, "--"]



# ---- human sizes in tool output -------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}


def parse_size(text: str) -> int | None:
    """``512K``, ``1.1T``, ``4194304`` -> bytes (binary units, as these tools print them)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


# ---- Lustre ---------------------------------------------------------------------------------


@dataclass
class LustreDf:
    """``lfs df`` (sizes in KiB) or ``lfs df -h`` (human sizes): every MDT and OST, and the total."""

    targets: list[LustreTarget] = field(default_factory=list)
    total: str = ""  # filesystem_summary size as lfs printed it

    @property
    def num_osts(self) -> int:
        return sum(1 for t in self.targets if t.kind == "OST")

    @property
    def num_mdts(self) -> int:
        return sum(1 for t in self.targets if t.kind == "MDT")

    @property
    def ost_sizes(self) -> list[str]:
        """The OSTs' sizes as lfs printed them (the OSTs that answered)."""
        return [t.size_text for t in self.targets if t.kind == "OST" and not t.inactive]


_LFS_TARGET = re.compile(r"^(\S+?(MDT|OST)([0-9a-fA-F]{4})\S*)")
_LFS_SIZES = re.compile(r"^\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)%\s+\S+")
_LFS_INACTIVE = re.compile(r"^\s*:?\s*(inactive device|.*(?:unavailable|Resource temporarily))")


def _kib(cell: str) -> int | None:
    """A size cell in KiB: plain (``lfs df``) or human (``lfs df -h``, powers of 1024)."""
    if cell.isdigit():
        return int(cell)
    num = parse_size(cell)
    return num // 1024 if num is not None else None


def parse_lfs_df(text: str) -> LustreDf:
    df = LustreDf()
    for raw in text.splitlines():
        line = raw.strip()
        parts = line.split()
        if parts and parts[0] == "filesystem_summary:" and len(parts) > 1:
            df.total = parts[1]
            continue
        m = _LFS_TARGET.match(line)
        if not m:
            continue
        uuid, kind, index = m.group(1), m.group(2), int(m.group(3), 16)
        rest = line[m.end():]
        sizes = _LFS_SIZES.match(rest)
        kib = [_kib(c) for c in sizes.groups()[:3]] if sizes else []
        if sizes and None not in kib:
            df.targets.append(LustreTarget(uuid=uuid, kind=kind, index=index, size_kib=kib[0] or 0,
                                           used_kib=kib[1] or 0, avail_kib=kib[2] or 0,
                                           use_pct=float(sizes.group(4)), size_text=sizes.group(1)))
        elif _LFS_INACTIVE.match(rest):
            df.targets.append(LustreTarget(uuid=uuid, kind=kind, index=index, inactive=True))
    return df


@dataclass
class StripeComponent:
    stripe_count: int
    stripe_size_bytes: int
    extent_end: str = ""  # PFL component end ("EOF" for the last); "" for a plain layout


def parse_lfs_getstripe(text: str) -> list[StripeComponent]:
    """Default layout of a directory; one component, or one per PFL component."""
    comps: list[StripeComponent] = []
    end = ""
    for line in text.splitlines():
        m_end = re.search(r"lcme_extent\.e_end:\s*(\S+)", line)
        if m_end:
            end = m_end.group(1)
        m = re.search(r"stripe_count:\s*(-?\d+)\s+stripe_size:\s*(\d+)", line)
        if m:
            comps.append(StripeComponent(int(m.group(1)), int(m.group(2)), end))
            end = ""
    if not comps:  # lfs prints each field on its own line with --raw or -v
        count = re.search(r"lmm_stripe_count:\s*(-?\d+)", text)
        size = re.search(r"lmm_stripe_size:\s*(\d+)", text)
        if count and size:
            comps.append(StripeComponent(int(count.group(1)), int(size.group(1))))
    return comps


# ---- GPFS / Storage Scale -------------------------------------------------------------------


def parse_mmlsfs(text: str) -> dict[str, str]:
    """Flag -> value from ``mmlsfs <device>`` (``-B`` is the block size)."""
    flags: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(-\S+)\s+(\S+)", line)
        if m and not line.lstrip().startswith("---"):
            flags.setdefault(m.group(1), m.group(2))
    return flags


@dataclass
class GpfsDisks:
    num_disks: int
    num_data_disks: int
    num_up: int


def parse_mmlsdisk(text: str) -> GpfsDisks:
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("---")), None)
    disks = data = up = 0
    if start is None:
        return GpfsDisks(0, 0, 0)
    for line in lines[start + 1:]:
        parts = line.split()
        if len(parts) < 8:
            continue
        disks += 1
        if parts[5].lower() == "yes":
            data += 1
        if parts[7].lower() == "up":
            up += 1
    return GpfsDisks(disks, data, up)


# ---- BeeGFS ---------------------------------------------------------------------------------


@dataclass
class BeegfsEntry:
    pattern: str = ""
    chunk_size: str = ""
    num_targets: int | None = None
    storage_pool: str = ""


def parse_beegfs_entryinfo(text: str) -> BeegfsEntry:
    entry = BeegfsEntry()
    m = re.search(r"\+\s*Type:\s*(\S+)", text)
    entry.pattern = m.group(1) if m else ""
    m = re.search(r"\+\s*Chunksize:\s*(\S+)", text)
    entry.chunk_size = m.group(1) if m else ""
    m = re.search(r"Number of storage targets:\s*(?:desired:\s*)?(\d+)", text)
    entry.num_targets = int(m.group(1)) if m else None
    m = re.search(r"\+\s*Storage Pool:\s*(.+)", text)
    entry.storage_pool = m.group(1).strip() if m else ""
    return entry


# ---- NFS ------------------------------------------------------------------------------------

NFS_THROUGHPUT_OPTIONS = ("vers", "proto", "rsize", "wsize", "nconnect")


@dataclass
class NfsMount:
    mount: str
    server: str
    flags: dict[str, str]


def parse_nfsstat_m(text: str) -> list[NfsMount]:
    mounts: list[NfsMount] = []
    for line in text.splitlines():
        m = re.match(r"^(\S.*?) from (\S+)\s*$", line)
        if m:
            mounts.append(NfsMount(m.group(1), m.group(2), {}))
            continue
        f = re.match(r"^\s+Flags:\s*(\S+)", line)
        if f and mounts:
            for item in f.group(1).split(","):
                key, _, value = item.partition("=")
                mounts[-1].flags[key] = value
    return mounts


def nfs_mount_for(mounts: list[NfsMount], path: str) -> NfsMount | None:
    """The NFS mount ``path`` lies under (the longest matching mount point)."""
    best = None
    for m in mounts:
        root = m.mount.rstrip("/") or "/"
        if (path == root or path.startswith(root.rstrip("/") + "/")) and (best is None or len(root) > len(best.mount)):
            best = m
    return best


# ---- dd -------------------------------------------------------------------------------------


def parse_dd(text: str) -> tuple[int, float] | None:
    """(bytes, seconds) from dd's closing line: ``1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2.34 s, ...``."""
    for line in reversed(text.splitlines()):
        m = re.match(r"^(\d+) bytes\b.*?copied,\s*([0-9]+(?:[.,][0-9]+)?(?:e-?\d+)?)\s*s", line)
        if m:
            return int(m.group(1)), float(m.group(2).replace(",", "."))
    return None
