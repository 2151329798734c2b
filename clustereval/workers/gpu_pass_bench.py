"""The measurements of the GPU memory and links pass, one function each, on one device.

Every copy is timed repeat by repeat (a CUDA event between two queued copies, or host time on the
CPU): a figure is the bytes of all its repeats over their summed time, and each repeat's own rate
goes beside it (``Rate``), so a later run or the fleet can judge a change against repeat noise.

- ``hbm``: device-local copy (``dst.copy_(src)``, bytes counted once, as nvbandwidth's
  ``device_local_copy`` counts them), a read kernel (a sum over the buffer) and a write kernel (a
  fill).
- ``pcie``: pinned host memory to the device and back, each direction alone; then each direction
  while the other runs (``under_load``), as nvbandwidth's bidirectional copy-engine testcases time
  it: the other direction copies twice the bytes on a second stream so it runs all through the
  timed window, both streams are held behind a spin kernel until everything is queued (``gated``),
  four warm-up copies each, and only the measured direction's copies are counted.
- ``p2p``: one GPU's buffer copied into another's (the copy engine of the source pushes: a write in
  nvbandwidth's terms), and both directions at once (each over its own span, summed).
- ``memtest``: most of the device's free memory in chunks, several patterns written over all of it
  and then verified; a mismatch names the pattern, the count and the first offset.
- ``vote_round``: the same seeded matmuls (inputs drawn on the CPU from a fixed seed, so every
  device gets the same bits) hashed with SHA-256; ``reference_error`` compares a result with a CPU
  fp64 product of the same rounded inputs.

Without CUDA the same code runs on CPU tensors (tiny sizes, ``time.perf_counter``), so the logic is
tested anywhere. Stdlib + torch only.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEED = 20260917
ADDRESS_KEY = 0x5DEECE66D  # the address pattern's words are index XOR this key, so no two neighbours repeat

# pattern name -> the int64 every word holds (None: the address pattern)
PATTERNS: tuple[tuple[str, int | None], ...] = (
    ("zeros", 0),
    ("ones", -1),
    ("0xAA", int.from_bytes(b"\xaa" * 8, "little", signed=True)),
    ("0x55", int.from_bytes(b"\x55" * 8, "little", signed=True)),
    ("address", None),
)

# The vote's matmuls, (dtype, M, N, K): square and odd shapes, both element types.
# The small ones are also checked against the CPU fp64 reference (``REFERENCE_MAX_MNK``).
GPU_CASES: tuple[tuple[str, int, int, int], ...] = (
    ("bfloat16", 1024, 1024, 1024), ("bfloat16", 1000, 1200, 800), ("bfloat16", 4096, 4096, 4096),
    ("bfloat16", 8192, 1024, 8192), ("float32", 1024, 1024, 1024), ("float32", 1000, 1200, 800),
    ("float32", 2048, 2048, 2048),
)
CPU_CASES: tuple[tuple[str, int, int, int], ...] = (
    ("bfloat16", 64, 64, 64), ("bfloat16", 33, 65, 17), ("float32", 64, 64, 64), ("float32", 33, 65, 17),
)
REFERENCE_MAX_MNK = 2 * 2**30  # the CPU fp64 reference runs for cases up to this many multiply-adds
# The stated tolerance: a result's relative Frobenius error against the fp64 product of the same
# rounded inputs. bf16 output rounding alone is ~1e-3; fp32 accumulation (no TF32) ~1e-7·√K.
TOLERANCE = {"bfloat16": 1e-2, "float32": 1e-5}


def on(torch: Any, device: Any) -> Any:
    """The device's context: CUDA events and streams then belong to ``device``, not to whichever GPU
    the calling thread has current (every thread starts on GPU 0)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


GATE_CYCLES = 50_000_000  # GPU clock cycles the gate holds its streams (~25 ms at 2 GHz), then longer if needed
GATE_TRIES = 4
LOAD_WARMUP = 4  # nvbandwidth's warm-up copies, queued on each stream of a bidirectional run behind the gate


@dataclass
class Rate:
    """One copy figure: the rate over every timed repeat together (their bytes over their summed
    time, as nvbandwidth and the pass always reported it) and each repeat's own rate, in order."""

    gb_s: float
    samples_gb_s: list[float]

    def fields(self, name: str) -> dict[str, Any]:
        return {f"{name}_gb_s": self.gb_s, f"{name}_samples_gb_s": self.samples_gb_s}


def rate_of(nbytes: int, seconds: list[float]) -> Rate:
    """GB/s (10^9 bytes) of repeats that each moved ``nbytes`` in the given seconds."""
    total = sum(seconds)
    return Rate(round(nbytes * len(seconds) / max(total, 1e-9) / 1e9, 2),
                [round(nbytes / max(x, 1e-9) / 1e9, 3) for x in seconds])


class Marks:
    """Points on one stream between repeats (CUDA events, or host time on CPU); each repeat's
    seconds are the span between two neighbouring points. Recording an event between two queued
    copies does not stall the stream, so the repeats still run back to back."""

    def __init__(self, torch: Any, device: Any, stream: Any = None) -> None:
        self.torch, self.cuda, self.stream = torch, device.type == "cuda", stream
        self.points: list[Any] = []

    def mark(self) -> Any:
        if self.cuda:
            point = self.torch.cuda.Event(enable_timing=True)
            point.record(self.stream) if self.stream is not None else point.record()
        else:
            point = time.perf_counter()
        self.points.append(point)
        return point

    def seconds(self) -> list[float]:
        if not self.cuda:
            return [b - a for a, b in itertools.pairwise(self.points)]
        self.points[-1].synchronize()
        return [a.elapsed_time(b) / 1000.0 for a, b in itertools.pairwise(self.points)]


def _rate(torch: Any, device: Any, work: Callable[[], Any], nbytes: int, iters: int, warmup: int = 2) -> Rate:
    """``work`` moving ``nbytes`` a call, timed call by call over ``iters`` calls after ``warmup``."""
    for _ in range(warmup):
        work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    marks = Marks(torch, device)
    marks.mark()
    for _ in range(iters):
        work()
        marks.mark()
    return rate_of(nbytes, marks.seconds())


def hbm(torch: Any, device: Any, nbytes: int, iters: int) -> dict[str, Any]:
    """Device-memory bandwidth, GB/s and each repeat's: copy (bytes counted once), read, write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    src.fill_(1)
    floats = src.view(torch.float32)
    return {**_rate(torch, device, lambda: dst.copy_(src), nbytes, iters).fields("copy"),
            **_rate(torch, device, lambda: floats.sum(), nbytes, iters).fields("read"),
            **_rate(torch, device, lambda: dst.fill_(7), nbytes, iters).fields("write")}


def _host(torch: Any, device: Any, nbytes: int) -> Any:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")


def pcie(torch: Any, device: Any, nbytes: int, iters: int) -> dict[str, Any]:
    """Host↔device over pinned memory, GB/s and each repeat's: each direction alone, then each
    direction while the other runs (``under_load``)."""
    host, dev = _host(torch, device, nbytes), torch.empty(nbytes, dtype=torch.uint8, device=device)
    # the other direction's buffers are twice the size, so it runs through the whole timed window
    host_load, dev_load = _host(torch, device, 2 * nbytes), torch.empty(2 * nbytes, dtype=torch.uint8, device=device)
    host.fill_(3)
    dev_load.fill_(5)
    nb = device.type == "cuda"

    def h2d() -> Any:
        return dev.copy_(host, non_blocking=nb)

    def d2h() -> Any:
        return host.copy_(dev, non_blocking=nb)

    return {**_rate(torch, device, h2d, nbytes, iters).fields("h2d"),
            **_rate(torch, device, d2h, nbytes, iters).fields("d2h"),
            **under_load(torch, device, h2d, lambda: host_load.copy_(dev_load, non_blocking=nb), nbytes,
                         iters).fields("bidir_h2d"),
            **under_load(torch, device, d2h, lambda: dev_load.copy_(host_load, non_blocking=nb), nbytes,
                         iters).fields("bidir_d2h")}


def gated(torch: Any, device: Any, num_streams: int, enqueue: Callable[[Any, list[Any]], Any]) -> Any:
    """Queue work on ``num_streams`` fresh streams held shut behind a spin kernel, so that every
    stream starts when the gate opens rather than when the host gets round to queuing it (as
    nvbandwidth holds its streams behind a spin kernel). ``enqueue(gate_event, streams)`` queues the
    work and returns what the caller reads after it ran. If the host was still queuing when the gate
    opened, the run is repeated with a longer hold."""
    cycles = GATE_CYCLES
    for _ in range(GATE_TRIES):
        holder = torch.cuda.Stream(device)
        streams = [torch.cuda.Stream(device) for _ in range(num_streams)]
        gate = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(holder):
            torch.cuda._sleep(cycles)
        gate.record(holder)
        for s in streams:
            s.wait_event(gate)
        got = enqueue(gate, streams)
        held = not gate.query()  # still shut once everything was queued
        torch.cuda.synchronize(device)
        if held:
            return got
        cycles *= 4
    raise RuntimeError(f"the host took longer to queue the copies than a {cycles // 4} cycle hold")


def under_load(torch: Any, device: Any, measured: Callable[[], Any], load: Callable[[], Any], nbytes: int,
               iters: int) -> Rate:
    """``measured`` (``nbytes`` a call) timed call by call while ``load``, the other direction with
    twice the bytes a call, runs on a second stream from before the first timed call to after the
    last, as nvbandwidth's bidirectional testcases time one direction: both streams start together,
    ``LOAD_WARMUP`` copies each, the load's timed copies wait for the measured stream's start, and
    only the measured direction is counted."""
    if device.type != "cuda":
        together = threading.Barrier(2)

        def run_load() -> None:
            together.wait(timeout=600)
            for _ in range(LOAD_WARMUP + iters):
                load()

        loader = threading.Thread(target=run_load)
        loader.start()
        together.wait(timeout=600)
        rate = _rate(torch, device, measured, nbytes, iters, warmup=LOAD_WARMUP)
        loader.join()
        return rate

    def enqueue(gate: Any, streams: list[Any]) -> Marks:
        timed, loaded = streams
        with torch.cuda.stream(loaded):
            for _ in range(LOAD_WARMUP):
                load()
        marks = Marks(torch, device, timed)
        with torch.cuda.stream(timed):
            for _ in range(LOAD_WARMUP):
                measured()
            start = marks.mark()
        loaded.wait_event(start)
        with torch.cuda.stream(loaded):
            for _ in range(iters):
                load()
        with torch.cuda.stream(timed):
            for _ in range(iters):
                measured()
                marks.mark()
        return marks

    with torch.cuda.device(device):
        return rate_of(nbytes, gated(torch, device, 2, enqueue).seconds())


def _both_ways(torch: Any, device: Any, one: Callable[[], Any], other: Callable[[], Any],
               iters: int) -> tuple[float, float]:
    """Seconds each of two copy streams took from a shared start, running at the same time."""
    if device.type != "cuda":
        spans = [0.0, 0.0]
        together = threading.Barrier(2)

        def run(i: int, work: Callable[[], Any]) -> None:
            together.wait(timeout=600)
            t0 = time.perf_counter()
            for _ in range(iters):
                work()
            spans[i] = time.perf_counter() - t0

        threads = [threading.Thread(target=run, args=(0, one)), threading.Thread(target=run, args=(1, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return spans[0], spans[1]

    def enqueue(gate: Any, streams: list[Any]) -> tuple[Any, list[Any]]:
        for work, stream in ((one, streams[0]), (other, streams[1])):  # warm both paths
            with torch.cuda.stream(stream):
                work()
        start = torch.cuda.Event(enable_timing=True)
        start.record(streams[0])
        streams[1].wait_event(start)
        ends = []
        for work, stream in ((one, streams[0]), (other, streams[1])):
            with torch.cuda.stream(stream):
                for _ in range(iters):
                    work()
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            ends.append(end)
        return start, ends

    with torch.cuda.device(device):
        start, ends = gated(torch, device, 2, enqueue)
        return start.elapsed_time(ends[0]) / 1000.0, start.elapsed_time(ends[1]) / 1000.0


def p2p(torch: Any, src: Any, dst: Any, nbytes: int, iters: int) -> dict[str, Any]:
    """One GPU pair, GB/s: ``src`` writing into ``dst``, then ``src`` reading ``dst``'s memory into its own
    (each with every repeat's rate), then both directions at once."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=src)
    b = torch.empty(nbytes, dtype=torch.uint8, device=dst)
    a_back = torch.empty_like(a)
    b.fill_(9)
    a.fill_(8)
    cuda = src.type == "cuda"
    write = _rate(torch, src, lambda: b.copy_(a, non_blocking=cuda), nbytes, iters)
    if cuda:
        torch.cuda.synchronize(dst)
    read = _rate(torch, src, lambda: a_back.copy_(b, non_blocking=cuda), nbytes, iters)
    if cuda:
        torch.cuda.synchronize(dst)
    there, back = _both_ways(torch, src, lambda: b.copy_(a, non_blocking=cuda),
                             lambda: a_back.copy_(b, non_blocking=cuda), iters)
    return {**write.fields("write"), **read.fields("read"),
            "bidir_gb_s": round(nbytes * iters / max(there, 1e-9) / 1e9 + nbytes * iters / max(back, 1e-9) / 1e9, 2)}


@dataclass
class Mismatch:
    pattern: str
    num_words: int  # 8-byte words that read back wrong
    first_offset_bytes: int  # from the start of the tested memory
    expected: int
    got: int


def allocate(torch: Any, device: Any, budget_bytes: int, chunk_bytes: int) -> list[Any]:
    """int64 chunks of ``chunk_bytes`` until ``budget_bytes`` are held or the device refuses more."""
    chunks: list[Any] = []
    held = 0
    words = chunk_bytes // 8
    while held + chunk_bytes <= budget_bytes:
        try:
            chunks.append(torch.empty(words, dtype=torch.int64, device=device))
        except RuntimeError:  # out of memory: test what was allocated
            break
        held += chunk_bytes
    return chunks


def _write(torch: Any, chunks: list[Any], value: int | None) -> None:
    base = 0
    for c in chunks:
        if value is None:
            torch.arange(base, base + c.numel(), dtype=torch.int64, device=c.device, out=c)
            c.bitwise_xor_(ADDRESS_KEY)
        else:
            c.fill_(value)
        base += c.numel()


def _verify(torch: Any, chunks: list[Any], name: str, value: int | None, slice_words: int) -> Mismatch | None:
    base = 0
    found: Mismatch | None = None
    for c in chunks:
        for lo in range(0, c.numel(), slice_words):
            part = c[lo:lo + slice_words]
            if value is None:
                want = torch.arange(base + lo, base + lo + part.numel(), dtype=torch.int64, device=c.device)
                want.bitwise_xor_(ADDRESS_KEY)
                bad = part != want
            else:
                want = None
                bad = part != value
            count = int(bad.sum().item())
            if count:
                at = int(bad.nonzero()[0].item())
                expected = int(want[at].item()) if want is not None else int(value or 0)
                if found is None:
                    found = Mismatch(name, 0, (base + lo + at) * 8, expected, int(part[at].item()))
                found.num_words += count
        base += c.numel()
    return found


def memtest(torch: Any, device: Any, budget_bytes: int, chunk_bytes: int, *,
            between: Callable[[str, list[Any]], None] | None = None) -> dict[str, Any]:
    """Every pattern written over all the chunks, then read back; the mismatches per pattern.

    ``between(pattern, chunks)`` runs after a pattern is written and before it is verified (the
    benchmark plants a corruption there to prove the verifier finds it)."""
    t0 = time.monotonic()
    chunks = allocate(torch, device, budget_bytes, chunk_bytes)
    slice_words = min(chunk_bytes // 8, 32 * 2**20)
    mismatches: list[Mismatch] = []
    try:
        for name, value in PATTERNS:
            _write(torch, chunks, value)
            if between is not None:
                between(name, chunks)
            bad = _verify(torch, chunks, name, value, slice_words)
            if bad is not None:
                mismatches.append(bad)
    finally:
        tested = sum(c.numel() * 8 for c in chunks)
        del chunks
    return {"bytes_tested": tested, "patterns": [n for n, _ in PATTERNS], "seconds": round(time.monotonic() - t0, 2),
            "mismatches": [vars(m) for m in mismatches]}


def vote_inputs(torch: Any, cases: tuple[tuple[str, int, int, int], ...]) -> list[tuple[Any, Any]]:
    """(A, B) in fp32 on the CPU per case, drawn from one seed: the same bits on every node."""
    gen = torch.Generator().manual_seed(SEED)
    return [(torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)) for _, m, n, k in cases]


def _digest(torch: Any, result: Any) -> str:
    """SHA-256 of the result's bytes, read straight from the host copy's memory (``bytes()`` of a
    torch storage goes element by element: seconds a MiB)."""
    host = result.detach().to("cpu").contiguous()
    raw = ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())
    return hashlib.sha256(raw).hexdigest()[:32]


def vote_round(torch: Any, device: Any, cases: tuple[tuple[str, int, int, int], ...],
               inputs: list[tuple[Any, Any]]) -> tuple[list[str], list[Any]]:
    """Each case's product hashed (and the products, for the reference check)."""
    hashes, results = [], []
    for (dtype, *_), (a, b) in zip(cases, inputs, strict=True):
        dt = getattr(torch, dtype)
        c = torch.mm(a.to(device=device, dtype=dt), b.to(device=device, dtype=dt))
        hashes.append(_digest(torch, c))
        results.append(c)
    return hashes, results


def reference_error(torch: Any, case: tuple[str, int, int, int], inputs: tuple[Any, Any], result: Any) -> float | None:
    """‖C − C_fp64‖ / ‖C_fp64‖ with C_fp64 the CPU fp64 product of the same rounded inputs; None
    for a case too large to multiply on the CPU in the pass's time."""
    dtype, m, n, k = case
    if m * n * k > REFERENCE_MAX_MNK:
        return None
    dt = getattr(torch, dtype)
    a, b = (x.to(dt).to(torch.float64) for x in inputs)
    ref = a @ b
    got = result.detach().to("cpu", torch.float64)
    norm = float(torch.linalg.norm(ref))
    return float(torch.linalg.norm(got - ref)) / norm if norm else 0.0
