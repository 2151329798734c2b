"""Preflight's checks across nodes for real: a port blocked on one node of the 4-node sshd bed is
named with that node, exit 1; and on a bed of 128 nodes, each a namespace with its own address and
ports, the TCP check (N log N connections by its rule) passes, or names the one node whose port a
firewall drops, within well under a minute on a 2-core machine."""

from __future__ import annotations

import os
import resource
import sys
import time

import pytest

from clustereval.config import Config, HostEntry, load_config
from clustereval.phases.base import RunContext
from clustereval.phases.preflight import PreflightPhase
from clustereval.phases.preflight_tcp import PAIRS_FILE, plan_tcp
from clustereval.records.run import PreflightRecord
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from clustereval.runner import render
from clustereval.store import RunState, RunStore
from tests.conftest import run_cli

FLEET = 128


def test_a_port_a_firewall_drops_on_one_node_is_named_with_that_node_and_exit_1(netns_cluster):
    cluster = netns_cluster(4)
    port = load_config(cluster.config_path).rdzv_port
    plan = plan_tcp([n.address for n in cluster.nodes], port)
    # a port of node2 that node1 tries (one of the ports the pairwise rounds meet at)
    blocked = next(c for c in plan.connections if c.dst == 2 and c.src == 1 and c.port != port).port
    sources = [cluster.nodes[c.src].name for c in plan.connections if (c.dst, c.port) == (2, blocked)]
    rule = cluster.exec(2, ["ip", "rule", "add", "pref", "100", "ipproto", "tcp", "sport", str(blocked), "prohibit"])
    assert rule.returncode == 0, rule.stderr
    proc = run_cli("preflight", "--config", str(cluster.config_path), timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    node = cluster.nodes[2]
    assert (f"Port {blocked} on {node.name} ({node.address}) could not be reached over TCP from "
            f"{', '.join(sources)}") in proc.stdout
    assert "preflight failed" in proc.stderr and "│ gloo" not in proc.stdout
    for other in cluster.nodes:  # only the blocked node is blamed
        if other.index != 2:
            assert f"on {other.name} ({other.address}) could not be reached" not in proc.stdout


@pytest.fixture(scope="module")
def fleet_bed():
    from tests.addressbed import AddressBed
    from tests.testbed import TestbedUnavailable, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    try:
        bed = AddressBed.create(FLEET, per_subnet=32)
    except TestbedUnavailable as exc:
        pytest.skip(f"the address bed could not be built: {exc}")
    try:
        yield bed
    finally:
        bed.close()


def _preflight(bed, tmp_path) -> tuple[PreflightRecord, RunStore, float, float]:  # noqa: ANN001
    from tests.addressbed import NamespaceTransport, python_without_torch

    (tmp_path / "scratch").mkdir()
    (tmp_path / "shared").mkdir()
    # the nodes' interpreter has no torch: the gloo check waits for the eval Python, as on fresh nodes,
    # and 128 torch imports on 2 cores are not what this test is about
    python = python_without_torch(tmp_path, sys.executable)
    cfg = Config(name="fleet", access="local", nodes=tuple(n.name for n in bed.nodes), hostfile="hostfile",
                 hosts=tuple(HostEntry(n.address) for n in bed.nodes), gpus_per_node=1,
                 local_scratch=str(tmp_path / "scratch"), shared_paths=(str(tmp_path / "shared"),),
                 eval_python=str(python), given=("gpus_per_node", "shared_paths"))
    store = RunStore.create(tmp_path / "reports", cfg.name)
    store.save_state(RunState(name=cfg.name, stamp="s"))
    ctx = RunContext(config=cfg, transport=NamespaceTransport(), nodes=list(bed.nodes), store=store)
    t0, cpu0 = time.monotonic(), _cpu_s()
    rec = PreflightPhase().run(ctx)
    return rec, store, time.monotonic() - t0, _cpu_s() - cpu0


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (every node's commands ran as such)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.mark.timeout(600)
def test_preflight_across_128_nodes_each_with_its_own_address_passes(fleet_bed, tmp_path):
    rec, store, seconds, cpu_s = _preflight(fleet_bed, tmp_path)
    assert rec.passed, [(p.kind, p.node, p.detail) for p in rec.probes if not p.ok and p.gating][:5]
    tcp = [p for p in rec.probes if p.kind == "tcp"]
    assert len(tcp) == FLEET and all(p.ok for p in tcp)
    assert tcp[5].detail.startswith(f"reached port 29500 on {fleet_bed.nodes[0].name} and one port on each of ")
    assert rec.gloo_deferred  # no torch yet: the gloo check runs after the eval Python
    cov = rec.tcp_coverage
    assert cov is not None and cov.subnets == 4 and cov.subnet_pairs_untried == 0
    assert cov.num_connections <= FLEET * (2 * 7 + 2) and cov.pairs_tried < cov.pairs_total == FLEET * (FLEET - 1)
    assert rec.gaps == []  # the pairs the rule leaves out are no Gap: the report's header says them
    store.save_record("preflight", rec)
    rendered = render(store, "local")
    line = next(ln for ln in rendered.markdown.splitlines() if ln.startswith("- TCP check across nodes"))
    assert f"{cov.pairs_tried} of the {cov.pairs_total} ordered pairs of nodes tried" in line
    assert lint_text(rendered.markdown) == []
    lines = (store.raw_dir / PAIRS_FILE).read_text().splitlines()
    assert len(lines) == cov.num_connections + 1 and all(ln.endswith("\tok") for ln in lines[1:])
    print(f"\npreflight over {FLEET} nodes: {seconds:.1f} s wall, {cpu_s:.1f} CPU-s (the nodes' and the "
          f"controller's), {cov.num_connections} connections, load {os.getloadavg()[0]:.1f}")
    # every node's commands and the controller share this machine: its CPU, not the wall clock that
    # other work on it stretches, is what must fit well under a minute of 2 cores
    assert cpu_s < 60, cpu_s


@pytest.mark.timeout(600)
def test_a_port_a_firewall_drops_on_one_of_128_nodes_names_that_node_and_port(fleet_bed, tmp_path):
    victim = fleet_bed.nodes[77]
    plan = plan_tcp([n.address for n in fleet_bed.nodes], 29500)
    blocked = next(c.port for c in plan.connections if c.dst == victim.index and c.port != 29500)
    sources = {fleet_bed.nodes[c.src].name for c in plan.connections if (c.dst, c.port) == (victim.index, blocked)}
    fleet_bed.block_incoming(victim.index, blocked)
    try:
        rec, _, _, _ = _preflight(fleet_bed, tmp_path)
    finally:
        fleet_bed.unblock_incoming(victim.index, blocked)
    assert not rec.passed
    (gap,) = rec.gaps
    assert gap.kind == "preflight.tcp-unreached" and gap.node == victim.name and gap.facts["port"] == blocked
    assert set(gap.facts["sources"]) == sources
    assert say(gap).text.startswith(f"Port {blocked} on {victim.name} ({victim.address}) could not be reached")
    failed = {p.node for p in rec.probes if p.kind == "tcp" and not p.ok}
    assert failed == sources
