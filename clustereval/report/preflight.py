"""A run stopped at the preflight gate: the report says so and lists every reason as a Gap."""

from __future__ import annotations

from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionResult, render_gaps


def render_preflight(view: RunView, doc: Document) -> SectionResult:
    """Nothing when the gate passed; otherwise a ``## Preflight`` section with every Gap it found."""
    pre = view.get("preflight")
    if pre is None or getattr(pre, "passed", True):
        return SectionResult()
    gaps = list(getattr(pre, "gaps", []) or [])
    doc.heading(2, "Preflight", note="the gate before any benchmark")
    count = f"{len(gaps)} item{'s' if len(gaps) != 1 else ''} below" if gaps else "the checks in the raw folder"
    doc.para(f"The preflight gate did not pass, so the benchmarks after it did not run; {count} stopped it.")
    render_gaps(doc, gaps)
    return SectionResult(gaps=gaps)
