"""Records -> the report. A pure function of the run's records: ``clustereval report`` re-renders offline.

Each section renderer takes the ``RunView`` and the ``Document`` and returns the findings and gaps it
produced; sections whose phases did not run write nothing (no heading, no TOC line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clustereval.records import FINDING_CATEGORIES, Finding, Gap
from clustereval.report.markdown import Document

FINDING_HEADINGS = {
    "healthy": "Healthy subsystems",
    "underperforming": "Underperforming subsystems",
    "needs_input": "Needs operator input",
}
NEEDS_INPUT_LEAD = ("These subsystems were measured cleanly but cannot be called healthy or underperforming "
                    "until the operator supplies the figures they are supposed to hit.")


@dataclass
class RunView:
    """What the renderers read: the run's identity and its finished records."""

    name: str
    stamp: str  # 2026-09-17-1938Z
    raw_rel: str  # raw-<name>-<stamp>
    access: str
    records: dict[str, Any] = field(default_factory=dict)
    profile: str = "standard"
    shortenings: tuple[str, ...] = ()
    interrupted: bool = False
    targets: Any = None  # storage targets (config.StorageTarget list) read at render time; None: the record's

    def get(self, phase: str) -> Any:
        return self.records.get(phase)


@dataclass
class SectionResult:
    findings: list[Finding] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)  # close-out questions besides findings
    files: dict[str, bytes] = field(default_factory=dict)  # raw-folder path -> bytes drawn at render time (plots)


SectionFn = Callable[[RunView, Document], SectionResult]


@dataclass
class Rendered:
    markdown: str
    findings: list[Finding]
    gaps: list[Gap]
    questions: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # raw-folder path -> bytes; the caller writes them


def _sections() -> list[SectionFn]:
    """Sections in report order. Imported here so each section module stays independent."""
    from clustereval.report import sections

    return sections.ORDER


def render_report(view: RunView, header: Callable[[RunView, Document], None] | None = None) -> Rendered:
    from clustereval.report import sections

    doc = Document()
    (header or sections.header)(view, doc)
    findings: list[Finding] = []
    gaps: list[Gap] = []
    questions: list[str] = []
    files: dict[str, bytes] = {}
    for fn in _sections():
        result = fn(view, doc)
        findings += result.findings
        gaps += result.gaps
        questions += result.questions
        files.update(result.files)
    render_findings(doc, findings)
    # a phase without a section of its own (preflight, packages, eval Python) still owes its Gaps
    # to the close-out
    shown = {(g.phase, g.text) for g in gaps}
    for rec in view.records.values():
        for g in getattr(rec, "gaps", None) or []:
            if isinstance(g, Gap) and (g.phase, g.text) not in shown:
                gaps.append(g)
                shown.add((g.phase, g.text))
    return Rendered(doc.render(), findings, gaps, questions, files)


def render_findings(doc: Document, findings: list[Finding]) -> None:
    if not findings:
        return
    doc.heading(2, "Findings")
    for category in FINDING_CATEGORIES:
        items = [f for f in findings if f.category == category]
        if not items:
            continue
        doc.heading(3, FINDING_HEADINGS[category])
        if category == "needs_input":
            doc.para(NEEDS_INPUT_LEAD)
        doc.bullets([f"**{f.subsystem}** — {f.text}" if f.subsystem else f.text for f in items])


def render_gaps(doc: Document, gaps: list[Gap]) -> None:
    """``### Gaps`` only when something is missing; never an empty one."""
    if not gaps:
        return
    doc.heading(3, "Gaps", toc=False)
    doc.bullets([g.text for g in gaps])
