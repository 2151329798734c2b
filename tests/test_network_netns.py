"""Connectivity, a gloo sweep and the pairwise hunt over SSH through torchrun on the 3-node namespace cluster.

Each node is its own network namespace with its own hostname and sshd; torchrun agents on different
nodes meet at the first node's address, exactly as on a cluster (gloo on CPU instead of NCCL).
"""

from __future__ import annotations

import json
import socket
import sys

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.network import AllreducePhase, ConnectivityPhase
from clustereval.phases.settings import NetworkSettings
from clustereval.phases.torchrun import launch, probe_nodes
from clustereval.runner import clear_scratch
from clustereval.store import RunState, RunStore
from tests.conftest import run_cli

SMALL = NetworkSettings(max_bytes=64 * 1024)


def _ctx(tmp_path, cluster, ranks: int = 1) -> RunContext:
    with socket.socket() as s:  # a port no other test uses (the namespaces share no ports with it anyway)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes), ssh=cluster.ssh_settings(),
                    local_scratch=str(cluster.scratch_dir), rdzv_port=port, cpu_ranks_per_node=ranks,
                    eval_python=sys.executable)
    return RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store,
                      eval_python=sys.executable)


@pytest.mark.timeout(1500)
def test_network_phases_over_ssh_with_a_loopback_hostname_and_a_slow_node(tmp_path, cluster3):
    """node0's hostname resolves to 127.0.1.1 there (the rendezvous quirk); node2's link is slow."""
    cluster3.set_hostname_loopback(0)
    cluster3.shape(2, rate_mbit=100)
    ctx = _ctx(tmp_path, cluster3)
    names = [n.name for n in cluster3.nodes]
    host = cluster3.nodes[0].address
    probes = probe_nodes(ctx, ctx.nodes, host, ctx.config.rdzv_port)
    assert probes[0].hostname_addrs == ["127.0.1.1"] and probes[0].matches_endpoint is False
    assert probes[1].route_addr == cluster3.nodes[1].address
    # without the fix nobody hosts the store: the runbook's problem 1, diagnosed as such
    broken = launch(ctx, label="nofix", module="connectivity", args=["--backend", "gloo"], nodes=ctx.nodes, nproc=1,
                    port=ctx.config.rdzv_port, timeout_s=90, probes=probes, auto_fix=False, rdzv_timeout_s=6)
    assert not broken.info.ok
    assert broken.info.diagnosis == "store-not-listening", broken.info.diagnosis_text

    conn = ConnectivityPhase().run(ctx)
    assert conn.status == "ok" and conn.allreduce_ok, conn.gaps
    assert conn.scope == "inter-node" and conn.num_ranks == 3
    assert [r.host for r in conn.ranks] == names  # each rank ran on its own node
    assert conn.launch.endpoint == f"{host}:{ctx.config.rdzv_port}"
    assert conn.launch.is_host_node == names[0]
    assert conn.launch.local_addrs == {n.name: n.address for n in cluster3.nodes}
    assert any("127.0.1.1" in r for r in conn.launch.fix_reasons)
    ctx.records["connectivity"] = conn

    rec = AllreducePhase(SMALL).run(ctx)
    assert rec.status == "ok", rec.gaps
    assert rec.intra == []  # one rank per node: nothing to all-reduce within a node
    assert rec.inter is not None and rec.inter.ok and rec.inter.num_ranks == 3
    assert rec.inter.launch.is_host_node == names[0]
    assert [r.payload_bytes for r in rec.inter.rows] == [32768, 65536]
    assert all(r.check_ok for r in rec.inter.rows + rec.inter.blocking_rows)

    # the phases above were one run: its end clears its scratch, so a command started in the same minute
    # (whose scratch folder would have the same name) finds none of it
    clear_scratch(ctx)
    # the pairwise hunt through the command, as a user runs it: node2's slow link makes it the straggler
    path = cluster3.write_config(tmp_path / "cluster.toml", rdzv_port=ctx.config.rdzv_port,
                                 eval_python=sys.executable, cpu_ranks_per_node=1, reports_dir=str(tmp_path / "pw"))
    proc = run_cli("pairwise", "--config", str(path), "--payload-mib", "1", timeout=400)
    assert proc.returncode == 1, proc.stderr  # a straggler named is a check that failed
    assert "1 MiB all-reduce, 2 ranks per pair (gloo), 3 pairs in 3 rounds" in proc.stdout
    assert f"stragglers: {names[2]}" in proc.stdout
    (raw,) = (tmp_path / "pw").glob("raw-*-pairwise-*")
    pw = json.loads((raw / "pairwise.record.json").read_text())
    assert pw["status"] == "ok" and pw["num_rounds"] == 3 and pw["stragglers"] == [names[2]]
    assert {(p["a"], p["b"]) for p in pw["pairs"] if p["slow"]} == {
        (p["a"], p["b"]) for p in pw["pairs"] if names[2] in (p["a"], p["b"])}
    assert (raw / pw["heatmap"]).exists()


@pytest.mark.timeout(900)
def test_unreachable_rendezvous_port_is_diagnosed(tmp_path, cluster3):
    ctx = _ctx(tmp_path, cluster3)
    port = ctx.config.rdzv_port
    # node1 has no route to node0 (what a missing security-group rule looks like from node1)
    blocked = cluster3.exec(1, ["ip", "route", "add", "prohibit", f"{cluster3.nodes[0].address}/32"])
    assert blocked.returncode == 0, blocked.stderr
    res = launch(ctx, label="blocked", module="connectivity", args=["--backend", "gloo"], nodes=ctx.nodes, nproc=1,
                 port=port, timeout_s=90, rdzv_timeout_s=5)
    assert not res.info.ok
    assert res.info.diagnosis == "unreachable-port", res.info.diagnosis_text
    assert cluster3.nodes[1].name in res.info.diagnosis_text
    # every exit is reported as it happened: the first launcher to give up failed, the others were
    # stopped by us, none timed out (which node gives up first depends on the machine's load: once
    # one leaves, torchrun closes the rendezvous for all; the diagnosis above still names node1)
    exits = {e.node: e for e in res.info.exits}
    assert {e.state for e in exits.values()} <= {"stopped", "failed"}
    assert "failed" in {e.state for e in exits.values()}
    assert res.info.port_free is True
