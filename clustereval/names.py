"""Names made from the run's own words: pure, for every layer (the store's folders, a phase's raw
files, the report's plots)."""

from __future__ import annotations

import re


def slug(text: str, sep: str = "_", default: str = "") -> str:
    """``text`` as one part of a file name: each run of characters other than ASCII letters,
    digits and ``._-`` becomes ``sep``, ``sep`` is trimmed from the ends, and ``default`` stands
    in when nothing is left (``"node 7/a"`` -> ``node_7_a``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", sep, text).strip(sep) or default
