"""Connectivity and all-reduce phases: torchrun launches of our workers, parsed into records.

Connectivity runs across every node when there are >= 2 (inter-node), else on the one node
(intra-node). The all-reduce phase sweeps every node on its own (intra-node, all nodes at once, each
with its own rendezvous) and then, with >= 2 nodes, all nodes x all GPUs together (inter-node).
GPU sweeps run with ``NCCL_DEBUG=INFO`` so the log says which transport NCCL took and whether NVLS
was set up; INFO lines are printed while connections are made, during the warm-ups.
"""

from __future__ import annotations

from clustereval.phases.base import RunContext
from clustereval.phases.remote import require_torch
from clustereval.phases.settings import NetworkSettings
from clustereval.phases.tools import publish_tools
from clustereval.phases.torchrun import (
    LaunchResult,
    launch,
    nccl_env_info,
    ranks_per_node,
    run_plan,
)
from clustereval.probes.nccl_debug import parse_nccl_info
from clustereval.records import Gap
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    NcclEnvInfo,
    Sweep,
    SweepRow,
)
from clustereval.transport.base import Node, run_parallel

NCCL_INFO_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET,P2P,SHM,NVLS"}
# the workers the report links (``publish_tools``)
NETWORK_TOOLS = ("clustereval.workers.connectivity", "clustereval.workers.allreduce", "clustereval.workers.distcommon")


def launcher_gap(phase: str, job: str, res: LaunchResult) -> Gap:
    """A job that failed to start or finish (``job``: connectivity | allreduce-inter): a launcher problem,
    with each node's own exit and the launch's diagnosis."""
    info = res.info
    return Gap(phase=phase, kind="network.launch-failed",
               facts={"job": job, "nodes": list(info.nodes), "diagnosis": info.diagnosis,
                      "diagnosis_text": info.diagnosis_text, "error": info.error,
                      "exits": [[e.node, e.state, e.rc, e.seconds, e.cause] for e in info.exits if e.state != "ok"],
                      "log": info.logs[0] if info.logs else "", "not_joined": list(info.not_joined),
                      "applied": {"is_host_node": info.is_host_node, "local_addrs": dict(info.local_addrs),
                                  "socket_ifnames": dict(info.socket_ifnames)}})


def _interp_gaps(phase: str, res: LaunchResult) -> list[Gap]:
    return [Gap(phase=phase, kind="network.wrong-interpreter", facts={"problem": p})
            for p in res.info.interpreter_problems]


class ConnectivityPhase:
    name = "connectivity"
    title = "Connectivity"
    across_nodes = True  # with >= 2 nodes: one job over every node (preflight's checks across nodes gate it)

    def __init__(self, settings: NetworkSettings | None = None) -> None:
        self.settings = settings or NetworkSettings()

    def applies(self, ctx: RunContext) -> bool:
        return bool(ctx.nodes)

    def run(self, ctx: RunContext) -> ConnectivityRecord:
        require_torch(ctx)
        publish_tools(ctx, *NETWORK_TOOLS)
        env = nccl_env_info(ctx)
        nodes = list(ctx.nodes)
        port = ctx.config.rdzv_port
        ctx.progress(self.name, nodes[0].name, f"the rendezvous plan for {len(nodes)} node(s)", None)
        plan, probes = run_plan(ctx, nodes)
        nproc, backend = ranks_per_node(ctx, probes)
        rec = ConnectivityRecord(scope="inter-node" if len(nodes) >= 2 else "intra-node", backend=backend,
                                 num_nodes=len(nodes), num_ranks=nproc * len(nodes), probes=probes, nccl_env=env)
        ctx.progress(self.name, nodes[0].name, f"{rec.num_ranks} ranks on {len(nodes)} node(s): join and all-reduce",
                     None)
        res = launch(ctx, label="connectivity", module="connectivity", args=["--backend", backend], nodes=nodes,
                     nproc=nproc, port=port, timeout_s=self.settings.connectivity_timeout_s,
                     extra_env=_collective_env(env, backend), probes=probes, plan=plan, backend=backend)
        rec.launch = res.info
        rec.ranks = res.ranks()
        done = res.of("allreduce")
        rec.allreduce_ok = (res.info.ok and len(done) == rec.num_ranks and all(e.get("ok") for e in done))
        rec.gaps += _interp_gaps(self.name, res)
        if not rec.allreduce_ok:
            rec.status = "failed"
            if res.info.ok:
                rec.gaps.append(Gap(phase=self.name, kind="network.wrong-sum",
                                    facts={"ranks": rec.num_ranks - sum(1 for e in done if e.get("ok"))}))
            else:
                rec.gaps.append(launcher_gap(self.name, "connectivity", res))
        return rec


def _collective_env(env: NcclEnvInfo, backend: str) -> dict[str, str]:
    return dict(env.final_env) if backend == "nccl" else {}


def sweep_args(backend: str, max_bytes: int, *, min_bytes: int, gloo_max_bytes: int,
               modes: str = "back-to-back,blocking") -> list[str]:
    if backend == "gloo":
        max_bytes = min(max_bytes, gloo_max_bytes)
    return ["--backend", backend, "--min-bytes", str(min_bytes), "--max-bytes", str(max_bytes), "--modes", modes]


def sweep_from(res: LaunchResult, scope: str, backend: str, requested_max: int) -> Sweep:
    """A Sweep from a launch's rank-0 lines."""
    info = res.info
    sweep = Sweep(scope=scope, nodes=list(info.nodes), num_ranks=info.world_size, backend=backend,
                  launch=info, max_bytes_requested=requested_max)
    hello = res.of("hello")
    if hello:
        sweep.device_name = hello[0].get("device_name", "")
    for e in res.of("row"):
        row = SweepRow(payload_bytes=int(e["payload_bytes"]), time_s=float(e["time_s"]),
                       algbw_gb_s=float(e["algbw_gb_s"]), busbw_gb_s=float(e["busbw_gb_s"]),
                       iterations=int(e.get("iterations", 0)), method=e.get("method", ""),
                       check_ok=bool(e.get("check_ok", True)))
        if e.get("mode") == "blocking":
            sweep.blocking_rows.append(row)
        elif e.get("mode") == "back-to-back":
            sweep.rows.append(row)
    sweep.max_bytes_fit = max((r.payload_bytes for r in sweep.rows), default=0)
    for e in res.of("fit"):
        sweep.max_bytes_fit = int(e.get("max_bytes", sweep.max_bytes_fit))
    done = res.of("done")
    if done:
        sweep.sweep_seconds = float(done[0].get("sweep_seconds", 0.0))
    if backend == "nccl":
        sweep.nccl = parse_nccl_info("\n".join(res.outputs.values()), scope)
        sweep.nccl.log = info.logs[0] if info.logs else ""
    sweep.ok = info.ok and bool(sweep.rows) and all(r.check_ok for r in sweep.rows + sweep.blocking_rows)
    if not sweep.ok:
        bad = [r for r in sweep.rows + sweep.blocking_rows if not r.check_ok]
        sweep.error = (f"wrong all-reduce sums at {len(bad)} payload(s)" if bad
                       else info.diagnosis_text or info.error or "no rows came back")
    return sweep


class AllreducePhase:
    name = "allreduce"
    title = "All-reduce"
    across_nodes = True  # with >= 2 nodes: the inter-node sweep over every node

    def __init__(self, settings: NetworkSettings | None = None) -> None:
        self.settings = settings or NetworkSettings()

    def applies(self, ctx: RunContext) -> bool:
        return bool(ctx.nodes)

    def run(self, ctx: RunContext) -> AllreduceRecord:
        require_torch(ctx)
        publish_tools(ctx, *NETWORK_TOOLS)
        env = nccl_env_info(ctx)
        nodes = list(ctx.nodes)
        settings = self.settings
        rec = AllreduceRecord(min_bytes=settings.min_bytes, max_bytes=settings.max_bytes, nccl_env=env,
                              nvlink_target_gb_s=ctx.config.targets.nvlink_uni_gb_s,
                              internode_target_gb_s=ctx.config.targets.internode_busbw_gb_s)
        plan, probes = run_plan(ctx, nodes)
        nproc, backend = ranks_per_node(ctx, probes)
        max_bytes = settings.max_bytes
        extra = {**_collective_env(env, backend), **(NCCL_INFO_ENV if backend == "nccl" else {})}
        args = sweep_args(backend, max_bytes, min_bytes=settings.min_bytes, gloo_max_bytes=settings.gloo_max_bytes)

        def intra(node: Node) -> Sweep:
            ctx.progress(self.name, node.name, f"intra-node sweep, {nproc} ranks", None)
            res = launch(ctx, label=f"allreduce-intra-{node.name}", module="allreduce", args=args, nodes=[node],
                         nproc=nproc, port=ctx.config.rdzv_port + 1 + node.index, timeout_s=settings.sweep_timeout_s,
                         extra_env=extra, backend=backend)
            rec.gaps.extend(_interp_gaps(self.name, res))
            return sweep_from(res, "intra-node", backend, max_bytes)

        # one rank alone has nothing to all-reduce with: a 1-GPU (or 1-process) node has no intra-node sweep
        rec.intra = run_parallel(nodes, intra, ctx.transport.fanout) if nproc >= 2 else []
        for s in rec.intra:
            if not s.ok:
                rec.gaps.append(Gap(phase=self.name, node=s.nodes[0], kind="network.intra-sweep-failed",
                                    facts={"error": s.error, "diagnosis": s.launch.diagnosis}))
        if len(nodes) >= 2 and not ctx.stop.is_set():
            ctx.progress(self.name, nodes[0].name, f"inter-node sweep, {nproc * len(nodes)} ranks", None)
            res = launch(ctx, label="allreduce-inter-node", module="allreduce", args=args, nodes=nodes, nproc=nproc,
                         port=ctx.config.rdzv_port, timeout_s=settings.sweep_timeout_s, extra_env=extra,
                         probes=probes, plan=plan, backend=backend)
            rec.gaps.extend(_interp_gaps(self.name, res))
            rec.inter = sweep_from(res, "inter-node", backend, max_bytes)
            if not rec.inter.ok:
                rec.gaps.append(launcher_gap(self.name, "allreduce-inter", res) if not res.info.ok
                                else Gap(phase=self.name, kind="network.inter-sweep-failed",
                                         facts={"error": rec.inter.error}))
        if any(not s.ok for s in rec.intra) or (rec.inter is not None and not rec.inter.ok):
            rec.status = "partial" if any(s.ok for s in rec.intra) else "failed"
        return rec
