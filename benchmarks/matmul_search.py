#!/usr/bin/env python3
"""Compute benchmark: our MAMF/MSMF search against our exhaustive sweep of the same grid, then the
all-GPU MSMF pass and the lemon GEMM pass, in one run.

    python3 benchmarks/matmul_search.py OUT_DIR            # on the GPU machine (several minutes: each run soaks)
    python3 benchmarks/matmul_search.py OUT_DIR --extras   # + runs 3 and 4 below (about 1 minute more)
    python3 benchmarks/matmul_search.py OUT_DIR --smoke    # on CPU, tiny shapes, stand-in GPUs

Runs, in order, on GPU0 with every other GPU idle:

1. ``search`` over the 256-shape reference grid (M = 1024…16384 step 1024, N and K in
   {4096, 8192, 12288, 16384}): screen, confirm, hold the large leaders hot, then hold the best
   of them to steady state (``benchmarks/matmul_msmf.py`` checks that figure against a 60 s hold);
2. ``exhaustive`` over the same grid: every shape with the full burst timing, then the same MSMF stage;
3. (``--extras``) ``search`` over the same grid with a 48-shape coarse budget, so coarse-then-refine
   does the work (no MSMF stage);
4. (``--extras``) ``search`` over the production space (M, N, K = 1024…20480 step 256: 512,000 shapes);

then, through the compute phases' own code: every GPU at (1)'s MSMF shape with all the others
running a continuous matmul, the lemon GEMM on every GPU (siblings idle), and the DCGM health check.

Writes ``matmul_search.json`` (everything), ``matmul_search.md`` (the tables) and ``logs/`` (every
worker's JSON lines) under OUT_DIR, and prints the tables.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clustereval.analysis.gpu_passes import sm_coverage  # noqa: E402
from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.gpunode import inventory  # noqa: E402
from clustereval.phases.health import HealthPhase  # noqa: E402
from clustereval.phases.lemon import LemonPhase  # noqa: E402
from clustereval.phases.matmul import NodePass  # noqa: E402
from clustereval.phases.settings import GpuSettings, HealthSettings  # noqa: E402
from clustereval.records import from_dict, to_dict  # noqa: E402
from clustereval.records.compute import SearchSummary, ShapeTiming  # noqa: E402
from clustereval.store import RunState, RunStore  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402

SEED_MAMF_TFLOPS = 807.5  # the published brute-force tool on the same kind of machine (2x H200)
POWER_LIMIT_W = 700.0


def run_worker(out: Path, name: str, args: list[str], timeout_s: float) -> tuple[dict[str, Any], float, list[dict]]:
    """One worker process; (its result event, wall seconds including start-up, every event)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    argv = [sys.executable, "-m", "clustereval.workers.matmul", *args]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.monotonic() - t0
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "logs" / f"{name}.jsonl").write_text(proc.stdout)
    if proc.stderr.strip():
        (out / "logs" / f"{name}.stderr").write_text(proc.stderr)
    events = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = next((e for e in reversed(events) if e.get("event") == "result"), None)
    if proc.returncode != 0 or result is None:
        err = next((e.get("error") for e in reversed(events) if e.get("event") == "error"), proc.stderr[-500:])
        raise SystemExit(f"{name}: the worker failed (exit {proc.returncode}): {err}")
    return result, wall, events


def fmt_t(t: ShapeTiming | None) -> tuple[str, str, str]:
    if t is None:
        return ("", "", "")
    wm = f"{t.power_w:.0f} / {t.sm_mhz:.0f}" if t.power_w is not None and t.sm_mhz is not None else ""
    return (num(t.mean_tflops), f"{t.m}×{t.n}×{t.k}", wm)


def num(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" ---: " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def context(out: Path, scratch: Path) -> RunContext:
    store = RunStore.create(out / "run", "bench")
    store.save_state(RunState(name="bench", stamp=store.run_id))
    host = os.uname().nodename.split(".")[0]
    config = Config(name="bench", nodes=(host,), local_scratch=str(scratch), scratch_root=str(scratch),
                    eval_python=sys.executable)
    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[Node(host, host)], store=store,
                     eval_python=sys.executable,
                     progress=lambda phase, node, msg, eta: print(f"  [{phase}] {msg}", flush=True))
    return ctx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="output directory (created)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, two stand-in GPUs: proves the script")
    ap.add_argument("--extras", action="store_true",
                    help="also the coarse-then-refine search on the same grid and the production-space search")
    ap.add_argument("--msmf-passes", type=int, default=1, choices=(1, 3),
                    help="3: run the three-pass rule in the all-GPU pass when a GPU is > 2%% low (adds ~1.5 min)")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    grid = "tiny" if args.smoke else "anchors"
    timed = ["--settle-s", "0.05", "--sustain-s", "0.2"] if args.smoke else ["--settle-s", "1.5", "--sustain-s", "3"]
    common = ["--device", device, "--gpu", "0", *timed]
    started = time.monotonic()
    report: dict[str, Any] = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                              "device": device, "runs": {}}
    try:
        import torch
        report["torch"] = torch.__version__
        report["cuda"] = torch.version.cuda or ""
        if device == "cuda":
            report["gpu"] = torch.cuda.get_device_name(0)
            report["num_gpus"] = torch.cuda.device_count()
    except Exception as exc:  # noqa: BLE001
        report["torch"] = f"unavailable: {exc}"
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
        report["driver"] = q.stdout.strip().splitlines()[0] if q.stdout.strip() else ""

    runs = [("search", ["search", *common, "--grid", grid]),
            ("exhaustive", ["exhaustive", *common, "--grid", grid])]
    if args.extras:
        runs += [("search-coarse48", ["search", *common, "--grid", grid, "--coarse-budget", "8" if args.smoke else "48",
                                      "--no-msmf"]),
                 ("search-default", ["search", *common, "--grid", "tiny" if args.smoke else "default"])]
    summaries: dict[str, SearchSummary] = {}
    for name, argv in runs:
        print(f"{name}: {' '.join(argv)}", flush=True)
        result, wall, _ = run_worker(out, name, argv, timeout_s=1200)
        summaries[name] = from_dict(SearchSummary, result["summary"])
        report["runs"][name] = {"wall_s": round(wall, 1), "summary": result["summary"]}
        s = summaries[name]
        print(f"  {s.shapes_tried} shapes, MAMF {fmt_t(s.mamf)[0]} TFLOPS at {fmt_t(s.mamf)[1]}, "
              f"MSMF {fmt_t(s.msmf)[0]} at {fmt_t(s.msmf)[1]}, {s.total_s:.1f} s in the worker, {wall:.1f} s wall",
              flush=True)

    search, exh = summaries["search"], summaries["exhaustive"]
    msmf_shape = search.msmf.shape if search.msmf else (exh.msmf.shape if exh.msmf else None)
    plan = GpuSettings(device=device, grid=grid, cpu_gpus=2 if args.smoke else 0,
                      settle_s=0.05 if args.smoke else 1.5, sustain_s=0.2 if args.smoke else 3.0)
    scratch = Path(tempfile.mkdtemp(prefix="clustereval-bench-"))
    try:
        ctx = context(out, scratch)
        inv = inventory(ctx, ctx.nodes[0], plan)
        if msmf_shape and len(inv.gpus) >= 1:
            print(f"all-GPU pass at {msmf_shape} on {len(inv.gpus)} GPUs", flush=True)
            t0 = time.monotonic()
            node_rec, gaps = NodePass(ctx, inv, plan).run_at(msmf_shape, args.msmf_passes)
            report["all_gpu"] = {"wall_s": round(time.monotonic() - t0, 1), "record": to_dict(node_rec),
                                 "gaps": to_dict(gaps)}
        t0 = time.monotonic()
        lemon = LemonPhase(plan).run(ctx)
        report["lemon"] = {"wall_s": round(time.monotonic() - t0, 1), "record": to_dict(lemon)}
        health = HealthPhase(HealthSettings(device=plan.device)).run(ctx)
        report["health"] = {"record": to_dict(health)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report["total_wall_s"] = round(time.monotonic() - started, 1)

    md = render(report, summaries, args.smoke)
    (out / "matmul_search.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "matmul_search.md").write_text(md)
    print()
    print(md)
    return 0


def render(report: dict[str, Any], summaries: dict[str, SearchSummary], smoke: bool) -> str:
    lines = [f"Date (UTC) {report['date_utc']}; {report.get('gpu', 'CPU')} × {report.get('num_gpus', '')}; "
             f"torch {report.get('torch')} (CUDA {report.get('cuda', '')}); driver {report.get('driver', '')}; "
             f"total wall {report['total_wall_s']:.0f} s.", ""]
    rows = []
    for name, s in summaries.items():
        mamf, msmf = fmt_t(s.mamf), fmt_t(s.msmf)
        rows.append([name, str(s.shapes_tried), *mamf, *msmf, f"{s.burst_s:.1f}", f"{s.sustain_s:.1f}",
                     f"{s.total_s:.1f}", f"{report['runs'][name]['wall_s']:.1f}"])
    lines.append(table(["run", "shapes", "MAMF TFLOPS", "MAMF shape", "W / MHz", "MSMF TFLOPS", "MSMF shape", "W / MHz",
                        "burst s", "sustain s", "worker s", "wall s"], rows))
    search, exh = summaries["search"], summaries["exhaustive"]
    checks = []
    if search.mamf and exh.mamf:
        gap = 100 * (exh.mamf.mean_tflops - search.mamf.mean_tflops) / exh.mamf.mean_tflops
        checks.append(["search MAMF vs exhaustive best (same run)", f"{gap:+.2f}% below", "≤ 0.5% below",
                       _ok(gap <= 0.5)])
        if not smoke:
            vs_seed = 100 * (SEED_MAMF_TFLOPS - search.mamf.mean_tflops) / SEED_MAMF_TFLOPS
            checks.append([f"search MAMF vs {SEED_MAMF_TFLOPS} TFLOPS (published tool)", f"{vs_seed:+.2f}% below",
                           "≤ 1% below", _ok(vs_seed <= 1.0)])
    ratio_burst = search.burst_s / exh.burst_s if exh.burst_s else 0.0
    ratio_total = search.total_s / exh.total_s if exh.total_s else 0.0
    checks.append(["search / exhaustive time, shape stages", f"{ratio_burst:.2f}", "≤ 0.33", _ok(ratio_burst <= 1 / 3)])
    checks.append(["search / exhaustive time, with the MSMF stage", f"{ratio_total:.2f}", "(same MSMF stage in both)", ""])
    if search.msmf and search.msmf.power_w is not None:
        checks.append(["search MSMF board power", f"{search.msmf.power_w:.0f} W", f"near {POWER_LIMIT_W:.0f} W",
                       _ok(search.msmf.power_w >= 0.95 * POWER_LIMIT_W)])
    lines += ["", table(["check", "measured", "target", ""], checks)]
    all_gpu = report.get("all_gpu")
    if all_gpu:
        rec = all_gpu["record"]
        rows = []
        for g in rec["gpus"]:
            t = from_dict(ShapeTiming, g["timings"][0]) if g["timings"] and g["timings"][0] else None
            rows.append([f"gpu{g['gpu']}", *fmt_t(t), ", ".join(num(v) if v is not None else "failed"
                                                              for v in g["tflops"]),
                         ", ".join(f"gpu{x}" for x in (t.idle_siblings if t else []))])
        lines += ["", f"All-GPU MSMF pass ({all_gpu['wall_s']:.0f} s, every other GPU running a continuous matmul; "
                      f"medians {rec['medians']}, flagged {rec['flagged']}):", "",
                  table(["GPU", "MSMF TFLOPS", "shape", "W / MHz", "per pass", "idle siblings seen"], rows)]
    lemon = report.get("lemon", {}).get("record")
    if lemon and lemon.get("nodes"):
        node = lemon["nodes"][0]
        rows = []
        for g in node["gpus"]:
            cov = sm_coverage(g["sm_count"], lemon["size"]) if g["sm_count"] else None
            rows.append([f"gpu{g['gpu']}", ", ".join(num(v) if v is not None else "dead" for v in g["tflops"]),
                         f"{g['power_w']:.0f} / {g['sm_mhz']:.0f}" if g["power_w"] is not None and g["sm_mhz"] else "",
                         str(g["sm_count"] or ""),
                         f"{cov.full_waves} + {cov.tail_ctas} ({100 * cov.wave_efficiency:.1f}%)" if cov else "",
                         g["error"]])
        lines += ["", f"Lemon GEMM {lemon['size']}³ ({report['lemon']['wall_s']:.0f} s, siblings idle; dead "
                      f"{node['dead']}, flagged {node['flagged']}):", "",
                  table(["GPU", "TFLOPS per pass", "W / MHz", "SMs", "waves + tail CTAs", "error"], rows)]
    health = report.get("health", {}).get("record", {})
    if health:
        lines += ["", "Health: " + ("; ".join(g["text"] for g in health.get("gaps", []))
                                    or ", ".join(f"{n['node']}: {'Pass' if n['ran'] else 'did not run'}"
                                                 for n in health.get("nodes", [])))]
    return "\n".join(lines) + "\n"


def _ok(flag: bool) -> str:
    return "met" if flag else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
