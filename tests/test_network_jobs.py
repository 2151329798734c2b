"""A collective is one job: on the 3-node namespace bed over SSH, a node whose launcher fails stops
every other node at once, Ctrl-C (``ctx.stop``) stops them all within seconds, and afterwards no
torchrun or worker process of the job is left on any node and the rendezvous port is free."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.torchrun import launch
from clustereval.store import RunState, RunStore


def _ctx(tmp_path, cluster) -> RunContext:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes), ssh=cluster.ssh_settings(),
                    local_scratch=str(cluster.scratch_dir), rdzv_port=port, cpu_ranks_per_node=1,
                    eval_python=sys.executable)
    return RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store,
                      eval_python=sys.executable)


def left_after(run_id: str, grace_s: float = 20.0) -> list[str]:
    """The job's processes still there once the remote watchdog shells had their grace (they send
    SIGTERM, then SIGKILL 5 s later, to the job's process group and then exit themselves)."""
    deadline = time.monotonic() + grace_s
    while job_processes(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    return job_processes(run_id)


def _process_table() -> dict[str, tuple[str, bytes, str]]:
    """pid -> (command line, environment, parent pid) of every process this machine lets us read."""
    table = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{pid}/stat") as fh:
                parent = fh.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        table[pid] = (cmd, env, parent)
    return table


def job_processes(run_id: str) -> list[str]:
    """Every process of the job on this machine (the bed's nodes share its process table): torchrun by
    its --rdzv_id, the workers by the TORCHELASTIC_RUN_ID torchrun gives them."""
    return [f"{pid}: {cmd[:120]}" for pid, (cmd, env, _) in _process_table().items()
            if run_id in cmd or f"TORCHELASTIC_RUN_ID={run_id}".encode() in env]


def job_ranks(run_id: str) -> list[str]:
    """The job's worker ranks on this machine: an interpreter running a worker module, or a process
    torchrun forked to run a worker's file (its command line is its launcher's, and so is its
    parent's)."""
    table = _process_table()
    found = []
    for pid, (cmd, env, parent) in table.items():
        forked = run_id in cmd and "--run_path" in cmd and table.get(parent, ("",))[0] == cmd
        started = f"TORCHELASTIC_RUN_ID={run_id}".encode() in env and "-m clustereval.workers." in cmd
        if forked or started:
            found.append(f"{pid}: {cmd[:120]}")
    return found


def listening(cluster, index: int, port: int) -> bool:
    out = cluster.exec(index, ["ss", "-Htln", f"sport = :{port}"]).stdout
    return bool(out.strip())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_failed_node_stops_the_job_everywhere_and_leaves_nothing(tmp_path, cluster3):
    ctx = _ctx(tmp_path, cluster3)
    port = ctx.config.rdzv_port
    # node1 cannot reach node0 (a missing firewall rule seen from node1): its agent fails, the others wait
    blocked = cluster3.exec(1, ["ip", "route", "add", "prohibit", f"{cluster3.nodes[0].address}/32"])
    assert blocked.returncode == 0, blocked.stderr
    res = launch(ctx, label="fails", module="connectivity", args=["--backend", "gloo"], nodes=ctx.nodes, nproc=1,
                 port=port, timeout_s=600, rdzv_timeout_s=20, diagnose=False)
    info = res.info
    by_node = {e.node: e for e in info.exits}
    n0, n1, n2 = (n.name for n in cluster3.nodes)
    assert not info.ok
    # whichever node gave up first (node1 on the store, or a peer on its join timeout) stopped the job:
    # each node's exit is its own, with its own cause, and nobody waited for the 600 s timeout
    first = min((e for e in info.exits if e.state == "failed"), key=lambda e: e.seconds)
    assert first.rc not in (0, None) and first.cause and info.stop_reason == f"{first.node} exited {first.rc}"
    for ex in info.exits:
        assert ex.state in ("failed", "stopped") and ex.cause, ex
        if ex.state == "stopped":
            assert ex.rc is None and ex.cause == f"stopped by us after {info.stop_reason}"
        assert ex.seconds - first.seconds < 30
    assert {n0, n1, n2} == set(by_node)
    assert info.seconds < 300
    assert left_after(f"fails-{ctx.store.run_id}") == []
    assert info.port_free is True and not listening(cluster3, 0, port)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stop_kills_the_running_job_on_every_node_within_seconds(tmp_path, cluster3):
    ctx = _ctx(tmp_path, cluster3)
    port = ctx.config.rdzv_port
    run_id = f"long-{ctx.store.run_id}"
    # a sweep that would run for many minutes: thousands of samples of a small payload
    args = ["--backend", "gloo", "--min-bytes", "65536", "--max-bytes", "65536", "--modes", "back-to-back",
            "--samples", "100000"]
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("res", launch(
        ctx, label="long", module="allreduce", args=args, nodes=ctx.nodes, nproc=1, port=port, timeout_s=600)))
    t.start()
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and len(job_ranks(run_id)) < 3:
        time.sleep(1)  # every node's worker is running: the collective is under way
    assert len(job_ranks(run_id)) >= 3, job_processes(run_id)
    time.sleep(3)
    stopped_at = time.monotonic()
    ctx.stop.set()
    t.join(120)
    assert not t.is_alive()
    took = time.monotonic() - stopped_at
    info = box["res"].info
    assert took < 60, took
    assert info.stop_reason == "interrupted" and info.diagnosis == "interrupted"
    assert {e.state for e in info.exits} == {"interrupted"}
    assert all(e.cause == "stopped by us: the run was interrupted" for e in info.exits)
    assert left_after(run_id) == []
    assert info.port_free is True and not listening(cluster3, 0, port)
