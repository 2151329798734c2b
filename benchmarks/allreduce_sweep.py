"""Our all-reduce sweep on this machine's GPUs against the nccl-tests reference figures.

One torchrun launch (one process per GPU) of ``clustereval.workers.allreduce`` with
``NCCL_DEBUG=INFO`` (as the ``allreduce`` phase runs it) times every payload from 32 KiB to 16 GiB
three ways: back-to-back (the product's figure: CUDA-graph replay up to 64 MiB, CUDA events above),
eager back-to-back without graphs (for comparison, graph payloads only) and blocking (one call at a
time). It prints busbw per payload next to the nccl-tests figures measured on 2x H200 (NV18), the
ratio, the sweep's wall time and whether the targets were met (>= 0.95x at every payload,
>= 0.99x from 256 MiB up, sweep <= 40 s), and writes sweep.json, table.md, busbw.png and the
NCCL INFO log under --out.

    python3 benchmarks/allreduce_sweep.py --out "$OUT/allreduce"       # GPUs, NCCL
    python3 benchmarks/allreduce_sweep.py --smoke --out /tmp/ar-smoke   # CPU, gloo, seconds
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.network import NCCL_INFO_ENV  # noqa: E402
from clustereval.phases.torchrun import launch, nccl_env_info  # noqa: E402
from clustereval.probes.nccl_debug import parse_nccl_info  # noqa: E402
from clustereval.report.network_plots import Series, busbw_png  # noqa: E402
from clustereval.report.units import iec_precise  # noqa: E402
from clustereval.store import RunState, RunStore  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402

KIB, MIB, GIB = 2**10, 2**20, 2**30
# nccl-tests 2.19.6 all_reduce_perf -b 32K -e 16G -f 2 -g 2 -w 5 -n 20, float32 sum, out-of-place busbw
# (GB/s), and the same with -z 1 (blocking), on 2x H200 SXM linked NV18, NCCL 2.28, NCCL_NVLS_ENABLE=0.
NCCL_TESTS = {
    32 * KIB: (1.72, 1.24), 64 * KIB: (3.29, 2.37), 128 * KIB: (6.94, 4.73), 256 * KIB: (12.83, 8.83),
    512 * KIB: (25.18, 17.84), 1 * MIB: (50.81, 29.89), 2 * MIB: (70.25, 43.09), 4 * MIB: (117.84, 76.31),
    8 * MIB: (168.23, 120.54), 16 * MIB: (206.70, 171.51), 32 * MIB: (230.15, 203.87), 64 * MIB: (260.12, 237.60),
    128 * MIB: (279.89, 267.71), 256 * MIB: (300.10, 293.02), 512 * MIB: (314.14, 307.11), 1 * GIB: (326.56, 323.76),
    2 * GIB: (333.98, 335.80), 4 * GIB: (343.09, 340.56), 8 * GIB: (345.25, 340.48), 16 * GIB: (342.23, 340.90),
}
TARGET_EVERY = 0.95
TARGET_LARGE = 0.99
LARGE_FROM = 256 * MIB
TARGET_SWEEP_S = 40.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for sweep.json, table.md, busbw.png, logs")
    ap.add_argument("--smoke", action="store_true", help="CPU: 2 gloo ranks, 32 KiB..256 KiB")
    ap.add_argument("--nproc", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--max-bytes", type=int, default=16 * GIB)
    ap.add_argument("--timeout-s", type=int, default=420)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backend = "gloo" if args.smoke else "nccl"
    nproc = args.nproc or (2 if args.smoke else gpu_count())
    if nproc < 2:
        print("error: needs at least 2 GPUs (or --smoke)", file=sys.stderr)
        return 2
    max_bytes = 256 * KIB if args.smoke else args.max_bytes
    store = RunStore.create(out / "run", "bench")
    store.save_state(RunState(name="bench", stamp=store.run_id))
    host = socket.gethostname()
    (out / "scratch").mkdir(parents=True, exist_ok=True)  # clustereval never creates a configured path
    config = Config(name="bench", nodes=(host,), local_scratch=str(out / "scratch"), rdzv_port=free_port())
    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[Node(host, host)], store=store,
                     eval_python=sys.executable)
    env = nccl_env_info(ctx)
    extra = {**env.final_env, **NCCL_INFO_ENV} if backend == "nccl" else {}
    worker_args = ["--backend", backend, "--min-bytes", str(32 * KIB), "--max-bytes", str(max_bytes),
                   "--modes", "back-to-back,eager,blocking"]
    t0 = time.monotonic()
    res = launch(ctx, label="allreduce-bench", module="allreduce", args=worker_args, nodes=ctx.nodes, nproc=nproc,
                 port=config.rdzv_port, timeout_s=args.timeout_s, extra_env=extra)
    wall = time.monotonic() - t0
    log = store.raw_dir / res.info.logs[0]
    shutil.copy(log, out / "allreduce-nccl-info.log")
    rows: dict[str, dict[int, dict]] = {"back-to-back": {}, "eager": {}, "blocking": {}}
    for e in res.of("row"):
        rows[e["mode"]][int(e["payload_bytes"])] = e
    done = (res.of("done") or [{}])[0]
    nccl = parse_nccl_info(log.read_text(), "intra-node") if backend == "nccl" else None
    if not res.info.ok or not rows["back-to-back"]:
        print(f"error: the sweep failed ({res.info.diagnosis_text or res.info.error}); log: {out / 'allreduce-nccl-info.log'}",
              file=sys.stderr)
        return 1
    hello = (res.of("hello") or [{}])[0]
    header = ["payload", "ours busbw (GB/s)", "method", "nccl-tests (GB/s)", "ours / nccl-tests",
              "ours eager (GB/s)", "ours blocking (GB/s)", "nccl-tests blocking (GB/s)", "blocking / nccl-tests"]
    table = []
    worst_every, worst_large = float("inf"), float("inf")
    for size in sorted(rows["back-to-back"]):
        r = rows["back-to-back"][size]
        ref, ref_blk = NCCL_TESTS.get(size, (0.0, 0.0))
        ratio = r["busbw_gb_s"] / ref if ref else None
        eager = rows["eager"].get(size)
        blk = rows["blocking"].get(size)
        blk_ratio = blk["busbw_gb_s"] / ref_blk if blk and ref_blk else None
        if ratio is not None:
            worst_every = min(worst_every, ratio)
            if size >= LARGE_FROM:
                worst_large = min(worst_large, ratio)
        table.append([iec_precise(size), f"{r['busbw_gb_s']:.2f}", r.get("method", ""), f"{ref:.2f}" if ref else "",
                      f"{ratio:.3f}" if ratio is not None else "", f"{eager['busbw_gb_s']:.2f}" if eager else "",
                      f"{blk['busbw_gb_s']:.2f}" if blk else "", f"{ref_blk:.2f}" if ref_blk else "",
                      f"{blk_ratio:.3f}" if blk_ratio is not None else ""])
    sweep_s = float(done.get("sweep_seconds", 0.0))
    md = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---:"] * 2 + ["---"] + ["---:"] * 6) + " |"]
    md += ["| " + " | ".join(row) + " |" for row in table]
    met_every = worst_every >= TARGET_EVERY
    met_large = worst_large >= TARGET_LARGE
    summary = [
        f"device: {hello.get('device_name', '?')} x {nproc}, backend {backend}, torch {hello.get('torch', '?')}, "
        f"NCCL {hello.get('nccl', '') or '-'}, NCCL_NVLS_ENABLE={env.nvls_enable} ({env.nvls_source})",
        f"sweep wall time: {sweep_s:.1f} s (target <= {TARGET_SWEEP_S:.0f} s); whole launch incl. torchrun start: "
        f"{wall:.1f} s",
        f"worst ours/nccl-tests at every payload: {worst_every:.3f} (target >= {TARGET_EVERY}) "
        f"{'met' if met_every else 'MISSED'}",
        (f"worst ours/nccl-tests from 256 MiB up: {worst_large:.3f} (target >= {TARGET_LARGE}) "
         f"{'met' if met_large else 'MISSED'}") if worst_large != float("inf") else "no payload of 256 MiB or more",
    ]
    if nccl is not None:
        summary.append(f"NCCL INFO: version {nccl.version or '?'}, transports {', '.join(nccl.transports) or '?'}, "
                       f"network {nccl.network or '?'}, NVLS available {nccl.nvls_available}, used {nccl.nvls_used}, "
                       f"NCCL_NVLS_ENABLE as NCCL saw it: {nccl.nvls_env or '?'}")
    text = "\n".join(md) + "\n\n" + "\n".join(f"- {s}" for s in summary) + "\n"
    print(text)
    (out / "table.md").write_text(text)
    series = [Series("ours back-to-back", sorted(rows["back-to-back"]),
                     [rows["back-to-back"][k]["busbw_gb_s"] for k in sorted(rows["back-to-back"])]),
              Series("ours blocking", sorted(rows["blocking"]),
                     [rows["blocking"][k]["busbw_gb_s"] for k in sorted(rows["blocking"])], dashed=True)]
    if not args.smoke:
        series.append(Series("nccl-tests (reference)", sorted(NCCL_TESTS), [NCCL_TESTS[k][0] for k in sorted(NCCL_TESTS)],
                             dashed=True))
    png = busbw_png(series, f"All-reduce busbw, intra-node: {nproc} ranks ({hello.get('device_name', backend)})")
    if png:
        (out / "busbw.png").write_bytes(png)
    (out / "sweep.json").write_text(json.dumps({
        "nproc": nproc, "backend": backend, "hello": hello, "done": done, "launch_wall_s": round(wall, 2),
        "rows": rows, "nccl_tests": {str(k): v for k, v in NCCL_TESTS.items()},
        "worst_ratio_every": worst_every, "worst_ratio_large": worst_large,
        "nccl_info": None if nccl is None else {"version": nccl.version, "transports": nccl.transports,
                                                 "network": nccl.network, "nvls_available": nccl.nvls_available,
                                                 "nvls_used": nccl.nvls_used, "nvls_env": nccl.nvls_env},
        "nccl_env": env.final_env, "nccl_env_source": env.env_source}, indent=2, default=str) + "\n")
    shutil.rmtree(out / "scratch", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
