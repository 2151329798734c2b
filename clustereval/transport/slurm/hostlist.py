"""Slurm node lists as a command line carries them: Slurm's compressed hostlist (``gpu[0001-4096]``),
whose length follows the gaps in the names' numbering, not the node count.

Only a run of digits at the end of a name is folded, as every Slurm version reads it: ``gpu0007``
and ``gpu0009`` become ``gpu[0007,0009]``; a name without a trailing number stays as it is. A
number written with leading zeros keeps its width (``[0007-0012]``, and ``1000`` joins ``0999``),
any other is folded with others without them (``[7-12]``), so the list expands to exactly the given
names.
Where names share no numbering the list is still as long as the names joined: ``argument`` puts it
in a file then (``NODELIST_INLINE_MAX``), which srun and salloc read as the list.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading

NODELIST_INLINE_MAX = 8192  # bytes of a node list on a command line; a longer one goes in a file
_TRAILING = re.compile(r"^(.*?)(\d+)$")


def _ranges(numbers: list[int], width: int) -> str:
    numbers = sorted(set(numbers))
    parts = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        a, b = f"{start:0{width}d}", f"{prev:0{width}d}"
        parts.append(a if start == prev else f"{a}-{b}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def compress(names: list[str]) -> str:
    """``names`` as one Slurm hostlist expression (groups in the order of their first name)."""
    split = [(name, _TRAILING.match(name) if "[" not in name and "]" not in name else None) for name in names]
    # the widths written with leading zeros: a number as wide as one of them joins it (0999 and 1000)
    padded = {(m.group(1), len(m.group(2))) for _, m in split if m and m.group(2).startswith("0") and len(m.group(2)) > 1}
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name, m in split:
        if not m:
            order.append(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        key = (prefix, len(digits)) if (prefix, len(digits)) in padded else (prefix, 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        numbers = groups[item]
        body = _ranges(numbers, width)
        out.append(f"{prefix}{body}" if len(set(numbers)) == 1 else f"{prefix}[{body}]")
    return ",".join(out)


def expand(expression: str) -> list[str]:
    """The names of a hostlist expression of the form ``compress`` writes (``scontrol show hostnames``
    reads every form)."""
    names = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", expression):
        prefix, body = m.group(1), m.group(2)
        if body is None:
            names.append(prefix)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
            names += [f"{prefix}{n:0{width}d}" for n in range(int(lo), int(hi or lo) + 1)]
    return names


_FILES = {"dir": ""}
_FILES_LOCK = threading.Lock()


def argument(names: list[str]) -> str:
    """The value of srun's or salloc's ``--nodelist``: the compressed hostlist, or past
    ``NODELIST_INLINE_MAX`` the path of a file of one name a line (both read a value with a '/' as
    a file), in a folder of this process removed when it exits."""
    text = compress(names)
    if len(text) <= NODELIST_INLINE_MAX:
        return text
    with _FILES_LOCK:
        if not _FILES["dir"]:
            _FILES["dir"] = tempfile.mkdtemp(prefix="clustereval-nodelist-")
            atexit.register(shutil.rmtree, _FILES["dir"], True)
        path = os.path.join(_FILES["dir"], f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt")
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write("".join(f"{n}\n" for n in names))
    return path
