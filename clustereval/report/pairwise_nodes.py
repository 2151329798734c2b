"""The pairwise hunt's nodes in words: the failing nodes (a node that completed no pair, or none from
a round on while its partners went on), the suspects a round budget left unresolved, and the lines
`clustereval pairwise` prints.

Pure: records in, words out. A failing node is said in one shape whether it completed no pair or
stopped mid-hunt: the second adds the round it stopped in and the pairs it completed before.
"""

from __future__ import annotations

from collections.abc import Callable

from clustereval.records import Finding
from clustereval.records.network import FailingNode, PairwiseRecord
from clustereval.report.gaps.common import raw_output
from clustereval.report.markdown import Document
from clustereval.report.units import iec_precise, plural


def gbps(v: float) -> str:
    """Two decimals; small values (gloo on CPU) keep four so they do not print as 0.00."""
    return f"{v:_.2f}" if v >= 1 or v == 0 else f"{v:.4f}"


def failing_reason(f: FailingNode, label: Callable[[str], str]) -> str:
    """Why the failure is this node's, or why which node of the pair failed is not known."""
    partners = ", ".join(f"`{label(x)}`" for x in f.partners)
    if f.completed_pairs and len(f.partners) == 1:
        return f"its partner {partners} completed a pair in round {f.from_round} or later, so the failure is its own"
    if f.completed_pairs:
        return (f"each of its partners {partners} completed a pair in round {f.from_round} or later, so the failure "
                "is its own")
    if f.carries and len(f.partners) == 1:
        return f"its partner {partners} completed another pair, so the failure is its own"
    if f.carries:
        return f"of its partners {partners} at least one completed another pair, so the failure is its own"
    return f"neither it nor {partners} completed a pair, so which node of the pair failed is not known"


def stopped_words(f: FailingNode) -> str:
    """"" for a node that completed no pair; for one that stopped, the round and the pairs before it."""
    if not f.completed_pairs:
        return ""
    return f" from round {f.from_round} on, having completed {plural(f.completed_pairs, 'pair')} before"


def failing_verdict(f: FailingNode, stragglers: list[str]) -> str:
    if f.node in stragglers:  # named on the samples of the pairs it completed before it stopped
        return "it is failing from that round on, and a straggler on the pairs it completed"
    return "it is failing, not a straggler"


def render_failing(doc: Document, pw: PairwiseRecord, findings: list[Finding], label: Callable[[str], str]) -> None:
    """Failing nodes: listed with the launcher's error, and a Findings bullet each; never stragglers on
    their failed pairs (a node is named slow on samples only)."""
    if not pw.failing:
        return
    stopped = any(f.completed_pairs for f in pw.failing)
    doc.para("Nodes that did not complete a pair" + (", or none from a round on (failing: their failed pairs judged "
                                                      "none of them slow or fast): " if stopped else
                                                      " (failing, not slow: no sample judged them): ")
             + "; ".join(f"`{label(f.node)}`{stopped_words(f)} ({raw_output(f.error, 'no result')}; "
                         f"{failing_reason(f, label)})" for f in pw.failing) + ".")
    for f in pw.failing:
        findings.append(Finding(
            "underperforming", "torchrun",
            f"`{label(f.node)}` did not complete a pair of the pairwise hunt{stopped_words(f)} "
            f"({raw_output(f.error, 'no result')}; {failing_reason(f, label)}): {failing_verdict(f, pw.stragglers)}"))


def render_unresolved(doc: Document, pw: PairwiseRecord, label: Callable[[str], str]) -> None:
    """Suspects of the screening round that the hunt's round budget left unconfirmed: neither named nor cleared."""
    if pw.unresolved:
        doc.para(f"The hunt stopped at its budget of {plural(pw.num_rounds, 'round')}; "
                 f"{plural(len(pw.unresolved), 'node')} it suspected were neither named nor cleared (too few nodes "
                 "seen fast to pair them with): " + ", ".join(f"`{label(s)}`" for s in pw.unresolved) + ".")


def failing_line(f: FailingNode, stragglers: list[str]) -> str:
    """A failing node as `clustereval pairwise` prints it."""
    if f.completed_pairs:
        return (f"did not complete a pair from round {f.from_round} on (failing"
                f"{', not slow' if f.node not in stragglers else ''}): {f.node} ({f.error or 'no result'}; "
                f"{plural(f.completed_pairs, 'pair')} completed before; every partner completed a pair in round "
                f"{f.from_round} or later)")
    return (f"did not complete a pair (failing, not slow): {f.node} ({f.error or 'no result'}; "
            + ("a partner completed another pair)" if f.carries else "which node of the pair failed is not known)"))


def pairwise_lines(pw: PairwiseRecord) -> list[str]:
    """What `clustereval pairwise` prints: every pair, the bar, the ranked nodes, the stragglers."""
    lines = [f"{iec_precise(pw.payload_bytes)} all-reduce, {pw.ranks_per_node * 2} ranks per pair ({pw.backend}), "
             f"{len(pw.pairs)} pairs in {pw.num_rounds} rounds, {pw.samples_per_pair} samples per pair"]
    if pw.judged and pw.healthy_samples:
        lines.append(f"healthy pairs: median {gbps(pw.healthy_median_gb_s)} GBps, slowest sample "
                     f"{gbps(pw.healthy_floor_gb_s)} GBps; slow below {gbps(pw.limit_gb_s)} GBps")
    elif pw.why_not_judged:
        lines.append(f"not judged: {pw.why_not_judged}")
    for p in sorted(pw.pairs, key=lambda p: (p.busbw_gb_s is None, p.busbw_gb_s or 0.0)):
        if p.busbw_gb_s is None:
            lines.append(f"  {p.a} + {p.b}: failed ({p.error})")
            continue
        samples = p.samples_gb_s or [p.busbw_gb_s]
        lines.append(f"  {p.a} + {p.b}: {gbps(p.busbw_gb_s)} GBps (samples {gbps(min(samples))}–{gbps(max(samples))})"
                     f"{'  SLOW' if p.slow else '  not compared: sampled without its round' if p.ungated else ''}")
    for s in pw.suspects:
        if s.slow_pairs:
            lines.append(f"  {s.node}: {s.slow_pairs} of {s.pairs} pairs slow")
    lines.append("stragglers: " + (", ".join(pw.stragglers) if pw.stragglers else "none named"))
    lines += [failing_line(f, pw.stragglers) for f in pw.failing]
    if pw.unresolved:
        lines.append(f"unresolved at the {pw.num_rounds}-round budget: " + ", ".join(pw.unresolved))
    return lines
