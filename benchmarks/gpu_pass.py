"""The GPU memory and links pass on this machine's GPUs beside NVIDIA's nvbandwidth.

One call does everything:

1. ``nvbandwidth -j`` (built beforehand, its path given with ``--nvbandwidth``) for the testcases the
   pass compares with (``clustereval.probes.nvbandwidth.TESTCASES``), parsed by our probe;
2. the pass's worker as the ``gpupass`` phase launches it, standard sizes, then the quick profile's
   (timed: the quick pass must finish within 60 s a node);
3. the memory pattern test on GPU0 with a planted corruption: one bit flipped in a buffer between
   the write and the verify of one pattern (only this script can do that: the worker's command line
   has no such switch); the verifier must report it for that GPU;
4. ``nvidia-smi -q`` for the parser fixtures;
5. ``--bidir-rounds`` rounds (5 by default) of nvbandwidth's two bidirectional copy-engine testcases
   alternating with our ``pcie`` on GPU0 at the standard size, so the two are compared by their
   medians over rounds that share the machine's drift, beside the one call's pair of figures.

It prints and writes ``table.md`` (ours beside nvbandwidth, the ratio, the targets: HBM copy >= 0.97x
``device_local_copy``, H2D / D2H >= 0.97x the copy-engine figures, each bidirectional direction within
3%, the quick pass <= 60 s, the planted corruption found) and keeps every raw output under --out.

    python3 benchmarks/gpu_pass.py --nvbandwidth /tmp/nvb/nvbandwidth --out "$OUT"   # nvbandwidth built with nvcc
    python3 benchmarks/gpu_pass.py --smoke --out /tmp/gp-smoke     # CPU stand-ins, no nvbandwidth
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.probes import nvbandwidth  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUICK_LIMIT_S = 60.0
WORKER_LIMIT_S = 150.0  # one worker run; past it the benchmark kills it and reports what came
PLANTED_PATTERN, PLANTED_CHUNK, PLANTED_WORD, PLANTED_BIT = "0x55", 1, 12345, 17


def worker(args: list[str], out: Path) -> tuple[list[dict], float]:
    """The worker's lines as they come (each step printed, so a slow step shows where it is), its wall
    time; killed past WORKER_LIMIT_S."""
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-m", "clustereval.workers.gpu_pass", *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        timer = threading.Timer(WORKER_LIMIT_S, proc.kill)
        timer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if '"step"' in line or '"done"' in line or '"error"' in line or not line.startswith("{"):
                print(f"  {time.monotonic() - t0:6.1f} s {line.rstrip()[:160]}", flush=True)
        timer.cancel()
    wall = time.monotonic() - t0
    out.write_text("".join(lines))
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return events, wall


def planted(device: str) -> dict:
    """The memory test on GPU0 with one bit flipped between the write and the verify."""
    from clustereval.workers import gpu_pass as gp
    from clustereval.workers import gpu_pass_bench as bench

    torch, nvml, gpus, sizes = gp.setup(gp.parser().parse_args(["--device", device, "--gpus", "0"]))
    g = gpus[0]
    dev = torch.device("cuda", g.cuda_index) if g.cuda_index >= 0 else torch.device("cpu")

    def flip(pattern: str, chunks: list) -> None:
        if pattern == PLANTED_PATTERN:
            chunks[PLANTED_CHUNK][PLANTED_WORD:PLANTED_WORD + 1].bitwise_xor_(1 << PLANTED_BIT)

    budget = int(torch.cuda.mem_get_info(dev)[0] * 0.5) if dev.type == "cuda" else sizes.mem_bytes_cpu
    got = bench.memtest(torch, dev, budget, sizes.chunk_bytes, between=flip)
    return {"event": "memtest", "gpu": g.index, "chunk_bytes": sizes.chunk_bytes, **got}


BIDIR = (("H2D", "host_to_device_bidirectional_memcpy_ce", "bidir_h2d_gb_s"),
         ("D2H", "device_to_host_bidirectional_memcpy_ce", "bidir_d2h_gb_s"))


def bidir_rounds(device: str, exe: str, rounds: int) -> list[dict]:
    """Per round: nvbandwidth's two bidirectional testcases (when ``exe``), then our ``pcie`` on GPU0."""
    from clustereval.workers import gpu_pass as gp
    from clustereval.workers import gpu_pass_bench as bench
    from clustereval.workers.gpu_pass_nvml import near_gpu

    torch, nvml, gpus, sizes = gp.setup(gp.parser().parse_args(["--device", device, "--gpus", "0"]))
    dev = torch.device("cuda", gpus[0].cuda_index) if gpus[0].cuda_index >= 0 else torch.device("cpu")
    out = []
    for i in range(rounds):
        row: dict = {"round": i}
        if exe:
            proc = subprocess.run(nvbandwidth.run_argv(exe, tuple(tc for _, tc, _ in BIDIR)), capture_output=True,
                                  text=True, timeout=300)
            run = nvbandwidth.parse(proc.stdout)
            for _, tc, key in BIDIR:
                got = run.testcase(tc)
                row[f"nvb_{key}"] = got.per_gpu_gb_s().get(0) if got else None
        with bench.on(torch, dev), near_gpu(nvml.nv if nvml.ok else None, gpus[0].handle):  # as the pass runs it
            got = bench.pcie(torch, dev, sizes.pcie_bytes, sizes.iters)
        for _, _, key in BIDIR:
            row[key] = got[key]
            row[key.replace("_gb_s", "_samples_gb_s")] = got[key.replace("_gb_s", "_samples_gb_s")]
        print(f"  bidirectional round {i}: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                         if k != "round" and "samples" not in k), flush=True)
        out.append(row)
    return out


def rounds_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["", f"Bidirectional, {len(rows)} alternating rounds on gpu0 (median, and the range over rounds):", "",
             "| direction | ours GB/s | nvbandwidth GB/s | ours / nvbandwidth (medians) | within 3% |",
             "| --- | ---: | ---: | ---: | --- |"]
    for name, tc, key in BIDIR:
        mine = [r[key] for r in rows if r.get(key)]
        theirs = [r[f"nvb_{key}"] for r in rows if r.get(f"nvb_{key}")]

        def cell(xs: list[float]) -> str:
            return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})" if xs else "—"

        x = ratio(statistics.median(mine), statistics.median(theirs)) if mine and theirs else None
        lines.append(f"| {name} (`{tc}`) | {cell(mine)} | {cell(theirs)} | {x if x is not None else '—'} | "
                     f"{'—' if x is None else ('yes' if abs(x - 1) <= 0.03 else 'no')} |")
    return lines


def ratio(ours: float | None, ref: float | None) -> float | None:
    return round(ours / ref, 3) if ours and ref else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--nvbandwidth", default="", help="the nvbandwidth executable")
    ap.add_argument("--smoke", action="store_true", help="CPU stand-ins, tiny sizes")
    ap.add_argument("--bidir-rounds", type=int, default=5,
                    help="alternating rounds of the bidirectional comparison (0: none)")
    a = ap.parse_args()
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if a.smoke else "cuda"
    nvb = nvbandwidth.NvbRun(error="not run")
    if a.nvbandwidth:
        t0 = time.monotonic()
        proc = subprocess.run(nvbandwidth.run_argv(a.nvbandwidth), capture_output=True, text=True, timeout=300)
        (out / "nvbandwidth.json").write_text(proc.stdout)
        nvb = nvbandwidth.parse(proc.stdout)
        print(f"nvbandwidth {nvb.version}: {len(nvb.testcases)} testcases in {time.monotonic() - t0:.1f} s", flush=True)
    standard, standard_s = worker(["--device", device], out / "gpu_pass_standard.jsonl")
    quick, quick_s = worker(["--device", device, "--quick"], out / "gpu_pass_quick.jsonl")
    print(f"worker: standard {standard_s:.1f} s, quick {quick_s:.1f} s", flush=True)
    plant = planted(device)
    (out / "planted.jsonl").write_text(json.dumps(plant) + "\n")
    if not a.smoke:
        smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60)
        (out / "nvidia-smi-q.txt").write_text(smi.stdout)
    rounds = bidir_rounds(device, a.nvbandwidth, a.bidir_rounds)
    (out / "bidir_rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))

    def ours(events: list[dict], name: str, key: str, **match: object) -> float | None:
        for e in events:
            if e.get("event") == name and e.get("gpu") == 0 and all(e.get(k) == v for k, v in match.items()):
                return e.get(key)
        return None

    def ref(name: str) -> float | None:
        tc = nvb.testcase(name)
        return tc.per_gpu_gb_s().get(0) if tc else None

    rows = [
        ("HBM device-local copy (counted once)", "hbm", "copy_gb_s", {}, "device_local_copy", 0.97, None),
        ("HBM read kernel", "hbm", "read_gb_s", {}, None, None, None),
        ("HBM write kernel", "hbm", "write_gb_s", {}, None, None, None),
        ("H2D pinned", "pcie", "h2d_gb_s", {"mode": "solo"}, "host_to_device_memcpy_ce", 0.97, None),
        ("D2H pinned", "pcie", "d2h_gb_s", {"mode": "solo"}, "device_to_host_memcpy_ce", 0.97, None),
        ("bidirectional, H2D", "pcie", "bidir_h2d_gb_s", {"mode": "solo"}, "host_to_device_bidirectional_memcpy_ce",
         None, 0.03),
        ("bidirectional, D2H", "pcie", "bidir_d2h_gb_s", {"mode": "solo"}, "device_to_host_bidirectional_memcpy_ce",
         None, 0.03),
    ]
    def spread(events: list[dict], name: str, key: str, **match: object) -> str:
        xs = ours(events, name, key.replace("_gb_s", "_samples_gb_s"), **match) or []
        return f"{min(xs):.2f}–{max(xs):.2f}" if xs else "—"

    lines = ["| measure | ours standard GB/s | its repeats | ours quick GB/s | nvbandwidth testcase | nvbandwidth GB/s | "
             "standard / nvbandwidth | target | met |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]
    met_all = True
    for label, name, key, match, tc, floor, within in rows:
        s, q = ours(standard, name, key, **match), ours(quick, name, key, **match)
        r = ref(tc) if tc else None
        x = ratio(s, r)
        target, met = "—", "—"
        if floor is not None and r:
            target, ok = f">= {floor}x", x is not None and x >= floor
            met, met_all = ("yes" if ok else "no"), met_all and ok
        if within is not None and r:
            target, ok = f"within {within:.0%}", x is not None and abs(x - 1) <= within
            met, met_all = ("yes" if ok else "no"), met_all and ok
        lines.append(f"| {label} | {s} | {spread(standard, name, key, **match)} | {q} | {f'`{tc}`' if tc else '—'} | "
                     f"{r if r is not None else '—'} | "
                     f"{x if x is not None else '—'} | {target} | {met} |")
    quick_ok = quick_s <= QUICK_LIMIT_S and any(e.get("event") == "done" for e in quick)
    found = [m for m in plant["mismatches"] if m["pattern"] == PLANTED_PATTERN]
    planted_ok = bool(found) and found[0]["num_words"] == 1 and \
        found[0]["first_offset_bytes"] == PLANTED_CHUNK * plant["chunk_bytes"] + PLANTED_WORD * 8
    lines += ["", f"quick pass: {quick_s:.1f} s wall (target <= {QUICK_LIMIT_S:.0f} s): {'yes' if quick_ok else 'no'}",
              f"standard pass: {standard_s:.1f} s wall",
              f"planted corruption ({PLANTED_PATTERN}, chunk {PLANTED_CHUNK}, word {PLANTED_WORD}, bit {PLANTED_BIT}) "
              f"on gpu{plant['gpu']}: {found[0] if found else 'NOT FOUND'}: {'yes' if planted_ok else 'no'}",
              f"nvbandwidth: {nvb.version or nvb.error}", *rounds_lines(rounds)]
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    print(text)
    return 0 if (met_all and quick_ok and planted_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
