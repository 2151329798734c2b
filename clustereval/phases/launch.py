"""Starting one torchrun per node through the transport, with the rendezvous quirks handled.

``torch.distributed.run`` (c10d rendezvous at the first hostfile node) is the launcher; we only
start it on every node, watch all of them, and stop the rest as soon as one fails, so a broken
node costs seconds instead of the rendezvous timeout.

The seed's two rendezvous failures (both look like a TCPStore timeout) are fixed up front from
what each node reports about itself (``probes.preflight.NodeFacts``):

1. nobody hosts the store: the endpoint node's hostname resolves to 127.0.1.1 (or torch's
   ``_matches_machine_hostname`` is False there), so every agent acts as a client. Fix:
   ``--rdzv_conf is_host=1`` on the endpoint node.
2. workers get an unresolvable master: an agent advertises a hostname that resolves to loopback.
   Fix: ``--local_addr <its hostfile address>`` on every such node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from clustereval.errors import TransportError
from clustereval.probes.preflight import NodeFacts
from clustereval.transport.base import Node, Transport


@dataclass
class RendezvousPlan:
    """Per-node extra torchrun arguments and why each was added."""

    endpoint: str  # "10.0.0.1:29500"
    is_host: dict[str, bool] = field(default_factory=dict)  # node name -> force the store there
    local_addr: dict[str, str] = field(default_factory=dict)  # node name -> address to advertise
    fixes: list[str] = field(default_factory=list)  # one sentence per fix, for the record

    def conf(self, node: Node, base: Mapping[str, str]) -> str:
        conf = dict(base)
        if self.is_host.get(node.name):
            conf["is_host"] = "1"
        return ",".join(f"{k}={v}" for k, v in conf.items())


def plan_rendezvous(nodes: list[Node], facts: Mapping[str, NodeFacts], port: int) -> RendezvousPlan:
    """Decide ``is_host`` / ``--local_addr`` from each node's own view (pure)."""
    first = nodes[0]
    plan = RendezvousPlan(endpoint=f"{first.address}:{port}")
    for node in nodes:
        f = facts.get(node.name, NodeFacts())
        if f.hostname_is_loopback:
            plan.local_addr[node.name] = node.address
            seen = f"resolves to {f.resolves}" if f.resolves else "does not resolve"
            plan.fixes.append(f"{node.name}: --local_addr {node.address} (its hostname {f.hostname or '?'} {seen} "
                              "there, so peers could not reach the address it would advertise)")
    ff = facts.get(first.name, NodeFacts())
    if ff.hostname_is_loopback or ff.matches_endpoint is False:
        plan.is_host[first.name] = True
        why = ("its hostname resolves to loopback" if ff.hostname_is_loopback
               else f"it does not recognise {first.address} as its own address")
        plan.fixes.append(f"{first.name}: --rdzv_conf is_host=1 ({why}, so no agent would host the store)")
    return plan


def torchrun_argv(python: str, node: Node, plan: RendezvousPlan, *, num_nodes: int, nproc_per_node: int,
                  rdzv_id: str, module: str, module_args: list[str] | None = None,
                  rdzv_conf: Mapping[str, str] | None = None) -> list[str]:
    """``python -m torch.distributed.run`` for one node (c10d, no restarts, the plan's fixes)."""
    conf = plan.conf(node, rdzv_conf or {"join_timeout": "60", "read_timeout": "60"})
    argv = [python, "-m", "torch.distributed.run", "--nnodes", str(num_nodes),
            "--nproc_per_node", str(nproc_per_node), "--rdzv_backend", "c10d", "--rdzv_endpoint", plan.endpoint,
            "--rdzv_id", rdzv_id, "--max_restarts", "0", "--rdzv_conf", conf]
    if node.name in plan.local_addr:
        argv += ["--local_addr", plan.local_addr[node.name]]
    return [*argv, "-m", module, *(module_args or [])]


@dataclass
class LaunchResult:
    node: str
    rc: int | None  # None: stopped by us (another node failed, or the time ran out)
    output: str  # stdout and stderr merged, as the node printed them
    seconds: float
    timed_out: bool = False
    stopped: bool = False  # killed because another node failed first
    error: str = ""  # a transport error (the node could not be reached)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.error


def launch_all(transport: Transport, nodes: list[Node], argv_for: Callable[[Node], list[str]], *,
               env_for: Callable[[Node], Mapping[str, str]] | None = None, timeout_s: float = 120.0,
               grace_s: float = 3.0, on_line: Callable[[str, str], None] | None = None) -> list[LaunchResult]:
    """Start ``argv_for(node)`` on every node at once; return when all have exited.

    As soon as one node exits non-zero the others get ``grace_s`` to finish and are then stopped;
    after ``timeout_s`` everything still running is stopped and marked timed out.
    """
    start = time.monotonic()
    procs = {}
    outputs: dict[str, list[str]] = {n.name: [] for n in nodes}
    readers = []
    for node in nodes:
        env = dict(env_for(node)) if env_for else None
        proc = transport.popen(node, argv_for(node), env=env)
        procs[node.name] = proc

        def read(name: str = node.name, p=proc) -> None:  # noqa: ANN001
            assert p.stdout is not None
            for line in p.stdout:
                outputs[name].append(line)
                if on_line:
                    on_line(name, line.rstrip("\n"))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        readers.append(t)
    finished: dict[str, float] = {}
    stop_at: float | None = None
    stopped: set[str] = set()
    timed_out: set[str] = set()
    while len(finished) < len(nodes):
        now = time.monotonic()
        for name, proc in procs.items():
            if name not in finished and proc.poll() is not None:
                finished[name] = now - start
                if proc.returncode != 0 and stop_at is None:
                    stop_at = now + grace_s
        running = [n for n in procs if n not in finished]
        if running and ((stop_at is not None and now >= stop_at) or now - start >= timeout_s):
            for name in running:
                procs[name].kill()
                procs[name].wait()
                finished[name] = now - start
                (stopped if stop_at is not None and now < start + timeout_s else timed_out).add(name)
        time.sleep(0.05)
    for t in readers:
        t.join(timeout=5)
    results = []
    for node in nodes:
        proc = procs[node.name]
        output = "".join(outputs[node.name])
        killed = node.name in stopped or node.name in timed_out
        result = LaunchResult(node=node.name, rc=None if killed else proc.returncode, output=output,
                              seconds=round(finished[node.name], 2), timed_out=node.name in timed_out,
                              stopped=node.name in stopped)
        error_for = getattr(transport, "error_for", None)
        if not killed and error_for is not None:
            err: TransportError | None = error_for(node, proc.returncode, output)
            if err is not None:
                result.error = err.message
        results.append(result)
    return results
