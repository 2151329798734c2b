"""Hardware health: ``dcgmi diag -r 2`` on every node at once.

Start ``nv-hostengine`` if it is not running (and stop it again afterwards), run ``dcgmi diag -r 2``,
keep the console log, parse Pass / Fail per plugin and GPU. DCGM missing, unprivileged or failing is a
Gap with a plan; the other passes still run. DCGM missing on every node leaves the pass ``not-run``
(nothing failed; the eval is incomplete until it is installed or the operator skips the pass).
"""

from __future__ import annotations

from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.gpunode import NodeGpus, no_gpu_gap
from clustereval.phases.pernode import each_node, hostname_of
from clustereval.phases.settings import HealthSettings
from clustereval.probes._text import last_line
from clustereval.probes.dcgmi import connection_error, cuda_major, diag_argv, parse_diag
from clustereval.records import Gap
from clustereval.records.compute import HealthRecord, NodeHealth
from clustereval.transport.base import Node

_HEALTH_PROBE = ("command -v dcgmi >/dev/null 2>&1 && echo have:dcgmi; "
                 "command -v nv-hostengine >/dev/null 2>&1 && echo have:nv-hostengine; "
                 "command -v nvidia-smi >/dev/null 2>&1 && echo have:nvidia-smi; "
                 "(. /etc/os-release 2>/dev/null && echo os:$ID:$VERSION_ID:$ID_LIKE); "
                 "nvidia-smi 2>/dev/null | grep -m1 'CUDA Version' || true")


def dcgm_missing_gap(node: str, os_line: str, cuda: str) -> Gap:
    return Gap(HealthPhase.name, node=node, kind="health.dcgm-missing", facts={"os": os_line, "cuda": cuda})


class HealthPhase:
    name = "health"
    title = "Hardware health (dcgmi diag -r 2)"

    def __init__(self, settings: HealthSettings | None = None) -> None:
        self.settings = settings or HealthSettings()

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> HealthRecord:
        rec = HealthRecord(level=self.settings.level)
        if self.settings.cpu:
            rec.status = "skipped"
            rec.gaps.append(Gap(phase=self.name, kind="health.cpu-stand-ins"))
            return rec
        steps = each_node(ctx, self.name, "the hardware health check", ctx.nodes, lambda n: self._node(ctx, n),
                          what=f"`dcgmi diag -r {self.settings.level}`")
        results = [s.value if s.value is not None else
                   (NodeHealth(node=s.node.name, index=s.node.index, hostname=hostname_of(ctx, s.node),
                               level=self.settings.level, errors=[s.error.message if s.error else "no answer"]),
                    [s.gap] if s.gap else [])
                   for s in steps]
        rec.nodes = [r[0] for r in results if r[0] is not None]
        if not rec.nodes:  # no node has a driver: one gap, worded as the other compute phases word it
            rec.status = "skipped"
            rec.gaps.append(no_gpu_gap([NodeGpus(n, n.name, error="nvidia-smi is not installed")
                                                    for n in ctx.nodes]))
            return rec
        for _, gaps in results:
            rec.gaps += gaps
        if rec.gaps and all(g.kind == "health.dcgm-missing" for g in rec.gaps) and not any(n.ran for n in rec.nodes):
            rec.status = "not-run"  # nothing failed: DCGM is not installed; one Gap a node says how to install it
        elif not any(n.ran for n in rec.nodes):
            rec.status = "failed" if rec.nodes else "skipped"
        elif rec.gaps or any(not s.ok for s in steps):
            rec.status = "partial"
        return rec

    def _node(self, ctx: RunContext, node: Node) -> tuple[NodeHealth | None, list[Gap]]:
        timeout_s = self.settings.command_timeout_s
        probe = ctx.repeatable.run(node, ["sh", "-c", _HEALTH_PROBE], timeout_s=timeout_s)
        have = {ln[5:] for ln in probe.stdout.splitlines() if ln.startswith("have:")}
        os_line = next((ln[3:] for ln in probe.stdout.splitlines() if ln.startswith("os:")), "")
        cuda = cuda_major(probe.stdout)
        if "nvidia-smi" not in have:
            return None, [Gap(self.name, node=node.name, kind="health.no-driver")]
        nh = NodeHealth(node=node.name, index=node.index, hostname=hostname_of(ctx, node), level=self.settings.level)
        if "dcgmi" not in have:
            nh.errors.append("dcgmi is not installed")
            return nh, [dcgm_missing_gap(node.name, os_line, cuda)]
        ctx.progress(self.name, node.name, f"dcgmi diag -r {self.settings.level}", self.settings.diag_expected_s)
        disc = ctx.transport.run(node, ["dcgmi", "discovery", "-l"], timeout_s=timeout_s)
        if not disc.ok and connection_error(disc.stdout + disc.stderr) and "nv-hostengine" in have:
            started = ctx.transport.run(node, ["nv-hostengine"], timeout_s=timeout_s)
            nh.hostengine_started = started.ok
            disc = ctx.transport.run(node, ["dcgmi", "discovery", "-l"], timeout_s=timeout_s)
        try:
            if not disc.ok:
                why = last_line(disc.stdout + "\n" + disc.stderr, "no output")[:200]
                nh.errors.append(why)
                return nh, [Gap(self.name, node=node.name, kind="health.hostengine-unreachable",
                                facts={"output": last_line(disc.stdout + "\n" + disc.stderr)[:200]})]
            res = ctx.transport.run(node, diag_argv(self.settings.level), timeout_s=self.settings.diag_timeout_s)
            nh.log_rel = f"health/dcgm-diag-r{self.settings.level}-{node.name}.txt"
            ctx.raw(nh.log_rel, f"$ dcgmi diag -r {self.settings.level}\n{res.stdout}{res.stderr}")
            report = parse_diag(res.stdout + "\n" + res.stderr)
            nh.ran, nh.dcgm_version, nh.results = report.ran, report.version, report.results
            nh.errors += report.errors
            if not report.ran:
                output = "" if res.timed_out else last_line(res.stdout + "\n" + res.stderr)[:200]
                return nh, [Gap(self.name, node=node.name, kind="health.diag-incomplete",
                                facts={"level": self.settings.level, "output": output,
                                       "timeout_min": self.settings.diag_timeout_s / 60 if res.timed_out else 0})]
            return nh, []
        finally:
            if nh.hostengine_started:
                try:
                    ctx.transport.run(node, ["nv-hostengine", "--term"], timeout_s=timeout_s)
                except TransportError:
                    pass  # the node stopped answering: the diag's own error is the one to report
