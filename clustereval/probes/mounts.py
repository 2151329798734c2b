"""Mount tables: ``findmnt``, ``lsblk`` and ``/proc/mounts`` (``df`` is ``probes.df``). Pure.

Each parser accepts the format our ``build_argv`` asks for and the plain formats a person
captures (``findmnt -rn -o TARGET,SOURCE,FSTYPE,SIZE``, ``lsblk -f -b``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from clustereval.probes._text import body, size_bytes
from clustereval.redact import mount_options

# Network and parallel filesystem types: a mount of one is shared between nodes (or may be), so it
# is never a node's local disk
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "virtiofs", "9p", "ceph", "cephfs",
    "glusterfs", "wekafs", "panfs", "orangefs", "pvfs2", "afs", "sshfs", "fuse.ceph", "fuse.glusterfs",
    "fuse.gcsfuse", "fuse.s3fs", "fuse.sshfs", "fuse.juicefs", "fuse.mountpoint-s3", "fuse.blobfuse2",
    "fuse.blobfuse", "fuse.weka", "fuse.alluxio-fuse", "fuse.geesefs", "fuse.goofys", "fuse.rclone",
    "fuse.cvmfs2", "fuse.dbfs",
})


def is_network(fstype: str) -> bool:
    return fstype.lower() in NETWORK_FSTYPES


def _unescape(text: str) -> str:
    """findmnt -r and /proc/mounts escape blanks as ``\\x20`` / ``\\040``."""
    text = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


@dataclass
class Mount:
    target: str
    source: str
    fstype: str
    size_bytes: int = 0
    majmin: str = ""
    fsroot: str = ""  # the subtree mounted (bind mounts: not "/")
    options: str = ""


# -- findmnt -----------------------------------------------------------------------------

FINDMNT_COLUMNS = ("TARGET", "SOURCE", "FSTYPE", "SIZE", "MAJ:MIN", "FSROOT", "OPTIONS")


def findmnt_argv() -> list[str]:
    return ["findmnt", "-r", "-b", "-o", ",".join(FINDMNT_COLUMNS)]


def parse_findmnt(text: str, columns: tuple[str, ...] = ("TARGET", "SOURCE", "FSTYPE", "SIZE")) -> list[Mount]:
    """``findmnt -r`` output; a header line (``TARGET SOURCE ...``) overrides ``columns``."""
    out: list[Mount] = []
    cols = list(columns)
    for n, line in enumerate(body(text).splitlines()):
        words = line.split(" ")
        if not line.strip():
            continue
        if n == 0 and words and words[0] == "TARGET":
            cols = words
            continue
        if len(words) < len(cols):
            words += [""] * (len(cols) - len(words))
        row = dict(zip(cols, (_unescape(w) for w in words), strict=False))
        source = row.get("SOURCE", "")
        fsroot = row.get("FSROOT", "")
        m = re.match(r"^(.*)\[(/.*)\]$", source)
        if m:  # "/dev/vda[/tmp]": a bind mount of a subtree
            source, fsroot = m.group(1), fsroot or m.group(2)
        out.append(Mount(target=row.get("TARGET", ""), source=source, fstype=row.get("FSTYPE", ""),
                         size_bytes=size_bytes(row.get("SIZE", "")), majmin=row.get("MAJ:MIN", ""),
                         fsroot=fsroot, options=mount_options(row.get("OPTIONS", ""))))
    return out


# -- /proc/mounts ------------------------------------------------------------------------


def proc_mounts_argv() -> list[str]:
    return ["cat", "/proc/mounts"]


def parse_proc_mounts(text: str) -> list[Mount]:
    out = []
    for line in body(text).splitlines():
        parts = line.split()
        # a hand-trimmed capture may end a line after the type
        if len(parts) >= 3 and parts[1].startswith("/"):
            out.append(Mount(target=_unescape(parts[1]), source=_unescape(parts[0]), fstype=parts[2],
                             options=mount_options(parts[3]) if len(parts) > 3 else ""))
    return out


# -- lsblk -------------------------------------------------------------------------------


@dataclass
class BlockDev:
    name: str
    kname: str = ""
    pkname: str = ""  # parent kernel name (a RAID member's disk)
    type: str = ""  # disk, part, raid0, raid1, lvm, crypt, loop, rom
    fstype: str = ""
    size_bytes: int = 0
    mountpoint: str = ""
    model: str = ""
    tran: str = ""  # nvme, sata, sas, virtio


LSBLK_COLUMNS = ("NAME", "KNAME", "PKNAME", "TYPE", "FSTYPE", "SIZE", "MOUNTPOINT", "MODEL", "TRAN")


def lsblk_argv() -> list[str]:
    return ["lsblk", "-P", "-b", "-o", ",".join(LSBLK_COLUMNS)]


def parse_lsblk(text: str) -> list[BlockDev]:
    """``lsblk -P`` (KEY="value" pairs) or the column layout of ``lsblk -f``."""
    text = body(text)
    if re.search(r'^NAME="', text, re.MULTILINE):
        return _parse_pairs(text)
    return _parse_columns(text)


def _parse_pairs(text: str) -> list[BlockDev]:
    out = []
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        row = dict(w.split("=", 1) for w in words if "=" in w)
        if "NAME" not in row:
            continue
        out.append(BlockDev(name=row["NAME"], kname=row.get("KNAME", row["NAME"]), pkname=row.get("PKNAME", ""),
                            type=row.get("TYPE", ""), fstype=row.get("FSTYPE", ""),
                            size_bytes=size_bytes(row.get("SIZE", "")),
                            mountpoint=row.get("MOUNTPOINT", row.get("MOUNTPOINTS", "")),
                            model=row.get("MODEL", "").strip(), tran=row.get("TRAN", "")))
    return out


_RIGHT_ALIGNED = {"FSAVAIL", "FSUSE%", "SIZE", "FSSIZE", "FSUSED", "RO", "RM", "MAJ:MIN"}


def _parse_columns(text: str) -> list[BlockDev]:
    """The aligned layout. Left-aligned columns start exactly under their header; right-aligned
    numbers may spill left, so a left column's cell is only the word that starts at its column."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].lstrip().startswith("NAME"):
        return []
    starts = [(m.start(), m.group()) for m in re.finditer(r"\S+", lines[0])]
    out = []
    parents: list[str] = []
    for line in lines[1:]:
        cells: dict[str, str] = {}
        for i, (start, col) in enumerate(starts):
            if col in _RIGHT_ALIGNED or start >= len(line) or line[start] == " ":
                continue
            if start and line[start - 1] != " ":
                continue
            if i == len(starts) - 1:
                cells[col] = line[start:].strip()
            else:
                cells[col] = line[start:].split()[0]
        raw_name = line[: starts[1][0] if len(starts) > 1 else len(line)].rstrip()
        prefix = re.split(r"[^\s│├└─|`-]", raw_name, maxsplit=1)[0]  # the tree drawing before the name
        depth = len(prefix) // 2
        name = raw_name[len(prefix):].split()[0] if raw_name[len(prefix):].split() else ""
        if not name:
            continue
        parents = parents[:depth] + [name]
        out.append(BlockDev(name=name, kname=name, pkname=parents[-2] if len(parents) > 1 else "",
                            type=cells.get("TYPE", ""), fstype=cells.get("FSTYPE", ""),
                            mountpoint=cells.get("MOUNTPOINTS", cells.get("MOUNTPOINT", ""))))
    return out
