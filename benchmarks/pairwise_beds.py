"""The pairwise hunt's rounds and pairs on a real 8-node bed, over SSH and over Slurm.

Builds 8 network namespaces with sshd (``tests/testbed.py``) and, for Slurm, a local Slurm cluster
over them (``tests/slurmbed.py``: slurmctld here, one slurmd per namespace), then runs
``clustereval pairwise`` (gloo on CPU, one rank per node, the phase's defaults) through each
transport, un-throttled (the right answer: nobody named) and with one node's link held to
``--rate-mbit`` by tc tbf (the right answer: exactly that node), ``--runs`` times each. Prints one
row per run: the rounds and pairs the hunt took, against the budget of 2·log2 N rounds, who was
named, the seconds.

    sudo python3 benchmarks/pairwise_beds.py --runs 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.slurmbed import SlurmCluster, slurm_unavailable_reason  # noqa: E402
from tests.testbed import NetnsCluster  # noqa: E402

NUM_NODES = 8
SLOW = 5  # the node whose link is limited


def hunt(config: Path, reports: Path, env: dict[str, str]) -> tuple[dict, float, int]:
    """``clustereval pairwise`` once: its record, its seconds, its exit status."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "clustereval", "pairwise", "--config", str(config),
                           "--reports-dir", str(reports)], capture_output=True, text=True, env=env, timeout=3600)
    seconds = time.monotonic() - t0
    found = sorted(reports.glob("raw-*/pairwise.record.json"))
    if not found:
        raise RuntimeError(f"no pairwise record (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(found[-1].read_text()), seconds, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs per transport and case")
    ap.add_argument("--rate-mbit", type=float, default=50.0, help="the limited node's link rate")
    ap.add_argument("--transports", default="ssh,slurm", help="ssh, slurm or both")
    ap.add_argument("--cases", default="un-throttled,limited", help="un-throttled, limited or both, in this order")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy every run's report folder (records, raw logs) here, one folder per run")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cluster = NetnsCluster.create(NUM_NODES)
    slurm: SlurmCluster | None = None
    rows = []
    try:
        configs: dict[str, tuple[Path, dict[str, str]]] = {"ssh": (cluster.write_config(), env)}
        if "slurm" in args.transports:
            reason = slurm_unavailable_reason()
            if reason:
                print(f"slurm: {reason}", file=sys.stderr)
            else:
                slurm = SlurmCluster.create(cluster)
                senv = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
                configs["slurm"] = (slurm.write_config(), {**senv, **slurm.env})
        slow = cluster.nodes[SLOW].name
        budget = 2 * math.ceil(math.log2(NUM_NODES))
        for run in range(1, args.runs + 1):
            for transport in [t for t in args.transports.split(",") if t in configs]:
                config, tenv = configs[transport]
                for limited in [case == "limited" for case in args.cases.split(",")]:
                    if limited:
                        cluster.shape(SLOW, rate_mbit=args.rate_mbit)
                    else:
                        cluster.unshape(SLOW)
                    reports = cluster.workdir / f"bench-{transport}-{run}-{int(limited)}"
                    rec, seconds, rc = hunt(config, reports, tenv)
                    if args.keep is not None:
                        shutil.copytree(reports, args.keep / reports.name, dirs_exist_ok=True)
                    # the Slurm record names nodes by their Slurm names, the SSH one by cluster.toml's
                    named = [n for n in rec.get("stragglers", [])]
                    want = [n for n in named if n.endswith(slow[-3:])] if limited else []
                    right = named == want and (not limited or len(want) == 1)
                    rows.append((transport, "limited" if limited else "un-throttled", run, rec.get("num_rounds", 0),
                                 len(rec.get("pairs", [])), budget, ", ".join(n[-3:] for n in named) or "nobody",
                                 right, seconds, rec.get("unresolved", [])))
                    print(f"{transport:>5} {rows[-1][1]:>12} run {run}: {rows[-1][3]} rounds, {rows[-1][4]} pairs, "
                          f"named {rows[-1][6]} ({'right' if right else 'WRONG'}), exit {rc}, {seconds:.0f} s, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
        cluster.unshape(SLOW)
    finally:
        if slurm is not None:
            slurm.close()
        cluster.close()
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} CPUs, "
          f"{NUM_NODES} nodes, node{SLOW} at {args.rate_mbit:g} Mbit/s when limited")
    print("| transport | case | run | rounds | budget 2·log2 N | pairs | named | right | seconds | unresolved |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[5]} | {r[4]} | {r[6]} | {'yes' if r[7] else 'no'} | "
              f"{r[8]:.0f} | {', '.join(r[9]) or '-'} |")
    return 0 if all(r[7] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
