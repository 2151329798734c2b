"""``df``: one row per filesystem. Pure.

One parser for every layout clustereval runs or a person captures; the header names the columns:
``df -P -T -B1`` (the environment, the storage phase, the snapshot), ``df -P -B1`` (no Type column),
``df -hT`` / ``df -h`` (human sizes, powers of 1024; a long source wraps onto a line of its own)
and ``df --output=source,fstype,size,avail,target``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustereval.probes._text import body, size_bytes
from clustereval.records.environment import DfRow

# -P: one line per filesystem (no wrapping); -T: the type; -B1: sizes in bytes
DF_ARGV = ["df", "-P", "-T", "-B1"]

# header word -> DfRow field; the size column is named after the block size (1-blocks, 1B-blocks, Size)
_HEADER = {"Filesystem": "source", "Type": "fstype", "Used": "used", "Avail": "avail",
           "Available": "avail", "Use%": "use", "Capacity": "use", "Mounted": "target"}
# without a header: the layout of DF_ARGV
_DEFAULT_COLUMNS = ["source", "fstype", "size", "used", "avail", "use", "target"]
_SIZE_CELL = re.compile(r"\d+(?:\.\d+)?[KMGTPE]?")


def df_argv() -> list[str]:
    return list(DF_ARGV)


def _columns(header: str) -> list[str]:
    return [_HEADER.get(word, "size" if word.endswith("blocks") or word == "Size" else word)
            for word in header.split() if word != "on"]  # "Mounted on" is one column


def _cells(parts: list[str], cols: list[str]) -> dict[str, str] | None:
    """A filesystem's line by column, or None when the line is not one (the table has ended)."""
    if len(parts) < len(cols):
        return None
    # the mount point is the last column and may contain spaces
    cells = dict(zip(cols[:-1], parts, strict=False))
    cells[cols[-1]] = " ".join(parts[len(cols) - 1:])
    if "use" in cells and not cells["use"].endswith("%"):
        return None
    return cells


def _size(cell: str) -> int | None:
    return size_bytes(cell) if _SIZE_CELL.fullmatch(cell) else None


def _row(cells: dict[str, str]) -> DfRow | None:
    """None for a line df could not fill (no size: a stale or unreachable mount)."""
    size = _size(cells.get("size", ""))
    if size is None:
        return None
    used = _size(cells.get("used", "")) or 0
    cap = cells.get("use", "").rstrip("%")
    use_pct = float(cap) if cap.replace(".", "").isdigit() else (100.0 * used / size if size else 0.0)
    return DfRow(source=cells["source"], fstype=cells.get("fstype", ""), size_bytes=size, used_bytes=used,
                 avail_bytes=_size(cells.get("avail", "")) or 0, use_pct=use_pct, target=cells.get("target", ""))


def parse_df(text: str) -> list[DfRow]:
    """Rows of the first table in ``text``: from its header (or the first row) to the first line
    that is not a filesystem's (captures put other tools' output after it)."""
    rows: list[DfRow] = []
    cols = _DEFAULT_COLUMNS
    pending = ""
    started = False
    for line in body(text).splitlines():
        if not line.strip() or line.startswith("$ "):
            continue
        if line.startswith("Filesystem"):
            if started:
                break
            cols, started = _columns(line), True
            continue
        parts = line.split()
        if pending:
            parts, pending = [pending, *parts], ""
        elif len(parts) == 1:  # df without -P wraps a long source onto its own line
            pending = parts[0]
            continue
        cells = _cells(parts, cols)
        if cells is None:
            if started:
                break
            continue  # before the table: a note or another tool's line
        started = True
        row = _row(cells)
        if row is not None:
            rows.append(row)
    return rows


@dataclass
class DfSize:
    """What the environment's inventory takes from a ``df`` row: the volume, never how full it is."""

    source: str
    fstype: str
    size_bytes: int
    target: str


def parse_df_sizes(text: str) -> list[DfSize]:
    """``parse_df`` rows without their usage, for the filesystem inventory."""
    return [DfSize(source=r.source, fstype=r.fstype, size_bytes=r.size_bytes, target=r.target)
            for r in parse_df(text)]
