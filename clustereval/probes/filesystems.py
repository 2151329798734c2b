"""Mount tables -> the filesystem inventory: one row per distinct backing volume. Pure.

Rules (the runbook's Existing Partitions): always a ``/`` row; ``overlay`` is looked through to
its backing filesystem; bind mounts and ``/tmp`` on ``/`` fold into the row of their volume;
Linux md shows as ``md127 RAID0 (...)``; Lustre by ``nid@net:/fsname``; virtiofs by its tag.
Sizes only: used and free space are never read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from clustereval.probes.df import DfSize
from clustereval.probes.mounts import BlockDev, Mount, is_network
from clustereval.records.environment import FilesystemInfo
from clustereval.report.units import iec

PSEUDO = {
    "proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "cgroup", "cgroup2", "mqueue", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "rpc_pipefs",
    "nsfs", "efivarfs", "ramfs", "selinuxfs", "nfsd", "fuse.lxcfs", "fuse.snapfuse", "fuse.portal",
    "squashfs", "iso9660", "erofs", "zram", "overlay", "shm", "none", "rootfs", "devfs", "udev",
}
# file bind mounts a container runtime adds; they say which disk backs the container, nothing more
_SYSTEM_PREFIXES = ("/etc/", "/dev/", "/proc", "/sys", "/run/", "/var/run/", "/boot", "/efi", "/snap/",
                    "/var/lib/docker/", "/var/lib/kubelet/", "/var/lib/containers/")


def volume_key(m: Mount) -> str:
    """What identifies the backing volume: device, ``nid@net:/fsname``, ``server:/export``, virtiofs tag."""
    src = m.source
    if m.fstype == "lustre":
        lm = re.match(r"^(.+?:/[^/]+)", src)
        return "lustre:" + (lm.group(1) if lm else src)
    if src.startswith("/dev/"):
        return "dev:" + src
    if m.majmin and not is_network(m.fstype) and m.majmin not in ("0:0",):
        return "majmin:" + m.majmin
    return f"{m.fstype}:{src}"


def _skip(m: Mount) -> bool:
    if m.target != "/" and m.target.startswith(_SYSTEM_PREFIXES):
        return True
    if m.fstype in PSEUDO and m.target != "/":
        return True
    if m.fstype.startswith("fuse.") and not is_network(m.fstype):
        return True
    return False


def md_description(device: str, blocks: Sequence[BlockDev]) -> str:
    """``md127 RAID0 (8× 3.5 TiB NVMe)`` for a Linux md device; '' otherwise."""
    name = device.rsplit("/", 1)[-1]
    if not re.fullmatch(r"md\d+(p\d+)?", name) and not device.startswith("/dev/md/"):
        return ""
    rows = [b for b in blocks if b.kname == name or b.name == name]
    level = next((b.type for b in rows if b.type.startswith("raid") or b.type == "linear"), "")
    label = f"{name} RAID{level[4:]}" if level.startswith("raid") else f"{name} RAID"
    members = [b.pkname for b in rows if b.pkname]
    if not members:
        return label
    parents = {b.kname or b.name: b for b in blocks}
    disks = [_disk_of(parents, p) for p in members]
    sizes = {d.size_bytes for d in disks if d}
    kinds = {_disk_kind(d) for d in disks if d}
    desc = f"{len(members)}×"
    if len(sizes) == 1 and (size := next(iter(sizes))):
        desc += " " + iec(size)
    if len(kinds) == 1:
        desc += " " + next(iter(kinds))
    return f"{label} ({desc.strip()})"


def _disk_of(parents: dict[str, BlockDev], name: str) -> BlockDev | None:
    dev = parents.get(name)
    while dev and dev.type == "part" and dev.pkname in parents:
        dev = parents[dev.pkname]
    return dev


def _disk_kind(dev: BlockDev) -> str:
    if dev.tran == "nvme" or dev.name.startswith("nvme"):
        return "NVMe"
    if dev.tran in ("sata", "sas", "ata"):
        return dev.tran.upper()
    return "disk"


def _backing_of_overlay(root: Mount, candidates: list[Mount], blocks: Sequence[BlockDev]) -> Mount | None:
    """The block-device filesystem under an overlay root: a same-size device mount, else the only one."""
    disks = [c for c in candidates if c.source.startswith("/dev/") and c.fstype not in PSEUDO]
    if not disks:
        return None
    if root.size_bytes:
        same = [c for c in disks if c.size_bytes and abs(c.size_bytes - root.size_bytes) <= 0.01 * root.size_bytes]
        if same:
            return same[0]
    devices = {c.source for c in disks}
    return disks[0] if len(devices) == 1 else None


def inventory(mounts: Sequence[Mount], blocks: Sequence[BlockDev] = (), df: Sequence[DfSize] = (),
              prefer: Sequence[str] = ()) -> list[FilesystemInfo]:
    """Distinct volumes, ``/`` first, then local volumes, then shared ones (by mount path).

    ``prefer``: paths the cluster uses for work (cluster.toml shared paths); the mount holding one
    names its volume's row.
    """
    df_size = {d.target: d.size_bytes for d in df}
    df_type = {d.target: d.fstype for d in df}
    rows: list[Mount] = []
    seen_targets: set[str] = set()
    for m in mounts:
        if m.target in seen_targets:  # over-mounts: the last one is what a path resolves to
            rows = [r for r in rows if r.target != m.target]
        seen_targets.add(m.target)
        size = m.size_bytes or df_size.get(m.target, 0)
        rows.append(Mount(m.target, m.source, m.fstype or df_type.get(m.target, ""), size, m.majmin, m.fsroot, m.options))
    if not any(r.target == "/" for r in rows) and "/" in df_size:
        d = next(d for d in df if d.target == "/")
        rows.append(Mount("/", d.source, d.fstype, d.size_bytes))

    root = next((r for r in rows if r.target == "/"), None)
    root_key = ""
    root_fs = None
    if root is not None:
        if root.fstype in ("overlay", "aufs", "rootfs", "none", "fuse-overlayfs") or not root.source.startswith("/dev/"):
            system = [r for r in rows if r.target.startswith(("/etc/", "/dev/termination-log")) or r.target == "/tmp"]
            backing = _backing_of_overlay(root, system + [r for r in rows if r.target != "/"], blocks)
            if backing is not None and not is_network(backing.fstype):
                root_key = volume_key(backing)
                root_fs = FilesystemInfo(mount="/", size_bytes=root.size_bytes or backing.size_bytes,
                                         fstype=backing.fstype, source=backing.source)
        if root_fs is None:
            root_key = volume_key(root)
            root_fs = FilesystemInfo(mount="/", size_bytes=root.size_bytes, fstype=root.fstype,
                                     source=root.source)
        root_fs.raid = md_description(root_fs.source, blocks)

    groups: dict[str, list[Mount]] = {}
    for r in rows:
        if r.target == "/" or _skip(r) or (not r.size_bytes and not is_network(r.fstype)):
            continue
        if not is_network(r.fstype) and not r.source.startswith("/dev/"):
            continue
        groups.setdefault(volume_key(r), []).append(r)

    out: list[FilesystemInfo] = []
    if root_fs is not None:
        root_fs.aliases = sorted(m.target for m in groups.pop(root_key, []))
        out.append(root_fs)
    for members in groups.values():
        rep = _representative(members, prefer)
        fs = FilesystemInfo(mount=rep.target, size_bytes=rep.size_bytes, fstype=rep.fstype, source=rep.source,
                            shared=is_network(rep.fstype),
                            aliases=sorted(m.target for m in members if m is not rep))
        fs.raid = md_description(fs.source, blocks)
        out.append(fs)
    head, rest = out[:1] if root_fs else [], out[1:] if root_fs else out
    rest.sort(key=lambda f: (f.shared, f.mount))
    return head + rest


def _representative(members: list[Mount], prefer: Sequence[str]) -> Mount:
    for path in prefer:
        holders = [m for m in members if path == m.target or path.startswith(m.target.rstrip("/") + "/")]
        if holders:
            return max(holders, key=lambda m: len(m.target))
    whole = [m for m in members if m.fsroot in ("", "/")]
    return min(whole or members, key=lambda m: (len(m.target), m.target))
