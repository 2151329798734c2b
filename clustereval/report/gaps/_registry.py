"""The table from a Gap's kind to the function that words it; each area module adds its own."""

from __future__ import annotations

from collections.abc import Callable

from clustereval.records import Gap

Wording = Callable[[Gap], tuple[str, str]]  # a Gap -> (what is missing, the proposed plan of action)
WORDINGS: dict[str, Wording] = {}


def wording(kind: str) -> Callable[[Wording], Wording]:
    """Register the function that words Gaps of ``kind``; a kind is worded in one place only."""
    def add(fn: Wording) -> Wording:
        if kind in WORDINGS:
            raise ValueError(f"Gap kind {kind!r} is worded twice")
        WORDINGS[kind] = fn
        return fn
    return add
