"""The matmul worker: runs on a node with the eval Python (stdlib + torch + pynvml), prints JSON lines.

Modes:

- ``search``: GPU0's shape search for MAMF (Maximum Achievable Matmul FLOPS, the best short burst
  of any matmul shape) and MSMF (Maximum Sustainable Matmul FLOPS, the best shape that holds the
  board at its power limit); the stages are in ``clustereval.analysis.matmul`` (a run's raw folder
  holds it beside this file as ``matmul_search.py``).
- ``exhaustive``: every shape of a grid with the full burst timing, then the same MSMF stage.
- ``pinned``: one shape held for a settle period, then timed for N seconds (a sustained measurement).
- ``load``: a continuous matmul on one GPU until a stop file appears (the sibling load).
- ``lemon``: the fixed 16384³ matmul on each listed GPU in turn, the others idle.

How one shape is timed: ``torch.mm`` of an M×K by a K×N matrix (bf16 unless told otherwise) with
inputs freshly drawn from a normal distribution; before every iteration, timed or not, a buffer
twice the L2 cache is overwritten (so no operand is served from cache) and the output matrix is
re-randomised (so the product never overwrites identical bits); each matmul alone is timed with a
pair of CUDA events; the CPU is kept at most ~50 ms ahead of the GPU so the telemetry window lines
up with the work. A sampling thread reads board power and SM clock from NVML every 20 ms (and the
siblings' utilisation, to see whether their load stopped). TFLOPS = 2·M·N·K / time.

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
import threading
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
    idle_siblings,
    parse_grid,
    parse_shape,
    percentile,
    search,
    summarize_times,
)
from clustereval.records import to_dict
from clustereval.records.compute import ShapeTiming

LEMON = "lemon"
EXIT_BUSY = 3  # a foreign process holds a GPU this run was to measure
SAMPLE_INTERVAL_S = 0.02
MAX_AHEAD_S = 0.05  # how far the CPU may run ahead of the GPU


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


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


def specs(device: str, settle_s: float, sustain_s: float, hot_s: float = 1.0) -> dict[str, Spec]:
    if device == "cuda":
        return {
            SCREEN: Spec(1, 0.004, 3, 400, 0.008, BURST_DUTY),
            BURST: Spec(10, 0.02, 30, 2000, 0.05, BURST_DUTY),
            HOT: Spec(2, settle_s, 5, 400_000, hot_s),
            SUSTAINED: Spec(5, settle_s, 10, 400_000, sustain_s),
            LEMON: Spec(10, 0.5, 30, 5000, 1.0),
        }
    return {  # CPU: the same stages, scaled to tiny shapes; no power budget to stay under
        SCREEN: Spec(1, 0.0, 2, 50, 0.002),
        BURST: Spec(2, 0.002, 5, 200, 0.01),
        HOT: Spec(2, min(settle_s, 0.05), 5, 100_000, min(hot_s, 0.1)),
        SUSTAINED: Spec(2, min(settle_s, 0.05), 5, 100_000, min(sustain_s, 0.2)),
        LEMON: Spec(2, 0.005, 3, 100, 0.02),
    }


# -- NVML ------------------------------------------------------------------------------------


class Nvml:
    """The few NVML calls we need; ``ok`` is False without pynvml or a driver."""

    _VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}

    def __init__(self) -> None:
        self.ok = False
        self.error = ""
        self.power_source = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - no pynvml, no driver: run without telemetry
            self.error = f"{type(exc).__name__}: {exc}"

    def handle(self, index: int) -> Any:
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, h: Any) -> str:
        return _text(self.nv.nvmlDeviceGetUUID(h))

    def name(self, h: Any) -> str:
        return _text(self.nv.nvmlDeviceGetName(h))

    def power_limit_w(self, h: Any) -> float | None:
        try:
            return self.nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except Exception:  # noqa: BLE001
            return None

    def boost_mhz(self, h: Any) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetMaxClockInfo(h, self.nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            return None

    def sm_mhz(self, h: Any) -> float:
        return float(self.nv.nvmlDeviceGetClockInfo(h, self.nv.NVML_CLOCK_SM))

    def util_pct(self, h: Any) -> float:
        return float(self.nv.nvmlDeviceGetUtilizationRates(h).gpu)

    def _instant_power_w(self, h: Any) -> float | None:
        field_id = getattr(self.nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field_id is None:
            return None
        value = self.nv.nvmlDeviceGetFieldValues(h, [field_id])[0]
        if value.nvmlReturn != 0:
            return None
        raw = getattr(value.value, self._VALUE_FIELDS.get(value.valueType, "uiVal"))
        watts = float(raw) / 1000.0
        return watts if 1.0 <= watts <= 5000.0 else None

    def power_w(self, h: Any) -> float:
        """Instantaneous board power where the driver offers it, else NVML's (1 s averaged) reading."""
        if self.power_source != "average":
            try:
                watts = self._instant_power_w(h)
            except Exception:  # noqa: BLE001
                watts = None
            if watts is not None:
                self.power_source = "instant"
                return watts
            self.power_source = "average"
        return self.nv.nvmlDeviceGetPowerUsage(h) / 1000.0

    def processes(self, h: Any) -> list[tuple[int, str, int]]:
        """(pid, name, used MiB) of the compute processes on a GPU."""
        out = []
        for p in self.nv.nvmlDeviceGetComputeRunningProcesses(h):
            used = getattr(p, "usedGpuMemory", None) or 0
            out.append((int(p.pid), self._process_name(int(p.pid)), int(used) // 2**20))
        return out

    def _process_name(self, pid: int) -> str:
        try:
            return _text(self.nv.nvmlSystemGetProcessName(pid))
        except Exception:  # noqa: BLE001
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    return fh.read().strip()
            except OSError:
                return "?"


def _sig(value: float, digits: int = 6) -> float:
    """``digits`` significant figures: 807.531 on a GPU, 6.53e-05 on a CPU stand-in (never 0)."""
    return float(f"{value:.{digits}g}")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Sampler(threading.Thread):
    """Board power and SM clock of the measured GPU, utilisation of its siblings, every 20 ms."""

    def __init__(self, nvml: Nvml, handle: Any, siblings: dict[int, Any]) -> None:
        super().__init__(daemon=True)
        self.nvml, self.handle, self.siblings = nvml, handle, siblings
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._samples: list[tuple[float, float, float, dict[int, float]]] = []

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                t = time.monotonic()
                power = self.nvml.power_w(self.handle)
                clock = self.nvml.sm_mhz(self.handle)
                util = {g: self.nvml.util_pct(h) for g, h in self.siblings.items()}
                with self._lock:
                    self._samples.append((t, power, clock, util))
            except Exception:  # noqa: BLE001 - a failed read leaves a hole, not a crash
                pass
            self._stop_event.wait(SAMPLE_INTERVAL_S)

    def stop(self) -> None:
        self._stop_event.set()

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        with self._lock:
            inside = [s for s in self._samples if t0 <= s[0] <= t1]
            if not inside:  # a window shorter than one sample: the first one after it
                inside = [s for s in self._samples if s[0] > t1][:1] or self._samples[-1:]
        if not inside:
            return {}
        powers = [s[1] for s in inside]
        clocks = [s[2] for s in inside]
        util: dict[int, list[float]] = {g: [] for g in self.siblings}
        for s in inside:
            for g, u in s[3].items():
                util[g].append(u)
        return {
            "power_w": round(sum(powers) / len(powers), 1),
            "power_max_w": round(max(powers), 1),
            "sm_mhz": round(sum(clocks) / len(clocks), 1),
            "sm_mhz_low": round(percentile(clocks, 5), 1),
            "sm_mhz_high": round(percentile(clocks, 95), 1),
            "num_samples": len(inside),
            "idle_siblings": idle_siblings(util) if self.siblings else [],
            "siblings_sampled": bool(self.siblings),
        }


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

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def operands(self, shape: tuple[int, int, int]) -> tuple[Any, Any, Any]:
        m, n, k = shape
        a = self.abuf[: m * k].view(m, k)
        b = self.bbuf[: k * n].view(k, n)
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

    def measure(self, shape: tuple[int, int, int], spec: Spec, stage: str) -> ShapeTiming:
        wall0 = time.perf_counter()
        a, b, c = self.operands(shape)
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
                             kernel_s=round(sum(seconds), 6), wall_s=round(time.perf_counter() - wall0, 4))
        if self.sampler is not None:
            for key, value in self.sampler.window(t0, t1).items():
                setattr(timing, key, value)
        return timing


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
    nvml = Nvml.__new__(Nvml)
    nvml.ok, nvml.error, nvml.power_source = False, "CPU run: no NVML", ""
    return nvml


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
    torch, device = _torch_and_device(args)
    grid = parse_grid(args.grid or ("default" if device == "cuda" else "tiny"))
    _, gpu, bench = _setup(args, torch, device, grid.max_elems())
    table = specs(device, args.settle_s, args.sustain_s, args.hot_s)
    hot_next = replace(table[HOT], warm_s=min(HOT_SETTLE_S, table[HOT].warm_s))
    plan = SearchPlan(coarse_budget=args.coarse_budget, num_confirm=args.confirm, num_hot=args.hot,
                      num_hot_extra=0 if args.no_msmf else SearchPlan.num_hot_extra, num_sustain=args.sustain)
    if args.no_msmf:
        plan = replace(plan, num_hot=0, num_sustain=0)
    tel = Telemetry(gpu.power_limit_w, gpu.boost_mhz)
    _accelerator_warmup(bench, device, args.warmup_s)
    last = [""]

    def measure(shape: tuple[int, int, int], stage: str) -> ShapeTiming:
        if stage == BURST and last[0] != BURST and device == "cuda":
            time.sleep(1.0)  # off the power limit before the bursts that decide MAMF
        spec = hot_next if stage == HOT and last[0] == HOT else table[stage]
        t = bench.measure(shape, spec, stage)
        last[0] = stage
        if stage in (HOT, SUSTAINED):
            classify_sustained(t, tel)
        emit("shape", gpu=gpu.index, **to_dict(t))
        return t

    runner = exhaustive if args.mode == "exhaustive" else search
    summary = runner(grid, measure, plan, tel, clock=time.monotonic)
    summary.screen_min_iters = table[SCREEN].iters_min
    summary.confirm_min_iters, summary.confirm_min_s = table[BURST].iters_min, table[BURST].min_s
    summary.burst_duty, summary.hot_s = table[BURST].duty, table[HOT].min_s
    emit("result", mode=args.mode, gpu=gpu.index, dtype=args.dtype, summary=to_dict(summary))
    return 0


def run_pinned(args: argparse.Namespace) -> int:
    shape = parse_shape(args.shape)
    m, n, k = shape
    torch, device = _torch_and_device(args)
    _, gpu, bench = _setup(args, torch, device, (m * k, k * n, m * n))
    spec = specs(device, args.settle_s, args.sustain_s)[SUSTAINED]
    t = classify_sustained(bench.measure(shape, spec, SUSTAINED), Telemetry(gpu.power_limit_w, gpu.boost_mhz))
    emit("result", mode="pinned", gpu=gpu.index, dtype=args.dtype, timing=to_dict(t))
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
    spec = specs(device, 0.0, 0.0)[LEMON]
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
        p.add_argument("--settle-s", type=float, default=1.5, help="sustained: seconds before timing starts")
        p.add_argument("--sustain-s", type=float, default=3.0, help="sustained: seconds timed")

    for mode in ("search", "exhaustive"):
        p = sub.add_parser(mode)
        measured(p)
        p.add_argument("--grid", default="", help="anchors | default | tiny | M=a:b:step,N=..,K=..")
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
    runners = {"search": run_search, "exhaustive": run_search, "pinned": run_pinned, "load": run_load,
               "lemon": run_lemon}
    try:
        return runners[args.mode](args)
    except Exception as exc:  # noqa: BLE001 - one JSON line says what broke; the phase records it
        emit("error", error=f"{type(exc).__name__}: {exc}".strip()[:500])
        return 1


if __name__ == "__main__":
    sys.exit(main())
