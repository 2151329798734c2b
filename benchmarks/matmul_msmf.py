#!/usr/bin/env python3
"""MSMF against what a sustained workload really gets: the whole matmul phase, then each reported
MSMF shape held back to back for 60 s by this script's own loop.

    python3 benchmarks/matmul_msmf.py OUT_DIR            # on the GPU machine (about 6 minutes on 1 GPU)
    python3 benchmarks/matmul_msmf.py OUT_DIR --smoke    # on CPU: tiny shapes, one stand-in GPU, short holds

1. The matmul phase exactly as ``clustereval run`` runs it (the standard plan: the production
   search space, soak, held windows, the all-GPU pass), timed as a whole and per stage.
2. Each node's MSMF shape (and, while the time budget allows, the other held candidates) held back
   to back for ``--hold-s`` seconds: plain ``torch.mm`` into the same output, chunks of matmuls
   timed with CUDA events, NVML read after every chunk. Not the worker's code: an independent
   check. Its figure is the median chunk rate of the last half of the hold.

Targets: MSMF within 1% of that held median; MAMF not below 837.5 TFLOPS (the figure the earlier
search reached on the same kind of machine). Writes under OUT_DIR: ``matmul_msmf.json`` (all of
it), ``matmul_msmf.md`` (the tables), ``msmf-search.json`` (GPU0's search summary with its trace,
the test fixture), ``held.json`` (the held traces) and ``run.tar.gz`` (the phase's run folder).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clustereval.analysis.matmul import held_rate  # noqa: E402
from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.matmul import MatmulPhase  # noqa: E402
from clustereval.phases.settings import GpuSettings  # noqa: E402
from clustereval.records import from_dict, to_dict  # noqa: E402
from clustereval.records.compute import MatmulRecord, ShapeTiming  # noqa: E402
from clustereval.store import RunState, RunStore  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402

EARLIER_MAMF_TFLOPS = 837.5  # the earlier search on the same kind of machine (1x H200, 700 W)
MSMF_TOLERANCE = 0.01


def context(run_root: Path, scratch: Path) -> RunContext:
    store = RunStore.create(run_root, "bench")
    store.save_state(RunState(name="bench", stamp=store.run_id))
    host = os.uname().nodename.split(".")[0]
    config = Config(name="bench", nodes=(host,), local_scratch=str(scratch), scratch_root=str(scratch),
                    eval_python=sys.executable)
    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[Node(host, host)], store=store,
                     eval_python=sys.executable,
                     progress=lambda phase, node, msg, eta: print(f"  [{phase}] {msg}", flush=True))
    return ctx


def smi(query: str) -> str:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""


class HeldLoop:
    """Back-to-back ``torch.mm`` of one shape in one operand layout for a fixed time; one (t, TFLOPS,
    W, MHz, °C) per chunk of about a quarter second. Not the worker's code: an independent check."""

    def __init__(self, device: str, gpu: int = 0) -> None:
        import torch

        self.torch, self.device = torch, device
        self.dev = torch.device("cuda", gpu) if device == "cuda" else torch.device("cpu")
        self.nv = self.handle = None
        if device == "cuda":
            import pynvml

            pynvml.nvmlInit()
            self.nv, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu)

    def run(self, shape: tuple[int, int, int], seconds: float, layout: str = "nn") -> list[dict[str, float | None]]:
        """``layout`` ``nn``: B is K×N in memory; ``tn``: B is N×K, read transposed."""
        torch = self.torch
        m, n, k = shape
        a = torch.randn(m, k, device=self.dev, dtype=torch.bfloat16)
        b = (torch.randn(k, n, device=self.dev, dtype=torch.bfloat16) if layout == "nn"
             else torch.randn(n, k, device=self.dev, dtype=torch.bfloat16).t())
        c = torch.empty(m, n, device=self.dev, dtype=torch.bfloat16)
        work = 2 * m * n * k
        torch.mm(a, b, out=c)
        count, rows = 1, []
        t_start = time.monotonic()
        while time.monotonic() - t_start < seconds:
            if self.device == "cuda":
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(count):
                    torch.mm(a, b, out=c)
                e1.record()
                e1.synchronize()
                spent = e0.elapsed_time(e1) / 1e3
            else:
                t = time.perf_counter()
                for _ in range(count):
                    torch.mm(a, b, out=c)
                spent = time.perf_counter() - t
            row: dict[str, float | None] = {"t_s": round(time.monotonic() - t_start, 3),
                                            "tflops": round(count * work / spent / 1e12, 6)}
            if self.nv is not None:
                row["power_w"] = round(self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0, 1)
                row["sm_mhz"] = float(self.nv.nvmlDeviceGetClockInfo(self.handle, self.nv.NVML_CLOCK_SM))
                row["temp_c"] = float(self.nv.nvmlDeviceGetTemperature(self.handle, self.nv.NVML_TEMPERATURE_GPU))
            rows.append(row)
            count = max(1, round(count * 0.25 / max(spent, 1e-9)))
        del a, b, c
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return rows


def held_summary(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    last = [r for r in rows if r["t_s"] > seconds / 2]
    first = [r for r in rows if r["t_s"] <= seconds / 2]

    def med(key: str, rs: list[dict[str, Any]]) -> float | None:
        values = [r[key] for r in rs if r.get(key) is not None]
        return float(f"{statistics.median(values):.6g}") if values else None

    return {"median_last_half_tflops": med("tflops", last), "median_first_half_tflops": med("tflops", first),
            "power_w": med("power_w", last), "sm_mhz": med("sm_mhz", last), "temp_c": med("temp_c", last),
            "num_chunks": len(rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, one stand-in GPU, short holds")
    ap.add_argument("--hold-s", type=float, default=60.0)
    ap.add_argument("--budget-s", type=float, default=540.0, help="hold more candidates only while under this")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    device = "cpu" if args.smoke else "cuda"
    hold_s = min(args.hold_s, 2.0) if args.smoke else args.hold_s
    import torch

    report: dict[str, Any] = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                              "device": device, "torch": torch.__version__, "cuda": torch.version.cuda or "",
                              "gpu": smi("name"), "driver": smi("driver_version"), "power_limit": smi("power.limit"),
                              "num_gpus": len(smi("index").splitlines()) if not args.smoke else 1}
    if args.smoke:
        plan = GpuSettings(device="cpu", cpu_gpus=1, grid="M=32|64,N=32|64,K=64", soak_min_s=0.05, soak_max_s=0.2,
                          settle_s=0.05, sustain_s=0.1)
    else:
        plan = GpuSettings()  # the standard profile
    report["plan"] = to_dict(plan)
    report["hold_s"] = hold_s
    scratch = Path(tempfile.mkdtemp(prefix="clustereval-msmf-"))
    run_root = Path(tempfile.mkdtemp(prefix="clustereval-msmf-run-"))
    try:
        ctx = context(run_root, scratch)
        print("the matmul phase (standard plan)", flush=True)
        t0 = time.monotonic()
        rec: MatmulRecord = MatmulPhase(plan).run(ctx)
        report["phase_wall_s"] = round(time.monotonic() - t0, 1)
        report["record"] = to_dict(rec)
        with tarfile.open(out / "run.tar.gz", "w:gz") as tar:
            tar.add(ctx.store.raw_dir, arcname="run")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(run_root, ignore_errors=True)
    node = rec.nodes[0] if rec.nodes else None
    search = node.search if node else None
    if search is not None:
        (out / "msmf-search.json").write_text(json.dumps(to_dict(search), separators=(",", ":")) + "\n")
    held_runs: list[dict[str, Any]] = []
    if search is not None and search.msmf is not None:
        held = [t for t in search.sustained if t.held and t.stage == "sustained"]  # not the ladder's rungs
        order = [search.msmf] + [t for t in sorted(held, key=lambda t: -held_rate(t)) if t != search.msmf]
        loop = HeldLoop(device)
        for i, t in enumerate(order):
            if i and time.monotonic() - started + hold_s + 15 > args.budget_s:
                break
            print(f"holding {t.m}×{t.n}×{t.k} for {hold_s:.0f} s", flush=True)
            rows = loop.run(t.shape, hold_s)
            held_runs.append({"shape": list(t.shape), "is_msmf": t == search.msmf, "reported": to_dict(t),
                              "held": held_summary(rows, hold_s), "rows": rows})
    report["held"] = [{k: v for k, v in h.items() if k != "rows"} for h in held_runs]
    (out / "held.json").write_text(json.dumps(held_runs, separators=(",", ":")) + "\n")
    report["total_wall_s"] = round(time.monotonic() - started, 1)
    md = render(report, rec, held_runs)
    (out / "matmul_msmf.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "matmul_msmf.md").write_text(md)
    print(md, flush=True)
    return 0


def _t(t: ShapeTiming) -> str:
    return f"{t.m}×{t.n}×{t.k}"


def render(report: dict[str, Any], rec: MatmulRecord, held_runs: list[dict[str, Any]]) -> str:
    lines = [f"Date (UTC) {report['date_utc']}; {report['gpu'] or 'CPU'} × {report['num_gpus']} "
             f"({report['power_limit']}); driver {report['driver']}; torch {report['torch']} (CUDA {report['cuda']}); "
             f"benchmark wall {report['total_wall_s']:.0f} s.", ""]
    node = rec.nodes[0] if rec.nodes else None
    s = node.search if node else None
    if node is None or s is None:
        return "\n".join(lines + ["The matmul phase produced no search: " + "; ".join(g.text for g in rec.gaps)]) + "\n"
    mamf, msmf = s.mamf, s.msmf
    lines += ["| stage | seconds |", "| --- | ---: |",
              f"| search (screen, refine, confirm: {s.shapes_tried} shapes) | {s.burst_s:.1f} |",
              f"| hot holds ({s.num_hot} shapes) | {s.hot_stage_s:.1f} |",
              f"| soak and settles ({s.num_sustained} held shapes) | {s.soak_stage_s:.1f} |",
              f"| held windows | {s.window_stage_s:.1f} |",
              f"| GPU0's worker, start-up included | {node.search_wall_s:.1f} |",
              f"| all-GPU pass ({max(0, node.num_gpus - 1)} other GPUs) | {node.all_gpu_wall_s:.1f} |",
              f"| the passes after the first (2 and 3, or to gpu_passes) | {node.extra_passes_wall_s:.1f} |",
              f"| the whole matmul phase | {report['phase_wall_s']:.1f} |", ""]
    lines += ["| held shape | hot burst TFLOPS | soak s (settled) | window median TFLOPS | drift | W / MHz / °C | label |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    hot = {t.shape: t for t in s.sustained if t.stage == "hot"}
    for t in s.sustained:
        if not t.held or t.stage != "sustained":
            continue
        burst = hot.get(t.shape)
        lines.append(f"| {_t(t)}{' (MSMF)' if t == msmf else ''} | {burst.mean_tflops:.1f} |" if burst else
                     f"| {_t(t)}{' (MSMF)' if t == msmf else ''} | |")
        lines[-1] += (f" {t.soak_s:.1f} ({'yes' if t.settled else 'no'}) | {t.median_tflops:.1f} | "
                      f"{100 * t.drift_frac:+.2f}% | {t.power_w or 0:.0f} / {t.sm_mhz or 0:.0f} / {t.temp_c or 0:.0f} | "
                      f"{t.label or 'ok'} |")
    checks = [["| check | measured | target | |", "| --- | ---: | ---: | --- |"]]
    rows = checks[0]
    if mamf is not None:
        ok = mamf.mean_tflops >= EARLIER_MAMF_TFLOPS
        rows.append(f"| MAMF ({_t(mamf)}, {mamf.power_w or 0:.0f} W / {mamf.sm_mhz or 0:.0f} MHz) | "
                    f"{mamf.mean_tflops:.1f} TFLOPS | ≥ {EARLIER_MAMF_TFLOPS} | {'met' if ok else 'MISSED'} |")
    for h in held_runs:
        rep = h["reported"]
        held = h["held"]["median_last_half_tflops"]
        if held:
            reported = held_rate(from_dict(ShapeTiming, rep))
            gap = (reported - held) / held
            what = "MSMF" if h["is_msmf"] else "held candidate"
            rows.append(f"| {what} {rep['m']}×{rep['n']}×{rep['k']}: reported {reported:.1f} "
                        f"vs {report['hold_s']:g} s held (median of the last {report['hold_s'] / 2:g} s) {held:.1f} TFLOPS "
                        f"({h['held']['power_w']} W / {h['held']['sm_mhz']} MHz / {h['held']['temp_c']} °C) | "
                        f"{100 * gap:+.2f}% | within ±1% | {'met' if abs(gap) <= MSMF_TOLERANCE else 'MISSED'} |")
    rows.append(f"| the whole matmul phase | {report['phase_wall_s']:.1f} s | (8 GPUs: ≤ 360 s, not measurable here) | |")
    lines += ["", *rows]
    if rec.gaps:
        lines += ["", "Gaps: " + "; ".join(g.text for g in rec.gaps)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
