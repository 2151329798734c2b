"""Pairwise straggler hunt: all-reduce busbw for node pairs at one large payload, pairs in parallel rounds.

Up to ``round_robin_max_nodes`` nodes (``PairwiseSettings``) every pair is measured in N-1 rounds of
disjoint pairs (a round-robin schedule), each pair ``samples_per_pair`` times at a bandwidth-bound
payload so its own noise is known; ``analysis.stragglers.judge`` names a node only when every sample
of its pairs is slower than any healthy pair ever ran, less ``threshold_pct``. Above that many nodes
``screen_and_confirm`` localises slow nodes in a few rounds. Every pair's job uses the run's
rendezvous plan. ``run_pairwise(ctx, nodes)`` is the entry point the ``pairwise`` command and other
phases call.

A pair whose job fails gives no sample: its nodes are never slow on that evidence. A node that
completed no pair is a failing node (``PairwiseRecord.failing``, with the launcher's error, and the
phase is partial: exit 1); with a partner that completed another pair the failure is its own. So is
a node that completed pairs and failed every one after (lost mid-hunt) while its partners went on
completing pairs: failing from the round it stopped, with how many pairs it completed. A
round of several pairs whose pairs did not all pass its gate together (one never came, or the gate
could not be reached) gets a ``pairwise.round-ungated`` Gap, and its ungated pairs are neither a
healthy reference nor evidence of a slow pair (``analysis.stragglers`` says the rule).
"""

from __future__ import annotations

import time

from clustereval.analysis import stragglers as st
from clustereval.phases.base import RunContext
from clustereval.phases.network import NETWORK_TOOLS, _collective_env, sweep_args
from clustereval.phases.remote import require_torch
from clustereval.phases.settings import NetworkSettings, PairwiseSettings
from clustereval.phases.tools import publish_tools
from clustereval.phases.torchrun import (
    host_port,
    launch,
    nccl_env_info,
    probes_for,
    ranks_per_node,
    run_plan,
    ship_all,
)
from clustereval.records import Gap
from clustereval.records.network import FailingNode, NodeSuspect, PairResult, PairwiseRecord
from clustereval.transport.base import Node, run_parallel

# each sample at least 0.3 s of back-to-back calls: a CPU rank's scheduling hiccups average out
CPU_TIMING = ["--warmup", "2", "--iters", "3", "--min-time-s", "0.3"]
# how long the pairs of a round wait at a gate for a pair that has not come: the jobs start within a
# second of each other, then spend up to the rendezvous's 60 s join timeout and a torch import on a
# loaded node before their first sample; a pair that failed to start costs the round this much once
GATE_TIMEOUT_S = 120


def run_pairwise(ctx: RunContext, nodes: list[Node] | None = None, settings: PairwiseSettings | None = None, *,
                 strategy: str = "auto", phase: str = "pairwise") -> PairwiseRecord:
    """Measure node pairs and name the stragglers. ``strategy``: auto | round-robin | screen."""
    nodes = list(nodes if nodes is not None else ctx.nodes)
    settings = settings or PairwiseSettings()
    samples, threshold_pct = settings.samples_per_pair, settings.threshold_pct
    rec = PairwiseRecord(phase=phase, threshold_pct=threshold_pct, samples_per_pair=samples)
    if len(nodes) < 2:
        rec.status = "skipped"
        return rec
    require_torch(ctx)
    publish_tools(ctx, *NETWORK_TOOLS)
    t0 = time.monotonic()
    env = nccl_env_info(ctx)
    plan, probes = run_plan(ctx, nodes)
    rec.rendezvous = plan
    nproc, backend = ranks_per_node(ctx, probes)
    payload = settings.payload_bytes or (settings.gpu_payload_bytes if backend == "nccl"
                                         else settings.cpu_payload_bytes)
    rec.payload_bytes, rec.backend, rec.ranks_per_node = payload, backend, nproc
    by_name = {n.name: n for n in nodes}
    # one payload; with gloo held to what CPU ranks carry, as in the all-reduce sweep
    args = [*sweep_args(backend, payload, min_bytes=payload, gloo_max_bytes=NetworkSettings().gloo_max_bytes,
                        modes="back-to-back"), "--samples", str(samples)]
    if backend == "gloo":
        args += CPU_TIMING
    results: list[PairResult] = []
    joined: set[str] = set()
    state = {"round": 0}
    ship_all(ctx, nodes)  # no pair of round 1 starts late for its first contact with a node

    def gate_args(host: Node, num_pairs: int, index: int, rnd: int) -> list[str]:
        # the round's pairs take every sample together (workers.roundgate), at the run's rendezvous
        # port on the first node of the round's first pair: no pair's job meets there meanwhile
        if num_pairs < 2:
            return []
        return ["--gate", host_port(host.address, ctx.config.rdzv_port), "--gate-pairs", str(num_pairs),
                "--gate-server", host.name if index == 0 else "", "--gate-key", f"{ctx.store.run_id}-{phase}-r{rnd}",
                "--gate-timeout-s", str(GATE_TIMEOUT_S)]

    def measure(pairs: list[st.Pair]) -> dict[st.Pair, st.Sampled]:
        state["round"] += 1
        rnd = state["round"]
        ctx.progress(phase, nodes[0].name, f"round {rnd}: {len(pairs)} pair(s) in parallel", None)

        def one(item: tuple[int, st.Pair]) -> st.Sampled:
            i, (a, b) = item
            if ctx.stop.is_set():
                results.append(PairResult(a=a, b=b, round=rnd, error="not run: the run was interrupted"))
                return st.Sampled(())
            pair_nodes = [by_name[a], by_name[b]]
            gate = gate_args(by_name[pairs[0][0]], len(pairs), i, rnd)
            res = launch(ctx, label=f"pair-r{rnd}-{a}-{b}", module="allreduce", args=[*args, *gate], nodes=pair_nodes,
                         nproc=nproc, port=ctx.config.rdzv_port + 1 + i, timeout_s=settings.sweep_timeout_s,
                         extra_env=_collective_env(env, backend), diagnose=False, plan=plan,
                         probes=probes_for(probes, pair_nodes), backend=backend)
            joined.update(e.node for e in res.info.exits if e.joined)
            rows = [e for e in res.of("row") if e.get("mode") == "back-to-back"]
            ok = res.info.ok and bool(rows) and all(e.get("check_ok", True) for e in rows)
            values = [float(e["busbw_gb_s"]) for e in rows] if ok else []
            why = res.info.diagnosis_text or res.info.error or "no result"
            ended = time.monotonic() - t0
            gated = bool(gate) and bool(rows) and all(e.get("gated") for e in rows)
            ungated = bool(gate) and bool(values) and not gated  # a round of several pairs, not sampled with it
            left = next((str(e.get("error", "")) for e in res.of("gate-unavailable")), "")
            results.append(PairResult(a=a, b=b, round=rnd, samples_gb_s=values, error="" if ok else why,
                                      started_s=round(ended - res.info.seconds, 2), ended_s=round(ended, 2),
                                      sample_starts_unix_s=[float(e.get("started_unix_s", 0.0)) for e in rows],
                                      sample_ends_unix_s=[float(e.get("ended_unix_s", 0.0)) for e in rows],
                                      gated=gated, ungated=ungated,
                                      gate_error=left))
            return st.Sampled(tuple(values), gated=not ungated)

        values = run_parallel(list(enumerate(pairs)), one, max(1, len(pairs)))
        return dict(zip(pairs, values, strict=True))

    names = [n.name for n in nodes]
    use_screen = strategy == "screen" or (strategy == "auto" and len(nodes) > settings.round_robin_max_nodes)
    if use_screen:
        screen = st.screen_and_confirm(names, measure, threshold_pct)
        rec.num_rounds = screen.rounds
        rec.unresolved = list(screen.unresolved)
    else:
        _, _, rec.num_rounds = st.run_round_robin(names, measure, threshold_pct)
    judge_pairs(rec, results, names, joined, screen.stragglers if use_screen else None)
    rec.wall_seconds = round(time.monotonic() - t0, 1)
    return rec


def judge_pairs(rec: PairwiseRecord, results: list[PairResult], names: list[str], joined: set[str],
                stragglers: list[str] | None = None) -> None:
    """Fill ``rec`` from every pair's samples: the judgement (``analysis.stragglers.judge``), each pair's
    median and verdict, the suspects, the stragglers (``stragglers``: the screening's names; None:
    the judgement's), the failing nodes, the nodes that joined no pair, and a Gap for each failed
    pair, each ungated round and a hunt that could not judge. ``names``: every node of the hunt;
    ``joined``: those whose workers started. A pair's ``ungated`` is the phase's own word (set when it
    ran), so a record of an older run is judged as it was."""
    threshold_pct, phase = rec.threshold_pct, rec.phase
    samples_by_pair = {st.key(r.a, r.b): st.Sampled(tuple(r.samples_gb_s), gated=not r.ungated) for r in results}
    rounds = {st.key(r.a, r.b): r.round for r in results}
    verdict = st.judge(samples_by_pair, threshold_pct, half_gated=stragglers is None, rounds=rounds)
    rec.mean_busbw_gb_s = round(verdict.mean_busbw_gb_s, 6)
    rec.judged, rec.why_not_judged = verdict.judged, verdict.why_not_judged
    rec.healthy_pairs, rec.healthy_samples = verdict.healthy_pairs, verdict.healthy_samples
    rec.healthy_median_gb_s = round(verdict.healthy_median_gb_s, 6)
    rec.healthy_floor_gb_s = round(verdict.healthy_floor_gb_s, 6)
    rec.limit_gb_s = round(verdict.limit_gb_s, 6)
    for r in results:
        k = st.key(r.a, r.b)
        r.busbw_gb_s = verdict.medians.get(k)
        r.slow = k in verdict.slow
    rec.pairs = sorted(results, key=lambda r: (r.round, r.a, r.b))
    rec.suspects = [NodeSuspect(node=s.node, slow_pairs=s.slow_pairs, pairs=s.pairs, share=round(s.share, 4),
                                mean_busbw_gb_s=round(s.mean_busbw_gb_s, 3), failed_pairs=s.failed_pairs)
                    for s in verdict.suspects]
    rec.stragglers = list(stragglers) if stragglers is not None else verdict.stragglers
    order = {n: i for i, n in enumerate(names)}
    by_pair = {st.key(r.a, r.b): r for r in rec.pairs}
    # the error of its first failed pair (from the round it stopped), as the launcher gave it
    rec.failing = [FailingNode(node=f.node, error=next((by_pair[k].error for k in sorted(
                                   f.failed_pairs, key=lambda k: (by_pair[k].round, k)) if k in by_pair), ""),
                               carries=f.carries, completed_pairs=f.completed_pairs, from_round=f.from_round,
                               partners=sorted((b if a == f.node else a for a, b in f.failed_pairs),
                                               key=lambda x: order.get(x, len(order))))
                   for f in verdict.failing]
    rec.not_joined = [n for n in names if n not in joined] if any(r.error for r in results) else []
    failed = [r for r in results if r.busbw_gb_s is None]
    for rnd in sorted({r.round for r in rec.pairs}):
        mine = [r for r in rec.pairs if r.round == rnd]
        if any(r.ungated for r in mine):
            rec.gaps.append(Gap(phase=phase, kind="pairwise.round-ungated", facts={
                "round": rnd, "pairs": [f"{r.a} + {r.b}" for r in mine],
                "ungated": [f"{r.a} + {r.b}" for r in mine if r.ungated],
                "missing": [f"{r.a} + {r.b}" for r in mine if r.busbw_gb_s is None],
                "why": next((r.gate_error for r in mine if r.gate_error), ""), "timeout_s": GATE_TIMEOUT_S}))
    if failed:
        rec.status = "partial" if len(failed) < len(results) else "failed"
        for r in failed:
            rec.gaps.append(Gap(phase=phase, kind="pairwise.pair-failed", facts={"a": r.a, "b": r.b, "error": r.error}))
    if not rec.judged:
        rec.status = "failed" if failed and len(failed) == len(results) else "partial"
        rec.gaps.append(Gap(phase=phase, kind="pairwise.not-judged",
                            facts={"why": rec.why_not_judged, "not_joined": list(rec.not_joined)}))


class PairwisePhase:
    name = "pairwise"
    title = "Pairwise"
    across_nodes = True  # every pair is a job over two nodes

    def __init__(self, settings: PairwiseSettings | None = None) -> None:
        self.settings = settings or PairwiseSettings()

    def applies(self, ctx: RunContext) -> bool:
        return len(ctx.nodes) >= 2

    def run(self, ctx: RunContext) -> PairwiseRecord:
        return run_pairwise(ctx, ctx.nodes, self.settings)
