"""Lemon GEMM: find underperforming GPUs.

The fixed 16384³ matmul on every GPU, one at a time with the siblings idle; a GPU more than 2% below
its node median gets two more passes; an error or a hang is a dead GPU. With ``[verdicts] gpu_passes``
= N >= 2 every GPU runs N passes (the rule still judges a flagged GPU on its first three). Before the
pass, foreign compute processes stop it.
"""

from __future__ import annotations

import time

from clustereval.analysis.gpu_passes import NUM_PASSES, three_pass
from clustereval.phases.base import RunContext
from clustereval.phases.gpunode import (
    Guard,
    NodeGpus,
    PassAborted,
    launch,
    prepare_matmul_pass,
)
from clustereval.phases.pernode import each_node
from clustereval.phases.settings import GpuSettings
from clustereval.phases.workerproc import is_event
from clustereval.records import Gap, from_dict
from clustereval.records.compute import LemonGpu, LemonRecord, NodeLemon, ShapeTiming


class LemonPhase:
    name = "lemon"
    title = "Find underperforming GPUs (lemon GEMM)"

    def __init__(self, settings: GpuSettings | None = None) -> None:
        self.settings = settings or GpuSettings()

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> LemonRecord:
        settings = self.settings
        rec = LemonRecord(size=settings.lemon_square, dtype=settings.dtype,
                          num_gpu_passes=ctx.config.verdicts.gpu_passes)
        invs, live, lost = prepare_matmul_pass(ctx, settings, self.name, "the lemon GEMM pass", rec)
        if not live:
            return rec
        by_name = {i.node.name: i for i in live}
        steps = each_node(ctx, self.name, "the lemon GEMM pass", [i.node for i in live],
                          lambda n: self._node(ctx, by_name[n.name], rec.num_gpu_passes),
                          what="the lemon GEMM worker")
        results = [s.value if s.value is not None else
                   (NodeLemon(node=s.node.name, index=s.node.index, hostname=by_name[s.node.name].hostname,
                              gpu_name=by_name[s.node.name].gpus[0].name,
                              gpus=[LemonGpu(gpu=g) for g in by_name[s.node.name].indices],
                              error=s.error.message if s.error else "no answer"), [s.gap] if s.gap else [])
                   for s in steps]
        rec.nodes = [r[0] for r in results]
        for _, gaps in results:
            rec.gaps += gaps
        rec.gaps += lost
        if rec.gaps or ctx.stop.is_set():
            rec.status = "partial"  # interrupted: the runner runs the phase again on --resume
        return rec

    def _node(self, ctx: RunContext, inv: NodeGpus, num_passes: int = 1) -> tuple[NodeLemon, list[Gap]]:
        """Every GPU in ``num_passes`` passes, three at least when the first pass flagged one."""
        node = inv.node
        out = NodeLemon(node=node.name, index=node.index, hostname=inv.hostname,
                        gpu_name=inv.gpus[0].name, gpus=[LemonGpu(gpu=g) for g in inv.indices])
        gaps: list[Gap] = []
        guard = Guard(ctx, inv, self.settings)
        found = guard.foreign()
        if found:
            out.error = "lemon.busy"
            return out, [Gap(self.name, node=node.name, kind="lemon.busy", facts={"processes": found})]
        passes: list[dict[int, float | None]] = []
        pace = _Pace(num_passes)
        try:
            passes.append(self._pass(ctx, inv, out, inv.indices, 1, pace))
            while len(passes) < num_passes and not ctx.stop.is_set():
                passes.append(self._pass(ctx, inv, out, [g.gpu for g in out.gpus if not g.error], len(passes) + 1,
                                         pace))
            verdict = three_pass(passes)
            if verdict.needs_more_passes and not ctx.stop.is_set():
                pace.planned = max(pace.planned, NUM_PASSES)
                while len(passes) < NUM_PASSES:
                    passes.append(self._pass(ctx, inv, out, [g.gpu for g in out.gpus if not g.error],
                                             len(passes) + 1, pace))
                verdict = three_pass(passes)
        except PassAborted as exc:
            out.error = exc.kind
            gaps.append(exc.gap(self.name, node.name))
            return out, gaps
        out.num_passes = len(passes)
        out.medians = [round(m, 4) for m in verdict.medians]
        out.flagged, out.underperforming = verdict.flagged, verdict.underperforming
        out.dead = [g.gpu for g in out.gpus if g.error]
        for g in out.gpus:
            if g.error:
                # the Gap names no node (it never did); the node is a fact for its words
                gaps.append(Gap(self.name, kind="lemon.gpu-dead", facts={"node": node.name, "gpu": g.gpu,
                                                                          "error": g.error}))
        return out, gaps

    def _pass(self, ctx: RunContext, inv: NodeGpus, out: NodeLemon, gpus: list[int],
              passno: int, pace: _Pace) -> dict[int, float | None]:
        """Every listed GPU in one worker; a GPU that hangs is killed, marked dead, and the rest continue
        in a fresh worker."""
        settings = self.settings
        started = time.monotonic()
        values: dict[int, float | None] = {g: None for g in gpus}
        todo = list(gpus)
        attempt = 0
        while todo:
            attempt += 1
            args = ["--gpus", ",".join(map(str, todo))]
            if settings.lemon_size:
                args += ["--size", str(settings.lemon_size)]
            size = settings.lemon_square
            ctx.progress(self.name, inv.node.name, f"{size}³ matmul on {len(todo)} GPU(s), pass {passno} of "
                                                   f"{max(pace.planned, passno)}", pace.left_s(passno))
            proc = launch(ctx, inv.node, settings, "lemon", args, f"lemon/{inv.node.name}-pass{passno}-{attempt}.log")
            current = None
            try:
                for g in list(todo):
                    if proc.wait_event(is_event("begin", gpu=g), settings.start_timeout_s) is None:
                        if ctx.stop.is_set():
                            todo = []
                        break
                    current = g
                    done = proc.wait_event(is_event("lemon", "error", "busy", gpu=g),
                                           settings.lemon_gpu_timeout_s)
                    if done is None:
                        if ctx.stop.is_set():  # interrupted: no verdict on this GPU
                            todo = []
                            break
                        why = (f"the worker exited ({proc.error_text()})" if proc.eof
                               else f"hung: no result within {settings.lemon_gpu_timeout_s:.0f} s")
                        self._dead(out, g, why)
                        todo.remove(g)
                        current = None
                        break
                    todo.remove(g)
                    current = None
                    if done["event"] == "busy":
                        raise PassAborted("lemon.busy", processes=[f"pid {p['pid']} ({p['name']}) on gpu{g}"
                                                                   for p in done.get("processes", [])])
                    if done["event"] == "error":
                        self._dead(out, g, str(done.get("error", "error")))
                        continue
                    t = from_dict(ShapeTiming, done["timing"])
                    values[g] = t.mean_tflops
                    lg = next(x for x in out.gpus if x.gpu == g)
                    lg.tflops.append(t.mean_tflops)
                    lg.power_w, lg.sm_mhz = t.power_w, t.sm_mhz
                    lg.sm_count = int(done.get("sm_count") or 0)
                    out.sm_count = out.sm_count or lg.sm_count
            finally:
                proc.kill()
                proc.save_log()
            if ctx.stop.is_set():
                break
            if current is None and todo and not proc.of("begin"):
                # the worker never reached a GPU: it cannot start at all
                for g in list(todo):
                    self._dead(out, g, f"the worker did not start ({proc.error_text()})")
                todo = []
        pace.first_s = pace.first_s or time.monotonic() - started
        return values

    @staticmethod
    def _dead(out: NodeLemon, gpu: int, why: str) -> None:
        lg = next(x for x in out.gpus if x.gpu == gpu)
        lg.error = lg.error or why
        lg.tflops.append(None)


class _Pace:
    """One node's lemon passes: how many are planned, and how long the first took (the time left of the rest)."""

    def __init__(self, planned: int) -> None:
        self.planned = planned
        self.first_s = 0.0

    def left_s(self, passno: int) -> float | None:
        """This pass and the ones after it, at the first pass's pace; None until the first pass ended."""
        return (max(self.planned, passno) - passno + 1) * self.first_s if self.first_s else None
