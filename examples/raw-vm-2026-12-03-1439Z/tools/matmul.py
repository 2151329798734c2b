"""The matmul worker: runs on a node with the eval Python (stdlib + torch + pynvml), prints JSON lines.

Modes:

- ``search``: GPU0's shape search for MAMF (Maximum Achievable Matmul FLOPS, the best short burst
  of any matmul shape) and MSMF (Maximum Sustainable Matmul FLOPS, the best shape that holds the
  board at its power limit). Without ``--grid`` it is the whole-wave search
  (``clustereval.analysis.waves``: shapes built for the GPU's SM count, MSMF ranked on a held ladder
  against a reference shape); with one, the lattice search of ``clustereval.analysis.matmul``. The
  steadiness rule is in ``clustereval.analysis.steady`` (a run's raw folder holds them beside this
  file as ``matmul_waves.py``, ``matmul_search.py`` and ``matmul_steady.py``, with
  ``matmul_bench.py`` and ``matmul_nvml.py``).
- ``exhaustive``: every shape of a grid with the full burst timing, then the same MSMF stage.
- ``pinned``: one shape held until its SM clock settles, then timed for a window (a sustained
  measurement, as the search's MSMF is; the all-GPU pass runs it on every other GPU).
- ``load``: a continuous matmul on one GPU until a stop file appears (the sibling load).
- ``lemon``: the fixed 16384³ matmul on each listed GPU in turn, the others idle.

How one shape is timed: ``torch.mm`` of an M×K by a K×N matrix (bf16 unless told otherwise) with
inputs freshly drawn from a normal distribution; before every iteration, timed or not, a buffer
twice the L2 cache is overwritten (so no operand is served from cache) and the output matrix is
re-randomised (so the product never overwrites identical bits); each matmul alone is timed with a
pair of CUDA events; the CPU is kept at most ~50 ms ahead of the GPU so the telemetry window lines
up with the work. A sampling thread reads board power, SM clock, temperature and clock-event reasons
from NVML every 20 ms (and the siblings' utilisation, to see whether their load stopped; see
``clustereval.workers.nvml``). TFLOPS = 2·M·N·K / time.

A ladder rung (the whole-wave search's MSMF ranking) is a short hold: about a second back to back,
no flush, its first third untimed, the rest timed in chunks of a tenth of a second; its figure is
the median chunk rate. The B operand is stored K×N (``nn``) or N×K and read transposed (``tn``),
as the search asks; the search says which layout each figure was measured in.

How a shape is held (the sustained regime, MSMF): back-to-back matmuls in chunks of about a quarter
second, each chunk timed with a pair of CUDA events, no cache flush between them (a sustained
workload does not idle); the first held shape soaks until its SM clock stops changing, a shape
switched in afterwards (the board already at its power limit) settles by the same test over
shorter spans, then a window is timed; its median chunk rate is the figure
(``clustereval.analysis.steady``). Every measurement adds to a trace (TFLOPS, W, MHz, °C over time)
that the result carries.

Without CUDA the same code runs on the CPU with tiny shapes and ``time.perf_counter`` timing, so the
logic is tested anywhere; there is no telemetry then.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from clustereval.analysis.matmul import (
    BURST,
    HOT,
    SCREEN,
    SUSTAINED,
    SearchPlan,
    Telemetry,
    classify_sustained,
    exhaustive,
    parse_grid,
    parse_shape,
    search,
)
from clustereval.analysis.steady import SETTLE, SOAK, classify_steadiness
from clustereval.analysis.waves import GPU_SPACE, STAND_IN, STAND_IN_SMS, WavePlan, max_elems, wave_search
from clustereval.records import to_dict
from clustereval.records.compute import ShapeTiming, TraceSpan
from clustereval.workers.matmul_bench import HOT_SETTLE_S, LEMON, Bench, Spec, specs, steady_rules
from clustereval.workers.nvml import Nvml, Sampler

EXIT_BUSY = 3  # a foreign process holds a GPU this run was to measure


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


# -- setup -----------------------------------------------------------------------------------


@dataclass
class Gpu:
    """One GPU as the worker sees it: nvidia-smi's index, the torch device, NVML facts."""

    index: int
    cuda_index: int
    name: str = ""
    uuid: str = ""
    sm_count: int = 0
    memory_gib: float = 0.0
    power_limit_w: float | None = None
    boost_mhz: float | None = None
    handle: Any = None


def _import_torch() -> Any:
    import torch

    return torch


def pick_device(torch: Any, wanted: str) -> str:
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available to this torch build (torch.cuda.is_available() is False)")
    return wanted


def resolve_gpu(torch: Any, nvml: Nvml, device: str, index: int) -> Gpu:
    """nvidia-smi's GPU ``index`` -> the torch device with the same UUID (they differ when the
    platform sets CUDA_VISIBLE_DEVICES), with its SM count and NVML limits."""
    if device != "cuda":
        return Gpu(index=index, cuda_index=-1, name=platform.processor() or "cpu")
    gpu = Gpu(index=index, cuda_index=index)
    if nvml.ok:
        try:
            gpu.handle = nvml.handle(index)
            gpu.uuid = nvml.uuid(gpu.handle)
            gpu.name = nvml.name(gpu.handle)
            gpu.power_limit_w = nvml.power_limit_w(gpu.handle)
            gpu.boost_mhz = nvml.boost_mhz(gpu.handle)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"NVML cannot read GPU {index}: {exc}") from exc
        want = gpu.uuid.lower().removeprefix("gpu-")
        count = torch.cuda.device_count()
        # The same index first: looking at other devices is only needed when the numbering differs.
        order = ([index] if index < count else []) + [d for d in range(count) if d != index]
        for d in order:
            got = str(getattr(torch.cuda.get_device_properties(d), "uuid", "")).lower().removeprefix("gpu-")
            if got and got == want:
                gpu.cuda_index = d
                break
    if gpu.cuda_index >= torch.cuda.device_count():
        raise RuntimeError(f"GPU {index} is not visible to torch ({torch.cuda.device_count()} devices; "
                           f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    props = torch.cuda.get_device_properties(gpu.cuda_index)
    gpu.name = gpu.name or props.name
    gpu.sm_count = int(props.multi_processor_count)
    gpu.memory_gib = round(props.total_memory / 2**30, 1)
    return gpu


def gpu_facts(gpu: Gpu) -> dict[str, Any]:
    return {"gpu": gpu.index, "cuda_index": gpu.cuda_index, "name": gpu.name, "uuid": gpu.uuid,
            "sm_count": gpu.sm_count, "memory_gib": gpu.memory_gib, "power_limit_w": gpu.power_limit_w,
            "boost_mhz": gpu.boost_mhz}


def hello(torch: Any, device: str, nvml: Nvml, mode: str) -> None:
    emit("hello", mode=mode, pid=os.getpid(), executable=sys.executable, python=platform.python_version(),
         torch=torch.__version__, cuda=getattr(torch.version, "cuda", None) or "", device=device,
         telemetry=nvml.ok, telemetry_error=nvml.error)


def _dtype(torch: Any, name: str) -> Any:
    value = getattr(torch, name, None)
    if value is None or not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use bfloat16, float16 or float32")
    return value


def _siblings(nvml: Nvml, device: str, text: str) -> dict[int, Any]:
    if device != "cuda" or not nvml.ok or not text:
        return {}
    return {int(g): nvml.handle(int(g)) for g in text.split(",") if g.strip()}


def _setup(args: argparse.Namespace, torch: Any, device: str,
           max_elems: tuple[int, int, int]) -> tuple[Nvml, Gpu, Bench]:
    nvml = Nvml() if device == "cuda" else _no_nvml()
    hello(torch, device, nvml, args.mode)
    gpu = resolve_gpu(torch, nvml, device, args.gpu)
    emit("gpu", **gpu_facts(gpu))
    sampler = None
    if nvml.ok and gpu.handle is not None:
        sampler = Sampler(nvml, gpu.handle, _siblings(nvml, device, getattr(args, "siblings", "")))
        sampler.start()
    bench = Bench(torch, device, gpu.cuda_index, _dtype(torch, args.dtype), max_elems, sampler)
    return nvml, gpu, bench


def _torch_and_device(args: argparse.Namespace) -> tuple[Any, str]:
    torch = _import_torch()
    device = pick_device(torch, args.device)
    if device == "cpu":
        torch.set_num_threads(1)  # tiny shapes; one core keeps the timing steady on a shared machine
    return torch, device


def _no_nvml() -> Nvml:
    return Nvml.absent("CPU run: no NVML")


def _accelerator_warmup(bench: Bench, device: str, seconds: float) -> None:
    """Bring the GPU out of its parked idle clock before the first shape."""
    if device != "cuda" or seconds <= 0:
        return
    side = 4096
    bench_max = min(side * side, bench.abuf.numel(), bench.bbuf.numel(), bench.cbuf.numel())
    side = int(math.isqrt(bench_max))
    bench.measure((side, side, side), Spec(1, seconds, 1, 1, 0.0), "warmup")


# -- modes -----------------------------------------------------------------------------------


def run_search(args: argparse.Namespace) -> int:
    if args.mode == "search" and not args.grid:
        return run_waves(args)
    torch, device = _torch_and_device(args)
    grid = parse_grid(args.grid or ("default" if device == "cuda" else "tiny"))
    _, gpu, bench = _setup(args, torch, device, grid.max_elems())
    table = specs(device, args.hot_s)
    soak, settle = steady_rules(args, device)
    hot_next = replace(table[HOT], warm_s=min(HOT_SETTLE_S, table[HOT].warm_s))
    plan = SearchPlan(coarse_budget=args.coarse_budget, num_confirm=args.confirm, num_hot=args.hot,
                      num_hot_extra=0 if args.no_msmf else SearchPlan.num_hot_extra, num_sustain=args.sustain)
    if args.no_msmf:
        plan = replace(plan, num_hot=0, num_sustain=0)
    tel = Telemetry(gpu.power_limit_w, gpu.boost_mhz)
    _accelerator_warmup(bench, device, args.warmup_s)
    last = [""]
    stage_start: dict[str, float] = {}
    burst_at: dict[tuple[int, int, int], float] = {}

    def measure(shape: tuple[int, int, int], stage: str) -> ShapeTiming:
        if stage == BURST and last[0] != BURST and device == "cuda":
            time.sleep(1.0)  # off the power limit before the bursts that decide MAMF
        stage_start.setdefault(stage, time.monotonic() - bench.origin)
        if stage == SUSTAINED:
            rule = settle if last[0] == SUSTAINED else soak  # the first held shape soaks, the next settle
            t = classify_steadiness(classify_sustained(bench.hold(shape, rule), tel, plan.min_power_frac), rule)
        else:
            spec = hot_next if stage == HOT and last[0] == HOT else table[stage]
            t = bench.measure(shape, spec, stage)
            if stage == HOT:
                classify_sustained(t, tel, plan.min_power_frac)
            if stage == BURST:
                burst_at[shape] = bench.points[-1].t_s
        last[0] = stage
        emit("shape", gpu=gpu.index, **to_dict(t))
        return t

    runner = exhaustive if args.mode == "exhaustive" else search
    summary = runner(grid, measure, plan, tel, clock=time.monotonic)
    summary.screen_min_iters = table[SCREEN].iters_min
    summary.confirm_min_iters, summary.confirm_min_s = table[BURST].iters_min, table[BURST].min_s
    summary.burst_duty, summary.hot_s = table[BURST].duty, table[HOT].min_s
    summary.soak_min_s, summary.soak_max_s = soak.min_s, soak.max_s
    summary.steady_window_s, summary.steady_tol_frac = soak.span_s, soak.tol_frac
    summary.held_window_s, summary.max_drift_frac = soak.window_s, soak.max_drift_frac
    held = [t for t in summary.sustained if t.held]
    summary.hot_stage_s = round(sum(t.wall_s for t in summary.sustained if t.stage == HOT), 3)
    summary.soak_stage_s = round(sum(t.soak_s for t in held), 3)
    summary.window_stage_s = round(sum(t.window_s for t in held), 3)
    trace = bench.trace(gpu.index)
    end = time.monotonic() - bench.origin
    first_hot = stage_start.get(HOT, stage_start.get(SUSTAINED, end))
    trace.spans = [TraceSpan("search", round(stage_start.get(SCREEN, stage_start.get(BURST, 0.0)), 3),
                             round(first_hot, 3))] + \
        ([TraceSpan("hot", round(first_hot, 3), round(stage_start.get(SUSTAINED, end), 3))] if HOT in stage_start
         else []) + trace.spans
    if summary.mamf is not None:
        trace.mamf_t_s = burst_at.get(summary.mamf.shape)
    if summary.msmf is not None:
        held_at = [i for i, t in enumerate(held) if t is summary.msmf]
        windows = [sp for sp in trace.spans if sp.name == "window"]
        if held_at and held_at[0] < len(windows):
            trace.msmf_span = windows[held_at[0]]
    summary.trace = trace
    emit("result", mode=args.mode, gpu=gpu.index, dtype=args.dtype, summary=to_dict(summary))
    return 0


def run_waves(args: argparse.Namespace) -> int:
    """The whole-wave search (``clustereval.analysis.waves``); a CPU stand-in runs it scaled down."""
    torch, device = _torch_and_device(args)
    space = GPU_SPACE if device == "cuda" else STAND_IN
    _, gpu, bench = _setup(args, torch, device, max_elems(space))
    sms = gpu.sm_count if device == "cuda" else STAND_IN_SMS
    table = specs(device, args.hot_s)
    soak, settle = steady_rules(args, device)
    plan = WavePlan() if device == "cuda" else WavePlan(rung_s=0.03, rung2_s=0.04)
    tel = Telemetry(gpu.power_limit_w, gpu.boost_mhz)
    _accelerator_warmup(bench, device, args.warmup_s)
    last = [""]
    stage_start: dict[str, float] = {}
    burst_at: dict[tuple[tuple[int, int, int], str], float] = {}

    def note(stage: str, t: ShapeTiming) -> ShapeTiming:
        last[0] = stage
        emit("shape", gpu=gpu.index, **to_dict(t))
        return t

    def measure(shape: tuple[int, int, int], stage: str, layout: str) -> ShapeTiming:
        if stage == BURST and last[0] != BURST and device == "cuda":
            time.sleep(1.0)  # off the power limit before the bursts that decide MAMF
        stage_start.setdefault(stage, time.monotonic() - bench.origin)
        t = bench.measure(shape, table[stage], stage, layout)
        if stage == BURST:
            burst_at[(shape, layout)] = bench.points[-1].t_s
        return note(stage, t)

    def rung(shape: tuple[int, int, int], layout: str, seconds: float) -> ShapeTiming:
        stage_start.setdefault(HOT, time.monotonic() - bench.origin)
        if last[0] != HOT and device == "cuda":  # the first rung: bring the board to its power limit
            bench.measure(shape, replace(table[HOT], min_s=0.0, iters_min=1, iters_max=1), "warmup", layout)
        return note(HOT, classify_sustained(bench.rung(shape, layout, seconds), tel))

    def hold(shape: tuple[int, int, int], layout: str) -> ShapeTiming:
        stage_start.setdefault(SUSTAINED, time.monotonic() - bench.origin)
        t = bench.hold(shape, settle, layout)  # after the ladder the board is hot: a settle, not a soak
        return note(SUSTAINED, classify_steadiness(classify_sustained(t, tel), settle))

    summary = wave_search(sms, measure, rung, hold, space, plan, tel, clock=time.monotonic, msmf=not args.no_msmf)
    summary.screen_min_iters = table[SCREEN].iters_min
    summary.confirm_min_iters, summary.confirm_min_s = table[BURST].iters_min, table[BURST].min_s
    summary.burst_duty = table[BURST].duty
    summary.soak_min_s, summary.soak_max_s = settle.min_s, settle.max_s
    summary.steady_window_s, summary.steady_tol_frac = settle.span_s, settle.tol_frac
    summary.held_window_s, summary.max_drift_frac = settle.window_s, settle.max_drift_frac
    held = [t for t in summary.sustained if t.stage == SUSTAINED]
    summary.hot_stage_s = next((st.seconds for st in summary.stages if st.name == "ladder"), 0.0)
    summary.soak_stage_s = round(sum(t.soak_s for t in held), 3)
    summary.window_stage_s = round(sum(t.window_s for t in held), 3)
    trace = bench.trace(gpu.index)
    end = time.monotonic() - bench.origin
    first_hot = stage_start.get(HOT, stage_start.get(SUSTAINED, end))
    trace.spans = [TraceSpan("search", round(stage_start.get(SCREEN, 0.0), 3), round(first_hot, 3))] + \
        ([TraceSpan("hot", round(first_hot, 3), round(stage_start.get(SUSTAINED, end), 3))] if HOT in stage_start
         else []) + trace.spans
    if summary.mamf is not None:
        trace.mamf_t_s = burst_at.get((summary.mamf.shape, summary.mamf.layout))
    if summary.msmf is not None:
        windows = [sp for sp in trace.spans if sp.name == "window"]
        at = [i for i, t in enumerate(held) if t is summary.msmf]
        if at and at[0] < len(windows):
            trace.msmf_span = windows[at[0]]
    summary.trace = trace
    emit("result", mode=args.mode, gpu=gpu.index, dtype=args.dtype, summary=to_dict(summary))
    return 0


def run_pinned(args: argparse.Namespace) -> int:
    """One shape held: a settle (the siblings have been computing all along, so the board is hot)
    or, with ``--soak``, the full soak; then the window."""
    shape = parse_shape(args.shape)
    m, n, k = shape
    torch, device = _torch_and_device(args)
    _, gpu, bench = _setup(args, torch, device, (m * k, k * n, m * n))
    soak, settle = steady_rules(args, device)
    rule = soak if args.soak else settle
    tel = Telemetry(gpu.power_limit_w, gpu.boost_mhz)
    t = classify_steadiness(classify_sustained(bench.hold(shape, rule, args.layout), tel), rule)
    trace = bench.trace(gpu.index)
    trace.msmf_span = next((sp for sp in trace.spans if sp.name == "window"), None)
    emit("result", mode="pinned", gpu=gpu.index, dtype=args.dtype, timing=to_dict(t), trace=to_dict(trace))
    return 0


def run_load(args: argparse.Namespace) -> int:
    """A continuous matmul until ``--stop-file`` exists or ``--max-seconds`` pass."""
    shape = parse_shape(args.shape)
    m, n, k = shape
    torch, device = _torch_and_device(args)
    nvml = Nvml() if device == "cuda" else _no_nvml()
    hello(torch, device, nvml, "load")
    gpu = resolve_gpu(torch, nvml, device, args.gpu)
    bench = Bench(torch, device, gpu.cuda_index, _dtype(torch, args.dtype), (m * k, k * n, m * n), None)
    a, b, c = bench.operands(shape)
    deadline = time.monotonic() + args.max_seconds
    chunk = 1
    done = 0
    started = time.monotonic()
    last_beat = started
    announced = False
    while True:
        t = time.perf_counter()
        for _ in range(chunk):
            torch.mm(a, b, out=c)
        bench.sync()
        spent = time.perf_counter() - t
        done += chunk
        chunk = max(1, min(chunk * 2, int(chunk * 0.25 / max(spent, 1e-6)) or 1))  # ~0.25 s between checks
        now = time.monotonic()
        if not announced:
            emit("running", gpu=gpu.index, pid=os.getpid(), shape=f"{m}x{n}x{k}")
            announced = True
        if now - last_beat >= 5.0:
            emit("heartbeat", gpu=gpu.index, iterations=done, seconds=round(now - started, 1))
            last_beat = now
        if (args.stop_file and os.path.exists(args.stop_file)) or now >= deadline:
            break
    emit("stopped", gpu=gpu.index, iterations=done, seconds=round(time.monotonic() - started, 1),
         reason="stop file" if args.stop_file and os.path.exists(args.stop_file) else "time limit")
    return 0


def run_lemon(args: argparse.Namespace) -> int:
    """The fixed matmul on each GPU in turn; a GPU that errors is reported and the next one runs."""
    torch, device = _torch_and_device(args)
    nvml = Nvml() if device == "cuda" else _no_nvml()
    hello(torch, device, nvml, "lemon")
    size = args.size or (16384 if device == "cuda" else 256)
    shape = (size, size, size)
    spec = specs(device)[LEMON]
    for index in [int(g) for g in args.gpus.split(",") if g.strip()]:
        emit("begin", gpu=index)
        try:
            gpu = resolve_gpu(torch, nvml, device, index)
            if nvml.ok and gpu.handle is not None:
                foreign = [p for p in nvml.processes(gpu.handle) if p[0] != os.getpid()]
                if foreign:
                    emit("busy", gpu=index, processes=[{"pid": p, "name": nm, "used_mib": u} for p, nm, u in foreign])
                    return EXIT_BUSY
            sampler = Sampler(nvml, gpu.handle, {}) if nvml.ok and gpu.handle is not None else None
            if sampler:
                sampler.start()
            try:
                bench = Bench(torch, device, gpu.cuda_index, _dtype(torch, args.dtype), (size * size,) * 3, sampler)
                t = bench.measure(shape, spec, LEMON)
            finally:
                if sampler:
                    sampler.stop()
            emit("lemon", **gpu_facts(gpu), timing=to_dict(t))
            del bench
            if device == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - a dead GPU is a result, not a crash of the pass
            emit("error", gpu=index, error=f"{type(exc).__name__}: {exc}".strip()[:500])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clustereval.workers.matmul", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
        p.add_argument("--dtype", default="bfloat16")

    def measured(p: argparse.ArgumentParser) -> None:
        common(p)
        p.add_argument("--gpu", type=int, default=0, help="GPU index as nvidia-smi numbers it")
        p.add_argument("--siblings", default="", help="comma-separated GPUs whose load must stay busy")
        p.add_argument("--soak-min-s", type=float, default=SOAK.min_s,
                       help="held: the first held shape soaks at least this long")
        p.add_argument("--soak-max-s", type=float, default=SOAK.max_s, help="held: ... and at most this long")
        p.add_argument("--settle-s", type=float, default=SETTLE.min_s,
                       help="held: a shape on a board already at its power limit settles at least this long")
        p.add_argument("--span-s", type=float, default=SOAK.span_s,
                       help="held: the SM clock's mean over this span vs the span before decides the soak")
        p.add_argument("--tol", type=float, default=SOAK.tol_frac, help="held: ... within this fraction")
        p.add_argument("--sustain-s", type=float, default=SOAK.window_s, help="held: seconds timed after the soak")
        p.add_argument("--max-drift", type=float, default=SOAK.max_drift_frac,
                       help="held: first-half vs second-half drift beyond this fraction labels it UNSTEADY")

    for mode in ("search", "exhaustive"):
        p = sub.add_parser(mode)
        measured(p)
        p.add_argument("--grid", default="", help="anchors | default | tiny | M=a:b:step,N=..,K=..; without it "
                       "search runs the whole-wave search")
        p.add_argument("--coarse-budget", type=int, default=SearchPlan.coarse_budget)
        p.add_argument("--confirm", type=int, default=SearchPlan.num_confirm)
        p.add_argument("--hot", type=int, default=SearchPlan.num_hot,
                       help="large shapes held at full power one after another")
        p.add_argument("--hot-s", type=float, default=1.0, help="seconds each hot shape is timed")
        p.add_argument("--sustain", type=int, default=SearchPlan.num_sustain,
                       help="of those, pinned for the full sustained timing")
        p.add_argument("--no-msmf", action="store_true", help="skip the sustained stage")
        p.add_argument("--warmup-s", type=float, default=1.0, help="accelerator warm-up before the first shape")
    p = sub.add_parser("pinned")
    measured(p)
    p.add_argument("--shape", required=True, help="MxNxK")
    p.add_argument("--soak", action="store_true", help="the full soak instead of a settle")
    p.add_argument("--layout", choices=["nn", "tn"], default="nn",
                   help="B in memory: nn (K×N) or tn (N×K read transposed), as the search chose it")
    p = sub.add_parser("load")
    common(p)
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--shape", default="8192x8192x8192")
    p.add_argument("--stop-file", default="")
    p.add_argument("--max-seconds", type=float, default=3600.0)
    p = sub.add_parser("lemon")
    common(p)
    p.add_argument("--gpus", default="0")
    p.add_argument("--size", type=int, default=0, help="M=N=K (default 16384 on a GPU, 256 on CPU)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "sustain_s", 1.0) <= 0:
        emit("error", error="--sustain-s must be positive: a held shape needs a timed window")
        return 1
    runners = {"search": run_search, "exhaustive": run_search, "pinned": run_pinned, "load": run_load,
               "lemon": run_lemon}
    try:
        return runners[args.mode](args)
    except Exception as exc:  # noqa: BLE001 - one JSON line says what broke; the phase records it
        emit("error", error=f"{type(exc).__name__}: {exc}".strip()[:500])
        return 1


if __name__ == "__main__":
    sys.exit(main())
