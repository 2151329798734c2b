"""The uneven-NCCL diagnosis: rank suspect nodes from the pair results and the snapshot, and say
which topology grouping lines up with the slow pairs. Pure.

Ranking, most likely first:

1. the failing nodes of the pairwise hunt (a node that completed no pair, or none from a round on
   while its partners went on: ``analysis.stragglers.failing_nodes``), as failing, with the
   launcher's error: they have no figure, so they are never ranked among the measured nodes by one;
2. the stragglers the pairwise hunt named, in its order;
3. other nodes with slow pairs that no straggler explains (a slow pair with a straggler in it is
   the straggler's), most such pairs first, then by the larger share of slow pairs, then by the
   lower mean busbw;
4. nodes whose only slow pairs include a straggler;
5. nodes without a slow pair but with CONCERN lines in their snapshot.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections.abc import Mapping

from clustereval.analysis.snapshot import format_signal
from clustereval.analysis.stragglers import failing_nodes, key
from clustereval.records.debug import NcclDebugRecord, SuspectNode, TopologyFact
from clustereval.records.network import FailingNode, PairResult
from clustereval.records.snapshot import Signal


def failing_from_pairs(pairs: list[PairResult]) -> list[FailingNode]:
    """The failing nodes of a pairwise record that does not list them (an older record, or a pairs file
    written by hand), by the hunt's own rule over its pairs and their rounds."""
    samples = {key(p.a, p.b): p.samples_gb_s or ([p.busbw_gb_s] if p.busbw_gb_s is not None else None) for p in pairs}
    by_pair = {key(p.a, p.b): p for p in pairs}
    rounds = {k: p.round for k, p in by_pair.items()} if all(p.round for p in pairs) else None
    out = []
    for f in failing_nodes(samples, rounds):
        first = min((by_pair[k] for k in f.failed_pairs), key=lambda p: (p.round, p.a, p.b))
        out.append(FailingNode(node=f.node, error=first.error, carries=f.carries, completed_pairs=f.completed_pairs,
                               from_round=f.from_round, partners=sorted(b if a == f.node else a for a, b in f.failed_pairs)))
    return out


def failing_why(f: FailingNode, straggler: bool = False) -> str:
    """A failing node in the words `clustereval pairwise` prints it with. ``straggler``: the hunt named it
    on the samples of the pairs it completed before it stopped."""
    if f.completed_pairs:
        return (f"failing{'' if straggler else ', not slow'}: it did not complete a pair from round {f.from_round} on, having completed "
                f"{f.completed_pairs} pair{'s' if f.completed_pairs != 1 else ''} before ({f.error or 'no result'}; "
                f"every partner completed a pair in round {f.from_round} or later)"
                + ("; named a straggler on the pairs it completed" if straggler else ""))
    return (f"failing, not slow: it did not complete a pair ({f.error or 'no result'}; "
            + ("a partner completed another pair)" if f.carries else "which node of the pair failed is not known)"))


def rank_suspects(pairs: list[PairResult], stragglers: list[str],
                  concerns: Mapping[str, list[Signal]], failing: list[FailingNode] | None = None) -> list[SuspectNode]:
    """The ranked suspects (the module's order). ``failing``: the hunt's failing nodes, listed first."""
    failing = list(failing or [])
    lost = {f.node for f in failing}
    named = [n for n in stragglers if n not in lost]
    nodes = sorted({n for p in pairs for n in (p.a, p.b)} | set(concerns) | lost)
    by_node: dict[str, list[PairResult]] = {n: [p for p in pairs if n in (p.a, p.b)] for n in nodes}
    out: list[SuspectNode] = []
    for f in failing:  # no figure to rank them by: first, as failing
        out.append(SuspectNode(node=f.node, rank=0, failing=True, error=f.error, straggler=f.node in stragglers,
                               slow_pairs=[p for p in by_node[f.node] if p.slow], num_pairs=len(by_node[f.node]),
                               failed_pairs=[p for p in by_node[f.node] if p.busbw_gb_s is None],
                               concerns=list(concerns.get(f.node, [])),
                               why=failing_why(f, f.node in stragglers)))

    def slow_of(n: str) -> list[PairResult]:
        return [p for p in by_node[n] if p.slow]

    def mean_of(n: str) -> float:
        vals = [p.busbw_gb_s for p in by_node[n] if p.busbw_gb_s is not None]
        return statistics.fmean(vals) if vals else 0.0

    for n in named:
        if n not in by_node:
            continue
        slow = slow_of(n)
        out.append(SuspectNode(node=n, rank=0, straggler=True, slow_pairs=slow, num_pairs=len(by_node[n]),
                               concerns=list(concerns.get(n, [])),
                               why=f"named by the pairwise hunt: {len(slow)} of {len(by_node[n])} pairs slow"))
    rest = [n for n in nodes if n not in named and n not in lost]
    independent = {n: [p for p in slow_of(n) if p.a not in named and p.b not in named] for n in rest}
    with_slow = [n for n in rest if slow_of(n)]
    with_slow.sort(key=lambda n: (-len(independent[n]), -len(slow_of(n)) / max(1, len(by_node[n])),
                                  mean_of(n), n))
    for n in with_slow:
        slow = slow_of(n)
        if independent[n]:
            why = (f"{len(slow)} of {len(by_node[n])} pairs slow, {len(independent[n])} of them without a "
                   "named straggler in the pair")
        else:
            why = (f"{len(slow)} of {len(by_node[n])} pairs slow, every one of them with a named straggler "
                   "(likely the straggler's, not this node's)")
        out.append(SuspectNode(node=n, rank=0, slow_pairs=slow, num_pairs=len(by_node[n]),
                               concerns=list(concerns.get(n, [])), why=why))
    listed = {s.node for s in out}
    only_concerns = [n for n in rest if n not in listed and concerns.get(n)]
    only_concerns.sort(key=lambda n: (-len(concerns[n]), n))
    for n in only_concerns:
        out.append(SuspectNode(node=n, rank=0, num_pairs=len(by_node.get(n, [])), concerns=list(concerns[n]),
                               why=f"no slow pair; {len(concerns[n])} CONCERN line"
                                   f"{'s' if len(concerns[n]) != 1 else ''} in its snapshot"))
    for i, s in enumerate(out, 1):
        s.rank = i
    return out


def grouping_fact(source: str, groups: Mapping[str, str], pairs: list[PairResult],
                  label: str = "group") -> TopologyFact | None:
    """How the measured nodes split by ``groups`` (node -> switch / subnet / model) and whether the
    slow pairs line up with that split. None when fewer than two measured nodes are grouped."""
    measured = sorted({n for p in pairs for n in (p.a, p.b)})
    known = {n: groups[n] for n in measured if n in groups}
    if len(known) < 2:
        return None
    members: dict[str, list[str]] = {}
    for n, g in known.items():
        members.setdefault(g, []).append(n)
    layout = "; ".join(f"{g}: {', '.join(ns)}" for g, ns in sorted(members.items()))
    if len(members) == 1:
        return TopologyFact(source=source, text=f"every measured node shares one {label} ({layout})")
    judged = [p for p in pairs if p.a in known and p.b in known]
    slow = [p for p in judged if p.slow]
    cross = [p for p in judged if known[p.a] != known[p.b]]
    within = [p for p in judged if known[p.a] == known[p.b]]
    text = f"nodes by {label}: {layout}"
    labels = label + ("es" if label.endswith(("s", "sh", "ch", "x", "z")) else "s")  # switches, subnets
    explains = False
    if slow and within and all(known[p.a] != known[p.b] for p in slow) and not any(p.slow for p in within):
        explains = True
        text += (f"; all {len(slow)} slow pairs cross {labels} and every pair within one {label} is fast, "
                 f"so the path between {labels} is the likely cause")
    elif slow:
        # a group of one is the straggler itself, which says nothing new
        touched = [g for g, ns in members.items() if len(ns) > 1 and all(set(ns) & {p.a, p.b} for p in slow)]
        if len(touched) == 1 and len(members) > 1:
            g = touched[0]
            explains = True
            text += f"; every slow pair has a node in {label} {g}"
    elif cross:
        text += f"; pairs across {labels} ran as fast as pairs within one"
    return TopologyFact(source=source, text=text, explains=explains)


def subnet_groups(addresses: Mapping[str, list[str]]) -> dict[str, str]:
    """node -> the network of its first global IPv4 address (``10.0.3.0/24``)."""
    out: dict[str, str] = {}
    for node, cidrs in addresses.items():
        for cidr in cidrs:
            try:
                out[node] = str(ipaddress.ip_interface(cidr).network)
                break
            except ValueError:
                continue
    return out


def _pct_vs(value: float | None, rec: NcclDebugRecord) -> str:
    """A pair's busbw against the bar it was judged by: the limit, or (an older record) the mean."""
    if value is None:
        return "did not complete"
    ref, what = (rec.limit_gb_s, "the limit") if rec.limit_gb_s else (rec.mean_busbw_gb_s, "the mean")
    if not ref:
        return f"{value:.2f} GB/s"
    return f"{value:.2f} GB/s ({100 * (value - ref) / ref:+.1f}% vs {what})"


def rule_line(rec: NcclDebugRecord) -> str:
    """How the pairs were judged, in the rule's own terms."""
    if rec.limit_gb_s:
        return (f"a pair is slow when even its fastest sample is below {rec.limit_gb_s:.2f} GB/s, "
                f"{rec.threshold_pct:g}% under the slowest sample of the healthy pairs ({rec.healthy_floor_gb_s:.2f} GB/s)")
    if rec.why_not_judged:
        return f"no node was judged: {rec.why_not_judged}"
    return f"a pair is slow when more than {rec.threshold_pct:g}% below the mean (the record's own rule)"


def report_lines(rec: NcclDebugRecord) -> list[str]:
    """What `clustereval debug nccl` prints: the hunt, the ranked suspects with evidence, topology."""
    done = [p for p in rec.pairs if p.busbw_gb_s is not None]
    lines = [f"pairwise all-reduce: {len(rec.pairs)} node pairs, {rec.ranks_per_node} rank(s) per node, "
             f"{rec.backend or '?'} backend; mean busbw {rec.mean_busbw_gb_s:.2f} GB/s over {len(done)} "
             f"completed pairs; {rule_line(rec)}"]
    slow = [p for p in rec.pairs if p.slow]
    lines.append(f"slow pairs: {len(slow)} of {len(rec.pairs)}")
    if not rec.suspects:
        lines.append("suspect nodes: none (no slow pair, no failing node, no CONCERN line on the nodes snapshotted)")
    else:
        lines.append("suspect nodes, most likely first:")
        for s in rec.suspects:
            lines.append(f"{s.rank:>3}. {s.node}: {s.why}")
            for p in s.failed_pairs:
                lines.append(f"       pair {p.a} + {p.b}: did not complete" + (f" [{p.error}]" if p.error else ""))
            for p in s.slow_pairs:
                lines.append(f"       pair {p.a} + {p.b}: {_pct_vs(p.busbw_gb_s, rec)}"
                             + (f" [{p.error}]" if p.error else ""))
            for c in s.concerns:
                lines.append(f"       {format_signal(c)}")
            if s.evidence:
                lines.append(f"       evidence: {s.evidence}")
    if rec.snapshot is not None:
        drift = [s for s in rec.snapshot.drift if s.concern]
        for d in drift:
            lines.append(format_signal(d))
    if rec.topology:
        lines.append("topology:")
        for f in rec.topology:
            lines.append(f"  [{f.source}] {f.text}")
    return lines
