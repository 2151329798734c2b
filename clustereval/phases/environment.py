"""The environment phase: what every node is (inventory, not a benchmark).

Runs every collector of ``probes.node.TOOLS`` plus the software worker on every node in
parallel, each with a timeout, a node's collectors in one round trip (``probes.batch``; the GPU
tools in a second one, where nvidia-smi lists a GPU), keeps each raw output under
``env/<node>/<tool>.txt``, parses them into an ``EnvironmentRecord`` and notes what differs across nodes. A node without a GPU (or
without the NVIDIA driver tools) is a fact of the record, not a failure: the phase succeeds and
the GPU phases turn into Gaps (``analysis.gpus.no_gpu_gap``).
"""

from __future__ import annotations

from clustereval.analysis.environment import drift, enrich
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node
from clustereval.phases.remote import worker_argv, worker_env
from clustereval.phases.tools import publish_tools
from clustereval.probes import batch
from clustereval.probes._text import last_line
from clustereval.probes.node import GPU_TOOLS, SOFTWARE, TOOLS, assemble
from clustereval.records import CommandResult, Gap
from clustereval.records.environment import EnvironmentRecord, NodeEnvironment
from clustereval.redact import findmnt_table, mount_table
from clustereval.transport.base import Node, run_parallel, shell_join

TIMEOUT_S = {"nvidia-smi-q": 90.0, SOFTWARE: 180.0}  # torch import on a cold shared FS can be slow
DEFAULT_TIMEOUT_S = 30.0
# tools whose absence says something about the node (the others are optional inventory)
REQUIRED = ("date", "hostname", "uname", "os-release", "meminfo")
MUST_ANSWER = (*REQUIRED, SOFTWARE, *GPU_TOOLS)


class EnvironmentPhase:
    name = "environment"
    title = "Environment"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> EnvironmentRecord:
        rec = EnvironmentRecord()
        (software,) = publish_tools(ctx, "clustereval.workers.software")
        rec.tool_links["software.py"] = f"{ctx.store.raw_rel}/{software}"
        steps = each_node(ctx, self.name, "the environment inventory", ctx.nodes, lambda n: self._node(ctx, n),
                          what="the inventory commands")
        for step in steps:
            if step.value is not None:
                node_env, gaps = step.value
            else:
                node_env = NodeEnvironment(node=step.node.name, index=step.node.index,
                                           errors=[step.error.message if step.error else "no answer"])
                gaps = [step.gap] if step.gap else []
            rec.nodes.append(node_env)
            rec.gaps += gaps
        self.merged(ctx, rec)
        return rec

    def merged(self, ctx: RunContext, rec: EnvironmentRecord) -> None:
        """What comes from every node together: drift across nodes, and the phase's status (also
        after --resume replaced the entries of the nodes that failed before)."""
        rec.drift = drift(rec.nodes)
        rec.status = "ok"
        if rec.nodes and all(n.errors and not n.hostname for n in rec.nodes):
            rec.status = "failed"
        elif any(n.errors for n in rec.nodes):
            rec.status = "partial"

    # -- one node ---------------------------------------------------------------------------
    def _node(self, ctx: RunContext, node: Node) -> tuple[NodeEnvironment, list[Gap]]:
        ctx.progress(self.name, node.name, "host, GPUs, fabric, mounts and software", None)
        outputs: dict[str, str] = {}
        raw_files: dict[str, str] = {}
        errors: list[str] = []
        # a node that stops answering raises out of here: ``each_node`` makes it that node's Gap
        # the GPU list and the host's inventory in one round trip; the GPU tools only where a GPU is
        other = [t for t in TOOLS if t not in GPU_TOOLS]
        first = self._collect(ctx, node, other, outputs, raw_files, errors)
        smi = first[other.index("nvidia-smi-query-gpu")]
        gpu_tools = list(GPU_TOOLS) if smi.ok and outputs.get("nvidia-smi-query-gpu", "").strip() else []
        self._collect(ctx, node, gpu_tools + [SOFTWARE], outputs, raw_files, errors)
        prefer = [*ctx.config.shared_paths, ctx.config.local_scratch]
        env = assemble(node.name, node.index, outputs, prefer=prefer, gpu_visibility=_visibility(smi))
        env.raw_files = raw_files
        env.errors = errors
        enrich(env)
        gaps = []
        if smi.rc not in (0, 127) and not env.gpus:
            gaps.append(Gap(phase=self.name, node=node.name, kind="environment.driver-silent",
                            facts={"label": env.hostname or node.name, "rc": smi.rc,
                                   "error": last_line(smi.stderr or smi.stdout)}))
        missing = [t for t in REQUIRED if t in errors_tools(errors)]
        if missing:
            gaps.append(Gap(phase=self.name, node=node.name, kind="environment.required-missing",
                            facts={"label": env.hostname or node.name, "tools": missing}))
        return env, gaps

    def _batched(self, ctx: RunContext, node: Node, tools: list[str]) -> dict[str, CommandResult]:
        """``tools`` in one round trip (``probes.batch``, read-only like the tools, so repeatable);
        the results it brought back by tool. A tool it did not bring back (no temporary folder on
        the node, a cut-short answer) the caller runs on its own. A node that stops answering
        raises, as any command would."""
        token = batch.new_token()
        commands = [batch.BatchCommand(t, tuple(TOOLS[t]()), TIMEOUT_S.get(t, DEFAULT_TIMEOUT_S)) for t in tools]
        limit_s = max(c.timeout_s for c in commands) + batch.KILL_GRACE_S + 10
        res = ctx.repeatable.run(node, batch.build_argv(commands, token), timeout_s=limit_s)
        by_name = {c.name: c for c in commands}
        got = {}
        for name, r in batch.parse(commands, res.stdout, token).items():
            cmd = by_name[name]
            timed_out = r.rc in (124, 137)
            got[name] = CommandResult(node=node.name, argv=list(cmd.argv), rc=r.rc, stdout=r.stdout,
                                      stderr=r.stderr + (f"\ntimed out after {cmd.timeout_s:.0f} s" if timed_out else ""),
                                      seconds=res.seconds, timed_out=timed_out)
        return got

    def _collect(self, ctx: RunContext, node: Node, tools: list[str], outputs: dict[str, str],
                 raw_files: dict[str, str], errors: list[str]) -> list[CommandResult]:
        batchable = [t for t in tools if t != SOFTWARE]
        done = self._batched(ctx, node, batchable) if len(batchable) > 1 else {}

        def one(tool: str) -> CommandResult:
            if tool in done:
                argv, res = list(done[tool].argv), done[tool]
            elif tool == SOFTWARE:
                argv = worker_argv(ctx, "software")
                res = ctx.repeatable.run(node, argv, timeout_s=TIMEOUT_S[SOFTWARE], env=worker_env(ctx, node))
            else:
                argv = TOOLS[tool]()
                res = ctx.repeatable.run(node, argv, timeout_s=TIMEOUT_S.get(tool, DEFAULT_TIMEOUT_S))  # read-only
            rel = f"env/{node.name}/{tool}.txt"
            text = f"$ {shell_join(argv)}\n{res.stdout}"
            if res.stderr.strip():
                text += ("" if text.endswith("\n") else "\n") + f"# stderr (exit {res.rc})\n{res.stderr}"
            # a raw mount table keeps only the options the report reads (CIFS/FUSE options carry credentials)
            ctx.store.write_raw(rel, mount_table(text) if tool == "proc-mounts" else
                                findmnt_table(text) if tool == "findmnt" else text)
            raw_files[tool] = rel
            return res

        results = run_parallel(tools, one, max_workers=4)
        for tool, res in zip(tools, results, strict=True):
            if res.ok:
                outputs[tool] = res.stdout
            elif tool in MUST_ANSWER and res.rc != 127:
                # a missing or failing optional tool (no RDMA stack, no lsblk in a container) is simply
                # not in the inventory; its raw output still says why
                errors.append(f"{tool}: {last_line(res.stderr or res.stdout, f'exit {res.rc}')}")
            if tool == SOFTWARE and not res.ok:
                outputs[tool] = res.stdout or res.stderr  # the parser keeps the last line as the error
        return results


def errors_tools(errors: list[str]) -> set[str]:
    return {e.split(":", 1)[0] for e in errors}


def _visibility(smi: CommandResult) -> str:
    """Why no GPU is in the inventory, in words the report header can carry."""
    if smi.rc == 127:
        return "no NVIDIA driver tools installed"
    if not smi.ok:
        return "the NVIDIA driver did not answer"
    return "the NVIDIA driver lists no GPU"
