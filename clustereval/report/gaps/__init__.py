"""Gap facts -> the report's words. Phases record what happened (``Gap.kind`` and ``Gap.facts``);
the sentences and plans live here, one module per area, so ``clustereval report`` can re-word a run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clustereval.records import Gap
from clustereval.report.gaps import common, compute, gpupass, network, setup, storage  # noqa: F401 - each area module registers its wordings
from clustereval.report.gaps._registry import WORDINGS


def _has_words(gap: Gap) -> bool:
    """Worded already (a record of an older run, or said before), or nothing to word it from."""
    return bool(gap.text) or not gap.kind


def say(gap: Gap) -> Gap:
    """The Gap with its sentence and plan; one that already has words (an older run's) is kept."""
    if _has_words(gap):
        return gap
    fn = WORDINGS.get(gap.kind)
    if fn is None:  # a record from a newer clustereval: say what it holds rather than nothing
        facts = "; ".join(f"{k}: {v}" for k, v in gap.facts.items())
        return dataclasses.replace(gap, text=f"The {gap.phase} phase recorded a gap this clustereval cannot word "
                                             f"(`{gap.kind}`{': ' + facts if facts else ''}).",
                                   plan=gap.plan or "render the run with the clustereval that made it")
    text, plan = fn(gap)
    return dataclasses.replace(gap, text=text, plan=plan)


def said(record: Any) -> Any:
    """A copy of a phase record whose Gaps are worded; the stored record is left as it is."""
    gaps = getattr(record, "gaps", None)
    if not gaps or all(map(_has_words, gaps)):
        return record
    return dataclasses.replace(record, gaps=[say(g) for g in gaps])


def kinds() -> frozenset[str]:
    """Every kind this clustereval words."""
    return frozenset(WORDINGS)
