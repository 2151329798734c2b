"""Small helpers every parser shares. Pure: text in, values out."""

from __future__ import annotations

import json
import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = re.compile(r"-?\d+(?:\.\d+)?")
_ABSENT = ("n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "")


def body(text: str) -> str:
    """Command output without the ``$ command`` line a captured file starts with, and without ANSI codes."""
    lines = (text or "").splitlines()
    while lines and lines[0].startswith("$ "):
        lines = lines[1:]
    return _ANSI.sub("", "\n".join(lines))


def is_absent(cell: str) -> bool:
    """``N/A``, ``[Not Supported]`` and friends: the tool says it has no value."""
    return (cell or "").strip().lower() in _ABSENT


def number(cell: str) -> float | None:
    """The first number in a cell (``"700.00 W"`` -> 700.0); None when the tool printed no value."""
    if is_absent(cell):
        return None
    m = _NUM.search(cell)
    return float(m.group()) if m else None


def integer(cell: str) -> int | None:
    v = number(cell)
    return int(v) if v is not None else None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(i?B?)\s*$", re.IGNORECASE)
_POW = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def size_bytes(cell: str) -> int:
    """``252G`` / ``303.6M`` / ``137415671808`` -> bytes. util-linux and coreutils suffixes are binary."""
    m = _SIZE.match(cell or "")
    if not m:
        return 0
    return int(float(m.group(1)) * 1024 ** _POW[m.group(2).upper()])


def last_line(text: str, default: str = "") -> str:
    """The last non-blank line of ``text``, stripped; ``default`` when there is none. Error messages
    quote it: a tool's closing line is the one that says why it stopped."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else default


def last_json(text: str, key: str = "") -> dict:
    """The last line of ``text`` that is a JSON object (holding ``key`` when one is given); ``{}``
    when none is. Workers print their result as one JSON line after whatever else they wrote."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and (not key or key in data):
            return data
    return {}
