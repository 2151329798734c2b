"""The GPU memory and links worker: runs on a node with the eval Python (stdlib + torch + pynvml),
prints JSON lines. Every GPU of the node in one process, in this order:

1. the GPUs' facts and their PCIe link (generation and width, current and maximum) and memory-health
   counters (ECC, retired pages, remapped rows) through NVML (``gpu``, ``health`` stage ``before``);
2. the correctness vote's first round (``clustereval.workers.gpu_pass_bench.vote_round``);
3. HBM bandwidth on every GPU at once (``hbm``);
4. PCIe host↔device on one GPU at a time (``pcie`` mode ``solo``; the link's current generation and
   width are read while the copies run, since an idle link steps down to save power), then on
   every GPU at once (mode ``all``); each GPU's thread runs on the CPUs nearest its GPU meanwhile
   (``near_gpu_cpus``), so its pinned buffers sit in the GPU's NUMA node;
5. GPU↔GPU copies for every ordered pair where peers can reach each other (``p2p``);
6. the vote's second round, the memory pattern test on every GPU at once (``memtest``), the third
   round, then the vote's hashes and the CPU fp64 reference check (``vote``);
7. the NVML counters again (``health`` stage ``after``) and ``done``.

A ``step`` line precedes each stage with the stage's number and the count, for the progress display.
A GPU whose stage raises gets an ``error`` line naming it and the stage; the others go on.

Without CUDA the same code runs on CPU tensors with tiny sizes and ``--cpu-gpus`` stand-in GPUs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from clustereval.workers import gpu_pass_bench as bench
from clustereval.workers.gpu_pass_nvml import memory_health, near_gpu, pcie_link
from clustereval.workers.matmul import Gpu, gpu_facts, pick_device, resolve_gpu
from clustereval.workers.nvml import Nvml

STEPS = ("vote-1", "hbm", "pcie-solo", "pcie-all", "p2p", "vote-2", "memtest", "vote-3")
LINK_POLL_S = 0.05


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


class Sizes:
    """How big each measurement is: ``--quick`` or the standard pass on a GPU, tiny on the CPU."""

    def __init__(self, cuda: bool, quick: bool, args: argparse.Namespace) -> None:
        gib, mib = 2**30, 2**20
        self.hbm_bytes = args.hbm_bytes or ((2 * gib if quick else 4 * gib) if cuda else 4 * mib)
        self.pcie_bytes = args.pcie_bytes or ((256 * mib if quick else gib) if cuda else 4 * mib)
        self.p2p_bytes = args.p2p_bytes or ((256 * mib if quick else gib) if cuda else 4 * mib)
        self.iters = args.iters or ((10 if quick else 20) if cuda else 3)
        self.mem_fraction = args.mem_fraction or (0.9 if cuda else 0.0)
        self.mem_bytes_cpu = 16 * mib
        self.chunk_bytes = (512 * mib) if cuda else (2 * mib)
        self.cases = bench.GPU_CASES if cuda else bench.CPU_CASES


def _each(torch: Any, gpus: list[Gpu], step: str, work: Callable[[Gpu], Any], together: bool) -> dict[int, Any]:
    """``work`` for every GPU (in threads when ``together``): GPU -> result; a GPU that raised has an
    ``error`` line and no result."""
    results: dict[int, Any] = {}
    start = threading.Barrier(len(gpus)) if together else None

    def one(g: Gpu) -> None:
        try:
            if start is not None:
                start.wait(timeout=600)
            with bench.on(torch, _device(torch, g)):
                results[g.index] = work(g)
        except Exception as exc:  # noqa: BLE001 - one GPU's failure is that GPU's, the others go on
            emit("error", gpu=g.index, step=step, error=f"{type(exc).__name__}: {exc}"[:400])

    if together and len(gpus) > 1:
        threads = [threading.Thread(target=one, args=(g,)) for g in gpus]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for g in gpus:
            one(g)
    return results


class LinkWatch(threading.Thread):
    """The highest PCIe generation and width NVML reports while copies run on one GPU."""

    def __init__(self, nvml: Nvml, gpu: Gpu) -> None:
        super().__init__(daemon=True)
        self.nvml, self.gpu = nvml, gpu
        self.seen: dict[str, int | None] = {"gen_under_load": None, "width_under_load": None}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            link = pcie_link(self.nvml.nv, self.gpu.handle)
            for key, field in (("gen_under_load", "gen_current"), ("width_under_load", "width_current")):
                value = link.get(field)
                if value is not None and (self.seen[key] is None or value > (self.seen[key] or 0)):
                    self.seen[key] = value
            self._stop_event.wait(LINK_POLL_S)

    def stop(self) -> dict[str, int | None]:
        self._stop_event.set()
        self.join(timeout=5)
        return self.seen


def run_pass(torch: Any, nvml: Nvml, gpus: list[Gpu], sizes: Sizes, *,
             between: Callable[[str, list[Any]], None] | None = None) -> None:
    """The whole pass over ``gpus``, printing its lines. ``between`` goes to the memory test (the
    benchmark's planted corruption; the command line has no way to set it)."""
    t_start = time.monotonic()
    devices = {g.index: _device(torch, g) for g in gpus}
    telemetry = nvml.ok and all(g.handle is not None for g in gpus)
    for g in gpus:
        emit("gpu", **gpu_facts(g), pcie=pcie_link(nvml.nv, g.handle) if telemetry else {},
             compute_capability=_capability(torch, devices[g.index]))
    if telemetry:
        for g in gpus:
            emit("health", gpu=g.index, stage="before", **memory_health(nvml.nv, g.handle))
    inputs = bench.vote_inputs(torch, sizes.cases)
    hashes: dict[int, list[list[str]]] = {g.index: [] for g in gpus}
    ref_errors: dict[int, list[float | None]] = {}
    step = itertools.count(1)

    def progress(name: str) -> None:
        emit("step", step=name, number=next(step), of=len(STEPS), elapsed_s=round(time.monotonic() - t_start, 1))

    def vote(round_no: int) -> None:
        progress(f"vote-{round_no}")

        def one(g: Gpu) -> None:
            got, results = bench.vote_round(torch, devices[g.index], sizes.cases, inputs)
            hashes[g.index].append(got)
            if round_no == 1:
                ref_errors[g.index] = [bench.reference_error(torch, case, pair, res)
                                       for case, pair, res in zip(sizes.cases, inputs, results, strict=True)]

        _each(torch, gpus, f"vote-{round_no}", one, together=False)

    vote(1)
    progress("hbm")
    for gpu, got in _each(torch, gpus, "hbm", lambda g: bench.hbm(torch, devices[g.index], sizes.hbm_bytes, sizes.iters),
                          together=True).items():
        emit("hbm", gpu=gpu, bytes=sizes.hbm_bytes, iters=sizes.iters, **got)
    progress("pcie-solo")

    def copies(g: Gpu) -> dict[str, Any]:
        with near_gpu(nvml.nv if telemetry else None, g.handle) as bound:
            return {**bench.pcie(torch, devices[g.index], sizes.pcie_bytes, sizes.iters), "near_gpu_cpus": bound}

    def solo(g: Gpu) -> dict[str, Any]:
        watch = LinkWatch(nvml, g) if telemetry else None
        if watch:
            watch.start()
        try:
            got = copies(g)
        finally:
            seen = watch.stop() if watch else {}
        return {**got, **seen}

    for gpu, got in _each(torch, gpus, "pcie-solo", solo, together=False).items():
        emit("pcie", gpu=gpu, mode="solo", bytes=sizes.pcie_bytes, iters=sizes.iters, **got)
    progress("pcie-all")
    if len(gpus) > 1:
        for gpu, got in _each(torch, gpus, "pcie-all", copies, together=True).items():
            emit("pcie", gpu=gpu, mode="all", bytes=sizes.pcie_bytes, iters=sizes.iters, **got)
    progress("p2p")
    if len(gpus) > 1:
        _pairs(torch, gpus, devices, sizes)
    vote(2)
    progress("memtest")
    _release(torch, devices)  # the allocator's cached blocks count as used in mem_get_info

    def mem(g: Gpu) -> dict[str, Any]:
        dev = devices[g.index]
        if dev.type == "cuda":
            free, _ = torch.cuda.mem_get_info(dev)
            budget = int(free * sizes.mem_fraction)
        else:
            budget = sizes.mem_bytes_cpu
        return bench.memtest(torch, dev, budget, sizes.chunk_bytes, between=between)

    for gpu, got in _each(torch, gpus, "memtest", mem, together=True).items():
        emit("memtest", gpu=gpu, **got)
    _release(torch, devices)
    vote(3)
    for g in gpus:
        if len(hashes[g.index]) == 3:
            cases = [{"dtype": d, "shape": [m, n, k], "hashes": [r[i] for r in hashes[g.index]],
                      "ref_rel_err": (ref_errors.get(g.index) or [None] * len(sizes.cases))[i],
                      "tolerance": bench.TOLERANCE[d]}
                     for i, (d, m, n, k) in enumerate(sizes.cases)]
            emit("vote", gpu=g.index, cases=cases)
    if telemetry:
        for g in gpus:
            emit("health", gpu=g.index, stage="after", **memory_health(nvml.nv, g.handle))
    emit("done", seconds=round(time.monotonic() - t_start, 1))


def _pairs(torch: Any, gpus: list[Gpu], devices: dict[int, Any], sizes: Sizes) -> None:
    for a, b in itertools.permutations(gpus, 2):
        da, db = devices[a.index], devices[b.index]
        if da.type == "cuda" and not torch.cuda.can_device_access_peer(da.index, db.index):
            emit("p2p", src=a.index, dst=b.index, peer=False)
            continue
        try:
            with bench.on(torch, da):
                got = bench.p2p(torch, da, db, sizes.p2p_bytes, sizes.iters)
        except Exception as exc:  # noqa: BLE001 - one pair's failure is that pair's
            emit("error", gpu=a.index, peer_gpu=b.index, step="p2p", error=f"{type(exc).__name__}: {exc}"[:400])
            continue
        emit("p2p", src=a.index, dst=b.index, peer=True, bytes=sizes.p2p_bytes, **got)


def _device(torch: Any, g: Gpu) -> Any:
    return torch.device("cuda", g.cuda_index) if g.cuda_index >= 0 else torch.device("cpu")


def _capability(torch: Any, device: Any) -> str:
    if device.type != "cuda":
        return ""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}.{minor}"


def _release(torch: Any, devices: dict[int, Any]) -> None:
    if any(d.type == "cuda" for d in devices.values()):
        torch.cuda.empty_cache()


def setup(args: argparse.Namespace) -> tuple[Any, Nvml, list[Gpu], Sizes]:
    import torch

    device = pick_device(torch, args.device)
    nvml = Nvml() if device == "cuda" else Nvml.absent("CPU stand-in GPUs: no NVML")
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32 here: no TF32 in the vote
    emit("hello", mode="gpu-pass", pid=os.getpid(), executable=sys.executable, python=platform.python_version(),
         torch=torch.__version__, cuda=getattr(torch.version, "cuda", None) or "", device=device,
         telemetry=nvml.ok, telemetry_error=nvml.error)
    if device == "cuda":
        indices = [int(x) for x in args.gpus.split(",") if x.strip()] if args.gpus else \
            list(range(torch.cuda.device_count()))
    else:
        indices = list(range(max(1, args.cpu_gpus)))
    gpus = [resolve_gpu(torch, nvml, device, i) for i in indices]
    return torch, nvml, gpus, Sizes(device == "cuda", args.quick, args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m clustereval.workers.gpu_pass", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--gpus", default="", help="nvidia-smi indices, comma-separated (default: every GPU)")
    p.add_argument("--cpu-gpus", type=int, default=1, help="stand-in GPUs on the CPU")
    p.add_argument("--quick", action="store_true", help="the quick profile's sizes")
    p.add_argument("--hbm-bytes", type=int, default=0)
    p.add_argument("--pcie-bytes", type=int, default=0)
    p.add_argument("--p2p-bytes", type=int, default=0)
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--mem-fraction", type=float, default=0.0, help="share of each GPU's free memory the pattern test holds")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        torch, nvml, gpus, sizes = setup(args)
    except Exception as exc:  # noqa: BLE001 - said as a line the phase reads, not a traceback
        emit("fatal", error=f"{type(exc).__name__}: {exc}"[:400])
        return 1
    run_pass(torch, nvml, gpus, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
