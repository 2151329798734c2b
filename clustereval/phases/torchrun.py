"""Launching a worker on every node through torchrun (``python -m torch.distributed.run``): one job.

One torchrun per node, started through the transport at the same time, with the eval Python, a c10d
rendezvous at the first node (``config.rdzv_port``), ``--max_restarts 0`` and ``--rdzv_conf
timeout=60``; it forks its ranks (``--run_path --start_method fork``: they start with the torch it
imported, not an import each). Every multi-node job of a run uses one ``RendezvousPlan``: the one preflight's gloo
check proved (recorded in the preflight record), else decided the same way from the nodes' answers
(``analysis.rendezvous.plan_rendezvous``). A job is one unit: when any node's launcher exits
non-zero, the time runs out or the run is interrupted (``ctx.stop``), every other launcher is
stopped at once, every process carrying the job's tag is killed on every node, and the rendezvous
port is checked free before ``launch`` returns. torchrun's temporary folders go under the run's
scratch (``TMPDIR``). A failed launch is diagnosed in the runbook's order. Worker lines carry
``[<node>:<local rank>]:`` (torchrun's ``--tee`` with the node as role); the whole log is saved.
"""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field

from clustereval.analysis.rendezvous import (
    classify_failure,
    last_error_line,
    plan_rendezvous,
    rendezvous_trouble,
    socket_env,
    subplan,
)
from clustereval.errors import TransportError
from clustereval.names import slug
from clustereval.phases.base import RunContext
from clustereval.phases.remote import interpreter_mismatch, node_scratch, worker_env
from clustereval.probes._text import last_json
from clustereval.probes.preflight import final_nccl_env, parse_env_dump
from clustereval.probes.torchrun import (
    CONNECT_SNIPPET,
    LISTEN_SNIPPET,
    PROBE_SNIPPET,
    REAP_SNIPPET,
    RESOLVE_SNIPPET,
    parse_worker_events,
    prefix_log,
)
from clustereval.records.network import (
    LaunchInfo,
    NcclEnvInfo,
    NodeExit,
    RankInfo,
    RendezvousPlan,
    RendezvousProbe,
)
from clustereval.transport.base import Node, run_parallel

DEFAULT_RDZV_TIMEOUT_S = 60
# what every node's torchrun runs with beside the worker environment: one OpenMP thread per rank, and
# torchrun's question whether CUDA is there (asked before it forks the ranks) answered through NVML,
# which leaves CUDA untouched in the launcher so each forked rank can start it (asked through CUDA:
# "Cannot re-initialize CUDA in forked subprocess")
LAUNCHER_ENV = {"OMP_NUM_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
KILL_GRACE_S = 10

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
    """Each node's rendezvous answers for ``host``, for every peer's address (pairs reuse them), and
    (second round trip, >= 2 nodes) what every node's hostname resolves to on each node."""
    peers = list(nodes if peers is None else peers)

    def one(node: Node) -> RendezvousProbe:
        try:
            # the peers' addresses on stdin: a fleet's worth of them is no command line
            res = ctx.transport.run(node, [ctx.eval_python, "-c", PROBE_SNIPPET, host, str(port), "-"],
                                    timeout_s=120, stdin="".join(f"{n.address}\n" for n in peers))
        except TransportError as exc:
            return RendezvousProbe(node=node.name, error=exc.message)
        data = last_json(res.stdout)
        if not data:
            return RendezvousProbe(node=node.name, error=(res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1])
        return RendezvousProbe(node=node.name, hostname=data.get("hostname", ""),
                               hostname_addrs=list(data.get("hostname_addrs", [])),
                               route_addr=data.get("route_addr", ""), matches_endpoint=data.get("matches_endpoint"),
                               num_gpus=int(data.get("num_gpus", 0)), error=data.get("error", "").strip(),
                               matches={k: bool(v) for k, v in data.get("matches", {}).items()},
                               routes=dict(data.get("routes", {})), route_ifname=data.get("route_ifname", ""),
                               env_ifnames=dict(data.get("env_ifnames", {})))

    probes = run_parallel(nodes, one, ctx.transport.fanout)
    names = sorted({p.hostname for p in probes if p.hostname})
    if len(nodes) >= 2 and names:
        def resolve(item: tuple[Node, RendezvousProbe]) -> None:
            node, probe = item
            try:
                res = ctx.transport.run(node, [ctx.eval_python, "-c", RESOLVE_SNIPPET, "-"], timeout_s=60,
                                        stdin="".join(f"{name}\n" for name in names))
            except TransportError:
                return
            probe.peer_names = {k: list(v) for k, v in last_json(res.stdout).items()}

        run_parallel(list(zip(nodes, probes, strict=True)), resolve, ctx.transport.fanout)
    return probes


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
                                   num_gpus=p.num_gpus, error=p.error, matches=p.matches, routes=p.routes,
                                   route_ifname=p.route_ifname, env_ifnames=dict(p.env_ifnames),
                                   peer_names=dict(p.peer_names)))
    return out


def decide_plan(ctx: RunContext, nodes: list[Node], probes: list[RendezvousProbe]) -> RendezvousPlan:
    """The plan for ``nodes`` from their answers (``probes[0]``: the endpoint node)."""
    fixed = {k: v for k, v in ctx.config.nccl_env if k.endswith("SOCKET_IFNAME")}
    return plan_rendezvous(probes, endpoint_host(nodes), {n.name: n.address for n in nodes}, fixed)


def run_plan(ctx: RunContext, nodes: list[Node]) -> tuple[RendezvousPlan, list[RendezvousProbe]]:
    """The run's one rendezvous plan and the answers behind it: preflight's when it covers ``nodes``
    (the one its gloo check proved), else the connectivity phase's, else asked and decided now."""
    names = [n.name for n in nodes]
    for phase in ("preflight", "connectivity"):
        rec = ctx.records.get(phase)
        plan = getattr(rec, "rendezvous_plan", None) if phase == "preflight" else None
        probes = list(getattr(rec, "rendezvous_probes" if phase == "preflight" else "probes", None) or [])
        if plan is not None and set(names) <= set(plan.nodes) and probes:
            return plan, probes
        if phase == "connectivity" and rec is not None and rec.launch.nodes == names and probes:
            launch_plan = RendezvousPlan(nodes=names, endpoint_host=endpoint_host(nodes),
                                         is_host_node=rec.launch.is_host_node, local_addrs=dict(rec.launch.local_addrs),
                                         socket_ifnames=dict(rec.launch.socket_ifnames),
                                         reasons=list(rec.launch.fix_reasons))
            return launch_plan, probes
    probes = probe_nodes(ctx, nodes, endpoint_host(nodes), ctx.config.rdzv_port)
    return decide_plan(ctx, nodes, probes), probes


def ranks_per_node(ctx: RunContext, probes: list[RendezvousProbe]) -> tuple[int, str]:
    """(processes per node, backend): one per GPU with NCCL, else ``cpu_ranks_per_node`` gloo ranks."""
    gpus = [p.num_gpus for p in probes if not p.error or p.num_gpus]
    configured = ctx.config.gpus_per_node
    if gpus and min(gpus) > 0:
        return (min(configured, min(gpus)) if configured else min(gpus)), "nccl"
    return max(1, int(getattr(ctx.config, "cpu_ranks_per_node", 2) or 2)), "gloo"


def host_port(host: str, port: int) -> str:
    """``host:port`` as torchrun and TCPStore clients read it (an IPv6 address in brackets)."""
    return f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"


def torchrun_argv(ctx: RunContext, node: Node, *, module: str, args: list[str], num_nodes: int, nproc: int,
                  endpoint: str, run_id: str, plan: RendezvousPlan, rdzv_timeout_s: int, timeout_s: float,
                  log_dir: str, package_dir: str = "") -> list[str]:
    """The node's torchrun command. With ``package_dir`` (the shipped package's folder on the node,
    absolute) torchrun runs the worker's file in ranks forked from its own process (``--run_path
    --start_method fork``): the ranks start with the torch the launcher already imported instead of
    importing it again each, seconds per rank on a shared FS, and CUDA is first touched in the rank.
    Without it, each rank is a new interpreter (``-m clustereval.workers.<module>``)."""
    # `timeout` is the runbook's key (the static and etcd backends read it); the c10d backend reads
    # `join_timeout` (default 600 s), so both are given to keep a failed attempt short
    conf = f"timeout={rdzv_timeout_s},join_timeout={rdzv_timeout_s}"
    if rdzv_timeout_s != DEFAULT_RDZV_TIMEOUT_S:
        conf += f",read_timeout={rdzv_timeout_s}"
    if plan.is_host_node:
        conf += f",is_host={1 if node.name == plan.is_host_node else 0}"
    # TMPDIR must exist, or Python quietly falls back to /tmp for torchrun's torchelastic_* folders
    argv = ["sh", "-c", 'mkdir -p "$TMPDIR" && exec "$@"', "sh",
            "timeout", "-k", str(KILL_GRACE_S), str(int(timeout_s)),
            ctx.eval_python, "-u", "-m", "torch.distributed.run",
            "--nnodes", str(num_nodes), "--nproc_per_node", str(nproc),
            "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", run_id,
            "--max_restarts", "0", "--rdzv_conf", conf]
    if node.name in plan.local_addrs:
        argv += ["--local_addr", plan.local_addrs[node.name]]
    argv += ["--role", f"{node.name}:", "--tee", "3", "--log_dir", log_dir]
    if package_dir:
        argv += ["--run_path", "--start_method", "fork", f"{package_dir}/clustereval/workers/{module}.py"]
    else:
        argv += ["-m", f"clustereval.workers.{module}"]
    return [*argv, *args]


def _package_dir(env: dict[str, str] | TransportError) -> str:
    """The shipped package's folder in a node's worker environment ('' when it could not be shipped)."""
    return env.get("PYTHONPATH", "") if isinstance(env, dict) else ""


def check_ports(ctx: RunContext, owner: Node, others: list[Node], host: str, port: int,
                seconds: float = 10.0) -> tuple[dict[str, bool], str]:
    """(node -> could connect, bind error): the runbook's "can a worker reach it?" probe."""
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


def ship_worker_env(ctx: RunContext, node: Node) -> dict[str, str] | TransportError:
    """The worker environment of ``node``, its package shipped there first: once per node and run."""
    shipped = ctx.launch_env
    try:
        if node.name not in shipped:
            shipped[node.name] = worker_env(ctx, node)
    except TransportError as exc:
        return exc
    return shipped[node.name]


def ship_all(ctx: RunContext, nodes: list[Node]) -> None:
    """Ship the package to every node now, all at once, so that no later job spends its first
    seconds on it: the jobs of one pairwise round then start together on every transport. A node it
    fails on is left to the job that needs it, which reports why."""
    run_parallel(nodes, lambda node: ship_worker_env(ctx, node), ctx.transport.fanout)


def launch(ctx: RunContext, *, label: str, module: str, args: list[str], nodes: list[Node], nproc: int,
           port: int, timeout_s: float, extra_env: dict[str, str] | None = None,
           probes: list[RendezvousProbe] | None = None, plan: RendezvousPlan | None = None, auto_fix: bool = True,
           rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S, diagnose: bool = True, backend: str = "") -> LaunchResult:
    """Run ``clustereval.workers.<module>`` on ``nodes`` x ``nproc`` ranks as one job; never raises for a
    failed job. ``plan``: the run's rendezvous plan (default: ``run_plan``); ``auto_fix=False`` launches
    without is_host / --local_addr / socket interfaces (to show what the plan fixes)."""
    multi = len(nodes) >= 2
    if multi and ctx.ahead is not None and not ctx.ahead.checks_across_nodes:
        # preflight left its checks across nodes out because no phase of the run was to start such a job
        raise RuntimeError(f"`{label}` starts a job across {len(nodes)} nodes in a run whose preflight left its "
                           "checks across nodes out: the phase that launched it must say `across_nodes = True`")
    host = endpoint_host(nodes)
    endpoint = host_port(host, port)
    names = [n.name for n in nodes]
    if multi and plan is None and probes is not None:
        plan = decide_plan(ctx, nodes, probes)
    elif multi and plan is None:
        plan, probes = run_plan(ctx, nodes)
    job_plan = subplan(plan, names, host) if (multi and auto_fix and plan is not None) else RendezvousPlan()
    backend = backend or ("nccl" if (extra_env or {}).keys() & {"NCCL_DEBUG", "NCCL_NVLS_ENABLE"} else "gloo")
    info = LaunchInfo(label=label, nodes=names, nproc_per_node=nproc, world_size=nproc * len(nodes),
                      endpoint=endpoint, is_host_node=job_plan.is_host_node, local_addrs=dict(job_plan.local_addrs),
                      fix_reasons=list(job_plan.reasons), socket_ifnames=dict(job_plan.socket_ifnames))
    run_id = f"{slug(label, '-', 'launch')}-{ctx.store.run_id}"[:60]
    tag = f"{run_id}-{secrets.token_hex(4)}"
    scratch = node_scratch(ctx)
    log_dir = f"{scratch}/torchrun/{slug(label, '-', 'launch')}"

    def ship(node: Node):
        # the package reaches every node before any torchrun starts (no node imports a half-copied tree);
        # once per node and run: a pairwise hunt launches dozens of jobs
        base = ship_worker_env(ctx, node)
        if isinstance(base, TransportError):
            return base
        env = {**base, **LAUNCHER_ENV, **(extra_env or {})}
        env.update(socket_env(job_plan, node.name, backend))
        env["TMPDIR"] = f"{scratch}/torchrun/tmp"
        env["CLUSTEREVAL_JOB"] = f"{tag}:{node.name}"
        return env

    envs = dict(zip(names, run_parallel(nodes, ship, ctx.transport.fanout), strict=True))
    argvs = {n.name: torchrun_argv(ctx, n, module=module, args=args, num_nodes=len(nodes), nproc=nproc,
                                   endpoint=endpoint, run_id=run_id, plan=job_plan, rdzv_timeout_s=rdzv_timeout_s,
                                   timeout_s=timeout_s, log_dir=f"{log_dir}/{slug(n.name, '-', 'launch')}",
                                   package_dir=_package_dir(envs[n.name])) for n in nodes}
    t0 = time.monotonic()
    job = _Job(ctx, nodes, envs)
    try:
        job.launch(argvs)
        job.watch(timeout_s)
        info.seconds = round(time.monotonic() - t0, 1)
        info.stop_reason = job.stop_reason
        if job.stop_reason or any(e.state != "ok" for e in job.exits.values()):
            # nothing of the job may outlive it: not on the nodes, not on the port
            info.port_free = job.reap(port)
    except KeyboardInterrupt:
        job.stop_now(port)
        raise
    outputs = job.outputs()
    events: list[dict] = []
    for node in nodes:
        ex = job.exits[node.name]
        node_events = parse_worker_events(outputs[node.name])
        ex.joined = bool(node_events)
        if ex.state not in ("ok", "unreachable"):
            ex.cause = ex.cause or last_error_line(outputs[node.name])
        info.rc_by_node[node.name] = ex.rc if ex.rc is not None else (124 if ex.state == "timed-out" else 143)
        for e in node_events:
            e["_node"] = node.name
            events.append(e)
        info.exits.append(ex)
    info.not_joined = [e.node for e in info.exits if not e.joined] if any(e.joined for e in info.exits) else []
    log_rel = f"network/{slug(label, '-', 'launch')}.log"
    ctx.raw(log_rel, "".join(prefix_log(n, outputs[n]) for n in outputs))
    info.logs = [log_rel]
    info.ok = all(e.state == "ok" for e in info.exits)
    result = LaunchResult(info=info, events=events, outputs=outputs)
    _check_interpreters(ctx, result)
    if not info.ok:
        first = min((e for e in info.exits if e.state in ("failed", "unreachable")), key=lambda e: e.seconds,
                    default=None)
        info.error = (first.cause if first else "") or last_error_line(outputs.get(names[0], ""))
        if job.stop_reason == "interrupted":
            info.diagnosis, info.diagnosis_text = "interrupted", "the run was interrupted (Ctrl-C) and the job stopped"
        elif job.stop_reason == "timeout" and not rendezvous_trouble(outputs):
            info.diagnosis, info.diagnosis_text = "timeout", f"the job did not finish within {int(timeout_s)} s"
        elif diagnose:
            port_check = None
            bind_error = ""
            if multi and rendezvous_trouble(outputs):
                port_check, bind_error = check_ports(ctx, nodes[0], nodes[1:], host, port)
            info.diagnosis, info.diagnosis_text = classify_failure(outputs, probes or [], job_plan, endpoint,
                                                                   port_check, bind_error)
        if info.not_joined and info.diagnosis not in ("interrupted",):
            info.diagnosis_text = (f"{', '.join(info.not_joined)} did not join the job; "
                                   + (info.diagnosis_text or info.error or "no cause was printed"))
    return result


class _Job:
    """One torchrun per node, watched together: the first failure, the deadline or ``ctx.stop``
    stops them all at once."""

    def __init__(self, ctx: RunContext, nodes: list[Node], envs: dict) -> None:
        self.ctx, self.nodes = ctx, nodes
        self.envs = envs
        self.lines: dict[str, list[str]] = {n.name: [] for n in nodes}
        self.exits: dict[str, NodeExit] = {}
        self.procs: dict = {}
        self.readers: dict[str, threading.Thread] = {}
        self.stop_reason = ""
        self.start = time.monotonic()

    def launch(self, argvs: dict[str, list[str]]) -> None:
        """Start torchrun on every node (``argvs``: node name -> its command)."""
        ctx, envs = self.ctx, self.envs
        for node in self.nodes:
            env = envs[node.name]
            if ctx.stop.is_set():  # interrupted before the job started: start nothing
                self.stop_reason = "interrupted"
                self.exits[node.name] = NodeExit(node=node.name, state="interrupted",
                                                 cause="not started: the run was interrupted")
                continue
            if isinstance(env, TransportError):
                self.exits[node.name] = NodeExit(node=node.name, state="unreachable", cause=env.message)
                continue
            try:
                proc = ctx.transport.popen(node, argvs[node.name], env=env)
            except (TransportError, OSError) as exc:
                self.exits[node.name] = NodeExit(node=node.name, state="unreachable", cause=str(exc))
                continue
            self.procs[node.name] = proc
            t = threading.Thread(target=self._read, args=(node.name, proc), daemon=True)
            t.start()
            self.readers[node.name] = t

    def _read(self, name: str, proc) -> None:  # noqa: ANN001
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines[name].append(line)

    def _elapsed(self) -> float:
        return round(time.monotonic() - self.start, 2)

    def watch(self, timeout_s: float) -> None:
        if any(e.state == "unreachable" for e in self.exits.values()) and not self.stop_reason:
            self.stop_reason = next(f"{e.node} could not be reached" for e in self.exits.values()
                                    if e.state == "unreachable")
        while not self.stop_reason and len(self.exits) < len(self.nodes):
            for name, proc in self.procs.items():
                if name in self.exits or proc.poll() is None:
                    continue
                self._exited(name, proc)
                if self.exits[name].state != "ok" and not self.stop_reason:
                    self.stop_reason = f"{name} exited {proc.returncode}"
            if not self.stop_reason and time.monotonic() - self.start >= timeout_s:
                self.stop_reason = "timeout"
            if not self.stop_reason and self.ctx.stop.is_set():
                self.stop_reason = "interrupted"
            if not self.stop_reason:
                time.sleep(0.1)
        if self.stop_reason:
            self._stop_all()
        for t in self.readers.values():
            t.join(timeout=5)

    def _exited(self, name: str, proc) -> None:  # noqa: ANN001
        rc = proc.returncode
        node = next(n for n in self.nodes if n.name == name)
        ex = NodeExit(node=name, rc=rc, seconds=self._elapsed(), state="ok" if rc == 0 else "failed")
        if rc != 0:
            self.readers[name].join(timeout=2)  # its last lines say whether ssh itself failed
            err = self.ctx.transport.error_for(node, rc, "".join(self.lines[name]))
            if err is not None:
                ex.state, ex.cause = "unreachable", err.message
        self.exits[name] = ex

    def _stop_all(self) -> None:
        state = {"timeout": "timed-out", "interrupted": "interrupted"}.get(self.stop_reason, "stopped")
        running = [n for n in self.procs if n not in self.exits]
        for name in running:
            self.procs[name].terminate()  # ssh: the node's watchdog signals the job's process group
        deadline = time.monotonic() + 3
        for name in running:
            proc = self.procs[name]
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            cause = ("stopped by us: the run was interrupted" if state == "interrupted"
                     else "stopped by us: the job ran out of time" if state == "timed-out"
                     else f"stopped by us after {self.stop_reason}")
            self.exits[name] = NodeExit(node=name, state=state, rc=None, seconds=self._elapsed(), cause=cause)

    def stop_now(self, port: int) -> None:
        """The second Ctrl-C came while the job started, ran or was being stopped: the run stops now, but
        nothing of the job may outlive it, so its connections are closed and every process of the
        job on every node is killed before the interrupt goes on (seconds: the reap's TERM, then
        KILL). Without this the nodes' processes were left to their watchdog, and a node whose
        launcher was slow to handle its TERM still ran the job after the run had exited."""
        self.stop_reason = self.stop_reason or "interrupted"
        self._stop_all()
        self.reap(port)

    def reap(self, port: int) -> bool | None:
        """Kill every process of the job left on every node; True when the endpoint's port is free."""
        tags = {n.name: env["CLUSTEREVAL_JOB"] for n in self.nodes
                if isinstance(env := self.envs[n.name], dict)}
        first = self.nodes[0].name

        def one(node: Node) -> dict:
            if node.name not in tags:
                return {}
            argv = [self.ctx.eval_python, "-c", REAP_SNIPPET, tags[node.name],
                    str(port if node.name == first else 0), "15"]
            try:
                return last_json(self.ctx.transport.run(node, argv, timeout_s=40).stdout)
            except TransportError:
                return {}

        answers = dict(zip([n.name for n in self.nodes], run_parallel(self.nodes, one, self.ctx.transport.fanout),
                           strict=True))
        for name, got in answers.items():
            if name in self.exits:
                self.exits[name].reaped = int(got.get("found", 0) or 0)
        free = answers.get(first, {}).get("port_free")
        return None if free is None else bool(free)

    def outputs(self) -> dict[str, str]:
        out = {}
        for node in self.nodes:
            text = "".join(self.lines[node.name])
            ex = self.exits[node.name]
            if ex.state == "unreachable" and not text:
                text = f"transport error: {ex.cause}\n"
            out[node.name] = text
        return out


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
