"""Preflight: the hard gate before anything slow.

1. The runbook's "Ask now, not later" checklist from cluster.toml: a required item missing stops
   here, before any node is touched, with the exact list.
2. Every node answers ``hostname`` over the transport (SSH BatchMode, in parallel): fails within
   the connect timeout, naming the node, its address:port and the cause.
3. GPUs per node (``nvidia-smi -L`` when not configured), the scratch paths on every node, and the
   NCCL environment of rank 0 (platform values kept; ``NCCL_NVLS_ENABLE=2`` preset only when unset).
4. With >= 2 nodes, the checks across nodes: passwordless SSH from the first node to the others
   (informational), the TCP check of the ports the run's jobs meet at (``preflight_tcp``: every port
   free on every node, the rendezvous reached from every node, each node's ports from its peers by a
   stated rule, N log N connections in all), and a CPU gloo all-reduce, one
   process per node, through torchrun with the rendezvous quirks fixed. A run none of whose phases
   starts a job across nodes leaves them out (``across_nodes_not_run``: they would gate nothing);
   ``clustereval preflight`` always runs them.

``record.passed`` gates the run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.preflight_checklist import checklist
from clustereval.phases.preflight_tcp import TcpCheck
from clustereval.phases.settings import PreflightSettings
from clustereval.phases.torchrun import decide_plan, launch, probe_nodes
from clustereval.probes.preflight import (
    NodeFacts,
    NodeProbe,
    final_nccl_env,
    node_probe_argv,
    parse_node_probe,
)
from clustereval.records import CommandResult, Gap
from clustereval.records.network import RendezvousPlan
from clustereval.records.run import AcrossNodesNotRun, NodeInfo, PreflightRecord, ProbeResult
from clustereval.report.units import short_list
from clustereval.transport.base import Node, run_parallel

PHASE = "preflight"


def _access_detail(ctx: RunContext) -> str:
    """kubectl: context, namespace and how the pods were chosen (the report's Access line names them)."""
    return ctx.transport.access_detail()


# Found, not imported: an import of torch takes seconds, and preflight stays fast.
TORCH_SNIPPET = ("import importlib.metadata as m, importlib.util as u\n"
                 "if u.find_spec('torch') is None:\n"
                 "    raise SystemExit('No module named torch')\n"
                 "print(m.version('torch'))\n")


class PreflightPhase:
    name = PHASE
    title = "Preflight"

    def __init__(self, settings: PreflightSettings | None = None) -> None:
        self.settings = settings or PreflightSettings()

    def applies(self, ctx: RunContext) -> bool:
        return True

    def restore(self, ctx: RunContext, record: PreflightRecord) -> None:
        ctx.nccl_env = dict(record.final_env)

    def run(self, ctx: RunContext) -> PreflightRecord:
        not_run = across_nodes_not_run(ctx)
        record = Preflight(ctx, self.settings).run(collective=not_run is None)
        record.across_nodes_not_run = not_run
        self.restore(ctx, record)
        return record


def across_nodes_not_run(ctx: RunContext) -> AcrossNodesNotRun | None:
    """Why the checks across nodes are left out of this preflight, or None when they run: they run
    with >= 2 nodes outside a run (``clustereval preflight``), and in a run that goes on to a phase
    that starts a job across nodes, or to no phase at all (``ctx.ahead``, the runner's decision)."""
    ahead = ctx.ahead
    if len(ctx.nodes) < 2 or ahead is None or ahead.checks_across_nodes:
        return None
    return AcrossNodesNotRun(phases=list(ahead.phases), across_nodes=list(ahead.every_across_nodes),
                             resume=ahead.resume)


class Preflight:
    """One preflight pass; every step appends to ``self.rec`` and returns False to stop."""

    def __init__(self, ctx: RunContext, settings: PreflightSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.cfg = ctx.config
        self.nodes = ctx.nodes
        self.python = ctx.eval_python
        self.multi = len(ctx.nodes) >= 2
        self.rec = PreflightRecord(phase=PHASE, access=ctx.config.access,
                                   access_detail=_access_detail(ctx),
                                   nodes=[NodeInfo(n.name, n.address, n.index) for n in ctx.nodes],
                                   gpu_bf16_target_tflops=ctx.config.targets.gpu_bf16_tflops)
        self._lock = threading.Lock()

    def run(self, *, collective: bool = True) -> PreflightRecord:
        """``collective=False``: the node-by-node checks alone (reachability, GPUs and paths, torch),
        without the cross-node TCP check and the gloo all-reduce; what ``benchmarks/fleet_orchestration.py``
        times at fleet size, where the nodes are aliases of a few hosts that share their ports."""
        rec = self.rec
        rec.checklist = checklist(self.cfg, self.ctx.transport.describe(), self.nodes, across_nodes=collective)
        rec.missing = [c.need for c in rec.checklist if c.required and not c.known and c.need != "GPUs per node"]
        if self.multi:
            rec.rendezvous = f"{self.nodes[0].address}:{self.cfg.rdzv_port}"
        if rec.missing:
            rec.status = "failed"
            for item in rec.checklist:
                if item.need in rec.missing:
                    rec.gaps.append(Gap(PHASE, kind="preflight.missing", facts={"need": item.need, "hint": item.hint}))
            return rec
        steps = [self._reach, self._node_facts, self._torch]
        if self.cfg.access == "slurm":
            steps.insert(0, self._allocation)
        if self.multi and collective:
            steps += [self._tcp, self._gloo]
        for step in steps:
            if not step():
                break
        kinds = list(dict.fromkeys(p.kind for p in rec.probes))
        order = {n.name: n.index for n in self.nodes}
        rec.probes.sort(key=lambda p: (kinds.index(p.kind), order.get(p.node, 0)))
        rec.passed = not rec.missing and all(p.ok for p in rec.probes if p.gating and not p.skipped)
        rec.status = "ok" if rec.passed else "failed"
        return rec

    # -- helpers --------------------------------------------------------------------------------
    def _progress(self, node: str, message: str) -> None:
        self.ctx.progress(PHASE, node, message, None)

    def _probe(self, probe: ProbeResult) -> None:
        with self._lock:
            self.rec.probes.append(probe)

    def _run(self, node: Node, argv: list[str], timeout_s: float) -> CommandResult:
        return self.ctx.transport.run(node, argv, timeout_s=timeout_s)

    # -- 0. Slurm: the allocation exists and covers the nodes ---------------------------------
    def _allocation(self) -> bool:
        t0 = time.monotonic()
        checked = self.ctx.transport.allocation_check(self.nodes)
        if checked is None:
            return True
        ok, detail = checked
        self._probe(ProbeResult("slurm", "all nodes", ok, detail, round(time.monotonic() - t0, 2)))
        if not ok:
            self.rec.gaps.append(Gap(PHASE, kind="preflight.allocation", facts={"detail": detail}))
        return ok

    # -- 1. every node answers ------------------------------------------------------------------
    def _reach(self) -> bool:
        self._progress("all nodes", f"{ {'ssh': 'SSH', 'slurm': 'srun', 'kubectl': 'kubectl exec'}.get(self.cfg.access, 'exec')} `hostname` on "
                       f"{len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}")
        errors: dict[str, TransportError] = {}
        kind = {"ssh": "ssh", "slurm": "srun", "kubectl": "kubectl"}.get(self.cfg.access, "exec")

        def one(node: Node) -> None:
            t0 = time.monotonic()
            try:
                # a dead node fails at connect (refused, or ConnectTimeout) within seconds either way;
                # the minute is for a live node whose login is slow (shell start-up files, a loaded host)
                # `hostname` is safe to repeat: a transient failure (sshd slow to answer its banner
                # while a thousand nodes connect at once) is retried before it counts
                res = self.ctx.repeatable.run(node, ["hostname"], timeout_s=self.cfg.ssh.connect_timeout_s
                                              + self.settings.login_allowance_s)
            except TransportError as exc:
                errors[node.name] = exc
                self._probe(ProbeResult(kind, node.name, False, exc.message, round(time.monotonic() - t0, 2)))
                return
            name = res.stdout.strip().split(".")[0]
            ok = res.ok and bool(name)
            detail = name if ok else (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
            self._probe(ProbeResult(kind, node.name, ok, detail, res.seconds))
            if ok:
                self.rec.nodes[node.index].hostname = name
            else:
                errors[node.name] = TransportError(node.name, f"`hostname` failed: {detail}")

        run_parallel(self.nodes, one, self.ctx.transport.fanout)
        if not errors:
            return True
        for node in self.nodes:
            exc = errors.get(node.name)
            if exc is not None:
                self.rec.gaps.append(Gap(PHASE, node=node.name, kind="preflight.unreachable",
                                         facts={"message": exc.message, "error_id": exc.error_id,
                                                "hint": exc.hint or ""}))
        refused = [e for e in errors.values() if e.error_id == "ssh-unreachable" and "refused" in e.message]
        if self.cfg.ssh.port is not None and len(refused) == len(self.nodes) >= 2:
            self.rec.gaps.insert(0, Gap(PHASE, kind="preflight.ssh-port-refused", facts={"port": self.cfg.ssh.port}))
        return False

    # -- 2. what each node has (one round trip per node) --------------------------------------
    def _node_facts(self) -> bool:
        endpoint = self.nodes[0].address
        paths = [self.cfg.local_scratch, *self.cfg.shared_paths]
        self.facts: dict[str, NodeFacts] = {}
        probes: dict[str, NodeProbe] = {}
        self._progress("all nodes", "GPUs, scratch paths" + (", rendezvous facts" if self.multi else "")
                       + ", NCCL environment")

        def one(node: Node) -> None:
            argv = node_probe_argv(self.python, endpoint, paths, gpus=self.cfg.gpus_per_node is None,
                                   facts=self.multi, env=node.index == 0)
            try:
                res = self._run(node, argv, timeout_s=self.settings.command_timeout_s)
            except TransportError as exc:
                kind = {"ssh": "ssh", "slurm": "srun", "kubectl": "kubectl"}.get(self.cfg.access, "exec")
                self._probe(ProbeResult(kind, node.name, False, exc.message))
                self.rec.gaps.append(Gap(PHASE, node=node.name, kind="preflight.probe-failed",
                                         facts={"message": exc.message, "error_id": exc.error_id,
                                                "hint": exc.hint or ""}))
                return
            probe = parse_node_probe(res.stdout)
            probes[node.name] = probe
            if probe.facts is not None:
                self.facts[node.name] = probe.facts

        run_parallel(self.nodes, one, self.ctx.transport.fanout)
        self._gpus({n: p.gpus for n, p in probes.items() if p.gpus is not None},
                   {n: p.gpu_note for n, p in probes.items() if p.gpu_note})
        paths_ok = all([self._paths(node, probes.get(node.name)) for node in self.nodes])
        first = self.nodes[0].name
        if first in probes:
            platform = probes[first].env
            self.rec.platform_env = platform
            self.rec.final_env, self.rec.env_source = final_nccl_env(platform, self.cfg.nccl_env)
            lines = [f"{k}={v}  # {self.rec.env_source[k]}" for k, v in self.rec.final_env.items()]
            self.ctx.raw("preflight/nccl-env.txt", "\n".join(lines) + "\n")
        return len(probes) == len(self.nodes) and paths_ok

    def _paths(self, node: Node, probe: NodeProbe | None) -> bool:
        """A configured path that is missing or not writable stops the run before anything slow:
        clustereval never creates local_scratch or a shared path (it would benchmark the wrong disk)."""
        if probe is None:
            return True
        bad = [(p, "does not exist") for p in probe.missing_paths] + [(p, "is not writable by the eval user")
                                                                       for p in probe.unwritable_paths]
        if not bad:
            return True
        for path, problem in bad:  # the probe's detail and the Gap's fact, in the same words
            key = "local_scratch" if path == self.cfg.local_scratch else "shared_paths"
            self._probe(ProbeResult("paths", node.name, False, f"{key} {path} {problem}"))
            self.rec.missing.append(f"{key} {path} on {node.name}")
            self.rec.gaps.append(Gap(PHASE, node=node.name, kind="preflight.path-unusable",
                                     facts={"path": path, "key": key, "problem": problem}))
        return False

    def _gpus(self, gpus: dict[str, int], notes: dict[str, str]) -> None:
        rec = self.rec
        item = next(c for c in rec.checklist if c.need == "GPUs per node")
        if self.cfg.gpus_per_node is not None:
            rec.gpus_per_node = self.cfg.gpus_per_node
            rec.gpu_source = "cluster.toml" if "gpus_per_node" in self.cfg.given else "hostfile slots"
            return
        rec.gpus_by_node = {n.name: gpus[n.name] for n in self.nodes if n.name in gpus}
        if not rec.gpus_by_node:
            item.hint = "the nodes could not be asked; set gpus_per_node in cluster.toml"
            return
        counts = Counter(rec.gpus_by_node.values())
        rec.gpus_per_node = counts.most_common(1)[0][0]
        rec.gpu_source = "nvidia-smi -L"
        item.known = True
        if len(counts) > 1:
            item.value = "differs: " + ", ".join(f"{n} {c}" for n, c in rec.gpus_by_node.items()) + " (nvidia-smi -L)"
        elif rec.gpus_per_node == 0:
            why = sorted(set(notes.values()))
            item.value = "none detected" + (f" ({'; '.join(why)})" if why else " (nvidia-smi -L listed no GPU)")
        else:
            item.value = f"{rec.gpus_per_node} (nvidia-smi -L)"

    # -- 2b. torch: informs, never gates (the eval-Python phase installs it; a pass it stops says so) --
    def _torch(self) -> bool:
        configured = bool(self.cfg.eval_python)
        who = "`eval_python`" if configured else f"`{self.python}`"
        self._progress("all nodes", f"torch in {who}")

        def one(node: Node) -> None:
            try:
                res = self._run(node, [self.python, "-c", TORCH_SNIPPET], timeout_s=self.settings.command_timeout_s)
            except TransportError as exc:
                self._probe(ProbeResult("torch", node.name, False, exc.message, gating=False))
                return
            version = res.stdout.strip().splitlines()[-1] if res.ok and res.stdout.strip() else ""
            if version:
                detail = f"torch {version} in {who}"
            else:
                why = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
                why = "torch is not installed" if "No module named" in why else why[:120]
                detail = (f"{who} cannot import torch ({why}); the benchmarks that need torch will not run"
                          if configured else
                          f"{who} cannot import torch ({why}); the eval Python phase installs it from the PyTorch "
                          "index for the driver's CUDA, else from pip's configured index")
            self._probe(ProbeResult("torch", node.name, bool(version), detail, res.seconds, gating=False))

        run_parallel(self.nodes, one, self.ctx.transport.fanout)
        return True

    # -- 3. the ports the run's jobs meet at: free on every node, reached by the rule of preflight_tcp --
    def _tcp(self) -> bool:
        peers = threading.Thread(target=self._peer_ssh, daemon=True)
        peers.start()
        try:
            return self._tcp_probe()
        finally:
            peers.join()

    def _tcp_probe(self) -> bool:
        """The multi-node jobs meet at ``rdzv_port`` on the first node, the intra-node sweeps at
        ``rdzv_port + 1 + i`` on node i, and the pairwise rounds at ``rdzv_port + 1 + k`` on the first
        node of pair k, which may be any node: every node opens every one of these ports at once, and
        the connections of ``preflight_tcp.plan_tcp`` (N log N of them) prove them reachable."""
        no_python = [n.name for n in self.nodes if self.facts.get(n.name, NodeFacts()).error]
        if no_python:
            for name in no_python:
                self._probe(ProbeResult("tcp", name, False, f"`{self.python}` did not run: {self.facts[name].error}"))
            self.rec.gaps.append(Gap(PHASE, kind="preflight.no-python",
                                     facts={"python": self.python,
                                            "nodes": [[n, self.facts[n].error] for n in no_python]}))
            return False
        check = TcpCheck(self.ctx, self.nodes, self.python, self.settings, _readline)
        self._progress("all nodes", check.progress_line())
        outcome = check.run()
        for probe in outcome.probes:
            self._probe(probe)
        order = {n.name: n.index for n in self.nodes}
        self.rec.gaps += sorted(outcome.gaps, key=lambda g: order.get(g.node, 0))
        self.rec.tcp_coverage = outcome.coverage
        return outcome.ok

    def _peer_ssh(self) -> None:
        """Passwordless SSH from the first node to every other (pdsh and DeepSpeed need it; we do not)."""
        if self.cfg.access != "ssh":
            return
        first = self.nodes[0]
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=accept-new"]
        if self.cfg.ssh.port is not None:
            opts += ["-p", str(self.cfg.ssh.port)]
        if self.cfg.ssh.user:
            opts += ["-l", self.cfg.ssh.user]

        def one(node: Node) -> None:
            try:
                res = self._run(first, ["ssh", *opts, node.address, "hostname"], timeout_s=self.settings.hop_timeout_s)
            except TransportError as exc:
                self._probe(ProbeResult("peer-ssh", node.name, False, exc.message, gating=False))
                return
            detail = (res.stdout.strip() if res.ok else (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1])
            self._probe(ProbeResult("peer-ssh", node.name, res.ok, f"from {first.name}: {detail}", res.seconds,
                                    gating=False))

        run_parallel(self.nodes[1:], one, self.ctx.transport.fanout)
        bad = [p.node for p in self.rec.probes if p.kind == "peer-ssh" and not p.ok]
        item = next(c for c in self.rec.checklist if c.need == "SSH / launcher details")
        item.value = item.value.replace("checked below", f"{'not working to ' + short_list(bad) if bad else 'working'}")
        if bad:
            self.rec.gaps.append(Gap(PHASE, kind="preflight.peer-ssh", facts={"first": first.name, "nodes": bad}))

    # -- 4. CPU gloo across all nodes -----------------------------------------------------------
    def _gloo(self) -> bool:
        no_torch = {n: f for n, f in self.facts.items() if not f.torch}
        if no_torch:
            # fresh nodes: the eval-Python phase gives them torch, and the check runs right after it
            for node in self.nodes:
                self._probe(ProbeResult("gloo", node.name, False, f"deferred: `{self.python}` has no torch on "
                                        f"{short_list(sorted(no_torch))}; `clustereval run` checks it right after the "
                                        "eval Python is ready, before any benchmark", skipped=True))
            self.rec.gloo_deferred = True
            return True
        return self._gloo_launch()

    def _gloo_launch(self) -> bool:
        port = self.cfg.rdzv_port
        self._progress("all nodes", "the rendezvous questions (hostnames, routes, interfaces)")
        probes = probe_nodes(self.ctx, self.nodes, self.nodes[0].address, port)
        plan = decide_plan(self.ctx, self.nodes, probes)
        self.rec.rendezvous_probes = probes
        self.rec.rendezvous_plan = plan
        self.rec.rendezvous_fixes = applied_fixes(plan)
        self._progress("all nodes", f"CPU gloo all-reduce, one process per node, rendezvous at "
                       f"{self.nodes[0].address}:{port}")
        res = launch(self.ctx, label="preflight-gloo", module="gloo_check", args=["--timeout-s", str(self.settings.gloo_join_timeout_s)],
                     nodes=self.nodes, nproc=1, port=port, timeout_s=self.settings.gloo_timeout_s, probes=probes, plan=plan,
                     backend="gloo")
        ok_all = True
        for node, ex in zip(self.nodes, res.info.exits, strict=True):
            self.ctx.raw(f"preflight/gloo-{node.name}.log", res.outputs.get(node.name, ""))
            line = _gloo_line(res.outputs.get(node.name, ""))
            ok = ex.state == "ok" and bool(line.get("ok"))
            if ok:
                detail = f"rank {line['rank']} of {line['world_size']}: all-reduce sum {line['sum']:g} as expected"
            elif ex.state == "ok" and line:
                detail = f"all-reduce gave {line.get('sum')} instead of {line.get('expected')}"
            elif ex.state == "failed":
                detail = f"exited {ex.rc} after {ex.seconds:.0f} s: {ex.cause or 'no error printed'}"
            elif ex.state == "timed-out":
                detail = f"did not finish within {self.settings.gloo_timeout_s:.0f} s"
            else:
                detail = f"{ex.cause or ex.state} after {ex.seconds:.0f} s"
            self._probe(ProbeResult("gloo", node.name, ok, detail, ex.seconds))
            ok_all &= ok
        plan.proven = ok_all
        if not ok_all:
            # the diagnosis and what the plan already applied: the plan of action is never a fix the launch had
            facts = {"nodes": len(self.nodes), "diagnosis": res.info.diagnosis,
                     "diagnosis_text": res.info.diagnosis_text,
                     "applied": {"is_host_node": plan.is_host_node, "local_addrs": dict(plan.local_addrs),
                                 "socket_ifnames": dict(plan.socket_ifnames)}}
            failed = [p for p in self.rec.probes if p.kind == "gloo" and not p.ok and "stopped by us" not in p.detail]
            for p in failed or [p for p in self.rec.probes if p.kind == "gloo" and not p.ok]:
                self.rec.gaps.append(Gap(PHASE, node=p.node, kind="preflight.gloo-failed",
                                         facts={**facts, "detail": p.detail,
                                                "log": f"{self.ctx.store.raw_rel}/preflight/gloo-{p.node}.log"}))
        return ok_all


def deferred_gloo(ctx: RunContext, record: PreflightRecord, settings: PreflightSettings | None = None) -> bool:
    """The gloo check preflight deferred (``record.gloo_deferred``), run now on the interpreter the
    eval-Python phase decided; ``record`` takes its probes, plan and Gaps, and ``passed`` its result.

    When that interpreter has no torch on some node the check cannot run: a Gap says so (the
    eval Python's own Gap says why), and the gate is not failed for it, since every pass that
    needs torch stops itself with its own Gap."""
    pf = Preflight(ctx, settings or PreflightSettings())
    pf.rec = record
    record.probes = [p for p in record.probes if p.kind != "gloo"]
    record.gloo_deferred = False
    record.gloo_after_eval_python = True
    ev = ctx.records.get("evalpython")
    no_torch = [[g.node, str(g.facts.get("why", ""))] for g in getattr(ev, "gaps", []) or []
                if g.kind == "evalpython.no-torch" and g.node]
    if ev is None or not getattr(ev, "torch", "") or no_torch:
        why = no_torch or [[n.name, "the eval Python was not decided"] for n in ctx.nodes]
        for node in ctx.nodes:
            pf._probe(ProbeResult("gloo", node.name, False, f"not run: `{ctx.eval_python}` has no torch on "
                                  f"{short_list(sorted(n for n, _ in why))}", skipped=True))
        record.gaps.append(Gap(PHASE, kind="preflight.gloo-no-torch", facts={"python": ctx.eval_python, "nodes": why}))
        return True
    ok = pf._gloo_launch()
    record.passed = record.passed and ok
    record.status = "ok" if record.passed else "failed"
    return ok


def _readline(proc, timeout_s: float) -> str:  # noqa: ANN001
    """The first line of a popen'd command, or '' when none comes within ``timeout_s``."""
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout_s)
    return box[0] if box else ""


def _gloo_line(output: str) -> dict:
    import json

    for line in output.splitlines():
        if '"event": "gloo"' in line:
            try:
                return json.loads(line[line.index("{"):])
            except ValueError:
                continue
    return {}


def applied_fixes(plan: RendezvousPlan) -> list[str]:
    """What the plan applies, node by node, then why: the lines preflight prints and records."""
    lines = []
    if plan.is_host_node:
        lines.append(f"{plan.is_host_node}: --rdzv_conf is_host=1 (this node hosts the rendezvous store)")
    lines += [f"{node}: --local_addr {addr}" for node, addr in plan.local_addrs.items()]
    return lines + [f"because {reason}" for reason in plan.reasons]
