"""Preflight's TCP check across nodes: the rule that picks its connections (N log N of them, every
port number, every subnet pair) and how a failed connection is blamed."""

from __future__ import annotations

import math

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.preflight_tcp import (
    EVERY_PAIR_MAX_NODES,
    Connection,
    TcpCheck,
    num_strides,
    plan_tcp,
    subnet_of,
)
from clustereval.phases.settings import PreflightSettings
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from clustereval.report.preflight import tcp_coverage_line
from clustereval.store import RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport

PORT = 29500


def addresses(num_nodes: int, per_subnet: int = 250) -> list[str]:
    return [f"10.{i // per_subnet // 256}.{i // per_subnet % 256}.{i % per_subnet + 1}" for i in range(num_nodes)]


@pytest.mark.parametrize("n", [2, 3, 4, 9, EVERY_PAIR_MAX_NODES])
def test_a_small_fleet_tries_every_ordered_pair_and_leaves_nothing_untried(n):
    plan = plan_tcp(addresses(n), PORT)
    pairs = {(c.src, c.dst) for c in plan.connections if c.src != c.dst}
    assert pairs == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert plan.coverage.pairs_tried == plan.coverage.pairs_total == n * (n - 1)
    assert plan.coverage.max_stride == 0 and plan.num_ports == n + 1


@pytest.mark.parametrize("n, per_subnet", [(17, 250), (128, 32), (1024, 250), (4096, 64), (10000, 250)])
def test_the_check_grows_as_n_log_n_and_still_proves_what_the_run_needs(n, per_subnet):
    addrs = addresses(n, per_subnet)
    plan = plan_tcp(addrs, PORT)
    big_l = num_strides(n)
    assert big_l == math.ceil(math.log2(n))
    assert plan.coverage.num_connections == len(plan.connections) <= n * (2 * big_l + 2)
    # the rendezvous port on the first node from every node
    assert {c.src for c in plan.connections if c.dst == 0 and c.port == PORT} == set(range(n))
    # each node from its ring neighbour and the nodes 2, 4, ..., 2^(L-1) before it
    sources = {}
    for c in plan.connections:
        if c.port != PORT:
            sources.setdefault(c.dst, set()).add(c.src)
            assert c.port == PORT + 1 + (c.src + c.dst) % n
    for j in range(n):
        assert {(j - 2 ** k) % n for k in range(big_l)} <= sources[j], j
        assert len(sources[j]) <= 2 * big_l + 1
    # every port the run's pairs and sweeps meet at is tried on some node
    assert {c.port for c in plan.connections} == set(range(PORT, PORT + n + 1))
    # every subnet reaches every subnet (each has at least S/(L+1) nodes here)
    nets = [subnet_of(a) for a in addrs]
    linked = {(nets[c.src], nets[c.dst]) for c in plan.connections}
    assert plan.coverage.subnets == len(set(nets))
    assert all((a, b) in linked for a in set(nets) for b in set(nets)), plan.coverage
    assert plan.coverage.subnet_pairs_untried == 0
    assert plan.coverage.pairs_tried < plan.coverage.pairs_total == n * (n - 1)
    assert plan.coverage.max_stride == 2 ** (big_l - 1) < n


def test_subnets_too_small_to_reach_every_subnet_are_counted_not_hidden():
    plan = plan_tcp(addresses(4096, 8), PORT)  # 512 subnets of 8 nodes: 8 x 13 subnets each at most
    assert plan.coverage.subnets == 512 and plan.coverage.subnet_pairs_untried > 0
    assert plan.coverage.num_connections <= 4096 * (2 * 12 + 2)


def test_names_instead_of_addresses_get_the_ring_and_strides_alone():
    plan = plan_tcp([f"gpu-{i:03d}.cluster.internal" for i in range(64)], PORT)
    assert plan.coverage.subnets == 0 and plan.coverage.subnet_pairs_untried == 0
    assert max(len(plan.targets_of(i)) for i in range(64)) <= num_strides(64) + 1


def test_ipv6_addresses_fall_in_their_64():
    assert subnet_of("fd00:1:2:3::17") == subnet_of("[fd00:1:2:3::99]") == "fd00:1:2:3::/64"
    assert subnet_of("10.0.3.17") == "10.0.3.0/24" and subnet_of("gpu-a") == ""


def _lint_bullet(text: str) -> list:
    """Lint's problems on one bullet of a page (the rest of this small page is not a report)."""
    page = f"# Cluster eval: 24 nodes\n\n## Preflight\n\n- {text}\n"
    return [p for p in lint_text(page) if p.line == 5]


def _check(tmp_path, n: int) -> TcpCheck:
    nodes = [Node(f"node{i}", a, i) for i, a in enumerate(addresses(n, 8))]
    cfg = Config(name="t", nodes=tuple(n.name for n in nodes), rdzv_port=PORT)
    ctx = RunContext(config=cfg, transport=LocalTransport(), nodes=nodes, store=RunStore.create(tmp_path, "t"))
    return TcpCheck(ctx, nodes, "python3", PreflightSettings(), lambda proc, s: "")


def test_a_port_its_peers_cannot_reach_is_that_nodes_gap_naming_them(tmp_path):
    check = _check(tmp_path, 24)
    blocked = next(c.port for c in check.plan.connections if c.dst == 5 and c.port != PORT)
    results = {c: ("timed out" if (c.dst, c.port) == (5, blocked) else "") for c in check.plan.connections}
    check._blame(results)
    (gap,) = check.out.gaps
    assert gap.kind == "preflight.tcp-unreached" and gap.node == "node5" and gap.facts["port"] == blocked
    assert gap.facts["sources"] == [f"node{c.src}" for c in check.plan.connections if (c.dst, c.port) == (5, blocked)]
    worded = say(gap)
    assert f"Port {blocked} on node5 (10.0.0.6) could not be reached over TCP from" in worded.text
    assert _lint_bullet(worded.text) == _lint_bullet(worded.plan) == []


def test_a_node_that_reaches_nothing_is_blamed_itself(tmp_path):
    check = _check(tmp_path, 24)
    results = {c: ("Network is unreachable" if c.src == 7 else "") for c in check.plan.connections}
    check._blame(results)
    (gap,) = check.out.gaps
    assert gap.kind == "preflight.tcp-blocked" and gap.node == "node7"
    assert all(isinstance(c, Connection) for c in check.plan.targets_of(7))


def test_what_the_check_left_untried_is_said_and_lints_clean():
    cov = plan_tcp(addresses(1024), PORT).coverage
    line = tcp_coverage_line(cov, "raw-fleet-2026-12-03-1013Z")
    assert line.startswith(f"TCP check across nodes in preflight: {cov.pairs_tried} of the {cov.pairs_total} "
                           "ordered pairs of nodes tried, by its rule")
    assert f"up to {cov.max_stride} nodes before it" in line and "ordered pairs of its" not in line
    assert f"the other {cov.pairs_total - cov.pairs_tried} pairs were not tried" in line
    assert "`raw-fleet-2026-12-03-1013Z/preflight/tcp-pairs.tsv` lists every pair tried" in line
    assert _lint_bullet(line) == []
    sparse = plan_tcp(addresses(4096, 8), PORT).coverage
    assert f"; {sparse.subnet_pairs_untried} ordered pairs of its 512 subnets had no connection" in \
        tcp_coverage_line(sparse)
    assert _lint_bullet(tcp_coverage_line(sparse)) == []
    assert tcp_coverage_line(plan_tcp(addresses(16), PORT).coverage) == "" == tcp_coverage_line(None)
