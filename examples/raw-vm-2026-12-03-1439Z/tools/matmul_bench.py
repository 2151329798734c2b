"""How the matmul worker times one shape: the stage specs, the steadiness rules from the command
line, and ``Bench`` (buffers, the timing loops, the held soak-then-window, the trace). Runs on the
node with stdlib + torch + pynvml; the module docstring of ``clustereval.workers.matmul`` says how
each measurement is taken.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from clustereval.analysis.matmul import BURST, HOT, SCREEN, SUSTAINED, summarize_times
from clustereval.analysis.steady import SETTLE, SOAK, Hold, SteadyRule
from clustereval.records.compute import MatmulTrace, ShapeTiming, TracePoint, TraceSpan
from clustereval.workers.nvml import Sampler

LEMON = "lemon"
MAX_AHEAD_S = 0.05  # how far the CPU may run ahead of the GPU
CHUNK_S = {"cuda": 0.25, "cpu": 0.005}  # one chunk of a held shape: one rate, one trace point
RUNG_CHUNK_S = {"cuda": 0.1, "cpu": 0.004}  # one chunk of a ladder rung (a rung lasts about a second)
RUNG_SETTLE_FRAC = 0.35  # the first part of a rung, on a board already at its power limit, is not timed


@dataclass(frozen=True)
class Spec:
    """How long one measurement runs: at least ``*_iters`` iterations and at least ``*_s`` seconds of
    GPU work; ``duty`` < 1 idles the GPU after every iteration for (1/duty − 1) times as long as it
    worked (a burst: the board stays under its power limit and the clock at boost)."""

    warm_iters: int
    warm_s: float
    iters_min: int
    iters_max: int
    min_s: float
    duty: float = 1.0


BURST_DUTY = 0.5
HOT_SETTLE_S = 0.3  # a hot shape after another hot shape: the board is already at its power limit


HOT_WARM_S = 1.5  # the first hot shape's warm-up: the board climbs to its power limit


def specs(device: str, hot_s: float = 1.0) -> dict[str, Spec]:
    if device == "cuda":
        return {
            SCREEN: Spec(1, 0.004, 3, 400, 0.008, BURST_DUTY),
            BURST: Spec(10, 0.02, 30, 2000, 0.05, BURST_DUTY),
            HOT: Spec(2, HOT_WARM_S, 5, 400_000, hot_s),
            LEMON: Spec(10, 0.5, 30, 5000, 1.0),
        }
    return {  # CPU: the same stages, scaled to tiny shapes; no power budget to stay under
        SCREEN: Spec(1, 0.0, 2, 50, 0.002),
        BURST: Spec(2, 0.002, 5, 200, 0.01),
        HOT: Spec(2, 0.02, 5, 100_000, min(hot_s, 0.1)),
        LEMON: Spec(2, 0.005, 3, 100, 0.02),
    }


def steady_rules(args: argparse.Namespace, device: str) -> tuple[SteadyRule, SteadyRule]:
    """(the first held shape's soak, a later shape's settle) from the command line; a CPU stand-in
    keeps the same proportions at a hundredth of the durations, at most."""
    soak = SteadyRule(min_s=args.soak_min_s, max_s=args.soak_max_s, span_s=args.span_s, tol_frac=args.tol,
                      window_s=args.sustain_s, max_drift_frac=args.max_drift)
    settle = SteadyRule(min_s=args.settle_s, max_s=args.soak_max_s, span_s=SETTLE.span_s * args.span_s / SOAK.span_s,
                        tol_frac=args.tol, window_s=args.sustain_s, max_drift_frac=args.max_drift)
    if device != "cuda":
        soak, settle = (SteadyRule(min(r.min_s, 0.05), min(r.max_s, 0.2), min(r.span_s, 0.02), r.tol_frac,
                                   min(r.window_s, 0.2), r.max_drift_frac) for r in (soak, settle))
    return soak, settle


def _sig(value: float, digits: int = 6) -> float:
    """``digits`` significant figures: 807.531 on a GPU, 6.53e-05 on a CPU stand-in (never 0)."""
    return float(f"{value:.{digits}g}")


# -- timing ----------------------------------------------------------------------------------


class Bench:
    """Buffers and the timing loop on one device."""

    def __init__(self, torch: Any, device: str, cuda_index: int, dtype: Any,
                 max_elems: tuple[int, int, int], sampler: Sampler | None) -> None:
        self.torch, self.device, self.dtype, self.sampler = torch, device, dtype, sampler
        if device == "cuda":
            self.dev = torch.device("cuda", cuda_index)
            torch.cuda.set_device(self.dev)
            l2 = int(getattr(torch.cuda.get_device_properties(self.dev), "L2_cache_size", 0) or 50 * 2**20)
            flush_bytes = max(2 * l2, 64 * 2**20)
        else:
            self.dev = torch.device("cpu")
            flush_bytes = 16 * 2**20
        a, b, c = max_elems
        self.abuf = torch.empty(a, dtype=dtype, device=self.dev)
        self.bbuf = torch.empty(b, dtype=dtype, device=self.dev)
        self.cbuf = torch.empty(c, dtype=dtype, device=self.dev)
        self.flush = torch.empty(flush_bytes, dtype=torch.int8, device=self.dev)
        self._starts: list[Any] = []
        self._ends: list[Any] = []
        self.origin = time.monotonic()  # the trace's zero
        self.points: list[TracePoint] = []
        self.spans: list[TraceSpan] = []

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def operands(self, shape: tuple[int, int, int], layout: str = "nn") -> tuple[Any, Any, Any]:
        """A (M×K, rows of K), B (K×N: rows of N for ``nn``; an N×K matrix read transposed for ``tn``)
        and the output C, views of the buffers allocated once."""
        m, n, k = shape
        a = self.abuf[: m * k].view(m, k)
        b = self.bbuf[: k * n].view(k, n) if layout == "nn" else self.bbuf[: k * n].view(n, k).t()
        c = self.cbuf[: m * n].view(m, n)
        a.normal_()
        b.normal_()
        return a, b, c

    def _events(self, count: int) -> None:
        while len(self._starts) < count:
            self._starts.append(self.torch.cuda.Event(enable_timing=True))
            self._ends.append(self.torch.cuda.Event(enable_timing=True))

    def iterate(self, a: Any, b: Any, c: Any, count: int, lag: int, duty: float = 1.0) -> tuple[list[float], float]:
        """``count`` iterations (flush, re-randomise the output, matmul): (seconds of each matmul,
        seconds the device was kept busy, idle gaps excluded)."""
        torch = self.torch
        if self.device != "cuda":
            out = []
            t0 = time.perf_counter()
            for _ in range(count):
                self.flush.zero_()
                c.normal_()
                t = time.perf_counter()
                torch.mm(a, b, out=c)
                out.append(time.perf_counter() - t)
            return out, time.perf_counter() - t0
        self._events(count)
        starts, ends = self._starts, self._ends
        if duty < 1.0:
            busy = 0.0
            for i in range(count):
                t = time.perf_counter()
                self.flush.zero_()
                c.normal_()
                starts[i].record()
                torch.mm(a, b, out=c)
                ends[i].record()
                ends[i].synchronize()
                worked = time.perf_counter() - t
                busy += worked
                time.sleep(worked * (1.0 / duty - 1.0))  # idle as long as it worked: power stays low
            return [starts[i].elapsed_time(ends[i]) / 1e3 for i in range(count)], busy
        t0 = time.perf_counter()
        for i in range(count):
            self.flush.zero_()
            c.normal_()
            starts[i].record()
            torch.mm(a, b, out=c)
            ends[i].record()
            if i >= lag:
                ends[i - lag].synchronize()  # keep the CPU at most ``lag`` iterations ahead
        ends[count - 1].synchronize()
        return [starts[i].elapsed_time(ends[i]) / 1e3 for i in range(count)], time.perf_counter() - t0

    def measure(self, shape: tuple[int, int, int], spec: Spec, stage: str, layout: str = "nn") -> ShapeTiming:
        wall0 = time.perf_counter()
        a, b, c = self.operands(shape, layout)
        _, per_iter = self.iterate(a, b, c, 1, 1)  # the first call picks (and loads) the kernel
        per_iter = max(per_iter, 1e-7)
        # Warm-up in chunks; each chunk's busy time refines the per-iteration estimate.
        warm_done, warm_spent = 0, 0.0
        while warm_done < spec.warm_iters or warm_spent < spec.warm_s:
            count = max(1, spec.warm_iters - warm_done, min(math.ceil((spec.warm_s - warm_spent) / per_iter), 1 << 20))
            _, spent = self.iterate(a, b, c, count, max(2, int(MAX_AHEAD_S / per_iter)), spec.duty)
            per_iter = max(spent / count, 1e-7)
            warm_done, warm_spent = warm_done + count, warm_spent + spent
        count = min(spec.iters_max, max(spec.iters_min, math.ceil(spec.min_s / per_iter)))
        t0 = time.monotonic()
        seconds, _ = self.iterate(a, b, c, count, max(2, int(MAX_AHEAD_S / per_iter)), spec.duty)
        t1 = time.monotonic()
        mean, median, best = summarize_times(shape, seconds)
        timing = ShapeTiming(m=shape[0], n=shape[1], k=shape[2], stage=stage, mean_tflops=_sig(mean),
                             median_tflops=_sig(median), max_tflops=_sig(best), iterations=count,
                             kernel_s=round(sum(seconds), 6), wall_s=round(time.perf_counter() - wall0, 4),
                             layout=layout)
        self._point(t0, t1, timing.mean_tflops, stage)
        if self.sampler is not None:
            for key, value in self.sampler.window(t0, t1).items():
                setattr(timing, key, value)
        return timing

    def _point(self, t0: float, t1: float, tflops: float, stage: str) -> TracePoint:
        if self.sampler is not None:
            p = self.sampler.point(t0, t1, self.origin, _sig(tflops), stage)
        else:
            p = TracePoint(t_s=round((t0 + t1) / 2 - self.origin, 3), tflops=_sig(tflops), stage=stage)
        self.points.append(p)
        return p

    def _chunk(self, a: Any, b: Any, c: Any, count: int) -> float:
        """``count`` matmuls back to back; the seconds they took on the device."""
        torch = self.torch
        if self.device != "cuda":
            t = time.perf_counter()
            for _ in range(count):
                torch.mm(a, b, out=c)
            return time.perf_counter() - t
        self._events(1)
        start, end = self._starts[0], self._ends[0]
        start.record()
        for _ in range(count):
            torch.mm(a, b, out=c)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def rung(self, shape: tuple[int, int, int], layout: str, seconds: float) -> ShapeTiming:
        """One rung of the MSMF ladder: ``shape`` back to back for ``seconds`` on a board already at its
        power limit, no flush; the first ``RUNG_SETTLE_FRAC`` of it settles, the rest is timed in chunks
        of about a tenth of a second. The timing carries the timed part's median chunk rate."""
        wall0 = time.perf_counter()
        a, b, c = self.operands(shape, layout)
        _, per_iter = self.iterate(a, b, c, 1, 1)  # the first call picks (and loads) the kernel
        work = 2 * shape[0] * shape[1] * shape[2]
        chunk_s = RUNG_CHUNK_S.get(self.device, RUNG_CHUNK_S["cpu"])
        count = max(1, round(chunk_s / max(per_iter, 1e-7)))
        h0 = time.monotonic()
        w0: float | None = None
        spent_all: list[float] = []
        rates: list[float] = []
        iterations = 0
        while True:
            t0 = time.monotonic()
            spent = max(self._chunk(a, b, c, count), 1e-9)
            t1 = time.monotonic()
            rate = count * work / spent / 1e12
            self._point(t0, t1, rate, HOT)
            if t0 - h0 >= RUNG_SETTLE_FRAC * seconds:
                w0 = t0 if w0 is None else w0
                spent_all.append(spent)
                rates.append(rate)
                iterations += count
            count = max(1, round(chunk_s * count / spent))
            if t1 - h0 >= seconds and len(rates) >= 2:
                break
        t_end = time.monotonic()
        assert w0 is not None
        half = len(rates) // 2
        first, second = statistics.median(rates[:half]), statistics.median(rates[half:])
        timing = ShapeTiming(m=shape[0], n=shape[1], k=shape[2], stage=HOT, layout=layout,
                             mean_tflops=_sig(iterations * work / sum(spent_all) / 1e12),
                             median_tflops=_sig(statistics.median(rates)), max_tflops=_sig(max(rates)),
                             iterations=iterations, kernel_s=round(sum(spent_all), 6),
                             wall_s=round(time.perf_counter() - wall0, 4), soak_s=round(w0 - h0, 3),
                             window_s=round(t_end - w0, 3), first_half_tflops=_sig(first),
                             second_half_tflops=_sig(second), drift_frac=round((second - first) / first, 5))
        if self.sampler is not None:
            for key, value in self.sampler.window(w0, t_end).items():
                setattr(timing, key, value)
        return timing

    def hold(self, shape: tuple[int, int, int], rule: SteadyRule, layout: str = "nn") -> ShapeTiming:
        """Hold ``shape`` back to back: soak (or settle) until the clock stops changing, then time a
        window. The timing carries the window's median, its halves, and the board over it."""
        wall0 = time.perf_counter()
        a, b, c = self.operands(shape, layout)
        _, per_iter = self.iterate(a, b, c, 1, 1)  # the first call picks (and loads) the kernel
        work = 2 * shape[0] * shape[1] * shape[2]
        chunk_s = CHUNK_S.get(self.device, CHUNK_S["cpu"])
        count = max(1, round(chunk_s / max(per_iter, 1e-7)))
        state = Hold(rule)
        h0 = time.monotonic()
        w0: float | None = None
        seconds: list[float] = []
        rates: list[float] = []
        iterations = 0
        while not state.done:
            t0 = time.monotonic()
            spent = max(self._chunk(a, b, c, count), 1e-9)
            t1 = time.monotonic()
            rate = count * work / spent / 1e12
            in_window = state.in_window
            p = self._point(t0, t1, rate, "window" if in_window else "soak")
            state.add(t1 - h0, rate, p.sm_mhz)
            if in_window:
                seconds.append(spent)
                rates.append(rate)
                iterations += count
            elif state.in_window:
                w0 = t1
            count = max(1, round(chunk_s * count / spent))
        t_end = time.monotonic()
        res = state.result()
        assert w0 is not None
        o = self.origin
        self.spans += [TraceSpan("soak", round(h0 - o, 3), round(w0 - o, 3), shape),
                       TraceSpan("window", round(w0 - o, 3), round(t_end - o, 3), shape)]
        timing = ShapeTiming(m=shape[0], n=shape[1], k=shape[2], stage=SUSTAINED,
                             mean_tflops=_sig(iterations * work / sum(seconds) / 1e12),
                             median_tflops=_sig(res.median_tflops), max_tflops=_sig(max(rates)),
                             iterations=iterations, kernel_s=round(sum(seconds), 6),
                             wall_s=round(time.perf_counter() - wall0, 4), soak_s=round(res.soak_s, 3),
                             settled=res.settled, window_s=round(t_end - w0, 3),
                             first_half_tflops=_sig(res.first_half_tflops),
                             second_half_tflops=_sig(res.second_half_tflops), drift_frac=round(res.drift_frac, 5),
                             layout=layout)
        if self.sampler is not None:
            for key, value in self.sampler.window(w0, t_end).items():
                setattr(timing, key, value)
        return timing

    def trace(self, gpu: int) -> MatmulTrace:
        out = MatmulTrace(gpu=gpu, spans=list(self.spans))
        points = list(self.points)
        if self.sampler is not None:
            points += self.sampler.telemetry(self.origin)
            out.reasons_available = self.sampler.reasons_available
        out.points = sorted(points, key=lambda p: p.t_s)
        return out
