"""Records -> the report. A pure function of the run's records: ``clustereval report`` re-renders offline.

Each section renderer takes the ``RunView`` and the ``Document`` and returns the findings and gaps it
produced; sections whose phases did not run write nothing (no heading, no TOC line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from clustereval.analysis.fleet import FleetKind, fleet_judgements
from clustereval.analysis.gpupass import with_stand_in
from clustereval.records import FINDING_CATEGORIES, Finding, Gap
from clustereval.report.gaps import said
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
    shortenings: tuple[tuple[str, str], ...] = ()  # (phase, sentence), from the run's profile
    interrupted: bool = False
    targets: Any = None  # storage targets (config.StorageTarget list) read at render time; None: the record's
    not_asked: tuple[str, ...] = ()  # phases the operator left out of the run (cluster.toml's skip, --phases)
    policy: Any = None  # fleet verdicts' policy (fleetstats.VerdictPolicy) read at render time; None: the defaults

    def __post_init__(self) -> None:
        # where the GPU pass stood in for a missing DCGM, the DCGM Gap says so (a fact of two records)
        self.records = {phase: said(rec) for phase, rec in with_stand_in(self.records).items()}  # Gap facts -> words

    def get(self, phase: str) -> Any:
        return self.records.get(phase)

    @cached_property
    def fleet_kinds(self) -> list[FleetKind]:
        """Every kind of per-unit figure judged against its peers under the view's policy, once a render:
        the Findings and the folded tables read the same verdicts."""
        return fleet_judgements(self.records, self.policy)


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
    findings = fleet_findings(view, findings)
    findings = findings + leftover_findings(view, once(gaps + _setup_gaps_said_nowhere(view, gaps)))
    render_findings(doc, merged(findings))
    # a phase without a section of its own (preflight, packages, eval Python) still owes its Gaps
    # to the close-out
    present = sections_present(view)
    for phase, rec in view.records.items():
        for g in getattr(rec, "gaps", None) or []:
            if phase in SETUP_PHASES and isinstance(g, Gap) and setup_gap_section(g, present):
                continue  # said by its section, or merged there into the Gap that names the same tool
            if isinstance(g, Gap):
                gaps.append(g)
    return Rendered(doc.render(), findings, once(gaps), questions, files)


def gap_key(gap: Gap) -> tuple[str, str, str]:
    """What makes two Gaps the same one: its kind, node and facts (a section may have decorated its
    words, e.g. linked a tool); a Gap from an older run, without a kind, by its words."""
    if gap.kind:
        return gap.kind, gap.node, json.dumps(gap.facts, sort_keys=True, default=str)
    return gap.phase, gap.node, gap.text


def once(gaps: list[Gap]) -> list[Gap]:
    """Each Gap once, where it was first said."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for g in gaps:
        if gap_key(g) not in seen:
            seen.add(gap_key(g))
            out.append(g)
    return out


def fleet_findings(view: RunView, findings: list[Finding]) -> list[Finding]:
    """Every unit against its peers, beside the spec verdicts (``report/fleet.py``)."""
    from clustereval.report.fleet import with_fleet_findings

    return with_fleet_findings(view, findings)


def merged(findings: list[Finding]) -> list[Finding]:
    """One bullet per heading and subsystem: the bullets of one subsystem under one heading joined, in
    the order they came (a subsystem's label is said once under each heading). The report's bullets;
    ``Rendered.findings`` and summary.json keep each finding on its own."""
    out: dict[tuple[str, str], Finding] = {}
    for f in findings:
        key = (f.category, f.subsystem)
        if key in out:
            first = out[key]
            out[key] = Finding(f.category, f.subsystem, f"{first.text} {f.text}", first.judged + f.judged)
        else:
            out[key] = f
    return list(out.values())


# the Findings label of the subsystem a section's Gaps leave unjudged
_GAP_SUBSYSTEM = {"compute": "GPUs", "network": "fabric", "storage": "local disk"}


def _setup_gaps_said_nowhere(view: RunView, said_gaps: list[Gap]) -> list[Gap]:
    """The node-setup phases' Gaps that no section said (none of their sections rendered)."""
    present = sections_present(view)
    keys = {gap_key(g) for g in said_gaps}
    return [g for phase in SETUP_PHASES for g in getattr(view.get(phase), "gaps", None) or []
            if isinstance(g, Gap) and gap_key(g) not in keys and not setup_gap_section(g, present)]


def gap_subsystem(gap: Gap, present: list[str]) -> str:
    section = next((s for s, phases in GAP_SECTIONS.items() if gap.phase in phases), "")
    if not section and gap.phase in SETUP_PHASES:
        section = setup_gap_section(gap, present)
    if section == "storage" and "shared" in gap.text.lower():
        return "shared network FS"
    return _GAP_SUBSYSTEM.get(section, "GPUs" if gap.phase in SETUP_PHASES else "fabric")


# what a pass that did not run or did not finish leaves unjudged, by its phase (a Gap of the phase says why)
UNJUDGED = {
    "preflight": "the checks across nodes",
    "packages": "what the tools it could not install would have read",
    "evalpython": "whether the benchmarks ran on the newest torch",
    "environment": "the node's inventory",
    "health": "GPU health by NVIDIA's `dcgmi diag`",
    "gpupass": "GPU memory, PCIe and GPU-pair copies and the correctness vote",
    "matmul": "the matmul throughput of every GPU",
    "lemon": "the lemon GEMM",
    "connectivity": "whether every rank completes a collective",
    "allreduce": "all-reduce bandwidth",
    "pairwise": "the node pairs' all-reduce bandwidth",
    "storage": "the `fio` figures",
}


# Gaps that leave nothing of the eval unjudged: said (with a plan) in Gaps and the close-out, but no leftover
NOTHING_UNJUDGED = {
    "preflight.peer-ssh",  # node-to-node SSH, which clustereval does not use (pdsh and DeepSpeed launches do)
    "preflight.gloo-no-torch",  # the CPU gloo check runs later on the eval Python; its failure is its own Gap
    "evalpython.cache-refused",  # a planted cache refused: the run built its own copy and went on
}


def leftover_findings(view: RunView, gaps: list[Gap]) -> list[Finding]:
    """The runbook's leftover Gaps under Underperforming subsystems: every pass that did not run or did not
    finish (a pass the operator left out has no Gap) leaves part of a subsystem unjudged; one bullet per
    subsystem names what, and on which nodes (the Gaps say why, once)."""
    present = sections_present(view)
    env = view.get("environment")
    hosts = {n.node: f"{n.hostname or n.node}(node{n.index})" for n in getattr(env, "nodes", None) or []}
    by_subsystem: dict[str, dict[str, list[str]]] = {}
    for g in gaps:
        if not g.text or g.kind in NOTHING_UNJUDGED:
            continue
        subsystem = gap_subsystem(g, present)
        subsystems = [subsystem]
        if subsystem == "shared network FS" and "local and shared" in g.text:  # e.g. no `fio` at all
            subsystems = ["local disk", subsystem]
        for sub in subsystems:
            what = UNJUDGED.get(g.phase, "what its pass would have measured")
            if g.phase == "storage":
                what = "the shared filesystem's `fio` figures" if sub == "shared network FS" else \
                    "the local disk's `fio` figures"
            nodes = by_subsystem.setdefault(sub, {}).setdefault(what, [])
            host = hosts.get(g.node, g.node)
            if host and host not in nodes:
                nodes.append(host)
    out = []
    for subsystem, whats in by_subsystem.items():
        parts = [what + (f" on {', '.join(nodes)}" if nodes else "") for what, nodes in whats.items()]
        out.append(Finding("underperforming", subsystem,
                           f"not judged in full: {'; '.join(parts)} (a pass did not run or did not finish: the Gaps "
                           "of its section say why, the close-out has a plan)."))
    return out


def underperforming(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.category == "underperforming"]


def underperforming_lines(findings: list[Finding]) -> list[str]:
    """One console line per Underperforming bullet: its subsystem and the units it names."""
    out = []
    for f in underperforming(findings):
        names = list(dict.fromkeys(re.findall(r"`([^`]*\(node\d+\)[^`]*|/[^`]*)`", f.text)))
        what = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "") if names else ""
        if f.text.startswith("not judged in full"):
            what = "what did not run (the report's Gaps)"
        out.append(f"underperforming: {f.subsystem}" + (f" — {what}" if what else ""))
    return out


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


# Sections that own Gaps, with the phases whose records make them render.
GAP_SECTIONS: dict[str, tuple[str, ...]] = {
    "compute": ("health", "gpupass", "matmul", "lemon"),
    "network": ("connectivity", "allreduce", "pairwise"),
    "storage": ("storage",),
}
# The node-setup phases have no section of their own: their Gaps go to the section they affect.
SETUP_PHASES = ("packages", "evalpython", "environment")
_TOPIC_SECTION = (
    (("dcgm",), "compute"),
    (("fio",), "storage"),
    (("ibstat", "rdma", "infiniband", "pdsh", "adapter"), "network"),
)


def sections_present(view: RunView) -> list[str]:
    return [s for s, phases in GAP_SECTIONS.items() if any(view.get(p) is not None for p in phases)]


def setup_gap_section(gap: Gap, present: list[str]) -> str:
    """The one section a node-setup Gap is said in ('' when none of the sections it affects rendered).

    Tool gaps go where the tool is used; the eval Python and the inventory affect every torch pass,
    so they are said once, in Compute when it rendered, else in Network."""
    text = gap.text.lower()
    wanted = next((section for words, section in _TOPIC_SECTION if any(w in text for w in words)), "")
    order = [wanted] if wanted else ["compute", "network", "storage"]
    return next((s for s in order if s in present), "")


def setup_gaps(view: RunView, section: str, own: list[Gap] | None = None) -> list[Gap]:
    """The node-setup Gaps this section says, leaving out any whose tool the section's own Gaps
    already name (a missing ``dcgmi`` is said once, by the health pass)."""
    present = sections_present(view)
    said = " ".join(g.text.lower() for g in own or [])
    out: list[Gap] = []
    for phase in SETUP_PHASES:
        for gap in getattr(view.get(phase), "gaps", None) or []:
            if not isinstance(gap, Gap) or setup_gap_section(gap, present) != section:
                continue
            tools = [w for words, _ in _TOPIC_SECTION for w in words if w in gap.text.lower()]
            if tools and any(t in said for t in tools):
                continue
            if all(g.text != gap.text for g in out):
                out.append(gap)
    return out


def render_gaps(doc: Document, gaps: list[Gap]) -> None:
    """``### Gaps`` only when something is missing; never an empty one."""
    gaps = once(gaps)
    if not gaps:
        return
    doc.heading(3, "Gaps", toc=False)
    doc.bullets([g.text for g in gaps])
