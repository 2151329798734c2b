"""No command the run sends grows with the fleet past the kernel's limits (issue 47, item 1).

At 4096 nodes the real phases build their commands (preflight with every check across nodes, its
gloo launch through torchrun, the rendezvous probes, the port check a failed launch runs, scratch
creation, the package copy and cleanup) against a transport that records each call and answers as
a healthy node would. Every recorded call is then built again by each real transport (SSH, Slurm,
kubectl) with only the final process start replaced, and every argv that would be exec'd, here or
on a node, is held to ``MAX_ARG_STRLEN`` per argument and ``COMMAND_MAX_BYTES`` in all
(``transport/base.py`` says why those bounds). The commands only Slurm and kubectl send about the
whole fleet (srun over every node, salloc and sinfo naming nodes, kubectl get pods naming pods) are
built at 4096 nodes too.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from clustereval import store as store_module
from clustereval.config import Config, HostEntry, KubectlConfig, SlurmConfig, SshConfig
from clustereval.errors import UsageError
from clustereval.phases.base import RunContext
from clustereval.phases.preflight import TORCH_SNIPPET, Preflight
from clustereval.phases.scratch import scratch_for
from clustereval.phases.settings import PreflightSettings
from clustereval.phases.torchrun import check_ports
from clustereval.probes.preflight import TCP_CONNECT_SNIPPET, TCP_LISTEN_SNIPPET
from clustereval.probes.torchrun import PROBE_SNIPPET, RESOLVE_SNIPPET
from clustereval.records import CommandResult
from clustereval.store import RunState, RunStore
from clustereval.transport import kubectl as kubectl_module
from clustereval.transport import ssh as ssh_module
from clustereval.transport.base import COMMAND_MAX_BYTES, MAX_ARG_STRLEN, Node, Transport, command_bytes
from clustereval.transport.kubectl import KubectlTransport
from clustereval.transport.slurm import allocation as allocation_module
from clustereval.transport.slurm import client as slurm_client
from clustereval.transport.slurm import transport as slurm_transport_module
from clustereval.transport.slurm.hostlist import NODELIST_INLINE_MAX, expand
from clustereval.transport.slurm.transport import SlurmTransport
from clustereval.transport.ssh import SshTransport

NUM_NODES = 4096
# a long but ordinary identity per node: names as a site names them, addresses over 16 /24 subnets
NAMES = [f"h200-rack{i // 32:03d}-node{i:05d}" for i in range(NUM_NODES)]
ADDRESSES = [f"10.{20 + i // 4096}.{(i // 256) % 16}.{i % 256 + 0}" for i in range(NUM_NODES)]
SCRATCH = "/local/nvme/scratch-for-the-eval"
SHARED = "/lustre/fs01/projects/cluster-acceptance/shared"


def fleet_config() -> Config:
    return Config(name="h200-fleet", access="ssh", nodes=tuple(NAMES), hostfile="hostfile",
                  hosts=tuple(HostEntry(a) for a in ADDRESSES), gpus_per_node=8, local_scratch=SCRATCH,
                  shared_paths=(SHARED,), eval_python="/opt/conda/envs/clustereval-eval/bin/python3",
                  nccl_env=(("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3"), ("NCCL_SOCKET_IFNAME", "bond0")),
                  ssh=SshConfig(port=7878, user="clusteradmin", identity_file="~/.ssh/id_ed25519_cluster",
                                options=("ProxyJump=bastion.example.org",), connect_timeout_s=10),
                  given=("gpus_per_node", "shared_paths", "local_scratch"))


def fleet_nodes() -> list[Node]:
    return [Node(name=n, address=a, index=i, slots=8) for i, (n, a) in enumerate(zip(NAMES, ADDRESSES, strict=True))]


# ---- the recording transport: the phases' side -------------------------------------------------


@dataclass
class Call:
    kind: str  # run | popen | put | get
    node: Node
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    stdin: str | None = None
    timeout_s: float = 60.0
    local: Path | None = None
    remote: str = ""

    def size(self) -> int:
        return (command_bytes(self.argv) + sum(len(k) + len(v) + 2 for k, v in (self.env or {}).items())
                + len(self.cwd or "") + len(self.remote))

    def family(self) -> tuple:
        """Calls one builder makes: the same kind and leading words (a snippet by its first line)."""
        head = tuple((a.strip().splitlines() or [""])[0][:60] for a in self.argv[:3])
        return (self.kind, head)


class FakeProc:
    """A finished process as ``popen`` hands one back: its output, exit code 0."""

    def __init__(self, text: str) -> None:
        self.stdout = io.StringIO(text)
        self.returncode = 0
        self.pid = 0

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def kill(self) -> None:
        return None

    terminate = kill


class RecordingTransport(Transport):
    """Answers every command as a healthy node with torch and no GPU would, and records it."""

    method = "ssh"
    fanout = 64

    def __init__(self, nodes: list[Node]) -> None:
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.nodes = {n.name: n for n in nodes}

    def _record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def run(self, node, argv, *, timeout_s=60.0, env=None, cwd=None, stdin=None):  # noqa: ANN001
        self._record(Call("run", node, list(argv), dict(env) if env else None, cwd, stdin, timeout_s))
        return CommandResult(node=node.name, argv=list(argv), rc=0, stdout=self._answer(node, argv, stdin),
                             stderr="", seconds=0.01)

    def popen(self, node, argv, *, env=None, cwd=None):  # noqa: ANN001
        self._record(Call("popen", node, list(argv), dict(env) if env else None, cwd))
        if TCP_LISTEN_SNIPPET in argv:
            return FakeProc("listening\n")
        n = len(self.nodes)
        line = json.dumps({"event": "gloo", "ok": True, "rank": node.index, "world_size": n,
                           "sum": n * (n - 1) / 2, "expected": n * (n - 1) / 2})
        return FakeProc(f"[{node.name}:0]: {line}\n")

    def put(self, node, local, remote, *, timeout_s=300.0):  # noqa: ANN001
        self._record(Call("put", node, local=Path(local), remote=remote, timeout_s=timeout_s))

    def get(self, node, remote, local, *, timeout_s=300.0):  # noqa: ANN001
        self._record(Call("get", node, local=Path(local), remote=remote, timeout_s=timeout_s))

    def _answer(self, node: Node, argv: list[str], stdin: str | None) -> str:
        if argv == ["hostname"] or argv[0] == "ssh":
            return f"{node.name}\n"
        if TORCH_SNIPPET in argv:
            return "2.13.0\n"
        if TCP_CONNECT_SNIPPET in argv:
            return "".join(f"ok {a}:{p}\n" for a, p in (ln.split() for ln in (stdin or "").splitlines()))
        if PROBE_SNIPPET in argv:
            return json.dumps({"hostname": node.name, "hostname_addrs": [node.address], "route_addr": node.address,
                               "matches_endpoint": node.index == 0, "num_gpus": 0, "error": "", "matches": {},
                               "routes": {}, "route_ifname": "bond0", "env_ifnames": {}}) + "\n"
        if RESOLVE_SNIPPET in argv:  # names resolve nowhere: the plan gives every node its --local_addr
            return "{}\n"
        script = argv[2] if len(argv) > 2 and argv[:2] == ["sh", "-c"] else ""
        if "@@paths" in script:
            facts = {"hostname": node.name, "resolves": node.address, "executable": argv[4], "torch": "2.13.0",
                     "matches_endpoint": node.index == 0}
            return (f"@@paths\n@@unwritable\n@@facts\n{json.dumps(facts)}\n@@rc 0\n"
                    + ("@@env\nNCCL_IB_HCA=mlx5_0\n@@rc 0\n" if node.index == 0 else ""))
        if "no-mount:" in script:  # the scratch folder's creation: the mount and the folder, resolved
            return f"{argv[4]}\n{argv[6]}\n"
        if "refused:" in script:  # a scratch folder cleared
            return "moved 4096 /trash\n"
        if "LISTENING" in " ".join(argv):
            return "LISTENING\nACCEPTED 4095\n"
        if "OPEN" in " ".join(argv):
            return "OPEN\n"
        return ""


def run_the_fleet(tmp_path: Path) -> list[Call]:
    """Every command preflight, a launch's port check and cleanup send at 4096 nodes, as recorded."""
    config = fleet_config()
    nodes = fleet_nodes()
    transport = RecordingTransport(nodes)
    store = RunStore.create(tmp_path / "reports", config.name)
    store.save_state(RunState(name=config.name, stamp="s"))
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store)
    rec = Preflight(ctx, PreflightSettings()).run(collective=True)
    assert rec.passed, [(p.kind, p.node, p.detail) for p in rec.probes if not p.ok][:5]
    assert {p.kind for p in rec.probes} >= {"ssh", "tcp", "gloo", "peer-ssh", "torch"}
    check_ports(ctx, nodes[0], nodes[1:], nodes[0].address, config.rdzv_port, seconds=4.0)
    scratch_for(ctx).cleanup(nodes)
    return transport.calls


# ---- the real transports' side: what each would exec ----------------------------------------------


class Exec:
    """Every argv a transport hands to the operating system while it builds a call's command."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def add(self, argv) -> None:  # noqa: ANN001
        self.argvs.append([str(a) for a in argv])

    def run(self, argv, **kw):  # noqa: ANN001, ANN003
        self.add(argv)
        return subprocess.CompletedProcess(argv, 0, "" if kw.get("text") else b"", "" if kw.get("text") else b"")

    def popen(self, argv, *a, **kw):  # noqa: ANN001, ANN002, ANN003
        self.add(argv)
        return FakeProc("")


def ssh_commands(calls: list[Call], monkeypatch) -> list[tuple[str, list[str]]]:  # noqa: ANN001
    """Over SSH: the local ssh argv, the login shell's command (one argument of ``sh -c``), and the
    argv the node's ``sh`` execs for the command (its timeout, environment and words)."""
    seen = Exec()
    fake = SimpleNamespace(run=seen.run, Popen=seen.popen, PIPE=subprocess.PIPE, DEVNULL=subprocess.DEVNULL,
                           STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired,
                           SubprocessError=subprocess.SubprocessError)
    monkeypatch.setattr(ssh_module, "subprocess", fake)
    monkeypatch.setattr(ssh_module, "popen_held_stdin", lambda argv, first=b"": (seen.add(argv), FakeProc(""))[1])
    transport = SshTransport(fleet_config().ssh, multiplex=True)
    out = []
    for call in calls:
        seen.argvs.clear()
        if call.kind == "run":
            transport.run(call.node, call.argv, timeout_s=call.timeout_s, env=call.env, cwd=call.cwd, stdin=call.stdin)
            words = ssh_module.remote_command(call.argv, env=call.env, timeout_s=call.timeout_s)
            out.append(("ssh: node's sh -s line", ["sh", "-c", words]))
            out.append(("ssh: node's command", _words(call)))
        elif call.kind == "popen":
            transport.popen(call.node, call.argv, env=call.env, cwd=call.cwd)
            command = ssh_module.remote_command(call.argv, env=call.env, cwd=call.cwd)
            out.append(("ssh: node's watchdog", ["sh", "-c", ssh_module._WATCHDOG, "sh", command]))
            out.append(("ssh: node's command", _words(call, timeout=False)))
        elif call.kind == "put":
            transport.put(call.node, call.local, call.remote)
        else:
            transport.get(call.node, call.remote, call.local)
        # a command ssh gives the login shell is one argument of its `-c`
        out += [("ssh: local", argv) for argv in seen.argvs]
        out += [("ssh: login shell", ["sh", "-c", argv[-1]]) for argv in seen.argvs if argv[0] == "ssh"]
    return out


def _words(call: Call, *, timeout: bool = True) -> list[str]:
    words = [*(["env", *(f"{k}={v}" for k, v in call.env.items())] if call.env else []), *call.argv]
    return ["timeout", "-k", "5", str(int(call.timeout_s)), *words] if timeout else words


def slurm_commands(calls: list[Call], monkeypatch) -> list[tuple[str, list[str]]]:  # noqa: ANN001
    """Over Slurm: the local srun argv of every call (the node runs the words after ``--``), and
    the commands only Slurm sends about the whole allocation: srun over every node at once, salloc
    asking for them again for cleanup, sinfo about them."""
    seen = Exec()
    monkeypatch.setattr(slurm_transport_module, "communicate",
                        lambda argv, *a, **kw: (seen.add(argv), (0, _framed(argv), b"", 0.1, False))[1])
    monkeypatch.setattr(slurm_transport_module, "SrunProcess", lambda argv, *a, **kw: (seen.add(argv), FakeProc(""))[1])
    monkeypatch.setattr(slurm_transport_module, "stop_step", lambda *a, **kw: None)  # no step was started
    transport = SlurmTransport(SlurmConfig(job_id="4242424", srun_args=("--mpi=none",)))
    transport.alloc.job_id = "4242424"
    for call in calls:
        if call.kind == "run":
            transport.run(call.node, call.argv, timeout_s=call.timeout_s, env=call.env, cwd=call.cwd, stdin=call.stdin)
        elif call.kind == "popen":
            transport.popen(call.node, call.argv, env=call.env, cwd=call.cwd)
        elif call.kind == "put":
            transport.put(call.node, call.local, call.remote)
    transport.alloc.node_names = list(NAMES)
    assert len(transport.nodes()) == NUM_NODES  # one srun step over all 4096 nodes
    monkeypatch.setattr(slurm_client, "client", lambda argv: (seen.add(argv), subprocess.CompletedProcess(argv, 0, "", ""))[1])
    slurm_client.node_states(partition="gpu", names=NAMES)

    def no_salloc(argv, **kw):  # noqa: ANN001, ANN003
        seen.add(argv)
        raise FileNotFoundError("salloc")

    monkeypatch.setattr(allocation_module, "subprocess", SimpleNamespace(
        Popen=no_salloc, DEVNULL=subprocess.DEVNULL, PIPE=subprocess.PIPE, TimeoutExpired=subprocess.TimeoutExpired))
    with pytest.raises(UsageError):
        transport.alloc._request(num_nodes=NUM_NODES, nodelist=list(NAMES), time_limit="10", wait_s=1)
    return [("slurm: local", argv) for argv in seen.argvs]


def _framed(argv: list[str]) -> bytes:
    """What an srun step over several nodes prints for `hostname; hostname -I` (``FRAME_SCRIPT``'s
    base64 lines, then "rc 0 NODE", each behind its task's label)."""
    if "--label" not in argv:
        return b""
    lines = []
    for i, (name, address) in enumerate(zip(NAMES, ADDRESSES, strict=True)):
        out = base64.b64encode(f"{name}\n{address}\n".encode()).decode()
        lines += [f"{i}: o {out}", f"{i}: rc 0 {name}"]
    return ("\n".join(lines) + "\n").encode()


def kubectl_commands(calls: list[Call], monkeypatch) -> list[tuple[str, list[str]]]:  # noqa: ANN001
    """Over kubectl: the local kubectl argv of every call (the pod execs the words after ``--``), and
    `kubectl get pods` over 4096 listed pods."""
    seen = Exec()
    fake = SimpleNamespace(run=seen.run, PIPE=subprocess.PIPE, DEVNULL=subprocess.DEVNULL,
                           STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired,
                           CompletedProcess=subprocess.CompletedProcess, Popen=seen.popen)
    monkeypatch.setattr(kubectl_module, "subprocess", fake)
    monkeypatch.setattr(kubectl_module, "popen_held_stdin", lambda argv, first=b"": (seen.add(argv), FakeProc(""))[1])
    cfg = KubectlConfig(context="gke_acceptance-project_us-central1_h200-trial", namespace="cluster-acceptance",
                        pods=tuple(NAMES), container="trainer", kubeconfig="/home/clusteradmin/.kube/config")
    transport = KubectlTransport(cfg)
    for call in calls:
        if call.kind == "run":
            transport.run(call.node, call.argv, timeout_s=call.timeout_s, env=call.env, cwd=call.cwd, stdin=call.stdin)
        elif call.kind == "popen":
            transport.popen(call.node, call.argv, env=call.env, cwd=call.cwd)
        elif call.kind == "put":
            transport.put(call.node, call.local, call.remote)
        else:
            transport.get(call.node, call.remote, call.local)
    with pytest.raises(UsageError):  # the recorder's API answers no pod: every name was asked for
        transport.list_pods()
    return [("kubectl: local", argv) for argv in seen.argvs]


def _largest_of_each_family(calls: list[Call]) -> list[Call]:
    best: dict[tuple, Call] = {}
    for call in calls:
        key = call.family()
        if key not in best or call.size() > best[key].size():
            best[key] = call
    return list(best.values())


def _over(commands: list[tuple[str, list[str]]]) -> list[str]:
    bad = []
    for where, argv in commands:
        longest = max((len(a.encode()) for a in argv), default=0)
        if longest >= MAX_ARG_STRLEN:
            bad.append(f"{where}: an argument of {longest} bytes: {' '.join(argv)[:160]}")
        if command_bytes(argv) > COMMAND_MAX_BYTES:
            bad.append(f"{where}: {command_bytes(argv)} bytes in all: {' '.join(argv)[:160]}")
    return bad


@pytest.fixture(scope="module")
def fleet_calls(tmp_path_factory) -> list[Call]:
    with pytest.MonkeyPatch.context() as mp:
        # the raw folder's 4096 gloo logs, each written safely, would cost half a minute of fsync here
        mp.setattr(store_module.os, "fsync", lambda fd: None)
        return run_the_fleet(tmp_path_factory.mktemp("fleet"))


def test_the_fleet_run_sends_every_kind_of_command(fleet_calls):
    kinds = {c.kind for c in fleet_calls}
    assert kinds >= {"run", "popen", "put"}
    # preflight's TCP check: a listener and a connect command on every node, targets on stdin, at most
    # N(2L+2) connections (L = 12 at 4096 nodes)
    listeners = [c for c in fleet_calls if c.kind == "popen" and TCP_LISTEN_SNIPPET in c.argv]
    connects = [c for c in fleet_calls if c.kind == "run" and TCP_CONNECT_SNIPPET in c.argv]
    assert len(listeners) == len(connects) == NUM_NODES
    assert sum(len((c.stdin or "").splitlines()) for c in connects) <= NUM_NODES * (2 * 12 + 2)
    torchruns = [c for c in fleet_calls if c.kind == "popen" and "torch.distributed.run" in c.argv]
    assert len(torchruns) == NUM_NODES


def test_no_command_at_4096_nodes_passes_the_kernels_limits_on_any_transport(fleet_calls, monkeypatch):
    calls = _largest_of_each_family(fleet_calls)
    assert len(calls) >= 10, [c.family() for c in calls]
    commands = ssh_commands(calls, monkeypatch) + slurm_commands(calls, monkeypatch) + kubectl_commands(calls, monkeypatch)
    for prefix in ("ssh: local", "ssh: node's command", "slurm: local", "kubectl: local"):
        assert any(where == prefix for where, _ in commands), prefix
    assert _over(commands) == []
    # the commands about the whole fleet name it compressed, or in a file: never 4096 names
    named = [x.split("=", 1)[1] for w, a in commands if w == "slurm: local" for x in a
             if x.startswith(("--nodelist=", "--nodes=h"))]
    assert any(len(expand(x)) == NUM_NODES for x in named if "/" not in x)
    assert all(len(x) <= NODELIST_INLINE_MAX for x in named)
    gets = [a for w, a in commands if w == "kubectl: local" and "get" in a and "pods" in a]
    assert len(gets) == NUM_NODES // kubectl_module.PODS_PER_GET
    worst = max(command_bytes(a) for _, a in commands)
    print(f"\nthe largest command at {NUM_NODES} nodes: {worst} bytes (bound {COMMAND_MAX_BYTES})")


def test_the_bound_catches_what_the_old_preflight_built():
    """What the TCP check sent before: every node's every port in one argument (about 17 MB at 1024 nodes)."""
    targets = ",".join(f"{a}:{p}" for a in ADDRESSES[:1024] for p in range(29500, 29500 + 1025))
    assert _over([("old", ["python3", "-c", "...", targets])])
