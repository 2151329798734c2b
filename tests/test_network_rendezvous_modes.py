"""One rendezvous plan for every torchrun job, on the 4-node namespace bed over SSH, in three
name-resolution modes: preflight's gloo check proves the plan and records it, and connectivity, the
inter-node sweep and pairwise each use it unchanged, in every mode. The two modes that need a plan
get a bed of their own (one smallest payload, two samples a pair, the pairwise among three of the
nodes: this checks the launches, not speed); in the mode that needs none (every hostname resolves
everywhere) the plan is read from the records of the session's 4-node smoke run, whose bed resolves
names that way."""

from __future__ import annotations

import socket
import sys

import pytest

from clustereval.config import load_config
from clustereval.phases.base import RunContext
from clustereval.phases.network import AllreducePhase, ConnectivityPhase
from clustereval.phases.pairwise import run_pairwise
from clustereval.phases.preflight import PreflightPhase
from clustereval.phases.settings import NetworkSettings, PairwiseSettings
from clustereval.records.network import AllreduceRecord, ConnectivityRecord, PairwiseRecord
from clustereval.records.run import PreflightRecord
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from tests.conftest import only_leftovers

SMALLEST = 32 * 2**10  # the sweep's smallest payload, alone: one all-reduce size per job
TINY = NetworkSettings(min_bytes=SMALLEST, max_bytes=SMALLEST)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def context(tmp_path, cluster) -> RunContext:
    path = cluster.write_config(tmp_path / "cluster.toml", rdzv_port=free_port(), cpu_ranks_per_node=1,
                                reports_dir=str(tmp_path / "reports"))
    config = load_config(path)
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    return RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store,
                      eval_python=sys.executable)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("mode", ["loopback-ip-peers", "own-address-ip-peers"])
def test_every_job_uses_the_plan_preflight_proved(tmp_path, netns_cluster, mode):
    cluster = netns_cluster(4)
    cluster.set_name_resolution(mode)
    ctx = context(tmp_path, cluster)
    names = [n.name for n in cluster.nodes]
    addresses = {n.name: n.address for n in cluster.nodes}

    pre = PreflightPhase().run(ctx)
    gloo = [p for p in pre.probes if p.kind == "gloo"]
    assert pre.passed and [p.ok for p in gloo] == [True] * 4, (
        [(p.kind, p.node, p.detail) for p in pre.probes if not p.ok], [say(g).text for g in pre.gaps])
    plan = pre.rendezvous_plan
    assert plan is not None and plan.proven and plan.nodes == names
    assert plan.socket_ifnames == {n: "eth0" for n in names}
    # peers cannot resolve the hostnames (and in loopback mode no node hosts the store by itself)
    assert plan.is_host_node == names[0] and plan.local_addrs == addresses
    assert any(("127.0.1.1" if mode == "loopback-ip-peers" else "cannot resolve the hostname") in r
               for r in plan.reasons), plan.reasons
    ctx.records["preflight"] = pre

    conn = ConnectivityPhase().run(ctx)
    assert conn.status == "ok" and conn.allreduce_ok, conn.gaps
    assert [r.host for r in conn.ranks] == names
    assert (conn.launch.is_host_node, conn.launch.local_addrs, conn.launch.socket_ifnames) == (
        plan.is_host_node, plan.local_addrs, plan.socket_ifnames)
    ctx.records["connectivity"] = conn

    ar = AllreducePhase(TINY).run(ctx)
    assert ar.status == "ok", ar.gaps
    assert ar.inter is not None and ar.inter.ok and ar.inter.num_ranks == 4
    assert (ar.inter.launch.local_addrs, ar.inter.launch.socket_ifnames) == (plan.local_addrs, plan.socket_ifnames)

    # three of the four nodes: pairs whose first node (the pair's rendezvous host) is the plan's host,
    # and a pair hosted by another node, each launched with its part of the one plan
    trio = [ctx.nodes[0], ctx.nodes[2], ctx.nodes[3]]
    pw = run_pairwise(ctx, trio, settings=PairwiseSettings(payload_bytes=SMALLEST, samples_per_pair=2))
    assert pw.rendezvous == plan
    assert {(p.a, p.b) for p in pw.pairs} == {(names[0], names[2]), (names[0], names[3]), (names[2], names[3])}
    assert all(p.busbw_gb_s is not None and len(p.samples_gb_s) == 2 for p in pw.pairs), [
        (p.a, p.b, p.error) for p in pw.pairs]


@pytest.mark.timeout(1800)  # the session's 4-node smoke run may start here
def test_every_job_uses_the_plan_preflight_proved_where_every_hostname_resolves(four_node_smoke):
    """Mode ``all``, read from the smoke run (two gloo ranks a node, every pair of the four nodes):
    the plan preflight proved needs no fix, and connectivity, the inter-node sweep and every pair of
    the pairwise hunt were launched with it unchanged."""
    cluster = four_node_smoke.cluster
    assert cluster.name_mode == "all" and only_leftovers(four_node_smoke.result), four_node_smoke.output[-3000:]
    from tests.test_e2e import _report

    report = _report(cluster.workdir)
    store = RunStore.open(report.parent / f"raw-{report.stem}")
    names = [n.name for n in cluster.nodes]

    pre = store.load_record("preflight", PreflightRecord)
    assert pre is not None and pre.passed
    gloo = [p for p in pre.probes if p.kind == "gloo"]
    assert [p.ok for p in gloo] == [True] * 4, [(p.kind, p.node, p.detail) for p in pre.probes if not p.ok]
    plan = pre.rendezvous_plan
    assert plan is not None and plan.proven and plan.nodes == names
    assert plan.socket_ifnames == {n: "eth0" for n in names}
    assert not plan.needed and plan.reasons == [] and plan.is_host_node == "" and plan.local_addrs == {}

    conn = store.load_record("connectivity", ConnectivityRecord)
    assert conn is not None and conn.status == "ok" and conn.allreduce_ok, conn.gaps
    assert list(dict.fromkeys(r.host for r in conn.ranks)) == names
    assert (conn.launch.is_host_node, conn.launch.local_addrs, conn.launch.socket_ifnames) == (
        plan.is_host_node, plan.local_addrs, plan.socket_ifnames)

    ar = store.load_record("allreduce", AllreduceRecord)
    assert ar is not None and ar.status == "ok", ar.gaps
    assert ar.inter is not None and ar.inter.ok and ar.inter.num_ranks == len(conn.ranks) == 4 * 2
    assert (ar.inter.launch.local_addrs, ar.inter.launch.socket_ifnames) == (plan.local_addrs, plan.socket_ifnames)

    pw = store.load_record("pairwise", PairwiseRecord)
    assert pw is not None and pw.rendezvous == plan
    assert len(pw.pairs) == 6 and {frozenset((p.a, p.b)) for p in pw.pairs} == {
        frozenset((a, b)) for i, a in enumerate(names) for b in names[i + 1:]}
    assert all(p.busbw_gb_s is not None and p.samples_gb_s for p in pw.pairs), [(p.a, p.b, p.error) for p in pw.pairs]
