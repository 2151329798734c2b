"""All-reduce sweep: fp32 sum over payloads from --min-bytes to --max-bytes by powers of two.

Timed the way nccl-tests times it: after warm-ups, many collectives are issued back to back between
two CUDA events and the time per call is the elapsed time over the count, taken from the slowest
rank. Payloads up to --graph-max-bytes are also replayed from a CUDA graph of captured all-reduces
(the CPU's per-call overhead then does not count) and the faster of the two timings is kept. ``blocking`` mode times one call at a
time with a barrier and a synchronize around it (what a script that waits on every call sees).

algbw = payload bytes / time; busbw = algbw * 2(n-1)/n; GB/s = 1e9 B/s. Every payload's first
all-reduce is checked: each rank contributes rank+1, so every element must equal n(n+1)/2.
Rank 0 prints one ``row`` line per payload, mode and sample, with the sample's start and end (Unix
seconds). With ``--gate`` the job is one pair of a pairwise round and takes every sample together
with the round's other pairs (``workers.roundgate``).
"""

from __future__ import annotations

import argparse
import math
import time

from clustereval.workers.distcommon import emit, finish, init_group, run_main, start_rank
from clustereval.workers.roundgate import GateSpec, RoundGate

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
# back-to-back: the nccl-tests way (CUDA-graph replay up to --graph-max-bytes); eager: back-to-back
# without graphs (only where back-to-back used one, for comparison); blocking: one call at a time
MODES = ("back-to-back", "eager", "blocking")


def payloads(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min to max inclusive (min rounded up to a multiple of 4 bytes)."""
    out = []
    size = max(4, min_bytes)
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def busbw_factor(n: int) -> float:
    return 2 * (n - 1) / n if n > 1 else 1.0


def _available_bytes(device, local_world_size: int) -> int:
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // max(1, local_world_size)
    except OSError:
        pass
    return 1 * GIB


def fit_max_bytes(requested: int, available: int, headroom: int) -> int:
    """The largest power of two <= requested that fits (available - headroom) at 90%."""
    usable = max(0, int((available - headroom) * 0.9))
    size = requested
    while size > 4 and size > usable:
        size //= 2
    return size


class Timer:
    """Times a callable issued ``count`` times back to back; GPU: CUDA events, CPU: wall clock."""

    def __init__(self, device) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def run(self, fn, count: int) -> float:
        """Seconds per call."""
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(count):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / count
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        return (time.perf_counter() - t0) / count


def _slowest(value: float, device) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _all_true(flag: bool, device) -> bool:
    import torch
    import torch.distributed as dist

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(int(t.item()))


def check_once(t, n: int, rank: int) -> bool:
    """Each rank contributes rank+1; every element must come back as n(n+1)/2."""
    import torch
    import torch.distributed as dist

    t.fill_(float(rank + 1))
    dist.all_reduce(t)
    lo, hi = torch.aminmax(t)
    expected = n * (n + 1) / 2
    return float(lo) == expected and float(hi) == expected


class GraphReplay:
    """``calls`` all-reduces captured in one CUDA graph, replayed to time launch-bound payloads."""

    def __init__(self, t, calls: int) -> None:
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.calls = calls
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                dist.all_reduce(t)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the process group's watchdog thread may query CUDA events during the capture
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            for _ in range(calls):
                dist.all_reduce(t)
        torch.cuda.synchronize()

    def replay(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        self.graph.reset()


def time_back_to_back(t, timer: Timer, *, warmup: int, iters: int, min_time_s: float, max_iters: int,
                      graph_calls: int) -> tuple[float, int, str]:
    """(the slowest rank's seconds per call, calls timed, method).

    Calls issued back to back between two events; with ``graph_calls`` > 0 (every rank agreed that
    graphs work) the same count is also replayed from a CUDA graph of that many captured calls, and
    the faster of the two is kept: both time the same back-to-back collective, and which one lets
    NCCL run closer to the wire depends on the payload (launch-bound small payloads favour the
    graph; some mid-size payloads run faster launched eagerly)."""
    import torch.distributed as dist

    def one() -> None:
        dist.all_reduce(t)

    est = timer.run(one, max(1, warmup))
    count = max(iters, min(max_iters, math.ceil(min_time_s / max(est, 1e-7))))
    count = int(_slowest(float(count), t.device))  # every rank must issue the same number of calls
    timer.sync()
    dist.barrier()
    timer.sync()
    best = (_slowest(timer.run(one, count), t.device), count, "events" if timer.cuda else "wall-clock")
    if graph_calls > 0:
        g = GraphReplay(t, graph_calls)
        try:
            g.replay()
            reps = max(1, math.ceil(count / graph_calls))
            timer.sync()
            dist.barrier()
            timer.sync()
            graph = _slowest(timer.run(g.replay, reps) / graph_calls, t.device)
        finally:
            g.close()
        if graph < best[0]:
            best = (graph, reps * graph_calls, "cuda-graph")
    return best


def time_blocking(t, timer: Timer, *, warmup: int, iters: int) -> tuple[float, int]:
    """Mean seconds of one all-reduce with a barrier and a synchronize around each call."""
    import torch.distributed as dist

    total = 0.0
    for i in range(warmup + iters):
        dist.barrier()
        timer.sync()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        timer.sync()
        if i >= warmup:
            total += time.perf_counter() - t0
    return total / max(1, iters), iters


def graph_capable(t, device) -> tuple[bool, str]:
    """Whether every rank can capture an all-reduce in a CUDA graph (decided together)."""
    error = ""
    ok = False
    if device.type == "cuda":
        try:
            g = GraphReplay(t, 2)
            g.replay()
            g.close()
            ok = True
        except Exception as exc:  # noqa: BLE001 - any failure means: time eagerly
            error = f"{type(exc).__name__}: {exc}"[:300]
    return _all_true(ok, device), error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clustereval.workers.allreduce")
    ap.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    ap.add_argument("--min-bytes", type=int, default=32 * KIB)
    ap.add_argument("--max-bytes", type=int, default=16 * GIB)
    ap.add_argument("--modes", default="back-to-back,blocking", help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="timed calls at least")
    ap.add_argument("--min-time-s", type=float, default=0.1, help="back-to-back: time at least this long")
    ap.add_argument("--max-iters", type=int, default=4000)
    ap.add_argument("--graph-max-bytes", type=int, default=64 * MIB,
                    help="replay payloads up to this size from a CUDA graph (0: never)")
    ap.add_argument("--graph-calls", type=int, default=50)
    ap.add_argument("--headroom-bytes", type=int, default=2 * GIB)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--samples", type=int, default=1,
                    help="time each payload this many times (one row each): the spread of a pair's samples "
                         "is its own noise")
    ap.add_argument("--gate", default="", help="HOST:PORT of the round's gate (workers.roundgate): take every "
                    "sample together with the other jobs of the round")
    ap.add_argument("--gate-pairs", type=int, default=0, help="jobs in the round")
    ap.add_argument("--gate-server", default="", help="the node (its torchrun role) whose local rank 0 serves the "
                    "gate's store: the gate's host, in the round's first job; empty in the other jobs")
    ap.add_argument("--gate-key", default="round", help="the round's own prefix in the gate's store")
    ap.add_argument("--gate-timeout-s", type=float, default=180.0,
                    help="how long a gate waits for the round's other jobs before sampling alone")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; choose from {MODES}")

    import torch
    import torch.distributed as dist

    started = time.perf_counter()
    env, backend, device = start_rank(args.backend)
    init_group(backend, device, args.timeout_s)
    n = dist.get_world_size()
    rank = dist.get_rank()
    headroom = args.headroom_bytes if device.type == "cuda" else 0
    fit = fit_max_bytes(args.max_bytes, _available_bytes(device, env.local_world_size), headroom)
    fit = int(_slowest(-float(fit), device) * -1)  # the smallest fit over ranks
    if rank == 0 and fit < args.max_bytes:
        emit("fit", requested_bytes=args.max_bytes, max_bytes=fit,
             why="the largest payload was halved until it fit in free memory on every rank")
    timer = Timer(device)
    gate = None
    serve = bool(args.gate_server) and env.local_rank == 0 and env.role.rstrip(":") == args.gate_server
    if args.gate and (rank == 0 or serve):
        gate = RoundGate(GateSpec.parse(args.gate, args.gate_pairs, args.gate_key, args.gate_timeout_s),
                         serve=serve, check_in=rank == 0)
    graphs_ok = False
    graph_error = ""
    all_ok = True
    sweep_t0 = time.perf_counter()
    for size in payloads(args.min_bytes, fit):
        numel = size // 4
        t = torch.empty(numel, dtype=torch.float32, device=device)
        ok = _all_true(check_once(t, n, rank), device)
        all_ok = all_ok and ok
        t.zero_()
        use_graph = device.type == "cuda" and 0 < size <= args.graph_max_bytes
        if use_graph and not graphs_ok and not graph_error:
            graphs_ok, graph_error = graph_capable(t, device)
            if not graphs_ok:
                graph_error = graph_error or "another rank could not capture"
                if rank == 0:
                    emit("graph-unavailable", error=graph_error)
        for mode in modes:
            if mode == "eager" and not (use_graph and graphs_ok):
                continue  # identical to back-to-back where no graph is used
            for sample in range(max(1, args.samples)):
                gated = gate.wait() if gate is not None else False
                if args.gate:
                    dist.barrier()  # the pair's other ranks start the sample with its rank 0
                started_at = time.time()
                if mode in ("back-to-back", "eager"):
                    graph_calls = args.graph_calls if (mode == "back-to-back" and use_graph and graphs_ok) else 0
                    slowest, count, method = time_back_to_back(
                        t, timer, warmup=args.warmup, iters=args.iters, min_time_s=args.min_time_s,
                        max_iters=args.max_iters, graph_calls=graph_calls)
                else:
                    sec, count = time_blocking(t, timer, warmup=args.warmup, iters=args.iters)
                    method = "barrier+sync"
                    slowest = _slowest(sec, device)
                if rank == 0:
                    algbw = size / slowest / 1e9
                    emit("row", mode=mode, payload_bytes=size, time_s=slowest, algbw_gb_s=algbw,
                         busbw_gb_s=algbw * busbw_factor(n), iterations=count, method=method,
                         check_ok=ok, world_size=n, sample=sample, gated=gated,
                         started_unix_s=round(started_at, 3), ended_unix_s=round(time.time(), 3))
        del t
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if gate is not None:
        gate.close()
        if gate.error and rank == 0:
            emit("gate-unavailable", error=gate.error)
    if rank == 0:
        emit("done", world_size=n, backend=backend, sweep_seconds=round(time.perf_counter() - sweep_t0, 3),
             seconds=round(time.perf_counter() - started, 3), all_ok=all_ok)
    finish()
    return 0 if all_ok else 3


if __name__ == "__main__":
    run_main(main)
