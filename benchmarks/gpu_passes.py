#!/usr/bin/env python3
"""What ``[verdicts] gpu_passes`` costs: the matmul and lemon phases with every GPU in N passes.

    python3 benchmarks/gpu_passes.py OUT_DIR --passes 3           # on the GPU machine (standard plan)
    python3 benchmarks/gpu_passes.py OUT_DIR --passes 3 --smoke   # on CPU: tiny shapes, two stand-in GPUs

Runs ``MatmulPhase`` and ``LemonPhase`` exactly as ``clustereval run`` does, with the run's config asking
for N passes, and prints the wall time of each stage: GPU0's search (its first pass), the other GPUs'
first pass, the passes after the first (every GPU, pinned at the MSMF shape, siblings loaded), and the
lemon GEMM's passes. One pass's time per GPU is the later passes' wall time over (N - 1) × GPUs. Writes
``gpu_passes.json`` (the timings and both records) under OUT_DIR.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clustereval.config import Config, Verdicts  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.lemon import LemonPhase  # noqa: E402
from clustereval.phases.matmul import MatmulPhase  # noqa: E402
from clustereval.phases.settings import GpuSettings  # noqa: E402
from clustereval.records import to_dict  # noqa: E402
from clustereval.store import RunState, RunStore  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402


def context(run_root: Path, scratch: Path, num_passes: int) -> tuple[RunContext, list[tuple[float, str, str]]]:
    store = RunStore.create(run_root, "bench")
    store.save_state(RunState(name="bench", stamp=store.run_id))
    host = os.uname().nodename.split(".")[0]
    config = Config(name="bench", nodes=(host,), local_scratch=str(scratch), scratch_root=str(scratch),
                    eval_python=sys.executable, verdicts=Verdicts(gpu_passes=num_passes))
    seen: list[tuple[float, str, str]] = []
    t0 = time.monotonic()

    def progress(phase: str, node: str, msg: str, eta: float | None) -> None:
        seen.append((round(time.monotonic() - t0, 1), phase, msg))
        left = f" (about {eta:.0f} s left)" if eta else ""
        print(f"  [{phase}] {msg}{left}", flush=True)

    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[Node(host, host)], store=store,
                     eval_python=sys.executable, progress=progress)
    return ctx, seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--passes", type=int, default=3, help="[verdicts] gpu_passes (2 to 20)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, two stand-in GPUs")
    args = ap.parse_args()
    if not 2 <= args.passes <= 20:
        ap.error("--passes must be from 2 to 20: one pass has no later passes to time")
    args.out.mkdir(parents=True, exist_ok=True)
    plan = (GpuSettings(device="cpu", cpu_gpus=2, grid="M=32|64,N=32|64,K=64", soak_min_s=0.05, soak_max_s=0.2,
                        settle_s=0.05, sustain_s=0.1, lemon_size=64) if args.smoke else GpuSettings())
    ctx, seen = context(Path(tempfile.mkdtemp(prefix="clustereval-passes-run-")),
                        Path(tempfile.mkdtemp(prefix="clustereval-passes-")), args.passes)
    t0 = time.monotonic()
    mm = MatmulPhase(plan).run(ctx)
    matmul_s = time.monotonic() - t0
    t0 = time.monotonic()
    lemon = LemonPhase(plan).run(ctx)
    lemon_s = time.monotonic() - t0
    rows = []
    for n in mm.nodes:
        later = max(1, (n.num_passes - 1) * n.num_gpus)
        rows.append({"node": n.node, "gpu": n.gpu_name, "num_gpus": n.num_gpus, "num_passes": n.num_passes,
                     "search_wall_s": n.search_wall_s, "all_gpu_wall_s": n.all_gpu_wall_s,
                     "extra_passes_wall_s": n.extra_passes_wall_s,
                     "one_pass_per_gpu_s": round(n.extra_passes_wall_s / later, 1),
                     "total_wall_s": n.total_wall_s,
                     "msmf_tflops": {g.gpu: g.tflops for g in n.gpus}})
    report = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), "passes": args.passes,
              "device": plan.device, "matmul_wall_s": round(matmul_s, 1), "lemon_wall_s": round(lemon_s, 1),
              "nodes": rows, "lemon_tflops": {n.node: {g.gpu: g.tflops for g in n.gpus} for n in lemon.nodes},
              "progress": seen, "matmul": to_dict(mm), "lemon": to_dict(lemon),
              "plan": dataclasses.asdict(plan)}
    (args.out / "gpu_passes.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nmatmul phase {matmul_s:.1f} s, lemon phase {lemon_s:.1f} s, {args.passes} passes asked")
    for r in rows:
        print(f"{r['node']}: {r['num_gpus']}× {r['gpu']}, {r['num_passes']} passes: search (gpu0's first pass) "
              f"{r['search_wall_s']} s, the other GPUs' first pass {r['all_gpu_wall_s']} s, the later passes "
              f"{r['extra_passes_wall_s']} s = {r['one_pass_per_gpu_s']} s per GPU per pass")
    for n in lemon.nodes:
        print(f"lemon {n.node}: {n.num_passes} passes, TFLOPS {[g.tflops for g in n.gpus]}")
    return 0 if not mm.gaps and not lemon.gaps else 1


if __name__ == "__main__":
    sys.exit(main())
