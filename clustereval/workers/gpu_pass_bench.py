"""The measurements of the GPU memory and links pass, one function each, on one device.

- ``hbm``: device-local copy (``dst.copy_(src)``, bytes counted once, as nvbandwidth's
  ``device_local_copy`` counts them), a read kernel (a sum over the buffer) and a write kernel (a
  fill), each timed over several repeats with CUDA events.
- ``pcie``: pinned host memory to the device and back, each direction alone, then both at once on
  two streams (each direction's rate over its own span of the shared window).
- ``p2p``: one GPU's buffer copied into another's (the copy engine of the source pushes: a write in
  nvbandwidth's terms), and both directions at once.
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


class Timer:
    """Seconds of device work between two points on a stream (CUDA events), or host time on CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.cuda = torch, device.type == "cuda"
        self.device = device

    def start(self, stream: Any = None) -> Any:
        if not self.cuda:
            return time.perf_counter()
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record(stream) if stream is not None else ev.record()
        return ev

    def stop(self, start: Any, stream: Any = None) -> float:
        if not self.cuda:
            return time.perf_counter() - start
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record(stream) if stream is not None else ev.record()
        ev.synchronize()
        return start.elapsed_time(ev) / 1000.0

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)


def _rate(torch: Any, device: Any, work: Callable[[], Any], nbytes: int, iters: int, warmup: int = 2) -> float:
    """GB/s (10^9 bytes) of ``work`` moving ``nbytes`` a call, the mean over ``iters`` calls."""
    timer = Timer(torch, device)
    for _ in range(warmup):
        work()
    timer.sync()
    t0 = timer.start()
    for _ in range(iters):
        work()
    seconds = timer.stop(t0)
    return round(nbytes * iters / max(seconds, 1e-9) / 1e9, 2)


def hbm(torch: Any, device: Any, nbytes: int, iters: int) -> dict[str, float]:
    """Device-memory bandwidth, GB/s: copy (bytes counted once), read, write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    src.fill_(1)
    floats = src.view(torch.float32)
    out = {
        "copy_gb_s": _rate(torch, device, lambda: dst.copy_(src), nbytes, iters),
        "read_gb_s": _rate(torch, device, lambda: floats.sum(), nbytes, iters),
        "write_gb_s": _rate(torch, device, lambda: dst.fill_(7), nbytes, iters),
    }
    return out


def _host(torch: Any, device: Any, nbytes: int) -> Any:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")


def pcie(torch: Any, device: Any, nbytes: int, iters: int) -> dict[str, float]:
    """Host↔device over pinned memory, GB/s: each direction alone, then both at once."""
    host_in, host_out = _host(torch, device, nbytes), _host(torch, device, nbytes)
    dev_in = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dev_out = torch.empty(nbytes, dtype=torch.uint8, device=device)
    host_in.fill_(3)
    dev_out.fill_(5)
    cuda = device.type == "cuda"
    out = {
        "h2d_gb_s": _rate(torch, device, lambda: dev_in.copy_(host_in, non_blocking=cuda), nbytes, iters),
        "d2h_gb_s": _rate(torch, device, lambda: host_out.copy_(dev_out, non_blocking=cuda), nbytes, iters),
    }
    h2d, d2h = _both_ways(torch, device, lambda: dev_in.copy_(host_in, non_blocking=cuda),
                          lambda: host_out.copy_(dev_out, non_blocking=cuda), iters)
    out["bidir_h2d_gb_s"] = round(nbytes * iters / max(h2d, 1e-9) / 1e9, 2)
    out["bidir_d2h_gb_s"] = round(nbytes * iters / max(d2h, 1e-9) / 1e9, 2)
    return out


def _both_ways(torch: Any, device: Any, one: Callable[[], Any], other: Callable[[], Any],
               iters: int) -> tuple[float, float]:
    """Seconds each of two copy streams took from a shared start, running at the same time."""
    if device.type != "cuda":
        spans = [0.0, 0.0]

        def run(i: int, work: Callable[[], Any]) -> None:
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
    with torch.cuda.device(device):
        s1, s2 = torch.cuda.Stream(device), torch.cuda.Stream(device)
        for work, stream in ((one, s1), (other, s2)):  # warm both paths
            with torch.cuda.stream(stream):
                work()
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        ends = []
        for work, stream in ((one, s1), (other, s2)):
            stream.wait_event(start)
            with torch.cuda.stream(stream):
                for _ in range(iters):
                    work()
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            ends.append(end)
        for end in ends:
            end.synchronize()
        return start.elapsed_time(ends[0]) / 1000.0, start.elapsed_time(ends[1]) / 1000.0


def p2p(torch: Any, src: Any, dst: Any, nbytes: int, iters: int) -> dict[str, float]:
    """One GPU pair, GB/s: ``src`` writing into ``dst``, then both directions at once."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=src)
    b = torch.empty(nbytes, dtype=torch.uint8, device=dst)
    a_back = torch.empty_like(a)
    b.fill_(9)
    a.fill_(8)
    cuda = src.type == "cuda"
    write = _rate(torch, src, lambda: b.copy_(a, non_blocking=cuda), nbytes, iters)
    if cuda:
        torch.cuda.synchronize(dst)
    there, back = _both_ways(torch, src, lambda: b.copy_(a, non_blocking=cuda),
                             lambda: a_back.copy_(b, non_blocking=cuda), iters)
    return {"write_gb_s": write,
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
