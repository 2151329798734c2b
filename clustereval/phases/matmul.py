"""The matmul pass: MAMF and MSMF of every GPU.

GPU0 searches for MAMF and MSMF while every other GPU runs a continuous matmul; then each other GPU
measures GPU0's MSMF shape while every sibling (GPU0 included) runs one. A GPU more than 2% below its
node median gets two more passes with the shape pinned. With ``[verdicts] gpu_passes`` = N >= 2 every
GPU is measured in N passes (the extra ones pinned, every GPU in turn), so the fleet-relative verdict
has N repeats per GPU; the runbook's rule still judges a flagged GPU on its first three. Before every
pass and before every GPU's measurement, foreign compute processes stop the pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clustereval.analysis.gpu_passes import NUM_PASSES, gpu_label, three_pass
from clustereval.analysis.gpus import loaded_outliers
from clustereval.analysis.matmul import held_rate
from clustereval.phases.base import RunContext
from clustereval.phases.gpunode import (
    Guard,
    LoadSet,
    NodeGpus,
    PassAborted,
    check_interpreter,
    launch,
    prepare_matmul_pass,
)
from clustereval.phases.pernode import each_node
from clustereval.phases.settings import GpuSettings
from clustereval.phases.workerproc import WorkerProc
from clustereval.records import Gap, from_dict
from clustereval.records.compute import (
    GpuMsmf,
    MatmulRecord,
    MatmulTrace,
    NodeMatmul,
    SearchSummary,
    ShapeTiming,
)


class MatmulPhase:
    name = "matmul"
    title = "GPU performance benchmarks (MAMF / MSMF)"

    def __init__(self, settings: GpuSettings | None = None) -> None:
        self.settings = settings or GpuSettings()

    def applies(self, ctx: RunContext) -> bool:
        return True

    @staticmethod
    def merged(ctx: RunContext, rec: MatmulRecord) -> None:
        """The clock range over every node (also after --resume replaced the failed nodes' entries)."""
        rec.saturated_sm_mhz = saturated_clock(rec)

    def run(self, ctx: RunContext) -> MatmulRecord:
        settings = self.settings
        rec = MatmulRecord(dtype=settings.dtype, grid=settings.grid or ("tiny" if settings.cpu else "default"),
                           soak_min_s=settings.soak_min_s, soak_max_s=settings.soak_max_s, settle_s=settings.settle_s,
                           sustain_s=settings.sustain_s, num_gpu_passes=ctx.config.verdicts.gpu_passes)
        invs, live, lost = prepare_matmul_pass(ctx, settings, self.name, "the GPU performance pass", rec)
        if not live:
            return rec
        passes = {i.node.name: NodePass(ctx, i, settings, rec.num_gpu_passes) for i in live}
        steps = each_node(ctx, self.name, "the GPU performance pass", [i.node for i in live],
                          lambda n: passes[n.name].run(), what="the matmul worker")
        if ctx.stop.is_set():
            rec.status = "partial"  # interrupted: the runner runs the phase again on --resume
        results = [s.value if s.value is not None else (passes[s.node.name].rec, [s.gap] if s.gap else [])
                   for s in steps]
        for s in steps:
            if s.error is not None:
                passes[s.node.name].rec.error = s.error.message
        rec.nodes = [r[0] for r in results]
        for _, gaps in results:
            rec.gaps += gaps
        rec.gaps += lost
        for inv in invs:
            if not inv.gpus and not any(g.node == inv.node.name for g in lost):
                rec.gaps.append(Gap(self.name, node=inv.node.name, kind="matmul.node-without-gpu",
                                    facts={"error": inv.error}))
        self.merged(ctx, rec)
        if rec.gaps and rec.status == "ok":
            rec.status = "partial" if any(n.gpus for n in rec.nodes) else "failed"
        return rec


def saturated_clock(rec: MatmulRecord) -> tuple[int, int] | None:
    """SM clock range (5th–95th percentile of the samples) of every pinned measurement that held the
    board at its power limit: the Environment GPU table's saturated clock."""
    lows, highs = [], []
    for node in rec.nodes:
        timings = [t for g in node.gpus for t in g.timings if t is not None]
        if node.search and node.search.msmf:
            timings.append(node.search.msmf)
        for t in timings:
            if t.label == "" and t.power_w is not None and t.sm_mhz_low is not None and t.sm_mhz_high is not None:
                lows.append(t.sm_mhz_low)
                highs.append(t.sm_mhz_high)
    return (int(round(min(lows))), int(round(max(highs)))) if lows else None


class NodePass:
    """The matmul pass on one node: every GPU in ``num_passes`` passes (None: ``[verdicts] gpu_passes``),
    three at least on a node whose first pass flagged a GPU."""

    def __init__(self, ctx: RunContext, inv: NodeGpus, settings: GpuSettings, num_passes: int | None = None) -> None:
        self.ctx, self.inv, self.settings = ctx, inv, settings
        self.num_passes = num_passes if num_passes is not None else ctx.config.verdicts.gpu_passes
        self.planned_passes = self.num_passes  # raised to three when the runbook's rule asks for more
        self.measure_s: list[float] = []  # each pinned measurement's wall time, retries included: the pace
        self.node = inv.node
        first = inv.gpus[0]
        self.rec = NodeMatmul(node=self.node.name, index=self.node.index, hostname=inv.hostname,
                              gpu_name=first.name, num_gpus=len(inv.gpus), power_limit_w=first.power_limit_w,
                              boost_mhz=first.boost_mhz,
                              gpus=[GpuMsmf(gpu=g) for g in inv.indices])
        self.gaps: list[Gap] = []
        self.guard = Guard(ctx, inv, settings)
        self.log_dir = f"matmul/{self.node.name}"
        self.loads = LoadSet(ctx, inv, settings, self.log_dir)
        self.shape: tuple[int, int, int] | None = None
        self.layout = "nn"  # the MSMF shape's B operand layout, as the search chose it

    def gap(self, kind: str, **facts: Any) -> None:
        self.gaps.append(Gap(MatmulPhase.name, node=self.node.name, kind=kind, facts=facts))

    def run(self) -> tuple[NodeMatmul, list[Gap]]:
        """GPU0's search, then every other GPU at its MSMF shape; then every GPU again until each has its
        passes, three at least when one is > 2% low."""
        def work() -> None:
            self._search()
            if self.shape is not None:
                self._passes(self._first_pass())
        return self._guarded(work)

    def run_at(self, shape: tuple[int, int, int], max_passes: int = 3, layout: str = "nn") -> tuple[NodeMatmul, list[Gap]]:
        """Every GPU at a given shape, each with all the others loaded (the benchmark's all-GPU pass)."""
        def work() -> None:
            self.shape = self.rec.msmf_shape = shape
            self.layout = self.rec.msmf_layout = layout
            t0 = time.monotonic()
            first = self._pinned_pass()
            self.rec.all_gpu_wall_s = round(time.monotonic() - t0, 1)
            self._loaded_outliers()
            self._passes(first, max_passes)
        return self._guarded(work)

    def _guarded(self, work: Callable[[], object]) -> tuple[NodeMatmul, list[Gap]]:
        t0 = time.monotonic()
        try:
            self._check(set(), {})
            work()
        except PassAborted as exc:
            self.rec.error = exc.kind
            self.gaps.append(exc.gap(MatmulPhase.name, self.node.name))
        finally:
            self.loads.stop_all()
            self.rec.total_wall_s = round(time.monotonic() - t0, 1)
        return self.rec, self.gaps

    def _passes(self, first: dict[int, float | None], max_passes: int = 3) -> None:
        """Every GPU pinned until each has ``num_passes`` passes, then the runbook's rule on the first three:
        a GPU flagged in the first pass is judged on three passes, so they run (``max_passes`` < 3: never)."""
        passes = [first]
        t0 = time.monotonic()
        while len(passes) < self.num_passes:
            # past the rule's three passes a dead GPU (failed twice) is not measured again: each try costs a timeout
            passes.append(self._pinned_pass(skip_dead=len(passes) >= NUM_PASSES))
        verdict = three_pass(passes)
        if verdict.needs_more_passes and max_passes >= NUM_PASSES:
            self.planned_passes = max(self.planned_passes, NUM_PASSES)
            while len(passes) < NUM_PASSES:
                passes.append(self._pinned_pass())
            verdict = three_pass(passes)
        if len(passes) > 1:
            self.rec.extra_passes_wall_s = round(time.monotonic() - t0, 1)
        self.rec.num_passes = len(passes)
        self.rec.medians = [round(m, 4) for m in verdict.medians]
        self.rec.flagged, self.rec.underperforming = verdict.flagged, verdict.underperforming

    def _check(self, own_pids: set[int], own: dict[int, int], gpu: int | None = None) -> None:
        """Stop the pass when the run is interrupted or foreign processes are on the GPUs; ``gpu``:
        the GPU about to be measured (None: the pass as a whole)."""
        if self.ctx.stop.is_set():
            raise PassAborted("matmul.interrupted")
        found = self.guard.foreign(own_pids, own)
        if found:
            raise PassAborted("matmul.busy", processes=found, gpu=gpu)

    def _gpu(self, gpu: int) -> GpuMsmf:
        return next(g for g in self.rec.gpus if g.gpu == gpu)

    # GPU0's search, every sibling loaded
    def _search(self) -> None:
        gpus = self.inv.indices
        gpu0, siblings = gpus[0], gpus[1:]
        err = self.loads.ensure(set(siblings))
        if err:
            self._fail("matmul.search-not-started", gpu=gpu0, **err)
            return
        self._check(self.loads.pids(), self.loads.per_gpu())
        args = ["--gpu", str(gpu0), "--siblings", ",".join(map(str, siblings)), *self.settings.held_args(),
                "--coarse-budget", str(self.settings.coarse_budget)]
        if self.settings.grid:
            args += ["--grid", self.settings.grid]
        self.ctx.progress(MatmulPhase.name, self.node.name, f"searching matmul shapes on gpu{gpu0}",
                          self._time_left([], 0.0))
        t0 = time.monotonic()
        proc = launch(self.ctx, self.node, self.settings, "search", args, f"{self.log_dir}/gpu{gpu0}-search.log")
        self._follow_search(proc, gpu0, t0)
        rc = proc.finish(max(1.0, self.settings.search_timeout_s - (time.monotonic() - t0)),
                         idle_timeout_s=self.settings.start_timeout_s)
        self.rec.search_wall_s = round(time.monotonic() - t0, 1)
        proc.save_log()
        self._interpreter(proc)
        result = proc.last("result")
        if rc != 0 or result is None:
            self._fail("matmul.search-failed", gpu=gpu0, timed_out=rc is None,
                       error="" if rc is None else proc.error_text())
            return
        summary = from_dict(SearchSummary, result["summary"])
        self.rec.search = summary
        self._facts(proc)
        if summary.msmf is None:
            # the pinned shapes and why each failed; a held shape without a reason only led to them
            pinned = [[t.m, t.n, t.k, t.why] for t in summary.sustained if t.stage != "hot" and t.why]
            self.gap("matmul.no-msmf-shape", gpu=gpu0, pinned=pinned, siblings=bool(siblings))
            return
        self.shape = self.rec.msmf_shape = summary.msmf.shape
        self.layout = self.rec.msmf_layout = summary.msmf.layout

    def _time_left(self, stages: list[str], elapsed_s: float) -> float:
        """The search's time left, then every pinned measurement after it: the other GPUs' first pass and
        every GPU's later passes."""
        num_gpus = len(self.inv.indices)
        after = (num_gpus - 1) + (self.planned_passes - 1) * num_gpus
        if self.settings.grid:
            return self.settings.search_time_left_s(stages, elapsed_s) + self._pinned_left_s(after)
        return self.settings.wave_search_time_left_s(stages, elapsed_s) + self._pinned_left_s(after)

    def _pinned_left_s(self, num_measurements: int) -> float:
        """How long ``num_measurements`` pinned measurements take: at the pace of this node's measurements so
        far, or each one's settle and window before the first."""
        each = (sum(self.measure_s) / len(self.measure_s) if self.measure_s
                else self.settings.settle_s + self.settings.sustain_s)
        return num_measurements * each

    def _follow_search(self, proc: WorkerProc, gpu0: int, t0: float) -> None:
        """Show the shapes timed and the time left until the search prints its result or stops;
        ``finish`` then judges how it ended."""
        while not proc.eof and not self.ctx.stop.is_set():
            elapsed = time.monotonic() - t0
            if elapsed >= self.settings.search_timeout_s or time.monotonic() - proc.last_output >= self.settings.start_timeout_s:
                return
            if proc.wait_event(lambda e: e.get("event") == "result", self.settings.progress_every_s) is not None:
                return
            stages = [str(e.get("stage", "")) for e in proc.of("shape")]
            if stages:
                self.ctx.progress(MatmulPhase.name, self.node.name,
                                  f"searching matmul shapes on gpu{gpu0}: {len(stages)} timings done",
                                  self._time_left(stages, time.monotonic() - t0))

    def _label(self, gpu: int) -> str:
        return gpu_label(self.inv.hostname, self.node.index, gpu)

    def _idle_text(self, gpu: int, idle: list[int], *, again: bool) -> str:
        who = ", ".join(f"gpu{g}" for g in idle)
        text = f"During the MSMF measurement of `{self._label(gpu)}` the worker saw idle siblings ({who} stopped computing)"
        return text + (", so it was measured again" if again else "")

    def _fail(self, kind: str, **facts: Any) -> None:
        self.rec.error = kind
        self.gap(kind, **facts)

    def _interpreter(self, proc: WorkerProc) -> None:
        why = check_interpreter(self.ctx, self.node, proc)
        if why and not any(g.kind == "matmul.wrong-python" and g.facts.get("why") == why for g in self.gaps):
            self.gap("matmul.wrong-python", why=why)

    def _facts(self, proc: WorkerProc) -> None:
        facts = proc.last("gpu") or {}
        self.rec.sm_count = int(facts.get("sm_count") or 0)
        self.rec.memory_gib = float(facts.get("memory_gib") or 0.0)
        self.rec.power_limit_w = facts.get("power_limit_w") or self.rec.power_limit_w
        self.rec.boost_mhz = facts.get("boost_mhz") or self.rec.boost_mhz
        if facts.get("name") and not self.settings.cpu:
            self.rec.gpu_name = facts["name"]

    def _first_pass(self) -> dict[int, float | None]:
        """GPU0's MSMF from its search; every other GPU at that shape, every sibling loaded."""
        gpus = self.inv.indices
        values: dict[int, float | None] = {}
        msmf = self.rec.search.msmf if self.rec.search else None
        g0 = self._gpu(gpus[0])
        if msmf is not None and msmf.idle_siblings:
            self.rec.warnings.append(self._idle_text(gpus[0], msmf.idle_siblings, again=True))
            values[gpus[0]] = self._measure(gpus[0])
        else:
            g0.timings.append(msmf)
            g0.tflops.append(held_rate(msmf) if msmf else None)
            g0.wall_s = self.rec.search_wall_s
            values[gpus[0]] = held_rate(msmf) if msmf else None
        t0 = time.monotonic()
        for g in gpus[1:]:
            values[g] = self._measure(g)
        self.rec.all_gpu_wall_s = round(time.monotonic() - t0, 1)
        self._loaded_outliers()
        return values

    def _loaded_outliers(self) -> None:
        """Flag, from the first pass (every GPU computing), a GPU far hotter than the coolest or
        drawing far less power than the top one."""
        if len(self.inv.indices) < 2:
            return
        first = {g.gpu: (g.timings[0] if g.timings else None) for g in self.rec.gpus}
        temps = {g: (t.temp_c if t else None) for g, t in first.items()}
        powers = {g: (t.power_w if t else None) for g, t in first.items()}
        self.rec.hot_gpus, self.rec.low_power_gpus = loaded_outliers(temps, powers)

    def _pinned_pass(self, skip_dead: bool = False) -> dict[int, float | None]:
        return {g: self._measure(g) for g in self.inv.indices if not (skip_dead and g in self.rec.dead)}

    def _measure(self, gpu: int) -> float | None:
        """One GPU at the MSMF shape while every sibling computes; retried once when a sibling went
        idle or the run failed. Appends the value (None: failed twice, a dead GPU) to the GPU's list."""
        rec = self._gpu(gpu)
        others = [g for g in self.inv.indices if g != gpu]
        timing: ShapeTiming | None = None
        failures = 0
        started = time.monotonic()
        for attempt in (1, 2):
            err = self.loads.ensure(set(others))
            if err:
                raise PassAborted("matmul.load-failed", gpu=gpu, **err)
            self._check(self.loads.pids(), self.loads.per_gpu(), gpu)
            t0 = time.monotonic()
            timing, why = self._pinned(gpu, others, attempt)
            if not rec.timings:
                rec.wall_s = round(rec.wall_s + time.monotonic() - t0, 1)
            if timing is None:
                rec.errors.append(why)
                failures += 1
                continue
            self._unread_siblings(gpu, timing)
            if not timing.idle_siblings:
                break
            self.rec.warnings.append(self._idle_text(gpu, timing.idle_siblings, again=attempt == 1))
            rec.idle_sibling_retries += 1
            if attempt == 2:
                self.gap("matmul.idle-siblings-twice", label=self._label(gpu), idle=list(timing.idle_siblings))
        self.measure_s.append(time.monotonic() - started)
        if failures >= 2 and timing is None:
            if gpu not in self.rec.dead:
                self.rec.dead.append(gpu)
            self.gap("matmul.gpu-failed-twice", gpu=gpu, error=rec.errors[-1])
        rec.timings.append(timing)
        rec.tflops.append(held_rate(timing) if timing else None)
        return held_rate(timing) if timing else None

    def _unread_siblings(self, gpu: int, timing: ShapeTiming) -> None:
        """A sibling NVML could not read: whether it kept computing is unknown, and the report says so."""
        if not timing.siblings_unread:
            return
        who = ", ".join(f"gpu{g}" for g in timing.siblings_unread)
        text = (f"During the MSMF measurement of `{self._label(gpu)}` NVML could not read the utilisation of {who} "
                f"({timing.sibling_error or 'no reading'}), so whether those siblings were still computing is unknown")
        if text not in self.rec.warnings:
            self.rec.warnings.append(text)

    def _pinned(self, gpu: int, others: list[int], attempt: int) -> tuple[ShapeTiming | None, str]:
        assert self.shape is not None
        m, n, k = self.shape
        args = ["--gpu", str(gpu), "--shape", f"{m}x{n}x{k}", "--layout", self.layout,
                "--siblings", ",".join(map(str, others)), *self.settings.held_args()]
        passno = len(self._gpu(gpu).tflops) + 1
        gpus = self.inv.indices
        planned = max(self.planned_passes, passno)
        # this GPU and the rest of this pass, then every GPU in each pass still to come
        live = [g for g in gpus if g not in self.rec.dead]
        left = (len(gpus) - gpus.index(gpu)) + (planned - passno) * len(live)
        self.ctx.progress(MatmulPhase.name, self.node.name, f"gpu{gpu} at {m}×{n}×{k}, pass {passno} of {planned}",
                          self._pinned_left_s(left))
        proc = launch(self.ctx, self.node, self.settings, "pinned", args,
                      f"{self.log_dir}/gpu{gpu}-pass{passno}-try{attempt}.log")
        rc = proc.finish(self.settings.pinned_timeout_s(), idle_timeout_s=self.settings.start_timeout_s)
        proc.save_log()
        self._interpreter(proc)
        result = proc.last("result")
        if rc != 0 or result is None:
            return None, "no result within the time limit" if rc is None else proc.error_text()
        g = self._gpu(gpu)
        if passno == 1 and result.get("trace"):
            g.trace = from_dict(MatmulTrace, result["trace"])
        return from_dict(ShapeTiming, result["timing"]), ""
