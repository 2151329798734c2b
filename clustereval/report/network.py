"""The ``## Network`` section: Introduction (tools, busbw/algbw, NVLS), intra-node and inter-node
all-reduce benchmarks, the pairwise straggler hunt, Gaps; and the fabric findings.

Pure: records in, markdown and findings out.
"""

from __future__ import annotations

import statistics

from clustereval.analysis import network as an
from clustereval.analysis.rules import judge
from clustereval.probes.nccl_debug import describe_path
from clustereval.records import Finding, Gap
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    NcclDebugInfo,
    PairwiseRecord,
    Sweep,
)
from clustereval.report.fold import (
    FOLD_NODES,
    FleetFacts,
    Measure,
    Unit,
    fleet_facts,
    folds,
    left_out_sentence,
    run_files,
    summary_sentences,
)
from clustereval.report.gaps.common import raw_output
from clustereval.report.markdown import Document
from clustereval.report.network_plots import pairwise_png, sweep_plot_path, sweeps_png
from clustereval.report.pairwise_nodes import gbps, render_failing, render_unresolved
from clustereval.report.pairwise_nodes import pairwise_lines as pairwise_lines
from clustereval.report.render import RunView, SectionResult, render_gaps, setup_gaps
from clustereval.report.units import iec_precise

WHO = {"platform": "the platform's environment (the container image or the cluster), found on node0",
       "clustereval default": "clustereval, because neither the platform nor cluster.toml set it",
       "cluster.toml": "the operator, in cluster.toml"}
PAIRWISE_CRITERIA = "a slow pair, or a pair with a node named a straggler or named slow by the fleet-relative verdict"
INTRA_CRITERIA = (f"a node more than {an.NODE_SLOW_PCT:g}% below the node median, named slow by the fleet-relative "
                  "verdict, or without a figure")


def _tool(view: RunView, name: str) -> str:
    return f"[`{name}`]({view.raw_rel}/tools/{name})"


def _env_nodes(view: RunView) -> list:
    env = view.get("environment")
    return list(getattr(env, "nodes", []) or [])


def node_label(view: RunView, node: str, index: int | None = None) -> str:
    """``hostname(nodeN)``: the Environment table's hostname and the hostfile position."""
    for n in _env_nodes(view):
        if n.node == node:
            return f"{n.hostname or node}(node{n.index})"
    pre = view.get("preflight")
    for n in getattr(pre, "nodes", []) or []:
        if n.name == node:
            return f"{n.hostname or node}(node{n.index})"
    return f"{node}(node{index})" if index is not None else node


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ranks_words(n: int, nodes: int) -> str:
    return f"{plural(n, 'rank')} on {plural(nodes, 'node')}"


def _payload_range(ar: AllreduceRecord | None) -> tuple[int, int]:
    rows = [r for s in ((ar.intra if ar else []) + ([ar.inter] if ar and ar.inter else [])) for r in s.rows]
    if not rows:
        return (ar.min_bytes, ar.max_bytes) if ar else (0, 0)
    return min(r.payload_bytes for r in rows), max(r.payload_bytes for r in rows)


def _nccl_of(sweeps: list[Sweep]) -> NcclDebugInfo | None:
    return next((s.nccl for s in sweeps if s.nccl is not None), None)


def _nvls_state(info: NcclDebugInfo | None) -> str:
    if info is None:
        return ""
    if info.nvls_used:
        return "set up and used"
    if info.nvls_available is True:
        return "available but not set up"
    if info.nvls_available is False:
        return "not available"
    if info.nvls_used is False:
        return "not set up"
    return ""


def render_network(view: RunView, doc: Document) -> SectionResult:
    conn: ConnectivityRecord | None = view.get("connectivity")
    ar: AllreduceRecord | None = view.get("allreduce")
    pw: PairwiseRecord | None = view.get("pairwise")
    if conn is None and ar is None and pw is None:
        return SectionResult()
    out = SectionResult()
    doc.heading(2, "Network")
    _introduction(view, doc, conn, ar, pw)
    if ar is not None:
        _intra(view, doc, ar, out)
        _inter(view, doc, ar, out)
    if pw is not None and pw.pairs:
        _pairwise(view, doc, pw, out)
    gaps: list[Gap] = []
    for rec in (conn, ar, pw):
        gaps += list(getattr(rec, "gaps", []) or [])
    gaps += setup_gaps(view, "network", gaps)
    _launcher_findings(conn, ar, out)
    out.gaps += gaps
    render_gaps(doc, gaps)
    return out


# -- Introduction ---------------------------------------------------------------------------------
def _introduction(view: RunView, doc: Document, conn, ar, pw) -> None:
    items: list[str] = []
    toc_label = None
    note = ""
    # only what ran is listed: a launch in which no rank joined, or a sweep that measured no payload,
    # is said in the Gaps alone
    if conn is not None and conn.num_ranks <= 0:
        conn = None
    if ar is not None and not _measured_sweeps(ar):
        ar = None
    if conn is None and ar is None and not (pw is not None and pw.pairs):
        return
    if conn is not None:
        scope_word = "Inter-node" if conn.scope == "inter-node" and conn.launch.ok else "Intra-node"
        if conn.scope == "inter-node" and not conn.launch.ok:
            scope_word = "Inter-node"  # it was launched across every node; the Gap says it failed
        toc_label = f"{scope_word} connectivity"
        note = f"`connectivity.py`, {_ranks_words(conn.num_ranks, conn.num_nodes)}"
        items.append(_connectivity_item(view, conn))
    if ar is not None:
        items.append(_sweep_item(view, ar))
    if pw is not None and pw.pairs:
        items.append(_pairwise_item(view, pw, after_sweep=ar is not None))
    doc.heading(3, "Introduction", toc=bool(toc_label), toc_label=toc_label, note=note)
    doc.numbered(items)
    env = (ar.nccl_env if ar is not None else None) or (conn.nccl_env if conn is not None else None)
    backend = (conn.backend if conn is not None else "") or (ar.intra[0].backend if ar and ar.intra else "")
    if backend == "gloo":
        below = (", so the bandwidths below describe the host's TCP stack, not NVLink or a GPU fabric"
                 if ar is not None else "")
        doc.para("These ranks ran on CPUs with the gloo backend (TCP between processes): no GPU took part" + below + ".")
        return
    if env is not None and env.nvls_enable:
        doc.para(_nvls_paragraph(env, ar))


def _connectivity_item(view: RunView, conn: ConnectivityRecord) -> str:
    lib = ("NCCL (NVIDIA Collective Communications Library)" if conn.backend == "nccl"
           else "gloo (the CPU backend of torch.distributed)")
    k = conn.launch.nproc_per_node
    per = ("one process per GPU" if conn.backend == "nccl"
           else f"{k} CPU process{'' if k == 1 else 'es'} per node")
    if conn.allreduce_ok:
        did = (f"{_ranks_words(conn.num_ranks, conn.num_nodes)} joined one {lib} process group through a c10d "
               f"rendezvous at {conn.launch.endpoint} and completed one all-reduce whose sum every rank checked")
    else:
        did = (f"{_ranks_words(conn.num_ranks, conn.num_nodes)} were started to join one {lib} process group "
               f"through a c10d rendezvous at {conn.launch.endpoint} and complete one all-reduce")
    text = f"{_tool(view, 'connectivity.py')} (our connectivity test) — {per}, started with torchrun on each node; {did}"
    if conn.scope == "inter-node":
        text += ", across every node, so it is an inter-node check"
    else:
        text += "; it ran on one node, so it is an intra-node check only"
    text += ": **pass**." if conn.allreduce_ok else "; it did not complete: **failed** (see Gaps below)."
    if conn.launch.is_host_node:
        text += (f" The rendezvous needed `--rdzv_conf is_host=1` on {conn.launch.is_host_node} and `--local_addr` "
                 f"on every node: {'; '.join(conn.launch.fix_reasons[:2])}.")
    return text


def _measured_sweeps(ar: AllreduceRecord) -> list[Sweep]:
    return [s for s in ar.intra if s.rows] + ([ar.inter] if ar.inter is not None and ar.inter.rows else [])


def _sweep_item(view: RunView, ar: AllreduceRecord) -> str:
    lo, hi = _payload_range(ar)
    intra = [s for s in ar.intra if s.rows]
    inter = ar.inter if ar.inter is not None and ar.inter.rows else None
    backend = intra[0].backend if intra else (inter.backend if inter else "")
    timing = ("timed like nccl-tests: after 5 warm-ups, at least 20 calls (and at least 0.1 s of them) issued "
              "back to back between two CUDA events, the time per call taken from the slowest rank; payloads up "
              "to 64 MiB are also replayed from a CUDA graph, where the CPU's launch overhead does not count, "
              "and the table shows the faster of the two timings" if backend == "nccl"
              else "timed over at least 20 calls issued back to back after 5 warm-ups, the slowest rank's time")
    counts = []
    if intra:
        counts.append(f"{plural(intra[0].num_ranks, 'rank')} (intra-node, each node on its own)")
    if inter is not None:
        unit = "GPU" if inter.backend == "nccl" else "rank"
        counts.append(f"{plural(inter.num_ranks, 'rank')} (inter-node, every {unit} of every node)")
    through = (" through NCCL (NVIDIA Collective Communications Library)" if backend == "nccl"
               else " through gloo (the CPU backend of torch.distributed)")
    return (f"{_tool(view, 'allreduce.py')} (our all-reduce benchmark) — a float32 sum all-reduce{through} over payloads from "
            f"{iec_precise(lo)} to {iec_precise(hi)}, doubling each step, {timing}; a second pass times one call at a time with a "
            "barrier and a synchronize around it (blocking). Each payload's first all-reduce is checked. "
            "**algbw** (algorithm bandwidth, what the caller sees) is the payload's bytes divided by the time of one "
            "call; **busbw** (bus bandwidth, what the fabric moves) is algbw × 2(n−1)/n for n ranks, already "
            "unidirectional; 1 GBps = 10⁹ bytes per second. It ran at " + " and ".join(counts) + ".")


def _pairwise_item(view: RunView, pw: PairwiseRecord, *, after_sweep: bool) -> str:
    """The pairwise pass; ``after_sweep``: the sweep's item above already introduced the tool and busbw."""
    n = len({x for p in pw.pairs for x in (p.a, p.b)})
    tool = (f"{_tool(view, 'allreduce.py')} again, for" if after_sweep
            else f"{_tool(view, 'allreduce.py')} (our all-reduce benchmark), for")
    busbw = "busbw" if after_sweep else "busbw (bus bandwidth, what the fabric moves)"
    return (f"{tool} the pairwise straggler hunt — every node paired with the "
            f"others ({len(pw.pairs)} pairs of {n} nodes, {pw.ranks_per_node * 2} ranks per pair), "
            f"{plural(pw.samples_per_pair, 'timed sample')} of a {iec_precise(pw.payload_bytes)} all-reduce {busbw} per pair, "
            f"with disjoint pairs running at the same time in {pw.num_rounds} rounds; a node is named only when "
            f"every sample of its pairs is more than {pw.threshold_pct:g}% below the slowest sample of the pairs "
            "between the other nodes, so the healthy pairs' own spread sets the bar; a pair that did not complete, "
            "or that took its samples without the rest of its round, is neither slow nor fast, and a node that "
            "completed no pair, or none from a round on while its partners went on, is failing, not slow.")


def _nvls_paragraph(env, ar: AllreduceRecord | None) -> str:
    who = WHO.get(env.nvls_source, env.nvls_source)
    busbw = "busbw" if ar is not None else "bus bandwidth"  # busbw is expanded by the sweep's item
    text = ("NVLS (NVLink SHARP) lets the NVSwitch perform the all-reduce inside the switch; against ring " + busbw + " it "
            "typically gains about 30% intra-node and about 25% inter-node, it does not speed up all-gather or "
            "reduce-scatter, and it is a different feature from InfiniBand switch SHARP. "
            f"`NCCL_NVLS_ENABLE={env.nvls_enable}` (0 = force off, 1 = require NVLS, 2 = auto) was set by {who}.")
    if ar is not None:
        intra = _nvls_state(_nccl_of(ar.intra))
        inter = _nvls_state(ar.inter.nccl) if ar.inter is not None and ar.inter.nccl else ""
        said = []
        if intra:
            said.append(f"intra-node NVLS was {intra}")
        if inter:
            said.append(f"inter-node NVLS was {inter}")
        if said:
            text += " According to NCCL's own log (`NCCL_DEBUG=INFO`), " + " and ".join(said) + "."
    return text


# -- Intra-node -----------------------------------------------------------------------------------
def _intra(view: RunView, doc: Document, ar: AllreduceRecord, out: SectionResult) -> None:
    sweeps = [s for s in ar.intra if s.rows]
    if not sweeps:
        return
    n = sweeps[0].num_ranks
    gloo = sweeps[0].backend == "gloo"
    note = f"`allreduce.py`{' (gloo on CPU)' if gloo else ''}, {plural(n, 'rank')}"
    doc.heading(3, "Intra-node all-reduce benchmark", note=note)
    env_nodes = _env_nodes(view)
    spec = an.intra_spec(env_nodes[0] if env_nodes else None, ar.nvlink_target_gb_s)
    nccl = _nccl_of(sweeps)
    if gloo:
        doc.para(f"gloo all-reduce between {n} CPU processes on each node, over TCP.")
    else:
        parts = []
        if spec.kind:
            parts.append(f"Transport: {spec.kind}" + (f", {spec.bond}" if spec.bond else "")
                         + (f"; spec {gbps(spec.spec_uni_gb_s)} GBps unidirectional per GPU"
                            + (" (from cluster.toml)" if spec.source == "cluster.toml" else "") if spec.spec_uni_gb_s
                            else ""))
        if nccl is not None and nccl.transports:
            parts.append(f"NCCL connected the GPUs over {describe_path(nccl)}"
                         + (f" (NCCL {nccl.version})" if nccl.version else ""))
        if parts:
            doc.para(". ".join(parts) + ".")
    _intra_table(view, doc, sweeps)
    peaks = [(s, an.peak(s)) for s in sweeps]
    best_sweep, best = max(peaks, key=lambda sp: sp[1].busbw_gb_s)  # type: ignore[union-attr]
    assert best is not None
    lead = f"Peak busbw **{gbps(best.busbw_gb_s)} GBps** at {iec_precise(best.payload_bytes)}"
    if len(sweeps) > 1:
        lead += f" on {node_label(view, best_sweep.nodes[0])}"
    share = an.share_of_spec(best.busbw_gb_s, spec.spec_uni_gb_s) if not gloo else None
    nvls_on = bool(nccl and nccl.nvls_used)
    if share is not None:
        lead += f" = {share * 100:.1f}% of the {spec.kind or 'intra-node'} spec of {gbps(spec.spec_uni_gb_s)} GBps"
        lead += (" (NVLS was used, so busbw can exceed 100% of this ring-formula spec)" if nvls_on
                 else " (without NVLS, a ring or tree all-reduce)")
    doc.para(lead + ".")
    if folds(len(ar.intra)) and not gloo:
        png = _intra_nodes(view, doc, ar, fleet_facts(view))
    else:
        png = sweeps_png(sweeps)
    _plot(view, doc, out, "Intra-node all-reduce", sweep_plot_path(sweeps), png, drawn_by_run=bool(sweeps[0].plot))
    if gloo:
        return
    for s, p, med in an.slow_nodes(sweeps):
        out.findings.append(Finding("underperforming", "fabric",
                                    f"`{node_label(view, s.nodes[0])}` — intra-node all-reduce peak busbw "
                                    f"{gbps(p)} GBps, {(1 - p / med) * 100:.1f}% below the node median of "
                                    f"{gbps(med)} GBps"))
    if share is None:
        out.findings.append(Finding("needs_input", "fabric",
                                    f"intra-node all-reduce peak busbw {gbps(best.busbw_gb_s)} GBps at "
                                    f"{iec_precise(best.payload_bytes)} over {n} ranks; the intra-node interconnect's "
                                    "unidirectional spec is unknown. What to obtain: the GPU-to-GPU bandwidth the "
                                    "servers are sold with (GBps, unidirectional, per GPU)."))
        return
    words = (f"intra-node: peak all-reduce busbw {gbps(best.busbw_gb_s)} GBps at {iec_precise(best.payload_bytes)} over "
             f"{n} GPUs = {share * 100:.1f}% of the {spec.kind} spec of {gbps(spec.spec_uni_gb_s)} GBps "
             f"({'NVLS used' if nvls_on else 'NVLS not used'})")
    judged = judge("network.intra-allreduce", "intra-node", best.busbw_gb_s, spec.spec_uni_gb_s,
                   "operator" if spec.source == "cluster.toml" else "spec")
    good = judged.met
    out.findings.append(Finding("healthy" if good else "underperforming", "fabric",
                                words + (f", at or above the {an.HEALTHY_SHARE_OF_SPEC * 100:.0f}% of the spec a healthy "
                                         "ring all-reduce reaches" if good else
                                         f", below the {an.HEALTHY_SHARE_OF_SPEC * 100:.0f}% a "
                                         "healthy ring all-reduce reaches"), [judged.to_dict()]))


def _intra_table(view: RunView, doc: Document, sweeps: list[Sweep]) -> None:
    if len(sweeps) == 1:
        s = sweeps[0]
        blocking = {r.payload_bytes: r for r in s.blocking_rows}
        headers = ["payload", "algbw (GBps)", "busbw (GBps)"] + (["busbw blocking (GBps)"] if blocking else [])
        rows = []
        for r in s.rows:
            row = [iec_precise(r.payload_bytes), gbps(r.algbw_gb_s), gbps(r.busbw_gb_s)]
            if blocking:
                b = blocking.get(r.payload_bytes)
                row.append(gbps(b.busbw_gb_s) if b else "")
            rows.append(row)
        doc.table(headers, rows, "r" * len(headers))
        return
    payloads = sorted({r.payload_bytes for s in sweeps for r in s.rows})
    if len(sweeps) <= 4:
        headers = ["payload"] + [f"busbw {node_label(view, s.nodes[0])} (GBps)" for s in sweeps]
        rows = [[iec_precise(p)] + [gbps(x.busbw_gb_s) if (x := s.row_at(p)) else "" for s in sweeps] for p in payloads]
    else:
        headers = ["payload", "busbw median (GBps)", "busbw min (GBps)", "slowest node"]
        rows = []
        for p in payloads:
            vals = [(x.busbw_gb_s, s) for s in sweeps if (x := s.row_at(p))]
            low = min(vals, key=lambda v: v[0])
            rows.append([iec_precise(p), gbps(an.median_row(sweeps, p) or 0.0), gbps(low[0]), node_label(view, low[1].nodes[0])])
    doc.table(headers, rows, "r" * (len(headers) - (1 if len(sweeps) > 4 else 0)) + ("l" if len(sweeps) > 4 else ""))


def _intra_nodes(view: RunView, doc: Document, ar: AllreduceRecord, facts: FleetFacts) -> bytes | None:
    """At fleet size: each node's peak busbw over the fleet, and a row for each node a reader must act on.
    Returns the plot, drawn now, of the fleet's highest, median and lowest peak and the listed nodes (at most
    ``FOLD_NODES`` of them); None where it cannot be drawn here."""
    measured = [s for s in ar.intra if s.rows and s.nodes]
    peaks = {s.nodes[0]: an.peak(s) for s in measured}
    slow = {s.nodes[0] for s, _, _ in an.slow_nodes(measured)}
    units = [Unit(f"`{node_label(view, s.nodes[0])}`", (p.busbw_gb_s if (p := peaks[s.nodes[0]]) else None,))
             for s in measured]
    listed = [s for s in ar.intra if s.nodes and (not s.rows or s.nodes[0] in slow
                                                  or facts.named("busbw-intra", node_label(view, s.nodes[0])))]
    doc.para(" ".join(summary_sentences(units, [Measure("peak busbw", "GBps", gbps)], "node")
                      + [left_out_sentence(len(listed), len(ar.intra), "node", INTRA_CRITERIA,
                                           run_files(view.raw_rel, "allreduce"),
                                           lists="the table below lists only")]))
    ranked = sorted((s for s in measured if peaks[s.nodes[0]]), key=lambda s: peaks[s.nodes[0]].busbw_gb_s)  # type: ignore[union-attr]
    drawn = [ranked[-1], ranked[len(ranked) // 2], ranked[0]] if ranked else []
    drawn += [s for s in listed if s.rows and s not in drawn][:FOLD_NODES]
    png = sweeps_png(drawn)
    if png is not None:  # a plot the run drew itself, shown where this one cannot be drawn, has every node
        doc.para(f"The plot below draws {plural(len(drawn), 'node')}: those with the highest, the median and the "
                 "lowest peak busbw" + (", and the nodes of the table." if len(drawn) > 3 else "."))
    if not listed:
        return png
    node_median = statistics.median(p.busbw_gb_s for p in peaks.values() if p)
    rows = []
    for s in listed:
        p = peaks.get(s.nodes[0])
        rows.append([node_label(view, s.nodes[0])]
                    + ([gbps(p.busbw_gb_s), iec_precise(p.payload_bytes), f"{(p.busbw_gb_s / node_median - 1) * 100:+.1f}"]
                       if p else ["failed"] * 3))
    doc.table(["node", "peak busbw (GBps)", "payload", "vs node median (%)"], rows, "lrrr")
    return png


# -- Inter-node -----------------------------------------------------------------------------------
def _nic_inventory(view: RunView) -> str:
    env_nodes = _env_nodes(view)
    nics = list(getattr(env_nodes[0], "nics", []) or []) if env_nodes else []
    if not nics:
        return ""
    groups: dict[tuple[str, float], list[str]] = {}
    for nic in nics:
        groups.setdefault((nic.kind, nic.rate_gb_s), []).append(nic.name)
    parts = []
    for (kind, rate), names in groups.items():
        rate_words = f" at {rate:g} Gb/s ({gbps(rate / 8)} GBps) each" if rate else ""
        parts.append(f"{len(names)} × {kind} ({', '.join(names[:4])}{', …' if len(names) > 4 else ''}){rate_words}")
    return "NIC inventory per node (inventory, not a measure of this benchmark): " + "; ".join(parts) + "."


def _inter(view: RunView, doc: Document, ar: AllreduceRecord, out: SectionResult) -> None:
    s = ar.inter
    if s is None or not s.rows or len(s.nodes) < 2:
        return
    doc.heading(3, "Inter-node all-reduce benchmark", note=f"`allreduce.py`, {s.num_ranks} ranks")
    gloo = s.backend == "gloo"
    lines = []
    if gloo:
        lines.append(f"gloo all-reduce between {s.num_ranks} CPU processes on {len(s.nodes)} nodes, over TCP.")
    elif s.nccl is not None:
        path = describe_path(s.nccl)
        net = f"NCCL's network: {s.nccl.network}" if s.nccl.network else ""
        lines.append("Transport: " + "; ".join(x for x in (f"NCCL connected the ranks over {path}" if path else "", net,
                                                          f"NVLS {_nvls_state(s.nccl) or 'state not logged'}") if x)
                     + ".")
    inv = _nic_inventory(view)
    if inv:
        lines.append(inv)
    if lines:
        doc.para(" ".join(lines))
    one = {p: an.median_row([x for x in ar.intra if x.rows], p) for p in (r.payload_bytes for r in s.rows)}
    # the 1-node columns only where every payload has a 1-node figure (one GPU or rank per node has
    # no intra-node sweep): an empty cell would assert an absence
    compare = all(one.values())
    headers = ["payload", "algbw (GBps)", "busbw (GBps)"] + (["1-node busbw (GBps)", "inter ÷ 1-node (×)"] if compare else [])
    rows = []
    for r in s.rows:
        o = one[r.payload_bytes]
        rows.append([iec_precise(r.payload_bytes), gbps(r.algbw_gb_s), gbps(r.busbw_gb_s)]
                    + ([gbps(o), f"{r.busbw_gb_s / o:.2f}"] if compare and o else []))
    doc.table(headers, rows, "r" * len(headers))
    p = an.peak(s)
    assert p is not None
    so = an.scale_out(s, ar.intra)
    text = f"Peak busbw **{gbps(p.busbw_gb_s)} GBps** at {iec_precise(p.payload_bytes)} over {s.num_ranks} ranks"
    if so is not None:
        text += (f"; at that payload one node alone reached {gbps(so.intra_busbw_gb_s)} GBps, so spreading the "
                 f"all-reduce over {len(s.nodes)} nodes runs at {so.ratio:.2f}× the 1-node busbw")
    doc.para(text + ".")
    _plot(view, doc, out, "Inter-node all-reduce", sweep_plot_path([s]), sweeps_png([s]), drawn_by_run=bool(s.plot))
    if gloo:
        return
    path_words = describe_path(s.nccl) if s.nccl else ""
    measured = (f"inter-node: peak all-reduce busbw {gbps(p.busbw_gb_s)} GBps at {iec_precise(p.payload_bytes)} over "
                f"{s.num_ranks} ranks on {len(s.nodes)} nodes" + (f", NCCL path {path_words}" if path_words else "")
                + (f", NVLS {_nvls_state(s.nccl)}" if s.nccl and _nvls_state(s.nccl) else "")
                + (f", {so.ratio:.2f}× the 1-node busbw of {gbps(so.intra_busbw_gb_s)} GBps at the same payload"
                   if so else ""))
    target = ar.internode_target_gb_s
    if target:
        ok = p.busbw_gb_s >= target
        out.findings.append(Finding("healthy" if ok else "underperforming", "fabric",
                                    f"{measured}; the operator's target is {gbps(target)} GBps"))
    else:
        out.findings.append(Finding("needs_input", "fabric",
                                    f"{measured}. This busbw mixes NVLink, the NICs and the switches, so no NIC rate is "
                                    "its target. What to obtain: the all-reduce busbw the purchased fabric is expected "
                                    f"to reach at {s.num_ranks} ranks ({len(s.nodes)} nodes) for a {iec_precise(p.payload_bytes)} "
                                    "float32 payload, in GBps."))


# -- Pairwise -------------------------------------------------------------------------------------
def _pairwise(view: RunView, doc: Document, pw: PairwiseRecord, out: SectionResult) -> None:
    n = len({x for p in pw.pairs for x in (p.a, p.b)})
    doc.heading(3, "Pairwise all-reduce benchmark",
                note=f"`allreduce.py`, {n} nodes in pairs at {iec_precise(pw.payload_bytes)}, {pw.num_rounds} rounds")
    done = [p for p in pw.pairs if p.busbw_gb_s is not None]
    failed = [p for p in pw.pairs if p.busbw_gb_s is None]
    slow = [p for p in done if p.slow]
    if pw.judged and pw.healthy_samples:
        doc.para(f"The {plural(pw.healthy_pairs, 'healthy pair')} (none of them with a named node) gave "
                 f"{pw.healthy_samples} samples with a median of **{gbps(pw.healthy_median_gb_s)} GBps**; the slowest "
                 f"was {gbps(pw.healthy_floor_gb_s)} GBps, so a pair is slow when even its fastest sample is below "
                 f"{gbps(pw.limit_gb_s)} GBps ({pw.threshold_pct:g}% under that slowest sample). "
                 f"{len(slow)} of the {len(done)} completed pair{'s' if len(done) != 1 else ''} "
                 f"{'was' if len(slow) == 1 else 'were'} slow.")
    elif done and pw.why_not_judged:
        doc.para(f"No node was judged: {pw.why_not_judged}, fewer than half, so the slow or missing pairs are a "
                 "launcher problem rather than a verdict on the nodes.")
    elif pw.why_not_judged:
        doc.para(f"No node was judged: {pw.why_not_judged}.")
    listed = done
    n_nodes = len({x for p in pw.pairs for x in (p.a, p.b)})
    if folds(n_nodes):  # at fleet size: the pairs' figures over the fleet, and only the pairs to act on
        facts = fleet_facts(view)
        named = set(pw.stragglers) | {x for x in {p.a for p in done} | {p.b for p in done}
                                      if facts.named("pairwise", node_label(view, x))}
        listed = [p for p in done if p.slow or {p.a, p.b} & named]
        units = [Unit(f"{node_label(view, p.a)} + {node_label(view, p.b)}", (p.busbw_gb_s,)) for p in done]
        doc.para(" ".join(summary_sentences(units, [Measure("busbw", "GBps", gbps)], "completed pair")
                          + [left_out_sentence(len(listed), len(done), "completed pair", PAIRWISE_CRITERIA,
                                               run_files(view.raw_rel, "pairwise"))]))
    if listed:
        ref = pw.healthy_median_gb_s
        headers = ["node", "node", "round", "busbw median (GBps)", "slowest sample (GBps)", "fastest sample (GBps)"]
        headers += ["vs healthy median (%)"] if ref else []
        headers += ["verdict"]
        rows = []
        for p in listed:
            assert p.busbw_gb_s is not None
            samples = p.samples_gb_s or [p.busbw_gb_s]
            row = [node_label(view, p.a), node_label(view, p.b), str(p.round), gbps(p.busbw_gb_s),
                   gbps(min(samples)), gbps(max(samples))]
            row += [f"{(p.busbw_gb_s / ref - 1) * 100:+.1f}"] if ref else []
            row.append("slow" if p.slow else "not compared: sampled without its round" if p.ungated
                       else "within the healthy spread")
            rows.append(row)
        doc.table(headers, rows, "llrrrr" + ("r" if ref else "") + "l")
    if failed:
        doc.para("Pairs that did not complete (counted neither slow nor fast): "
                 + "; ".join(f"{node_label(view, p.a)} + {node_label(view, p.b)} ({raw_output(p.error, 'no result')})"
                             for p in failed) + ".")
    render_failing(doc, pw, out.findings, lambda x: node_label(view, x))
    if pw.stragglers:
        doc.para("Stragglers (every sample of their pairs below the limit): "
                 + ", ".join(f"`{node_label(view, s)}`" for s in pw.stragglers) + ".")
        how = "NCCL" if pw.backend == "nccl" else "gloo over TCP on CPU"
        for s in pw.stragglers:
            # its evidence: its pairs with nodes not named, sampled together with their rounds
            mine = [p for p in done if s in (p.a, p.b) and not p.ungated
                    and not set((p.a, p.b)) & (set(pw.stragglers) - {s})]
            fastest = max((x for p in mine for x in (p.samples_gb_s or [p.busbw_gb_s or 0.0])), default=0.0)
            out.findings.append(Finding(
                "underperforming", "fabric",
                f"`{node_label(view, s)}` is a straggler — pairwise all-reduce at {iec_precise(pw.payload_bytes)} ({how}): "
                f"the fastest of the {sum(len(p.samples_gb_s) or 1 for p in mine)} samples of its "
                f"{plural(len(mine), 'pair')} reached {gbps(fastest)} GBps, below the limit of {gbps(pw.limit_gb_s)} "
                f"GBps ({pw.threshold_pct:g}% under the healthy pairs' slowest sample of "
                f"{gbps(pw.healthy_floor_gb_s)} GBps; their median {gbps(pw.healthy_median_gb_s)} GBps)"))
    elif slow:
        doc.para("No node has all its pairs slow, so the slow pairs point at links between those nodes rather "
                 "than at one node.")
    render_unresolved(doc, pw, lambda x: node_label(view, x))
    if pw.why_not_judged:
        who = f"; {', '.join(node_label(view, x) for x in pw.not_joined)} joined no pair" if pw.not_joined else ""
        out.findings.append(Finding("underperforming", "torchrun",
                                    f"the pairwise hunt named nobody because {pw.why_not_judged}{who}: "
                                    + ("the pairs' launches failed" if failed else
                                       "the pairs did not take their samples together with their rounds")
                                    + ", which says nothing about the fabric"))
    _plot(view, doc, out, "Pairwise all-reduce busbw", pw.heatmap or "network/pairwise-heatmap.png",
          pairwise_png(pw), drawn_by_run=bool(pw.heatmap))


def _plot(view: RunView, doc: Document, out: SectionResult, alt: str, rel: str, png: bytes | None, *,
          drawn_by_run: bool) -> None:
    """Link a plot drawn now from the records; without matplotlib here, the one the run drew, if any."""
    if png is not None:
        out.files[rel] = png
    if png is not None or drawn_by_run:
        doc.image(alt, f"{view.raw_rel}/{rel}")


def _launcher_findings(conn, ar, out: SectionResult) -> None:
    """A failed launch is a launcher problem (torchrun / rendezvous), never "the network is unhealthy"."""
    launches = []
    if conn is not None and not conn.launch.ok and conn.launch.rc_by_node:
        launches.append(("connectivity test", conn.launch))
    if ar is not None:
        for s in ar.intra + ([ar.inter] if ar.inter else []):
            if not s.launch.ok and s.launch.rc_by_node:
                launches.append((f"{s.scope} all-reduce benchmark", s.launch))
    seen = set()
    for what, info in launches:
        why = info.diagnosis_text or raw_output(info.error, "the launch failed")
        if why in seen:
            continue
        seen.add(why)
        out.findings.append(Finding("underperforming", "torchrun",
                                    f"the {what} did not start or finish on {', '.join(info.nodes)}: {why}"))
