"""Many nodes on this one machine, each a network namespace with an address and ports of its own.

Lighter than ``tests/testbed.py``'s sshd bed: no sshd, no hostname or mount of its own. A command
reaches a node through ``NamespaceTransport`` (``ip netns exec NODE argv``, stdin, environment and
timeouts as every transport has them), so whatever a check across nodes opens or connects to is that
node's own, at that node's address: 128 nodes and more in seconds. The nodes sit on one bridge in a
random free ``10.x.0.0/16``, ``per_subnet`` to each ``10.x.s.0/24``, so a rule that reads subnets
from the hostfile sees several.
"""

from __future__ import annotations

import ipaddress
import random
import secrets
import subprocess
from collections.abc import Mapping
from pathlib import Path

from clustereval.errors import TransportError
from clustereval.records import CommandResult
from clustereval.transport.base import DEFAULT_TIMEOUT_S, Node, Transport, env_prefix, run_subprocess
from clustereval.transport.local import LocalTransport
from tests.testbed import TestbedUnavailable, unavailable_reason


def _ip(*argv: str) -> None:
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise TestbedUnavailable(f"ip {' '.join(argv)} failed: {proc.stderr.strip()}")


def _batch(tool: list[str], commands: str) -> None:
    proc = subprocess.run([*tool, "-batch", "-"], input=commands, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise TestbedUnavailable(f"{' '.join(tool)} -batch failed: {proc.stderr.strip()[:300]}")


def _free_16() -> str:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = f"10.{random.randint(100, 250)}"
        if f" {net}." not in used and f"\n{net}." not in used and not used.startswith(f"{net}."):
            return net
    raise TestbedUnavailable("no free 10.x.0.0/16 on this machine")


class AddressBed:
    """``num_nodes`` namespaces on one bridge; ``nodes`` as ``transport.base.Node`` (name = namespace)."""

    def __init__(self, num_nodes: int, per_subnet: int = 32) -> None:
        self.id = secrets.token_hex(3)
        self.num_nodes, self.per_subnet = num_nodes, per_subnet
        self.bridge = f"ab{self.id}br"
        self.nodes: list[Node] = []
        self._made: list[str] = []

    @classmethod
    def create(cls, num_nodes: int, per_subnet: int = 32) -> AddressBed:
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        bed = cls(num_nodes, per_subnet)
        try:
            bed._build()
        except BaseException:
            bed.close()
            raise
        return bed

    def _build(self) -> None:
        net = _free_16()
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(f"link:{self.bridge}")
        _ip("addr", "add", f"{net}.255.254/16", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        macs = []
        for i in range(self.num_nodes):
            ns, veth = f"ab{self.id}-{i}", f"ab{self.id}v{i}"
            address = str(ipaddress.ip_address(f"{net}.{i // self.per_subnet}.{i % self.per_subnet + 1}"))
            mac = f"02:ab:{secrets.token_hex(1)}:00:{i >> 8:02x}:{i & 255:02x}"
            _ip("netns", "add", ns)
            self._made.append(f"netns:{ns}")
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "address", mac, "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{address}/16", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self.nodes.append(Node(name=ns, address=address, index=i, slots=1))
            macs.append((mac, veth))
        # every node knows every other's MAC and the bridge every port's: the first connections of a
        # check across 128 nodes at once would otherwise be an ARP broadcast to every port, which the
        # kernel's per-CPU backlog drops on a loaded 2-core machine (connects then time out)
        _batch(["bridge"], "".join(f"fdb replace {mac} dev {veth} master static\n" for mac, veth in macs))
        for node in self.nodes:
            _batch(["ip", "-n", node.name], "".join(f"neigh replace {peer.address} lladdr {macs[peer.index][0]} "
                                                    "dev eth0 nud permanent\n"
                                                    for peer in self.nodes if peer is not node))

    def block_incoming(self, index: int, port: int) -> None:
        """A firewall rule on node ``index``: a connection to ``port`` from another node never completes
        (its answer has no route), as a security group that drops the port does."""
        _ip("-n", self.nodes[index].name, "rule", "add", "pref", "100", "ipproto", "tcp", "sport", str(port),
            "prohibit")

    def unblock_incoming(self, index: int, port: int) -> None:
        _ip("-n", self.nodes[index].name, "rule", "del", "pref", "100", "ipproto", "tcp", "sport", str(port),
            "prohibit")

    def close(self) -> None:
        for made in reversed(self._made):
            kind, name = made.split(":", 1)
            argv = ["netns", "del", name] if kind == "netns" else ["link", "del", name]
            subprocess.run(["ip", *argv], capture_output=True, timeout=30)
        self._made.clear()


class NamespaceTransport(Transport):
    """Runs a node's commands in its network namespace on this machine."""

    method = "local"

    def _argv(self, node: Node, argv: list[str], env: Mapping[str, str] | None) -> list[str]:
        return ["ip", "netns", "exec", node.name, *env_prefix(env), *argv]

    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        res = run_subprocess(node.name, self._argv(node, argv, env), timeout_s, stdin=stdin, cwd=cwd,
                             display_argv=list(argv))
        if res.rc != 0 and "Cannot open network namespace" in res.stderr:
            raise TransportError(node.name, "its namespace is gone", error_id="netns-missing")
        return res

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        return subprocess.Popen(self._argv(node, argv, env), cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
                                stdin=subprocess.DEVNULL)

    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        LocalTransport._copy(node, Path(local), Path(remote))  # the nodes share this machine's files

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        LocalTransport._copy(node, Path(remote), Path(local))


def python_without_torch(folder: Path, python: str) -> Path:
    """An interpreter that cannot see site-packages (no torch): a fresh node's ``python3``."""
    wrapper = folder / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexec "{python}" -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper
