"""Pairwise straggler hunt: all-reduce busbw for node pairs at one large payload, pairs in parallel rounds.

Up to ``ROUND_ROBIN_MAX_NODES`` nodes every pair is measured once in N-1 rounds of disjoint pairs
(a round-robin schedule); above it, ``screen_and_confirm`` localises slow nodes in a few rounds.
Pairs more than 5% below the run mean are flagged and nodes ranked by their share of slow pairs.
``run_pairwise(ctx, nodes)`` is the entry point the ``pairwise`` command and other phases call.
"""

from __future__ import annotations

import time

from clustereval.analysis import stragglers as st
from clustereval.phases.base import RunContext
from clustereval.phases.network import SWEEP_TIMEOUT_S, _collective_env, copy_tools, sweep_args
from clustereval.phases.torchrun import launch, nccl_env_info, probe_nodes, probes_for, ranks_per_node
from clustereval.records import Gap
from clustereval.records.network import NodeSuspect, PairResult, PairwiseRecord
from clustereval.report.network_plots import pair_heatmap_png
from clustereval.transport.base import Node, run_parallel

GPU_PAYLOAD_BYTES = 2**30  # 1 GiB: bandwidth-bound on every fabric
CPU_PAYLOAD_BYTES = 2**20  # gloo on CPU
ROUND_ROBIN_MAX_NODES = 16
THRESHOLD_PCT = 5.0


def run_pairwise(ctx: RunContext, nodes: list[Node] | None = None, *, payload_bytes: int | None = None,
                 strategy: str = "auto", phase: str = "pairwise") -> PairwiseRecord:
    """Measure node pairs and name the stragglers. ``strategy``: auto | round-robin | screen."""
    nodes = list(nodes if nodes is not None else ctx.nodes)
    rec = PairwiseRecord(phase=phase, threshold_pct=THRESHOLD_PCT)
    if len(nodes) < 2:
        rec.status = "skipped"
        return rec
    copy_tools(ctx)
    t0 = time.monotonic()
    env = nccl_env_info(ctx)
    conn = ctx.records.get("connectivity")
    known = {p.node: p for p in (conn.probes if conn is not None else [])}
    probes = ([known[n.name] for n in nodes] if all(n.name in known for n in nodes)
              else probe_nodes(ctx, nodes, nodes[0].address, ctx.config.rdzv_port))
    nproc, backend = ranks_per_node(ctx, probes)
    payload = payload_bytes or (GPU_PAYLOAD_BYTES if backend == "nccl" else CPU_PAYLOAD_BYTES)
    rec.payload_bytes, rec.backend, rec.ranks_per_node = payload, backend, nproc
    by_name = {n.name: n for n in nodes}
    args = sweep_args(backend, payload, min_bytes=payload, modes="back-to-back")
    results: list[PairResult] = []
    state = {"round": 0}

    def measure(pairs: list[st.Pair]) -> dict[st.Pair, float | None]:
        state["round"] += 1
        rnd = state["round"]
        ctx.progress(phase, nodes[0].name, f"round {rnd}: {len(pairs)} pair(s) in parallel", None)

        def one(item: tuple[int, st.Pair]) -> float | None:
            i, (a, b) = item
            res = launch(ctx, label=f"pair-r{rnd}-{a}-{b}", module="allreduce", args=args,
                         nodes=[by_name[a], by_name[b]], nproc=nproc, port=ctx.config.rdzv_port + 1 + i,
                         timeout_s=SWEEP_TIMEOUT_S, extra_env=_collective_env(env, backend), diagnose=False,
                         probes=probes_for(probes, [by_name[a], by_name[b]]))
            rows = [e for e in res.of("row") if e.get("mode") == "back-to-back"]
            ok = res.info.ok and rows and all(e.get("check_ok", True) for e in rows)
            value = float(rows[0]["busbw_gb_s"]) if ok else None
            results.append(PairResult(a=a, b=b, round=rnd, busbw_gb_s=value,
                                      error="" if ok else (res.info.error or "no result")))
            return value

        values = run_parallel(list(enumerate(pairs)), one, max(1, len(pairs)))
        return dict(zip(pairs, values, strict=True))

    names = [n.name for n in nodes]
    use_screen = strategy == "screen" or (strategy == "auto" and len(nodes) > ROUND_ROBIN_MAX_NODES)
    if use_screen:
        screen = st.screen_and_confirm(names, measure, THRESHOLD_PCT)
        rec.num_rounds = screen.rounds
    else:
        _, _, rec.num_rounds = st.run_round_robin(names, measure, THRESHOLD_PCT)
    busbw = {st.key(r.a, r.b): r.busbw_gb_s for r in results}
    verdict = st.judge(busbw, THRESHOLD_PCT)
    rec.mean_busbw_gb_s = verdict.mean_busbw_gb_s
    for r in results:
        r.slow = st.key(r.a, r.b) in verdict.slow
    rec.pairs = sorted(results, key=lambda r: (r.round, r.a, r.b))
    rec.suspects = [NodeSuspect(node=s.node, slow_pairs=s.slow_pairs, pairs=s.pairs, share=round(s.share, 4),
                                mean_busbw_gb_s=round(s.mean_busbw_gb_s, 3)) for s in verdict.suspects]
    rec.stragglers = screen.stragglers if use_screen else verdict.stragglers
    png = pair_heatmap_png(names, busbw, f"Pairwise all-reduce busbw (GB/s), {nproc * 2} ranks per pair")
    if png is not None:
        rec.heatmap = "network/pairwise-heatmap.png"
        ctx.raw(rec.heatmap, png)
    failed = [r for r in results if r.busbw_gb_s is None]
    if failed:
        rec.status = "partial" if len(failed) < len(results) else "failed"
        for r in failed:
            rec.gaps.append(Gap(phase=phase, text=f"The pair {r.a} + {r.b} did not complete ({r.error}).",
                                plan="read the pair's launch log in the raw folder, fix the cause and re-run "
                                     "`clustereval pairwise`"))
    rec.wall_seconds = round(time.monotonic() - t0, 1)
    return rec


class PairwisePhase:
    name = "pairwise"
    title = "Pairwise"

    def applies(self, ctx: RunContext) -> bool:
        return len(ctx.nodes) >= 2

    def run(self, ctx: RunContext) -> PairwiseRecord:
        return run_pairwise(ctx, ctx.nodes)
