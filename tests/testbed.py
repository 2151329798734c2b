"""A multi-node cluster on this one machine: network namespaces with a real sshd each.

Every node is a network namespace with its own address on a private bridge, its own hostname
(a UTS namespace), its own ``/etc/hosts`` and ``/etc/ssh/ssh_config`` (``ip netns exec`` bind-mounts
``/etc/netns/<ns>/*`` over ``/etc``), and an OpenSSH server on a non-default port that accepts one
generated test key. The nodes share this machine's filesystem, so the package, Python and torch
are importable everywhere, exactly as on a cluster with a shared home.

Names carry a short random id and the subnet is a random free ``10.x.y.0/24``, so several test
sessions on one machine never collide. Everything is recorded under ``/run/clustereval-testbed``
and removed on ``close()``; a session that died without cleaning up is swept by the next one.

Used through the pytest fixtures in ``tests/conftest.py`` (``netns_cluster``, ``cluster3``); see
``NetnsCluster`` for the API.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustereval.config import SshConfig
from clustereval.transport.base import Node
from clustereval.transport.ssh import SshTransport

REGISTRY = Path("/run/clustereval-testbed")
ETC_NETNS = Path("/etc/netns")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
NAME_MODES = ("all", "own-address-ip-peers", "loopback-ip-peers")


class TestbedUnavailable(RuntimeError):
    """This machine cannot build the test bed (not root, no ``ip netns``, no sshd, no qdisc)."""


def unavailable_reason() -> str:
    """Why the test bed cannot run here ('' when it can)."""
    if os.geteuid() != 0:
        return "the namespace test bed needs root (ip netns, veth, sshd)"
    for tool in ("ip", "ssh", "ssh-keygen", "unshare"):
        if not shutil.which(tool):
            return f"the namespace test bed needs `{tool}` (apt-get install iproute2 openssh-client util-linux)"
    if not os.path.exists(SSHD):
        return "the namespace test bed needs sshd (apt-get install openssh-server)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable here: {probe.stderr.strip()}"
    return ""


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise TestbedUnavailable(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


@dataclass
class TestNode:
    """One node of the test cluster."""

    __test__ = False  # not a pytest test class

    index: int  # position in the hostfile: node<index>
    name: str  # its hostname (inside its UTS namespace) and its name in cluster.toml
    netns: str  # network namespace name (`ip netns exec <netns> ...`)
    address: str  # IPv4 address on the bridge: what the hostfile lists
    veth: str  # host-side veth (on the bridge)
    ifname: str = "eth0"  # its interface inside the namespace
    sshd: subprocess.Popen | None = field(default=None, repr=False)


class NetnsCluster:
    """N nodes as network namespaces, each running sshd. Build with ``NetnsCluster.create(n)``.

    Attributes: ``id`` (short random id in every name), ``nodes`` (list of ``TestNode``),
    ``subnet`` (``10.x.y.0/24``), ``gateway`` (the bridge's address, this machine's side),
    ``ssh_port`` (the port every sshd listens on; never 22/2222), ``workdir`` (generated files),
    ``key`` (private test key; also used node to node), ``ssh_config`` (an ssh_config with a
    ``Host`` entry per node name, usable as ``ssh -F ssh_config <name>``), ``known_hosts``,
    ``hostfile`` (one address per line), ``config_path`` (cluster.toml, access = "ssh"),
    ``shared_dir`` (one directory every node sees: a shared path in cluster.toml),
    ``scratch_dir`` (local_scratch in cluster.toml: node-local, i.e. each node sees its own
    directory ``node_scratch_dir(i)`` mounted at this path; from this machine it stays empty).
    """

    def __init__(self, num_nodes: int, *, prefix: str = "ce") -> None:
        self.id = secrets.token_hex(3)
        self.prefix = f"{prefix}{self.id}"
        self.num_nodes = num_nodes
        self.nodes: list[TestNode] = []
        self.bridge = f"{self.prefix}br"
        self.subnet = ""
        self.gateway = ""
        self.ssh_port = random.randint(20000, 28999)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"clustereval-testbed-{self.id}-"))
        self.key = self.workdir / "id_ed25519"
        self.ssh_config = self.workdir / "ssh_config"
        self.known_hosts = self.workdir / "known_hosts"
        self.hostfile = self.workdir / "hostfile"
        self.config_path = self.workdir / "cluster.toml"
        self.shared_dir = self.workdir / "shared"
        self.scratch_dir = self.workdir / "scratch"
        self._closed = False
        self._shaped: set[int] = set()
        self._loopback: set[int] = set()
        self._login_passwd: dict[int, Path] = {}  # set_login_shell: node index -> its /etc/passwd
        self.name_mode = "all"  # see NAME_MODES
        self.python_dir = os.path.dirname(sys.executable)  # first on the nodes' PATH: their `python3`
        self.node_env: dict[str, str] = {}  # more variables every command on a node sees (set_node_env)
        self.node_paths: dict[int, str] = {}  # node index -> its PATH after python_dir (set_node_env)

    # ---- building ----------------------------------------------------------------------------
    @classmethod
    def create(cls, num_nodes: int = 3, **config_overrides) -> NetnsCluster:
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        sweep_stale()
        cluster = cls(num_nodes)
        try:
            cluster._build()
            cluster.write_config(**config_overrides)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def _build(self) -> None:
        REGISTRY.mkdir(parents=True, exist_ok=True)
        with _locked():
            self.subnet = _free_subnet()
            net = ipaddress.ip_network(self.subnet)
            hosts = list(net.hosts())
            self.gateway = str(hosts[0])
            self.nodes = [TestNode(index=i, name=f"{self.prefix}-n{i}", netns=f"{self.prefix}-n{i}",
                                   address=str(hosts[i + 1]), veth=f"{self.prefix}v{i}")
                          for i in range(self.num_nodes)]
            self._register()
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "addr", "add", f"{self.gateway}/{net.prefixlen}", "dev", self.bridge)
            _sh("ip", "link", "set", self.bridge, "up")
        for node in self.nodes:
            self._add_node(node, net.prefixlen)
        self.shared_dir.mkdir()
        self.scratch_dir.mkdir()
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"clustereval-testbed-{self.id}", "-f",
            str(self.key))
        (self.workdir / "authorized_keys").write_text((self.workdir / "id_ed25519.pub").read_text())
        self.known_hosts.touch()
        self._write_ssh_client_config()
        for node in self.nodes:
            self.node_scratch_dir(node.index).mkdir()
            self._write_node_etc(node)
            _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self._node_dir(node) / "host_ed25519"))
            # root logs in with sh, which reads no start-up file: what a node runs is what the bed
            # sets (its PATH, python_dir first), not this machine's ~/.bashrc (a bash login under sshd
            # reads it, and on a developer machine it may run a version manager's set-up, ~0.5 s and a
            # shared lock on every command); tests of other login shells set their own
            self._write_login_passwd(node, "/bin/sh")
            self._write_sshd_config(node)
        for node in self.nodes:
            self.start_sshd(node.index, wait=False)
        for node in self.nodes:
            self._wait_for_port(node, self.ssh_port)
        self.hostfile.write_text("# generated test hostfile: one node per line\n"
                                 + "".join(f"{n.address}\n" for n in self.nodes))

    def _add_node(self, node: TestNode, prefixlen: int) -> None:
        _sh("ip", "netns", "add", node.netns)
        _sh("ip", "link", "add", node.veth, "type", "veth", "peer", "name", f"{node.veth}p")
        _sh("ip", "link", "set", f"{node.veth}p", "netns", node.netns)
        _sh("ip", "link", "set", node.veth, "master", self.bridge)
        _sh("ip", "link", "set", node.veth, "up")
        ns = ["ip", "netns", "exec", node.netns]
        _sh(*ns, "ip", "link", "set", "lo", "up")
        _sh(*ns, "ip", "link", "set", f"{node.veth}p", "name", node.ifname)
        _sh(*ns, "ip", "addr", "add", f"{node.address}/{prefixlen}", "dev", node.ifname)
        _sh(*ns, "ip", "link", "set", node.ifname, "up")
        _sh(*ns, "ip", "route", "add", "default", "via", self.gateway)

    def _node_dir(self, node: TestNode) -> Path:
        path = self.workdir / node.name
        path.mkdir(exist_ok=True)
        return path

    def _write_ssh_client_config(self) -> None:
        common = (f"  User root\n  Port {self.ssh_port}\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
                  f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking accept-new\n"
                  "  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR\n")
        text = "# generated by the clustereval test bed\n"
        for node in self.nodes:
            text += f"Host {node.name}\n  HostName {node.address}\n{common}"
        addresses = " ".join(n.address for n in self.nodes)
        text += f"Host {addresses}\n{common}"
        self.ssh_config.write_text(text)

    def _hosts_text(self, node: TestNode) -> str:
        lines = ["127.0.0.1 localhost"]
        loopback = node.index in self._loopback or self.name_mode == "loopback-ip-peers"
        if loopback:
            lines.append(f"127.0.1.1 {node.name}")  # the Debian/Ubuntu default that breaks rendezvous
        for other in self.nodes:
            if other.index == node.index and loopback:
                continue
            if other.index != node.index and self.name_mode != "all":
                continue  # peers are known by IP only
            lines.append(f"{other.address} {other.name}")
        return "\n".join(lines) + "\n"

    def _write_node_etc(self, node: TestNode) -> None:
        etc = ETC_NETNS / node.netns
        (etc / "ssh").mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(self._hosts_text(node))
        (etc / "hostname").write_text(node.name + "\n")
        # no DNS on the private network: a lookup that misses /etc/hosts fails at once instead of
        # waiting for this machine's resolver to time out
        (etc / "resolv.conf").write_text("# generated by the clustereval test bed: no name server\n")
        # node -> node ssh (passwordless between nodes, as pdsh and DeepSpeed need) with the test key
        (etc / "ssh" / "ssh_config").write_text(
            f"Host *\n  User root\n  Port {self.ssh_port}\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.workdir / 'known_hosts_nodes'}\n  StrictHostKeyChecking accept-new\n"
            "  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR\n")
        if Path("/etc/ssh/moduli").exists():
            shutil.copy("/etc/ssh/moduli", etc / "ssh" / "moduli")

    def _write_sshd_config(self, node: TestNode) -> None:
        d = self._node_dir(node)
        python_dir = self.python_dir
        rest = self.node_paths.get(node.index, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        extra = "".join(f' "{k}={v}"' for k, v in sorted(self.node_env.items()))
        (d / "sshd_config").write_text(
            f"Port {self.ssh_port}\n"
            f"ListenAddress 0.0.0.0\n"
            f"HostKey {d / 'host_ed25519'}\n"
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}\n"
            "PidFile none\n"
            "StrictModes no\n"  # the generated files live in a temp dir
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\nUseDNS no\nPrintMotd no\nPrintLastLog no\n"
            "MaxStartups 100:30:200\nMaxSessions 100\n"
            # the classic key exchange: OpenSSH's post-quantum default (sntrup761x25519) costs ~0.1 CPU-s
            # a connection, and the suite opens a few thousand on two cores; nothing tested depends on it
            "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org\n"
            # `python3` on a node is the interpreter running the tests (torch importable)
            f"SetEnv PATH={python_dir}:{rest}{extra}\n"
            "LogLevel ERROR\n")

    def _wait_for_port(self, node: TestNode, port: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if node.sshd is not None and node.sshd.poll() is not None:
                log = (self._node_dir(node) / "sshd.log").read_text(errors="replace")
                raise TestbedUnavailable(f"sshd on {node.name} exited: {log.strip()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection((node.address, port), timeout=0.5):
                return
            time.sleep(0.05)
        raise TestbedUnavailable(f"sshd on {node.name} did not listen on {node.address}:{port} within {timeout_s} s")

    def _register(self) -> None:
        REGISTRY.joinpath(f"{self.id}.json").write_text(json.dumps({
            "owner_pid": os.getpid(), "bridge": self.bridge, "netns": [n.netns for n in self.nodes],
            "veths": [n.veth for n in self.nodes], "workdir": str(self.workdir), "subnet": self.subnet}))

    # ---- the knobs tests turn ----------------------------------------------------------------
    def node(self, which: int | str) -> TestNode:
        if isinstance(which, int):
            return self.nodes[which]
        for n in self.nodes:
            if which in (n.name, n.address):
                return n
        raise KeyError(which)

    def start_sshd(self, which: int | str, *, wait: bool = True) -> None:
        """(Re)start a node's sshd; returns once it accepts connections."""
        node = self.node(which)
        if node.sshd is not None and node.sshd.poll() is None:
            return
        cfg = self._node_dir(node) / "sshd_config"
        log = open(self._node_dir(node) / "sshd.log", "ab")  # noqa: SIM115 - handed to the child
        # ip netns exec -> unshare --uts -> sh -> sshd all exec in place: the Popen pid is sshd's
        passwd = self._login_passwd.get(node.index, "")
        # a node with its own login shell sees its own /etc/passwd (in sshd's mount namespace only)
        node.sshd = subprocess.Popen(
            [*self._enter(node), '[ -z "$3" ] || mount --bind "$3" /etc/passwd || exit 1; exec "$1" -D -e -f "$2"',
             SSHD, str(cfg), str(passwd)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        if wait:
            self._wait_for_port(node, self.ssh_port)

    def set_login_shell(self, which: int | str, shell: str) -> None:
        """Give root on one node another login shell (``/usr/bin/tcsh``: the csh family common on HPC
        sites; ``/bin/bash``: a login that reads root's ``~/.bashrc``), as sshd runs it for every
        command; restarts that node's sshd."""
        node = self.node(which)
        self._write_login_passwd(node, shell)
        self.kill_sshd(node.index)
        self.start_sshd(node.index)

    def _write_login_passwd(self, node: TestNode, shell: str) -> None:
        lines = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) == 7 and fields[0] == "root":
                fields[6] = shell
            lines.append(":".join(fields))
        passwd = self._node_dir(node) / "passwd"
        passwd.write_text("\n".join(lines) + "\n")
        self._login_passwd[node.index] = passwd

    def give_login(self, which: int | str, *, port: int, user: str) -> None:
        """Make one node answer only on its own sshd ``port``, and know a login ``user`` there (uid 0
        under another name, in sshd's view of /etc/passwd only): what a ``Host`` block with its own
        Port and User must reach. Restarts that node's sshd."""
        node = self.node(which)
        passwd = self._node_dir(node) / "passwd"
        base = passwd.read_text() if node.index in self._login_passwd else Path("/etc/passwd").read_text()
        passwd.write_text(base.rstrip("\n") + f"\n{user}:x:0:0:{user}:/root:/bin/sh\n")
        self._login_passwd[node.index] = passwd
        cfg = self._node_dir(node) / "sshd_config"
        cfg.write_text(cfg.read_text().replace(f"Port {self.ssh_port}\n", f"Port {port}\n"))
        self.kill_sshd(node.index)
        self.start_sshd(node.index, wait=False)
        self._wait_for_port(node, port)

    def set_node_env(self, *, python_dir: str | None = None, paths: dict[int, str] | None = None, **env: str) -> None:
        """What every command on every node sees: ``python_dir`` first on PATH (its ``python3`` is the
        nodes' own Python; default this test's interpreter, which has torch) and ``env`` (e.g.
        ``PIP_FIND_LINKS``); ``paths``: node index -> the rest of that node's PATH (e.g. a folder from
        ``conftest.path_without`` where a tool is missing); restarts every sshd. The nodes log in with
        ``/bin/sh`` (see ``_build``), which reads no start-up file, so this PATH is what they run with."""
        if python_dir is not None:
            self.python_dir = python_dir
        self.node_env.update(env)
        self.node_paths.update(paths or {})
        for node in self.nodes:
            self._write_sshd_config(node)
            self.kill_sshd(node.index)
            self.start_sshd(node.index)

    def kill_sshd(self, which: int | str) -> None:
        """Stop a node's sshd (SIGKILL): new connections are refused at once, as on a dead node."""
        node = self.node(which)
        if node.sshd is not None and node.sshd.poll() is None:
            node.sshd.kill()
            node.sshd.wait(timeout=10)

    def set_hostname_loopback(self, which: int | str, on: bool = True) -> None:
        """Make the node's own hostname resolve to 127.0.1.1 on that node (the Debian default that
        breaks torchrun's rendezvous); other nodes still resolve it to its address."""
        node = self.node(which)
        (self._loopback.add if on else self._loopback.discard)(node.index)
        # rewritten in place: the file is bind-mounted into the node's mount namespaces
        with open(ETC_NETNS / node.netns / "hosts", "w") as fh:
            fh.write(self._hosts_text(node))

    def set_name_resolution(self, mode: str) -> None:
        """How hostnames resolve on every node, one of ``NAME_MODES``: ``all`` (every node's hostname
        resolves to its address everywhere), ``own-address-ip-peers`` (a node resolves only its own
        hostname, to its address; peers are known by IP only), ``loopback-ip-peers`` (its own hostname
        resolves to 127.0.1.1, peers by IP only: a fresh Debian/Ubuntu image without DNS)."""
        if mode not in NAME_MODES:
            raise ValueError(f"unknown name-resolution mode {mode!r}; choose from {NAME_MODES}")
        self.name_mode = mode
        for node in self.nodes:
            with open(ETC_NETNS / node.netns / "hosts", "w") as fh:
                fh.write(self._hosts_text(node))

    def shape(self, which: int | str, *, rate_mbit: float | None = None, delay_ms: float | None = None) -> None:
        """Slow one node's link in both directions: ``rate_mbit`` (token bucket) and/or
        ``delay_ms`` (netem; raises ``TestbedUnavailable`` on kernels without sch_netem)."""
        node = self.node(which)
        self.unshape(which)
        for argv_prefix, dev in ((["ip", "netns", "exec", node.netns], node.ifname), ([], node.veth)):
            if delay_ms is not None:
                cmd = [*argv_prefix, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                       "delay", f"{delay_ms}ms"]
                if rate_mbit is not None:
                    cmd += ["rate", f"{rate_mbit}mbit"]
                proc = _sh(*cmd, check=False)
                if proc.returncode != 0:
                    raise TestbedUnavailable(f"tc netem is unavailable on this kernel: {proc.stderr.strip()}")
            elif rate_mbit is not None:
                burst_kbit = max(32, int(rate_mbit * 10))  # ~10 ms of traffic
                _sh(*argv_prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                    "burst", f"{burst_kbit}kbit", "latency", "200ms")
            self._shaped.add(node.index)

    def unshape(self, which: int | str) -> None:
        node = self.node(which)
        _sh("ip", "netns", "exec", node.netns, "tc", "qdisc", "del", "dev", node.ifname, "root", check=False)
        _sh("tc", "qdisc", "del", "dev", node.veth, "root", check=False)
        self._shaped.discard(node.index)

    def exec(self, which: int | str, argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` inside a node's namespaces directly (no ssh), e.g. to inspect it."""
        node = self.node(which)
        return subprocess.run([*self._enter(node), 'exec "$@"', *argv],
                              capture_output=True, text=True, timeout=timeout, **kw)

    def enter_argv(self, which: int | str) -> list[str]:
        """argv prefix that runs ``sh -c SCRIPT ARGS...`` (append SCRIPT and ARGS) as the node."""
        return self._enter(self.node(which))

    def node_scratch_dir(self, which: int | str) -> Path:
        """Where node ``which``'s private ``scratch_dir`` lives, seen from this machine."""
        return self._node_dir(self.node(which)) / "scratch"

    def _enter(self, node: TestNode) -> list[str]:
        """argv prefix that runs a ``sh -c SCRIPT ARGS`` as the node: its network namespace, its
        hostname, and its own directory mounted at ``scratch_dir`` (node-local disk). ``ip netns
        exec`` gives each command a private mount namespace, so the bind mount stays there."""
        setup = ('hostname "$0" && mount --bind "$1" "$2" && shift 2 && script=$1 && shift && '
                 'exec sh -c "$script" sh "$@"')
        return ["ip", "netns", "exec", node.netns, "unshare", "--uts", "sh", "-c", setup, node.name,
                str(self.node_scratch_dir(node.index)), str(self.scratch_dir)]

    def ssh_argv(self, which: int | str, *argv: str) -> list[str]:
        """``ssh -F ssh_config <node> ARGV`` as a test would type it."""
        return ["ssh", "-F", str(self.ssh_config), self.node(which).name, *argv]

    # ---- the cluster as clustereval sees it --------------------------------------------------
    def ssh_settings(self, **overrides) -> SshConfig:
        """The ``SshConfig`` that reaches every node (overrides: ``port=1``, ``user=...``)."""
        fields: dict[str, Any] = {"port": self.ssh_port, "user": "root", "identity_file": str(self.key),
                  "options": (f"UserKnownHostsFile={self.known_hosts}",), "connect_timeout_s": 5}
        fields.update(overrides)
        return SshConfig(**fields)

    def transport(self, **overrides) -> SshTransport:
        """An ``SshTransport`` to the nodes (``overrides`` go to ``ssh_settings``)."""
        return SshTransport(self.ssh_settings(**overrides))

    def cluster_nodes(self) -> list[Node]:
        """The nodes as ``transport.base.Node`` (name, address, hostfile index)."""
        return [Node(name=n.name, address=n.address, index=n.index, slots=1) for n in self.nodes]

    # ---- config files ------------------------------------------------------------------------
    def write_config(self, path: Path | None = None, *, ssh_port: int | None = None, extra: str = "",
                     nodes: list[str] | None = None, **fields) -> Path:
        """Write cluster.toml (default ``self.config_path``) for this cluster and return its path.

        ``ssh_port`` overrides the port (e.g. a wrong one), ``nodes`` the node list, ``extra`` is
        appended verbatim, other keyword fields become top-level keys (``rdzv_port=29600``)."""
        path = Path(path or self.config_path)
        names = nodes if nodes is not None else [n.name for n in self.nodes]
        top = {"name": f"testbed-{self.id}", "access": "ssh", "nodes": names, "hostfile": str(self.hostfile),
               "local_scratch": str(self.scratch_dir), "shared_paths": [str(self.shared_dir)],
               "eval_python": sys.executable, "install_packages": False, "rdzv_port": 29500,
               "reports_dir": str(self.workdir / "reports")}
        top.update(fields)
        lines = ["# generated by the clustereval test bed"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in top.items() if v is not None]
        lines += ["", "[ssh]", f"port = {ssh_port if ssh_port is not None else self.ssh_port}", 'user = "root"',
                  f"identity_file = {_toml_value(str(self.key))}",
                  f"options = {_toml_value([f'UserKnownHostsFile={self.known_hosts}'])}",
                  "connect_timeout_s = 5"]
        path.write_text("\n".join(lines) + "\n" + (extra + "\n" if extra else ""))
        return path

    # ---- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for node in self.nodes:
            if node.sshd is not None and node.sshd.poll() is None:
                node.sshd.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.sshd.wait(timeout=10)
        _remove(self.bridge, [n.netns for n in self.nodes], [n.veth for n in self.nodes])
        shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            REGISTRY.joinpath(f"{self.id}.json").unlink()

    def __enter__(self) -> NetnsCluster:
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.close()


def _toml_value(v) -> str:  # noqa: ANN001
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def _remove(bridge: str, netns: list[str], veths: list[str]) -> None:
    """Remove one cluster's namespaces (and every process still in them), veths and bridge."""
    for ns in netns:
        pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:  # only test-bed processes live in these namespaces (sshd sessions, torchrun)
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    for veth in veths:
        _sh("ip", "link", "del", veth, check=False)
    _sh("ip", "link", "del", bridge, check=False)


def sweep_stale() -> None:
    """Remove clusters whose owning test session died without cleaning up."""
    if not REGISTRY.exists():
        return
    for entry in REGISTRY.glob("*.json"):
        try:
            info = json.loads(entry.read_text())
            os.kill(int(info["owner_pid"]), 0)
            continue  # owner alive
        except ProcessLookupError:
            pass
        except (OSError, ValueError, KeyError):
            continue
        _remove(info["bridge"], info["netns"], info["veths"])
        shutil.rmtree(info.get("workdir", ""), ignore_errors=True) if info.get("workdir") else None
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()


@contextlib.contextmanager
def _locked():
    """Serialise subnet choice across concurrent test sessions."""
    REGISTRY.mkdir(parents=True, exist_ok=True)
    with open(REGISTRY / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _free_subnet() -> str:
    """A random 10.x.y.0/24 that no interface or route here uses and no live test bed holds."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    text = _sh("ip", "-4", "-o", "addr", "show", check=False).stdout + _sh("ip", "-4", "route", check=False).stdout
    for token in text.split():
        with contextlib.suppress(ValueError):
            if "/" in token:
                used.append(ipaddress.ip_network(token, strict=False))
    for entry in REGISTRY.glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.append(ipaddress.ip_network(json.loads(entry.read_text())["subnet"]))
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(u) for u in used):
            return str(candidate)
    raise TestbedUnavailable("no free 10.x.y.0/24 subnet found for the test bed")
