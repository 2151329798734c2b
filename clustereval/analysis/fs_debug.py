"""The slow-filesystem diagnosis: is the filesystem's capacity saturated, or is the job's I/O
pattern the limit? Pure.

The verdict needs a target: the operator's expected figures for this mount (``[targets.storage]``
in cluster.toml, one value per fio cell). With them, a quick scan well below the figures says the
capacity is used elsewhere or degraded (saturated), a scan at the figures says the filesystem
delivers and the job's pattern is the likely limit. Without them the verdict stays undecided and
both branches are given as guidance, with the measured numbers that bear on each. Storage
CONCERNs from the snapshot (full or unevenly filled OSTs, a full or hanging mount) point to the
capacity side on their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from clustereval.analysis.snapshot import format_signal
from clustereval.analysis.storage import cell_key
from clustereval.records.debug import FsDebugRecord
from clustereval.records.snapshot import Signal
from clustereval.records.storage import FioCell, Layout
from clustereval.report.units import iec_whole

TARGET_SHORTFALL = 0.8  # measured below this fraction of the operator's figure: the capacity side


def _bw(cells: list[FioCell], size: int, rw: str) -> float | None:
    for c in cells:
        if c.file_size_bytes == size and c.rw == rw and c.bw_mib_s > 0 and not c.error:
            return c.bw_mib_s
    return None


def _sizes(*scans: list[FioCell]) -> list[int]:
    return sorted({c.file_size_bytes for cells in scans for c in cells})


def sweep_text(cells: list[FioCell]) -> str:
    """``read / write: 16 KiB 1.0 MiB/s / 2.0 MiB/s, 1 MiB …`` (every cell, each with its unit)."""
    parts = []
    for size in _sizes(cells):
        r, w = _bw(cells, size, "read"), _bw(cells, size, "write")
        if r is None and w is None:
            continue
        fmt = [f"{v:.1f} MiB/s" if v is not None else "no figure" for v in (r, w)]
        parts.append(f"{iec_whole(size)} {fmt[0]} / {fmt[1]}")
    return "read / write: " + ", ".join(parts) if parts else "no fio figures"


def diagnose(mount: str, shared: list[FioCell], local: list[FioCell], layout: Layout | None,
             signals: list[Signal], targets: Mapping[str, float] | None = None, *, fstype: str = "",
             local_label: str = "the local disk") -> tuple[str, list[str], list[str]]:
    """(verdict, facts, guidance). verdict: ``saturated`` | ``pattern`` | ``undecided``.

    ``fstype``: the measured filesystem's type, which picks the advice; ``local_label``: what the
    local scan measured, e.g. "the local disk /scratch (xfs)"."""
    facts: list[str] = []
    capacity_reasons: list[str] = []
    for s in signals:
        if s.concern and s.key.startswith("storage") and (not s.subject or s.subject == mount
                                                          or mount.startswith(s.subject.rstrip("/") + "/")):
            capacity_reasons.append(s.text)
        if s.concern and s.key == "cpu.iowait":
            facts.append(f"the node spends CPU time waiting on IO: {s.text}")
    if shared:
        facts.append(f"`fio` on {mount}, one client, 16 jobs: {sweep_text(shared)}")
    if local:
        facts.append(f"`fio` on {local_label}, same runs: {sweep_text(local)}")
    ratios = []
    for size in _sizes(shared, local):
        for rw in ("read", "write"):
            s_bw, l_bw = _bw(shared, size, rw), _bw(local, size, rw)
            if s_bw and l_bw:
                ratios.append(f"{iec_whole(size)} {rw} {l_bw / s_bw:.1f}×")
    if ratios:
        facts.append(f"{mount} is this many times slower than {local_label} (local bandwidth ÷ {mount} "
                     "bandwidth): " + ", ".join(ratios))
    sizes = _sizes(shared)
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        small, large = _bw(shared, lo, "read"), _bw(shared, hi, "read")
        if small and large:
            facts.append(f"reading {iec_whole(lo)} files on {mount} runs at {small:.1f} MiB/s against "
                         f"{large:.1f} MiB/s for {iec_whole(hi)} files ({large / small:.1f}× apart)")
    if layout is not None and layout.summary:
        facts.append(f"layout of a new folder on {mount}: {layout.summary}")
    if layout is not None and layout.stripe_count is not None:
        if layout.stripe_count == 1 and (layout.num_targets or 0) > 1:
            facts.append("each new file in this folder sits on a single OST, so one large file (a checkpoint "
                         "shard, a dataset shard) moves at the speed of one OST whatever the filesystem's size")

    verdict = "undecided"
    if capacity_reasons:
        verdict = "saturated"
        facts.append("capacity side: " + "; ".join(capacity_reasons))
    elif targets:
        compared = []
        for c in shared:
            key = cell_key(c.file_size_bytes, c.rw)
            if key in targets and c.bw_mib_s > 0 and not c.error and targets[key] > 0:
                compared.append((c, c.bw_mib_s / targets[key]))
        if compared:
            facts.append("against the operator's figures: " + ", ".join(
                f"{iec_whole(c.file_size_bytes)} {c.rw} {100 * frac:.0f}%" for c, frac in compared))
            # bandwidth-bound cells decide (1 MiB and up); small files are latency-bound on any FS
            big = [frac for c, frac in compared if c.file_size_bytes >= 2**20] or [frac for _, frac in compared]
            verdict = "saturated" if min(big) < TARGET_SHORTFALL else "pattern"
    return verdict, facts, guidance(verdict, mount, shared, layout, fstype)


LOCAL_DISK = ("ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "overlay")


def fs_family(fstype: str, layout: Layout | None = None) -> str:
    """lustre | gpfs | beegfs | nfs | weka | hostshare | ram | local | shared: which advice applies."""
    if fstype == "lustre" or (not fstype and layout is not None and layout.tool == "lfs"):
        return "lustre"
    if fstype == "gpfs":
        return "gpfs"
    if fstype == "beegfs":
        return "beegfs"
    if fstype.startswith("nfs"):
        return "nfs"
    if fstype in ("wekafs", "fuse.weka"):
        return "weka"
    if fstype in ("virtiofs", "9p"):
        return "hostshare"
    if fstype in ("tmpfs", "ramfs"):
        return "ram"
    if fstype in LOCAL_DISK:
        return "local"
    return "shared"


def _capacity_steps(family: str, mount: str, layout: Layout | None) -> list[str]:
    """What to check on the capacity side, for the filesystem that was measured."""
    ask = (f"  - ask the operator for the figures {mount} is supposed to hit and whether other jobs load it now; "
           "re-run `clustereval debug fs` at a quiet time to compare")
    if family == "lustre":
        stripe = "  - Lustre: spread large files over more OSTs (`lfs setstripe -c -1 DIR` on a new, empty folder " \
                 "for checkpoints and dataset shards) and ask for full OSTs to be rebalanced"
        if layout is not None and layout.stripe_count == 1 and (layout.num_targets or 0) > 1:
            stripe += " (this folder's default stripe count is 1)"
        return [ask, stripe]
    if family == "gpfs":
        return [ask, "  - GPFS / Storage Scale: ask for the filesystem's block size and the client's `pagepool` "
                     "(`mmlsfs`, `mmlsconfig pagepool`); a small pagepool caps what one client reads"]
    if family == "beegfs":
        return [ask, "  - BeeGFS: see how files are striped (`beegfs-ctl --getentryinfo DIR`) and spread large "
                     "ones over more targets (`beegfs-ctl --setpattern --numtargets=N DIR` on a new, empty folder)"]
    if family == "nfs":
        return [ask, "  - NFS: one TCP connection caps a client; check the mount options (`findmnt -o OPTIONS "
                     f"{mount}`) for `nconnect=` and `rsize=`/`wsize=` (1048576 is the usual maximum) and ask "
                     "whether the server's disks or its network link are busy"]
    if family == "weka":
        return [ask, "  - WEKA: ask how many client cores (`num_cores` mount option) and which tier serve this "
                     "filesystem"]
    if family == "hostshare":
        return ["  - a folder shared from the host through the hypervisor: its speed is the host's disk and the "
                "share's cache mode (virtiofs `cache=`); ask the provider which disk backs it and whether "
                "other guests share it"]
    if family == "ram":
        return ["  - a RAM filesystem (tmpfs): it runs at memory speed and its limit is its size, not a disk; a "
                "full one stops writes (see the fullness line above)"]
    if family == "local":
        return [f"  - a node-local disk: compare with the drive's published figures (`lsblk -o NAME,MODEL {mount}`"
                " names the model; `nvme list` for NVMe drives), check that nothing else writes to it now "
                "(`iostat -x 5`), and whether it is one drive or a RAID set (`cat /proc/mdstat`)"]
    return [ask]


def guidance(verdict: str, mount: str, shared: list[FioCell], layout: Layout | None, fstype: str = "") -> list[str]:
    """The two branches as plain steps; the one the verdict points at first, with advice for the
    filesystem that was measured (``fstype``). Commands are for the reader to run; clustereval
    changes nothing."""
    family = fs_family(fstype, layout)
    sharers = "other jobs share it" if family not in ("local", "ram") else "other processes write to it"
    lead = ("If the filesystem's capacity is saturated (the quick scan is well below its figures, "
            + ("OSTs are full or unevenly filled, " if family == "lustre" else "it is nearly full, ")
            + f"{sharers}):")
    saturated = [lead, *_capacity_steps(family, mount, layout)]
    if family not in ("local", "ram"):
        saturated.append("  - move hot data (the dataset being read every epoch) to node-local NVMe or a cache tier")
    pattern = [
        "If the job's I/O pattern is the limit (the filesystem delivers its figures to one client):",
        "  - data loading: `DataLoader(num_workers=4..8 per GPU, pin_memory=True, persistent_workers=True, "
        "prefetch_factor=2..4)`, so reads overlap compute and host-to-GPU copies come from pinned memory",
        "  - checkpoints: save sharded and asynchronously (`torch.distributed.checkpoint` with `async_save`), "
        "every rank writing its own shard, instead of gathering a full state dict on rank 0 and "
        "`torch.save`-ing it from one process",
        "  - small files: pack them into shards of 100 MiB to 1 GiB (tar / WebDataset, Parquet, Arrow) and "
        "read the shards sequentially; every small file costs a metadata round trip",
    ]
    sizes = _sizes(shared)
    if len(sizes) >= 2:
        small, large = _bw(shared, sizes[0], "read"), _bw(shared, sizes[-1], "read")
        if small and large:
            pattern[-1] += (f" (here {iec_whole(sizes[0])} files read at {small:.1f} MiB/s, "
                            f"{iec_whole(sizes[-1])} files at {large:.1f} MiB/s)")
    head = {"saturated": "verdict: the capacity side (see the facts above)",
            "pattern": "verdict: the filesystem delivers its figures; look at the job's I/O pattern",
            "undecided": (f"verdict: undecided until the operator's expected figures for {mount} are known "
                          "(one value per measured cell, one client, 16 jobs, 4 KiB blocks, O_DIRECT; "
                          "`[targets.storage]` in cluster.toml)")}[verdict]
    order = pattern + saturated if verdict == "pattern" else saturated + pattern
    return [head, *order]


def report_lines(rec: FsDebugRecord) -> list[str]:
    """What `clustereval debug fs` prints."""
    lines = [f"{rec.path} on {rec.node}: {rec.fstype or 'unknown type'} filesystem mounted at {rec.mount}; "
             f"quick fio scan, {rec.runtime_s} s of timed IO per run"]
    if rec.local_note:
        lines.append(rec.local_note[0].upper() + rec.local_note[1:])
    lines += [format_signal(s) for s in rec.storage_signals]
    if rec.facts:
        lines.append("facts:")
        lines += [f"  - {f}" for f in rec.facts]
    lines += rec.guidance
    lines += [f"scratch: {c}" for c in rec.cleanup]
    if rec.evidence:
        lines.append(f"evidence: {rec.evidence}")
    return lines
