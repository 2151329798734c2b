"""Launching a network worker on every node through torchrun (``python -m torch.distributed.run``).

One torchrun per node, started through the transport at the same time, with the eval Python, a c10d
rendezvous at the first node (``config.rdzv_port``), ``--max_restarts 0`` and ``--rdzv_conf
timeout=60``. Before a multi-node launch every node answers a few rendezvous questions (its
hostname's addresses, its route to the endpoint, torch's ``_matches_machine_hostname``); when the
runbook's quirk applies, ``is_host=1`` goes to the endpoint node and ``--local_addr`` to every node.
A failed launch is diagnosed in the runbook's order. Worker lines carry ``[<node>:<local rank>]:``
(torchrun's ``--tee`` with the node as role); the whole log is saved to the raw folder.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from clustereval.analysis.rendezvous import (
    RendezvousPlan,
    classify_failure,
    plan_rendezvous,
    rendezvous_trouble,
)
from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.remote import interpreter_mismatch, node_scratch, worker_env
from clustereval.probes.preflight import final_nccl_env, parse_env_dump
from clustereval.probes.torchrun import parse_worker_events, prefix_log
from clustereval.records.network import LaunchInfo, NcclEnvInfo, RankInfo, RendezvousProbe
from clustereval.transport.base import Node, run_parallel

DEFAULT_RDZV_TIMEOUT_S = 60
KILL_GRACE_S = 10

# Runs on each node with the eval Python: the runbook's rendezvous probes, as JSON.
PROBE_SNIPPET = r"""
import json, socket, sys
host, port, peers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
out = {"hostname": socket.gethostname(), "hostname_addrs": [], "route_addr": "", "matches_endpoint": None,
       "num_gpus": 0, "error": "", "matches": {}, "routes": {}}
try:
    out["hostname_addrs"] = sorted({a[4][0] for a in socket.getaddrinfo(out["hostname"], None,
                                                                          proto=socket.IPPROTO_TCP)})
except Exception as exc:
    out["error"] = "hostname: %s" % exc

def route(addr):
    try:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((addr, port))  # no packet is sent: the kernel picks the source address
        src = s.getsockname()[0]
        s.close()
        return src
    except Exception:
        return ""

out["route_addr"] = route(host)
out["routes"] = {p: route(p) for p in peers}
try:
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname
    out["matches_endpoint"] = bool(_matches_machine_hostname(host))
    out["matches"] = {p: bool(_matches_machine_hostname(p)) for p in peers}
except Exception as exc:
    out["error"] += " torch: %s" % exc
try:
    import torch
    out["num_gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception:
    pass
print(json.dumps(out))
"""

# The runbook's step 3 (can a worker reach the port?): a listener on the endpoint node, connects elsewhere.
LISTEN_SNIPPET = r"""
import socket, sys, time
port, seconds, want = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("", port))
except OSError as exc:
    print("BIND-FAILED %s" % exc)
    sys.exit(0)
s.listen(64)
s.settimeout(0.5)
print("LISTENING", flush=True)
end, got = time.time() + seconds, 0
while time.time() < end and got < want:
    try:
        c, _ = s.accept()
        got += 1
        c.close()
    except OSError:
        pass
print("ACCEPTED %d" % got)
"""
CONNECT_SNIPPET = r"""
import socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + seconds
while True:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("OPEN")
        break
    except OSError as exc:
        if time.time() > end:
            print("CLOSED %s" % exc)
            break
        time.sleep(0.3)
"""


@dataclass
class LaunchResult:
    info: LaunchInfo
    events: list[dict] = field(default_factory=list)  # worker JSON lines, with _node / _local_rank
    outputs: dict[str, str] = field(default_factory=dict)  # node -> raw launcher output

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == event]

    def ranks(self) -> list[RankInfo]:
        out = []
        for e in sorted(self.of("hello"), key=lambda e: e.get("rank", 0)):
            out.append(RankInfo(rank=int(e.get("rank", 0)), local_rank=int(e.get("local_rank", 0)),
                                node=e.get("_node", ""), host=e.get("host", ""), device=e.get("device", ""),
                                device_name=e.get("device_name", ""), numa_node=int(e.get("numa_node", -1)),
                                cpu_affinity=e.get("cpu_affinity", ""), executable=e.get("executable", ""),
                                torch=e.get("torch", ""), nccl=e.get("nccl", ""), backend=e.get("backend", "")))
        return out


def endpoint_host(nodes: list[Node]) -> str:
    """The first node's address for >= 2 nodes; loopback for one node (the runbook's localhost form)."""
    return nodes[0].address if len(nodes) >= 2 else "127.0.0.1"


def nccl_env_info(ctx: RunContext) -> NcclEnvInfo:
    """The final NCCL env: the preflight record's when there is one, else dumped from node 0 now."""
    pre = ctx.records.get("preflight")
    final: dict[str, str] = {}
    source: dict[str, str] = {}
    if ctx.nccl_env:
        final = dict(ctx.nccl_env)
        source = dict(getattr(pre, "env_source", {}) or {})
    elif pre is not None and getattr(pre, "final_env", None):
        final, source = dict(pre.final_env), dict(pre.env_source)
    else:
        platform: dict[str, str] = {}
        if ctx.nodes:
            try:
                res = ctx.transport.run(ctx.nodes[0], ["env"], timeout_s=30)
                platform = parse_env_dump(res.stdout)
            except TransportError:
                platform = {}
        final, source = final_nccl_env(platform, ctx.config.nccl_env)
    if "NCCL_NVLS_ENABLE" not in final:
        final["NCCL_NVLS_ENABLE"] = "2"
        source["NCCL_NVLS_ENABLE"] = "clustereval default"
    for k in final:
        source.setdefault(k, "platform")
    return NcclEnvInfo(final_env=final, env_source=source, nvls_enable=final["NCCL_NVLS_ENABLE"],
                       nvls_source=source.get("NCCL_NVLS_ENABLE", "platform"))


def probe_nodes(ctx: RunContext, nodes: list[Node], host: str, port: int,
                peers: list[Node] | None = None) -> list[RendezvousProbe]:
    """Each node's rendezvous answers for ``host``, and for every peer's address (pairs reuse them)."""
    peers = list(nodes if peers is None else peers)

    def one(node: Node) -> RendezvousProbe:
        try:
            res = ctx.transport.run(node, [ctx.eval_python, "-c", PROBE_SNIPPET, host, str(port),
                                           *[n.address for n in peers]], timeout_s=120)
        except TransportError as exc:
            return RendezvousProbe(node=node.name, error=exc.message)
        data: dict = {}
        for line in reversed(res.stdout.strip().splitlines()):
            try:
                data = json.loads(line)
                break
            except ValueError:
                continue
        if not data:
            return RendezvousProbe(node=node.name, error=(res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1])
        return RendezvousProbe(node=node.name, hostname=data.get("hostname", ""),
                               hostname_addrs=list(data.get("hostname_addrs", [])),
                               route_addr=data.get("route_addr", ""), matches_endpoint=data.get("matches_endpoint"),
                               num_gpus=int(data.get("num_gpus", 0)), error=data.get("error", "").strip(),
                               matches={k: bool(v) for k, v in data.get("matches", {}).items()},
                               routes=dict(data.get("routes", {})))
    return run_parallel(nodes, one, ctx.transport.fanout)


def probes_for(probes: list[RendezvousProbe], nodes: list[Node]) -> list[RendezvousProbe] | None:
    """The probes of a launch among ``nodes`` (endpoint: the first), from a run-wide probe; None if missing."""
    by_node = {p.node: p for p in probes}
    if not nodes or any(n.name not in by_node for n in nodes):
        return None
    host = nodes[0].address
    out = []
    for n in nodes:
        p = by_node[n.name]
        if host not in p.routes or host not in p.matches:
            return None
        out.append(RendezvousProbe(node=p.node, hostname=p.hostname, hostname_addrs=list(p.hostname_addrs),
                                   route_addr=p.routes[host], matches_endpoint=p.matches[host],
                                   num_gpus=p.num_gpus, error=p.error, matches=p.matches, routes=p.routes))
    return out


def ranks_per_node(ctx: RunContext, probes: list[RendezvousProbe]) -> tuple[int, str]:
    """(processes per node, backend): one per GPU with NCCL, else ``cpu_ranks_per_node`` gloo ranks."""
    gpus = [p.num_gpus for p in probes if not p.error or p.num_gpus]
    configured = ctx.config.gpus_per_node
    if gpus and min(gpus) > 0:
        return (min(configured, min(gpus)) if configured else min(gpus)), "nccl"
    return max(1, int(getattr(ctx.config, "cpu_ranks_per_node", 2) or 2)), "gloo"


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "launch"


def torchrun_argv(ctx: RunContext, node: Node, *, module: str, args: list[str], num_nodes: int, nproc: int,
                  endpoint: str, run_id: str, plan: RendezvousPlan, rdzv_timeout_s: int, timeout_s: float,
                  log_dir: str) -> list[str]:
    # `timeout` is the runbook's key (the static and etcd backends read it); the c10d backend reads
    # `join_timeout` (default 600 s), so both are given to keep a failed attempt short
    conf = f"timeout={rdzv_timeout_s},join_timeout={rdzv_timeout_s}"
    if rdzv_timeout_s != DEFAULT_RDZV_TIMEOUT_S:
        conf += f",read_timeout={rdzv_timeout_s}"
    if plan.is_host_node:
        conf += f",is_host={1 if node.name == plan.is_host_node else 0}"
    argv = ["timeout", "-k", str(KILL_GRACE_S), str(int(timeout_s)),
            ctx.eval_python, "-u", "-m", "torch.distributed.run",
            "--nnodes", str(num_nodes), "--nproc_per_node", str(nproc),
            "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", run_id,
            "--max_restarts", "0", "--rdzv_conf", conf]
    if node.name in plan.local_addrs:
        argv += ["--local_addr", plan.local_addrs[node.name]]
    argv += ["--role", f"{node.name}:", "--tee", "3", "--log_dir", log_dir,
             "-m", f"clustereval.workers.{module}", *args]
    return argv


def check_ports(ctx: RunContext, owner: Node, others: list[Node], host: str, port: int,
                seconds: float = 10.0) -> tuple[dict[str, bool], str]:
    """(node -> could connect, bind error): the runbook's "can a worker reach it?" probe."""
    import threading

    holder: dict[str, str] = {}

    def listen() -> None:
        try:
            res = ctx.transport.run(owner, [ctx.eval_python, "-c", LISTEN_SNIPPET, str(port), str(seconds),
                                            str(len(others))], timeout_s=seconds + 30)
            holder["out"] = res.stdout
        except TransportError as exc:
            holder["out"] = f"BIND-FAILED {exc.message}"

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    time.sleep(1.0)

    def connect(node: Node) -> bool:
        try:
            res = ctx.transport.run(node, [ctx.eval_python, "-c", CONNECT_SNIPPET, host, str(port),
                                           str(seconds - 3)], timeout_s=seconds + 30)
        except TransportError:
            return False
        return "OPEN" in res.stdout

    results = run_parallel(others, connect, ctx.transport.fanout)
    th.join(seconds + 40)
    out = holder.get("out", "")
    bind_error = out.split("BIND-FAILED", 1)[1].strip() if "BIND-FAILED" in out else ""
    return {n.name: ok for n, ok in zip(others, results, strict=True)}, bind_error


def launch(ctx: RunContext, *, label: str, module: str, args: list[str], nodes: list[Node], nproc: int,
           port: int, timeout_s: float, extra_env: dict[str, str] | None = None,
           probes: list[RendezvousProbe] | None = None, auto_fix: bool = True,
           rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S, diagnose: bool = True) -> LaunchResult:
    """Run ``clustereval.workers.<module>`` on ``nodes`` x ``nproc`` ranks; never raises for a failed job."""
    host = endpoint_host(nodes)
    endpoint = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    multi = len(nodes) >= 2
    if multi and probes is None:
        probes = probe_nodes(ctx, nodes, host, port)
    plan = plan_rendezvous(probes or [], host) if (multi and auto_fix) else RendezvousPlan()
    info = LaunchInfo(label=label, nodes=[n.name for n in nodes], nproc_per_node=nproc,
                      world_size=nproc * len(nodes), endpoint=endpoint, is_host_node=plan.is_host_node,
                      local_addrs=dict(plan.local_addrs), fix_reasons=list(plan.reasons))
    run_id = f"{_safe(label)}-{ctx.store.run_id}"[:60]
    log_dir = f"{node_scratch(ctx)}/torchrun/{_safe(label)}"

    def ship(node: Node):
        # the package reaches every node before any torchrun starts (no node imports a half-copied tree)
        try:
            return worker_env(ctx, node, {"OMP_NUM_THREADS": "1", **(extra_env or {})})
        except TransportError as exc:
            return exc

    envs = dict(zip((n.name for n in nodes), run_parallel(nodes, ship, ctx.transport.fanout), strict=True))

    def one(node: Node):
        env = envs[node.name]
        if isinstance(env, TransportError):
            return env
        argv = torchrun_argv(ctx, node, module=module, args=args, num_nodes=len(nodes), nproc=nproc,
                             endpoint=endpoint, run_id=run_id, plan=plan, rdzv_timeout_s=rdzv_timeout_s,
                             timeout_s=timeout_s, log_dir=f"{log_dir}/{_safe(node.name)}")
        try:
            return ctx.transport.run(node, argv, timeout_s=timeout_s + KILL_GRACE_S + 20, env=env)
        except TransportError as exc:
            return exc

    t0 = time.monotonic()
    results = run_parallel(nodes, one, max(len(nodes), 1))
    info.seconds = round(time.monotonic() - t0, 1)
    outputs: dict[str, str] = {}
    events: list[dict] = []
    for node, res in zip(nodes, results, strict=True):
        if isinstance(res, TransportError):
            outputs[node.name] = f"transport error: {res.message}\n"
            info.rc_by_node[node.name] = 255
            continue
        text = (res.stdout or "") + (("\n" + res.stderr) if res.stderr else "")
        outputs[node.name] = text
        info.rc_by_node[node.name] = 124 if res.timed_out else res.rc
        for e in parse_worker_events(text):
            e["_node"] = node.name
            events.append(e)
    log_rel = f"network/{_safe(label)}.log"
    ctx.raw(log_rel, "".join(prefix_log(n, outputs[n]) for n in outputs))
    info.logs = [log_rel]
    info.ok = all(rc == 0 for rc in info.rc_by_node.values())
    result = LaunchResult(info=info, events=events, outputs=outputs)
    _check_interpreters(ctx, result)
    if not info.ok:
        failing = next((n for n, rc in info.rc_by_node.items() if rc != 0), "")
        from clustereval.analysis.rendezvous import last_error_line

        info.error = last_error_line(outputs.get(failing, ""))
        if any(rc == 124 for rc in info.rc_by_node.values()) and not rendezvous_trouble(outputs):
            info.diagnosis, info.diagnosis_text = "timeout", f"the job did not finish within {int(timeout_s)} s"
        elif diagnose:
            port_check = None
            bind_error = ""
            if multi and rendezvous_trouble(outputs):
                port_check, bind_error = check_ports(ctx, nodes[0], nodes[1:], host, port)
            info.diagnosis, info.diagnosis_text = classify_failure(outputs, probes or [], plan, endpoint,
                                                                   port_check, bind_error)
    return result


def _check_interpreters(ctx: RunContext, result: LaunchResult) -> None:
    """Every worker must have run on the eval Python's interpreter, torch and NCCL."""
    ev = ctx.records.get("evalpython")
    seen = set()
    for e in result.of("hello"):
        node = e.get("_node", "")
        problem = interpreter_mismatch(ctx, node, e)
        if not problem and ev is not None and ev.nccl and e.get("nccl") and e["nccl"] != ev.nccl:
            problem = f"{node}: the worker ran on NCCL {e['nccl']}, not the eval Python's NCCL {ev.nccl}"
        if problem and problem not in seen:
            seen.add(problem)
            result.info.interpreter_problems.append(problem)
