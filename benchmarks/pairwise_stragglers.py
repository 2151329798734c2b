"""Does the pairwise hunt name the right nodes, run after run, on a loaded machine?

Builds the 4-node namespace test bed (root, ``ip netns``, sshd: see ``tests/testbed.py``) and runs
``phases.pairwise.run_pairwise`` over SSH ``--runs`` times un-throttled (the right answer: nobody)
and ``--runs`` times with one node's link rate-limited by tc tbf (the right answer: exactly that
node), the two cases alternating. Prints one row per run (what was named, the healthy pairs' slowest sample, the limit, the
seconds it took) and the counts. ``--busy N`` starts N CPU-bound loops beside it for the whole time,
so the judgement is shown not to depend on an idle machine.

    sudo python3 benchmarks/pairwise_stragglers.py --runs 10 --busy 2
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.pairwise import run_pairwise  # noqa: E402
from clustereval.store import RunState, RunStore  # noqa: E402
from tests.testbed import NetnsCluster  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def context(cluster: NetnsCluster, folder: Path) -> RunContext:
    store = RunStore.create(folder, "bench")
    store.save_state(RunState(name="bench", stamp="s"))
    config = Config(name="bench", access="ssh", nodes=tuple(n.name for n in cluster.nodes),
                    ssh=cluster.ssh_settings(), local_scratch=str(cluster.scratch_dir), rdzv_port=free_port(),
                    cpu_ranks_per_node=1, eval_python=sys.executable)
    return RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store,
                      eval_python=sys.executable)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs each way")
    ap.add_argument("--rate-mbit", type=float, default=50.0, help="the limited node's link rate")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound loops to run beside it")
    args = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    cluster = NetnsCluster.create(4)
    rows: list[tuple[str, int, str, bool, float, float, float]] = []
    try:
        slow = cluster.nodes[2].name
        modes = ("un-throttled", f"{slow[-2:]} at {args.rate_mbit:g} Mbit/s")
        with tempfile.TemporaryDirectory(prefix="pairwise-bench-") as tmp:
            # the two cases alternate, so a machine whose load changes over the hour weighs on both alike
            for run in range(1, args.runs + 1):
                for mode in modes:
                    if mode == modes[0]:
                        cluster.unshape(2)
                    else:
                        cluster.shape(2, rate_mbit=args.rate_mbit)
                    want = [] if mode == modes[0] else [slow]
                    t0 = time.monotonic()
                    rec = run_pairwise(context(cluster, Path(tmp) / f"{len(rows)}"), None)
                    right = rec.stragglers == want and all(p.busbw_gb_s is not None for p in rec.pairs)
                    named = ", ".join(n[-2:] for n in rec.stragglers) or "nobody"
                    rows.append((mode, run, named, right, rec.healthy_floor_gb_s, rec.limit_gb_s,
                                 time.monotonic() - t0))
                    print(f"{mode:>22} run {run:2d}: named {named:8s} {'right' if right else 'WRONG'}  "
                          f"floor {rec.healthy_floor_gb_s:.3f} GB/s  limit {rec.limit_gb_s:.3f} GB/s  "
                          f"{time.monotonic() - t0:.0f} s  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        cluster.close()
        for p in busy:
            p.kill()
            p.wait()
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {args.busy} busy loop(s) beside it")
    print("| case | runs | right | wrong | seconds per run (median) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for mode in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == mode]
        secs = sorted(r[6] for r in mine)
        print(f"| {mode} | {len(mine)} | {sum(r[3] for r in mine)} | {sum(not r[3] for r in mine)} | "
              f"{secs[len(secs) // 2]:.0f} |")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
