"""How do preflight, the environment inventory, the snapshot and the report grow with the node count?

Builds the 4-node namespace test bed (root, ``ip netns``, sshd: see ``tests/testbed.py``) and an
ssh configuration with N ``Host`` aliases (``fleet-0000`` ...) spread over its 4 sshd namespaces,
each alias a distinct node name to clustereval. For each N a fresh controller process (so its
peak memory is its own) runs, over SSH exactly as a run does: preflight's node-by-node checks
(reachability, GPUs and paths, torch; the TCP port check and the gloo collective are left out: the
aliases of one namespace share its ports), the environment phase, the snapshot of every node,
then the report's render and lint. Prints one row per phase: wall seconds, the controller's CPU
seconds (its own and its ssh clients'), its peak RSS.

The aliases' sshd and every command they run share this machine's CPUs with the controller, so
the wall time on the bed includes all N nodes' own work; on a real fleet each node does its own.
``--node-python`` picks the nodes' interpreter (default: one without torch when there is one, so
the inventory's torch import does not swamp the figures; the controller's share is the same).

    sudo python3 benchmarks/fleet_orchestration.py --nodes 64,256,1024
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PHASES = ("preflight", "environment", "snapshot", "report")


# -- the controller: one process per N --------------------------------------------------------------

def _usage() -> tuple[float, float]:
    """(CPU seconds of this process and its finished children, peak RSS in MiB of this process)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, me.ru_maxrss / 1024


def masters(folder: str) -> tuple[float, float, int]:
    """The shared ssh connections (``ControlMaster``, detached from the controller, so not among its
    children): their CPU seconds so far, their summed PSS in MiB, how many."""
    cpu = pss = 0.0
    count = 0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if not folder or folder not in cmd:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) / 1024
            count += 1
        except (OSError, IndexError, ValueError):
            continue
    return cpu, pss, count


def controller(args: argparse.Namespace) -> int:
    from clustereval.analysis.fleet import policy_from
    from clustereval.config import load_config
    from clustereval.debug.snapshot import collect
    from clustereval.phases.base import RunContext
    from clustereval.phases.environment import EnvironmentPhase
    from clustereval.phases.preflight import Preflight
    from clustereval.phases.settings import PreflightSettings
    from clustereval.report.lint import lint_text
    from clustereval.runner import render
    from clustereval.store import RunState, RunStore, utc_stamp
    from clustereval.transport import ssh as ssh_module
    from clustereval.transport.factory import make_transport, nodes_of

    # every shared connection kept for the whole measurement, so none takes its CPU with it when it
    # ends between phases (a run's own connections close 60 s after their last command)
    ssh_module.MASTER_PERSIST_S = 3600
    config = load_config(args.config)
    transport = make_transport(config)
    nodes = nodes_of(config, transport)
    store = RunStore.create(Path(args.folder), config.name)
    store.save_state(RunState(name=config.name, stamp=utc_stamp(), phases_planned=["environment"]))
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store)

    def timed(phase: str, fn) -> None:  # noqa: ANN001
        control = getattr(transport, "_control_dir", "")
        cpu0, _ = _usage()
        mcpu0 = masters(control)[0] if control else 0.0
        t0 = time.monotonic()
        detail = fn()
        wall = time.monotonic() - t0
        cpu1, rss = _usage()
        control = control or getattr(transport, "_control_dir", "")
        mcpu1, mpss, count = masters(control) if control else (0.0, 0.0, 0)
        print(json.dumps({"phase": phase, "wall_s": round(wall, 1), "cpu_s": round(cpu1 - cpu0 + mcpu1 - mcpu0, 1),
                          "rss_mib": round(rss, 1), "masters_mib": round(mpss, 1), "masters": count,
                          "detail": detail}), flush=True)

    def preflight() -> str:
        rec = Preflight(ctx, PreflightSettings()).run(collective=False)
        ctx.records["preflight"] = rec
        store.save_record("preflight", rec)
        bad = [p for p in rec.probes if not p.ok and p.gating]
        return f"passed={rec.passed}, {len(rec.probes)} probes, {len(bad)} failed"

    def environment() -> str:
        rec = EnvironmentPhase().run(ctx)
        ctx.records["environment"] = rec
        store.save_record("environment", rec)
        failed = [n for n in rec.nodes if n.errors]
        why = f" ({failed[0].node}: {failed[0].errors[0]})" if failed else ""
        return f"status={rec.status}, {len(rec.nodes) - len(failed)} of {len(rec.nodes)} nodes without an error{why}"

    def snapshot() -> str:
        rec = collect(config, ctx.transport, nodes, sample_s=args.sample_s)
        return f"{sum(1 for n in rec.nodes if n.reachable)} of {len(rec.nodes)} nodes answered"

    def report() -> str:
        rendered = render(store, "ssh", None, policy_from(None))
        problems = lint_text(rendered.markdown)
        store.write_report(rendered.markdown)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            Path(args.out, f"report-{len(nodes)}-nodes.md").write_text(rendered.markdown)
        return f"{len(rendered.markdown.splitlines())} lines, {len(problems)} lint problems"

    try:
        for phase, fn in (("preflight", preflight), ("environment", environment), ("snapshot", snapshot),
                          ("report", report)):
            if phase in args.phases:
                timed(phase, fn)
    finally:
        transport.close()
    return 0


# -- the bed and the table ----------------------------------------------------------------------------

def node_python() -> str:
    """An interpreter without torch for the nodes, when this machine has one (else this one)."""
    for cand in ("/usr/bin/python3", shutil.which("python3") or ""):
        if cand and os.path.exists(cand):
            probe = subprocess.run([cand, "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
                                   capture_output=True, text=True)
            if probe.stdout.strip() == "True":
                return cand
    return sys.executable


def alias_port(cluster, i: int) -> int:  # noqa: ANN001 - a tests.testbed.NetnsCluster
    return cluster.ssh_port + 1 + i // len(cluster.nodes)


def start_aliases(cluster, n: int) -> list[subprocess.Popen]:  # noqa: ANN001
    """One sshd per alias, in its namespace on a port of its own, each in a mount and UTS namespace
    of its own: its own hostname, its own node-local scratch at ``scratch_dir``, and root's login
    shell ``/bin/sh`` (this machine's root ``.bashrc`` would add its own start-up to every command)."""
    from tests.testbed import SSHD

    passwd = cluster.workdir / "passwd-sh"
    passwd.write_text("".join(
        ":".join([*ln.split(":")[:6], "/bin/sh"]) + "\n" if ln.startswith("root:") else ln + "\n"
        for ln in Path("/etc/passwd").read_text().splitlines()))
    setup = ('hostname "$0" && mount --bind "$1" "$2" && mount --bind "$3" /etc/passwd && '
             'exec "$4" -D -e -f "$5"')
    procs = []
    for i in range(n):
        ns = cluster.nodes[i % len(cluster.nodes)]
        d = cluster.workdir / "aliases" / f"fleet-{i:04d}"
        (d / "scratch").mkdir(parents=True)
        base = (cluster.workdir / ns.name / "sshd_config").read_text()
        text = base.replace(f"Port {cluster.ssh_port}\n", f"Port {alias_port(cluster, i)}\n")
        (d / "sshd_config").write_text(text.replace("MaxStartups 100:30:200", "MaxStartups 200:30:400"))
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns.netns, "unshare", "--uts", "sh", "-c", setup, f"fleet-{i:04d}",
             str(d / "scratch"), str(cluster.scratch_dir), str(passwd), SSHD, str(d / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for i in range(n):
        ns = cluster.nodes[i % len(cluster.nodes)]
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection((ns.address, alias_port(cluster, i)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or procs[i].poll() is not None:
                    raise RuntimeError(f"the sshd of fleet-{i:04d} did not start") from None
                time.sleep(0.05)
    return procs


def alias_config(cluster, folder: Path, n: int, python: str) -> Path:  # noqa: ANN001 - a tests.testbed.NetnsCluster
    """cluster.toml, a hostfile of N aliases and the ssh configuration that resolves them; the path
    of cluster.toml."""
    common = (f"  User root\n  IdentityFile {cluster.key}\n  IdentitiesOnly yes\n"
              f"  UserKnownHostsFile {cluster.known_hosts}\n  StrictHostKeyChecking no\n"
              "  BatchMode yes\n  LogLevel ERROR\n")
    lines = ["# generated: N aliases over the bed's namespaces"]
    for i in range(n):
        lines.append(f"Host fleet-{i:04d}\n  HostName {cluster.nodes[i % len(cluster.nodes)].address}\n"
                     f"  Port {alias_port(cluster, i)}\n{common}")
    (folder / "ssh_config").write_text("\n".join(lines) + "\n")
    (folder / "hostfile").write_text("".join(f"fleet-{i:04d}\n" for i in range(n)))
    names = ", ".join(f'"fleet-{i:04d}"' for i in range(n))
    toml = (f'name = "fleet{n}"\naccess = "ssh"\nnodes = [{names}]\nhostfile = "hostfile"\n'
            f'local_scratch = "{cluster.scratch_dir}"\nshared_paths = ["{cluster.shared_dir}"]\n'
            f'eval_python = "{python}"\ninstall_packages = false\n'
            f'[ssh]\nconfig_file = "{folder / "ssh_config"}"\nconnect_timeout_s = 10\n')
    (folder / "cluster.toml").write_text(toml)
    return folder / "cluster.toml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="64,256,1024", help="comma-separated node counts")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"a subset of {','.join(PHASES)}")
    ap.add_argument("--sample-s", type=float, default=3.0, help="the snapshot's iowait sample (its default)")
    ap.add_argument("--node-python", default="", help="the nodes' interpreter (default: one without torch)")
    ap.add_argument("--out", default="", help="keep each N's report in this folder")
    # the controller's own arguments (one process per N)
    ap.add_argument("--controller", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", default="", help=argparse.SUPPRESS)
    ap.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.phases = [p for p in args.phases.split(",") if p]
    if args.controller:
        return controller(args)

    from tests.testbed import NetnsCluster

    python = args.node_python or node_python()
    counts = [int(x) for x in args.nodes.split(",")]
    cluster = NetnsCluster.create(4)
    rows: list[tuple[int, dict]] = []
    sshds: list[subprocess.Popen] = []
    try:
        t0 = time.monotonic()
        sshds = start_aliases(cluster, max(counts))
        print(f"  {len(sshds)} sshd started in {time.monotonic() - t0:.0f} s", flush=True)
        for n in counts:
            folder = Path(tempfile.mkdtemp(prefix=f"fleet{n}-", dir=cluster.workdir))
            conf = alias_config(cluster, folder, n, python)
            argv = [sys.executable, __file__, "--controller", "--config", str(conf), "--folder", str(folder / "reports"),
                    "--phases", ",".join(args.phases), "--sample-s", str(args.sample_s), "--out", args.out]
            t0 = time.monotonic()
            load0 = os.getloadavg()[0]
            proc = subprocess.run(argv, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            for line in proc.stdout.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    row["load"] = round(max(load0, os.getloadavg()[0]), 1)
                    rows.append((n, row))
                    print(f"  {n} nodes: {row['phase']}: {row['wall_s']} s, controller CPU {row['cpu_s']} s, "
                          f"peak RSS {row['rss_mib']} MiB + {row['masters']} shared connections "
                          f"{row['masters_mib']} MiB ({row['detail']})", flush=True)
            print(f"  {n} nodes done in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        for proc in sshds:
            proc.kill()
        for proc in sshds:
            proc.wait()
        cluster.close()
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"nodes' Python {python}, snapshot sample {args.sample_s:g} s")
    print("\n| nodes | phase | wall (s) | controller CPU (s) | controller peak RSS (MiB) "
          "| shared ssh connections (PSS MiB) | what it did |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for n, row in rows:
        print(f"| {n} | {row['phase']} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {row['rss_mib']:.0f} | "
              f"{row['masters']} ({row['masters_mib']:.0f}) | {row['detail']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
