"""Preflight's TCP check across nodes: which connections prove the ports the run's jobs meet at
(``plan_tcp``, pure), and making them (``TcpCheck``).

The rule, for N nodes in hostfile order and ``rdzv_port`` R:

- every node listens on every port R .. R+N at once, so each is free there (what a job's bind needs);
- every node connects to R on the first node: the rendezvous every job across nodes meets at;
- node i connects to node j at port R + 1 + (i + j) mod N, so each port number is tried on some node.
  Up to ``EVERY_PAIR_MAX_NODES`` nodes every node connects to every other. Above, node j is reached
  from j-1 (its ring neighbour) and j-2, j-4, ..., j-2^(L-1) with L = ceil(log2 N); and with S
  subnets in the hostfile (/24, /64 for IPv6), the node at position p < S/(L+1) of its subnet is
  also reached from one node of each of the L+1 subnets p(L+1) on after its own (when none of its
  peers is in that subnet yet; a subnet's nodes take turns), so that every subnet reaches every
  subnet once it has S/(L+1) nodes.

So a node is reached from at most 2L+1 peers and the check makes at most N(2L+2) connections: it
grows as N log N, where trying every port of every node from every node grew as N^3. The ordered
pairs of nodes it did not try are counted in the record (``TcpCoverage``) and said in the report's
header; every connection it made is listed in ``raw-.../preflight/tcp-pairs.tsv``.
"""

from __future__ import annotations

import ipaddress
import math
import resource
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.settings import PreflightSettings
from clustereval.probes.preflight import (
    CONNECTS_AT_ONCE,
    parse_tcp_connect,
    tcp_connect_argv,
    tcp_listen_argv,
    tcp_targets_text,
)
from clustereval.records import Gap
from clustereval.records.run import ProbeResult, TcpCoverage
from clustereval.transport.base import Node, run_parallel

PHASE = "preflight"
EVERY_PAIR_MAX_NODES = 16  # up to here every node tries every other node: at most 16 x 15 connections
PAIRS_FILE = "preflight/tcp-pairs.tsv"
# the controller holds two pipes per listener while every node listens at once (1024 is a common
# soft limit): the soft limit is raised toward the hard one for that long
FDS_PER_LISTENER = 3


@dataclass(frozen=True)
class Connection:
    """One connection of the check: from node ``src`` to node ``dst`` (hostfile positions) at ``port``."""

    src: int
    dst: int
    port: int


@dataclass
class TcpPlan:
    """Every connection the check makes, and what it leaves untried."""

    first_port: int
    num_ports: int
    connections: list[Connection] = field(default_factory=list)
    coverage: TcpCoverage = field(default_factory=TcpCoverage)

    _by_src: dict[int, list[Connection]] = field(default_factory=dict, repr=False)
    _by_dst: dict[int, int] = field(default_factory=dict, repr=False)

    def index(self) -> None:
        self._by_src, self._by_dst = {}, {}
        for c in self.connections:
            self._by_src.setdefault(c.src, []).append(c)
            self._by_dst[c.dst] = self._by_dst.get(c.dst, 0) + 1

    def targets_of(self, src: int) -> list[Connection]:
        """Node ``src``'s connections, in the order its connect command makes them."""
        return self._by_src.get(src, [])

    def expected_at(self, dst: int) -> int:
        """How many connections node ``dst``'s listener waits for."""
        return self._by_dst.get(dst, 0)


def subnet_of(address: str) -> str:
    """The /24 (IPv4) or /64 (IPv6) an address is in; '' for a name."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return ""
    return str(ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 64}", strict=False))


def num_strides(num_nodes: int) -> int:
    """L = ceil(log2 N): the strides 1, 2, ..., 2^(L-1) all fall short of N."""
    return max(1, math.ceil(math.log2(num_nodes))) if num_nodes > 1 else 0


def peers_of(addresses: list[str]) -> list[list[int]]:
    """For each node j, the nodes that connect to its ports (the rule in the module docstring)."""
    n = len(addresses)
    if n <= EVERY_PAIR_MAX_NODES:
        return [[i for i in range(n) if i != j] for j in range(n)]
    strides = [2 ** k for k in range(num_strides(n))]
    nets = [subnet_of(a) for a in addresses]
    order = sorted({s for s in nets if s})
    members: dict[str, list[int]] = {s: [] for s in order}
    for i, s in enumerate(nets):
        if s:
            members[s].append(i)
    position = {i: k for s in order for k, i in enumerate(members[s])}
    rank = {s: k for k, s in enumerate(order)}
    turn = dict.fromkeys(order, 0)
    out = []
    for j in range(n):
        peers = [(j - d) % n for d in strides]
        window = len(strides) + 1
        if order and nets[j] and position[j] < -(-len(order) // window):
            # node j at position p of its subnet is reached from the L+1 subnets p(L+1) on after its
            # own: between them the first S/(L+1) nodes of a subnet are reached from every subnet
            start = rank[nets[j]] + position[j] * window
            covered = {nets[p] for p in peers}
            for step in range(min(len(order), window)):
                net = order[(start + step) % len(order)]
                if net in covered:
                    continue
                group = members[net]
                pick = group[turn[net] % len(group)]  # the subnet's nodes take turns
                if pick == j:
                    if len(group) == 1:
                        continue
                    turn[net] += 1
                    pick = group[turn[net] % len(group)]
                turn[net] += 1
                peers.append(pick)
                covered.add(net)
        out.append(list(dict.fromkeys(peers)))
    return out


def plan_tcp(addresses: list[str], rdzv_port: int) -> TcpPlan:
    """The check's connections for nodes at ``addresses`` (hostfile order), and its coverage."""
    n = len(addresses)
    plan = TcpPlan(first_port=rdzv_port, num_ports=n + 1)
    plan.connections = [Connection(i, 0, rdzv_port) for i in range(n)]
    peers = peers_of(addresses)
    for j in range(n):
        plan.connections += [Connection(i, j, rdzv_port + 1 + (i + j) % n) for i in peers[j]]
    tried = {(c.src, c.dst) for c in plan.connections if c.src != c.dst}
    nets = [subnet_of(a) for a in addresses]
    subnets = sorted({s for s in nets if s})
    linked = {(nets[a], nets[b]) for a, b in tried if nets[a] and nets[b]}
    plan.coverage = TcpCoverage(
        num_connections=len(plan.connections), pairs_tried=len(tried), pairs_total=n * (n - 1),
        max_stride=0 if n <= EVERY_PAIR_MAX_NODES else 2 ** (num_strides(n) - 1), subnets=len(subnets),
        subnet_pairs_untried=sum(1 for a in subnets for b in subnets if a != b and (a, b) not in linked),
        pairs_file=PAIRS_FILE)
    plan.index()
    return plan


def raise_fd_limit(needed: int) -> None:
    """Raise this process's soft limit on open files toward ``needed`` (never past the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        pass


@dataclass
class TcpOutcome:
    """What the check found: probes (one per node, as the source of its connections), Gaps, coverage."""

    probes: list[ProbeResult] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    coverage: TcpCoverage | None = None
    listening: bool = True

    @property
    def ok(self) -> bool:
        return self.listening and all(p.ok for p in self.probes) and not self.gaps


class TcpCheck:
    """Every node listens on the run's ports while every node makes its planned connections."""

    def __init__(self, ctx: RunContext, nodes: list[Node], python: str, settings: PreflightSettings,
                 readline: Callable[..., str]) -> None:
        self.ctx, self.nodes, self.python, self.settings = ctx, nodes, python, settings
        self.readline = readline  # (popen'd process, seconds) -> its first line, '' when none came
        self.port = ctx.config.rdzv_port
        self.plan = plan_tcp([n.address for n in nodes], self.port)
        self.out = TcpOutcome(coverage=self.plan.coverage)
        self._lock = threading.Lock()

    def budget_s(self) -> float:
        """One node's connect command: the hop, plus one connect time per round of its targets."""
        most = max((len(self.plan.targets_of(i)) for i in range(len(self.nodes))), default=1)
        return self.settings.hop_timeout_s + -(-most // CONNECTS_AT_ONCE) * self.settings.connect_s

    def progress_line(self) -> str:
        last = self.port + self.plan.num_ports - 1
        peers = max((len(self.plan.targets_of(i)) for i in range(len(self.nodes))), default=0) - 1
        reach = "every other node" if self.plan.coverage.max_stride == 0 else f"up to {peers} peers each"
        return (f"TCP to port {self.port} on {self.nodes[0].name} and to {reach}, ports {self.port}-{last} open "
                "on every node")

    def run(self) -> TcpOutcome:
        budget = self.budget_s()
        raise_fd_limit(FDS_PER_LISTENER * len(self.nodes) + 256)
        listeners = {}
        try:
            for node in self.nodes:
                argv = tcp_listen_argv(self.python, self.port, self.plan.num_ports, self.plan.expected_at(node.index),
                                       self.settings.listen_s + budget)
                listeners[node.name] = self.ctx.transport.popen(node, argv)
            if not self._listening(listeners):
                self.out.listening = False
                return self.out
            results: dict[Connection, str] = {}

            def one(node: Node) -> None:
                mine = self.plan.targets_of(node.index)
                targets = [(self.nodes[c.dst].address, c.port) for c in mine]
                try:
                    res = self.ctx.transport.run(node, tcp_connect_argv(self.python, self.settings.connect_s),
                                                 timeout_s=budget, stdin=tcp_targets_text(targets))
                except TransportError as exc:
                    self._add(ProbeResult("tcp", node.name, False, exc.message))
                    return
                why = parse_tcp_connect(res.stdout, len(mine))
                if why is None:
                    detail = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
                    self._add(ProbeResult("tcp", node.name, False, detail, res.seconds))
                    with self._lock:
                        self.out.gaps.append(Gap(PHASE, node=node.name, kind="preflight.tcp-blocked", facts={
                            "detail": detail, "port": self.port, "endpoint": self.nodes[0].address}))
                    return
                with self._lock:
                    results.update(zip(mine, why, strict=True))
                failed = [f"{self.nodes[c.dst].name} port {c.port}: {w}" for c, w in zip(mine, why, strict=True) if w]
                if failed:
                    self._add(ProbeResult("tcp", node.name, False, "; ".join(failed[:4])
                                          + (f"; {len(failed) - 4} more" if len(failed) > 4 else ""), res.seconds))
                else:
                    self._add(ProbeResult("tcp", node.name, True, self._reached(mine), res.seconds))

            run_parallel(self.nodes, one, self.ctx.transport.fanout)
        finally:
            for proc in listeners.values():
                proc.kill()
                proc.wait()
        self._blame(results)
        # what the rule left untried is a fact of the record (``coverage``), said in the report's header
        # and on the console: not a Gap, since nothing failed or was left out of what the rule tries
        self.ctx.raw(PAIRS_FILE, self._pairs_text(results))
        return self.out

    def _add(self, probe: ProbeResult) -> None:
        with self._lock:
            self.out.probes.append(probe)

    def _reached(self, mine: list[Connection]) -> str:
        peers = sum(1 for c in mine if c.port != self.port)
        return (f"reached port {self.port} on {self.nodes[0].name} and one port on each of {peers} "
                f"peer{'s' if peers != 1 else ''}")

    def _listening(self, listeners: dict) -> bool:
        """Whether every node's listener opened every port; a port it could not open is that node's Gap."""
        ok = True
        for node in self.nodes:
            line = self.readline(listeners[node.name], self.settings.listen_start_timeout_s).strip()
            if line == "listening":
                continue
            ok = False
            why = line or "the listener did not start"
            port = self.port
            if "port " in why:
                digits = why.split("port ", 1)[1].split(":", 1)[0]
                port = int(digits) if digits.isdigit() else port
            self._add(ProbeResult("tcp", node.name, False, why.removeprefix("error: ")))
            self.out.gaps.append(Gap(PHASE, node=node.name, kind="preflight.rdzv-port-unavailable",
                                     facts={"port": port, "why": why}))
        return ok

    def _blame(self, results: dict[Connection, str]) -> None:
        """One Gap per port of a node that its peers could not reach, naming them; a node that reached
        none of its targets while others reached them is blamed itself (its own way out is shut)."""
        failed = {c: w for c, w in results.items() if w}
        if not failed:
            return
        reached_by_others = {(c.dst, c.port) for c, w in results.items() if not w}
        cut_off = set()
        for src in sorted({c.src for c in failed}):
            mine = [c for c in results if c.src == src]
            if len(mine) >= 2 and all(results[c] for c in mine) and any((c.dst, c.port) in reached_by_others
                                                                      for c in mine):
                cut_off.add(src)
                first = mine[0]
                self.out.gaps.append(Gap(PHASE, node=self.nodes[src].name, kind="preflight.tcp-blocked", facts={
                    "detail": f"{self.nodes[first.dst].address}:{first.port}: {results[first]}", "port": first.port,
                    "endpoint": self.nodes[first.dst].address}))
        by_port: dict[tuple[int, int], list[Connection]] = {}
        for c in failed:
            if c.src not in cut_off:
                by_port.setdefault((c.dst, c.port), []).append(c)
        for (dst, port), conns in sorted(by_port.items()):
            node = self.nodes[dst]
            self.out.gaps.append(Gap(PHASE, node=node.name, kind="preflight.tcp-unreached", facts={
                "port": port, "address": node.address, "sources": [self.nodes[c.src].name for c in conns],
                "detail": failed[conns[0]], "first_port": self.port, "last_port": self.port + self.plan.num_ports - 1}))

    def _pairs_text(self, results: dict[Connection, str]) -> str:
        lines = ["from\tto\taddress\tport\tresult"]
        for c in self.plan.connections:
            why = results.get(c)
            outcome = "not run" if why is None else (why or "ok")
            lines.append(f"{self.nodes[c.src].name}\t{self.nodes[c.dst].name}\t{self.nodes[c.dst].address}\t{c.port}"
                         f"\t{outcome}")
        return "\n".join(lines) + "\n"
