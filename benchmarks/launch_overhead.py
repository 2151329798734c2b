"""What one torchrun job costs before it measures anything: the node's command as ``launch`` builds
it (ranks forked from torchrun's own process, which imported torch once) against the same command
with a new interpreter per rank (``-m clustereval.workers.connectivity``: torchrun's usual form,
each rank importing torch again). The worker is the connectivity check: every rank joins the
process group and all-reduces once, so the job is nearly all start-up.

Each form runs ``--repeats`` times per rank count on this machine (one node, c10d rendezvous on
localhost); the table gives the median wall time from start to exit and the median CPU seconds of
the whole job (torchrun and every rank), and writes them to ``--out`` as JSON.

    python3 benchmarks/launch_overhead.py                        # CPU: gloo, 1 and 2 ranks
    python3 benchmarks/launch_overhead.py --nproc 1 --backend nccl --out "$OUT/launch.json"
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.torchrun import LAUNCHER_ENV, torchrun_argv  # noqa: E402
from clustereval.records.network import RendezvousPlan  # noqa: E402
from clustereval.store import RunStore  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402

FORMS = {"forked (clustereval)": str(REPO), "new interpreter per rank": ""}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_job(ctx: RunContext, node: Node, package_dir: str, nproc: int, backend: str, work: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one job; raises when it fails."""
    argv = torchrun_argv(ctx, node, module="connectivity", args=["--backend", backend], num_nodes=1, nproc=nproc,
                         endpoint=f"127.0.0.1:{free_port()}", run_id=f"bench-{time.monotonic_ns()}",
                         plan=RendezvousPlan(), rdzv_timeout_s=60, timeout_s=300, log_dir=str(work / "logs"),
                         package_dir=package_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(work / "tmp"), **LAUNCHER_ENV}  # as `launch` sets it
    cpu0, t0 = children_cpu_s(), time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    if proc.returncode != 0 or proc.stdout.count('"all_ok": true') != nproc:
        raise SystemExit(f"the job failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2], help="ranks per job (default: 1 2)")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="write the table's figures there as JSON")
    args = ap.parse_args()
    node = Node("this-machine", "127.0.0.1", 0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="launch-bench-") as tmp:
        work = Path(tmp)
        ctx = RunContext(config=Config(name="bench"), transport=LocalTransport(), nodes=[node],
                         store=RunStore.create(work / "reports", "bench"), eval_python=sys.executable)
        for nproc in args.nproc:
            for form, package_dir in FORMS.items():
                one_job(ctx, node, package_dir, nproc, args.backend, work)  # warm the page cache
                runs = [one_job(ctx, node, package_dir, nproc, args.backend, work) for _ in range(args.repeats)]
                rows.append({"nproc": nproc, "backend": args.backend, "form": form,
                             "wall_s": round(statistics.median(r[0] for r in runs), 2),
                             "cpu_s": round(statistics.median(r[1] for r in runs), 2), "repeats": args.repeats})
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.repeats} jobs per row (medians)")
    print(f"| ranks | backend | {'form':<26} | wall s | CPU s |")
    print("|---:|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['nproc']} | {r['backend']} | {r['form']:<26} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
