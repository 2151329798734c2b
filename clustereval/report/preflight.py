"""A run stopped at the preflight gate: the report says so and lists every reason as a Gap."""

from __future__ import annotations

from clustereval.records import Gap
from clustereval.records.run import AcrossNodesNotRun, TcpCoverage
from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionResult, render_gaps
from clustereval.report.units import joined


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


def render_setup_leftovers(view: RunView, doc: Document) -> SectionResult:
    """A run in which no Compute, Network or Storage section rendered (``--phases environment``, or
    every later phase failed to start) still names a node that stopped answering or failed while the
    nodes were set up and inventoried: such a node fault has no section of its own to go to, so it
    gets one. (A missing tool with no section it affects stays in the close-out alone.)"""
    from clustereval.report.render import SETUP_PHASES, sections_present, setup_gap_section

    present = sections_present(view)
    gaps: list[Gap] = []
    for phase in SETUP_PHASES:
        for gap in getattr(view.get(phase), "gaps", None) or []:
            fault = isinstance(gap, Gap) and gap.node and (
                gap.kind in ("node.error", "node.lost")  # an older run's Gap, without a kind, by its words
                or (not gap.kind and ("stopped answering" in gap.text or "(error[" in gap.text)))
            if fault and not setup_gap_section(gap, present) and all(g.text != gap.text for g in gaps):
                gaps.append(gap)
    if not gaps:
        return SectionResult()
    doc.heading(2, "Node faults", note="nodes lost while they were set up and inventoried")
    doc.para("No Compute, Network or Storage section was written in this run, so the nodes that stopped "
             "answering or failed while they were set up and inventoried are listed here.")
    render_gaps(doc, gaps)
    return SectionResult(gaps=gaps)


def across_nodes_line(why: AcrossNodesNotRun) -> str:
    """Why preflight left out its checks across nodes, naming the phases the run went on to and those
    that would have needed them: the header's line and the console's (no absence asserted: what ran
    is named)."""
    from clustereval.report.environment import PASS_WORDS

    ran = joined([PASS_WORDS.get(p, p) for p in why.phases])
    would = joined([PASS_WORDS.get(p, p) for p in why.across_nodes])
    checks = "Checks across nodes in preflight (TCP between the nodes, a CPU all-reduce through gloo)"
    do = "does" if len(why.across_nodes) == 1 else "do"
    if why.resume:
        return (f"{checks}: not run when the run was resumed, as no phase it ran again starts a job across "
                f"nodes (it ran {ran} again; {would} {do})")
    return f"{checks}: not run, as no phase of this run starts a job across nodes (it ran {ran}; {would} {do})"


def tcp_coverage_line(cov: TcpCoverage | None, raw_rel: str = "") -> str:
    """What preflight's TCP check across nodes left untried by its rule (``phases/preflight_tcp.py``),
    for the header and the console; '' when it tried every pair of nodes, or did not run."""
    if cov is None or cov.pairs_tried >= cov.pairs_total:
        return ""
    subnets = (f"; {cov.subnet_pairs_untried} ordered pairs of its {cov.subnets} subnets had no connection "
               "between them") if cov.subnet_pairs_untried else ""
    where = f"{raw_rel}/{cov.pairs_file}" if raw_rel else cov.pairs_file
    return (f"TCP check across nodes in preflight: {cov.pairs_tried} of the {cov.pairs_total} ordered pairs of nodes "
            "tried, by its rule (the rendezvous port from every node; each node's ports from the node before it, "
            f"nodes at powers of two up to {cov.max_stride} nodes before it in the hostfile, and nodes of other "
            f"subnets){subnets}; the other {cov.pairs_total - cov.pairs_tried} pairs were not tried (`{where}` lists "
            "every pair tried)")
