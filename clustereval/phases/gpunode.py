"""What the compute phases (health, matmul, lemon) share: each node's GPUs, the busy-GPU
guard, worker launching, and the sibling loads.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node, hostname_of
from clustereval.phases.remote import (
    ensure_node_scratch,
    interpreter_mismatch,
    require_torch,
    worker_argv,
    worker_env,
)
from clustereval.phases.settings import GpuSettings
from clustereval.phases.tools import publish_tools
from clustereval.phases.workerproc import WorkerProc, is_event
from clustereval.probes.gpu_procs import (
    COMPUTE_APPS_ARGV,
    GPU_INDEX_ARGV,
    GpuRow,
    foreign_apps,
    parse_compute_apps,
    parse_gpu_rows,
)
from clustereval.records import Gap
from clustereval.records.compute import LemonRecord, MatmulRecord
from clustereval.transport.base import Node

# the code the report links (``publish_tools``): the worker first, then what it imports, beside it
MATMUL_TOOLS = ("clustereval.workers.matmul", ("clustereval.analysis.matmul", "matmul_search.py"),
                ("clustereval.analysis.waves", "matmul_waves.py"), ("clustereval.analysis.steady", "matmul_steady.py"),
                "clustereval.workers.matmul_bench",
                ("clustereval.workers.nvml", "matmul_nvml.py"))


@dataclass
class NodeGpus:
    node: Node
    hostname: str
    gpus: list[GpuRow] = field(default_factory=list)
    error: str = ""  # why there are none

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]


def inventory(ctx: RunContext, node: Node, settings: GpuSettings) -> NodeGpus:
    """The node's GPUs as nvidia-smi numbers them (or the CPU stand-ins)."""
    out = NodeGpus(node, hostname_of(ctx, node))
    if settings.cpu:
        out.gpus = [GpuRow(i, f"cpu-{i}", "CPU") for i in range(max(1, settings.cpu_gpus))]
        return out
    res = ctx.transport.run(node, GPU_INDEX_ARGV, timeout_s=settings.command_timeout_s)
    out.gpus = parse_gpu_rows(res.stdout) if res.ok else []
    if not out.gpus:
        why = (res.stderr or res.stdout).strip().splitlines()
        out.error = "nvidia-smi is not installed" if res.rc == 127 else (
            why[-1][:200] if why else "nvidia-smi lists no GPU")
    return out


def no_gpu_gap(invs: list[NodeGpus]) -> Gap:
    """One Gap for the three compute phases (phase "compute"), so the close-out lists it once."""
    return Gap(phase="compute", kind="gpu.none", facts={"nodes": [[i.node.name, i.error] for i in invs]})


def inventories(ctx: RunContext, settings: GpuSettings, phase: str, title: str) -> tuple[list[NodeGpus], list[Gap]]:
    """Every node's GPUs; a node that cannot be asked has none, and a Gap that says why."""
    steps = each_node(ctx, phase, title, ctx.nodes, lambda n: inventory(ctx, n, settings),
                      what="`nvidia-smi` (the GPU inventory)")
    invs = [s.value if s.value is not None else NodeGpus(s.node, hostname_of(ctx, s.node),
                                                         error=s.error.message if s.error else "no answer")
            for s in steps]
    return invs, [s.gap for s in steps if s.gap is not None]


def prepare_matmul_pass(ctx: RunContext, settings: GpuSettings, phase: str, title: str,
                        rec: MatmulRecord | LemonRecord) -> tuple[list[NodeGpus], list[NodeGpus], list[Gap]]:
    """(every node's GPUs, the nodes that have some, the Gaps of nodes that could not be asked) for a
    pass of the matmul worker. With no GPU anywhere ``rec`` is skipped with the one no-GPU Gap and no
    node comes back live; else torch is required and the worker's code is published into ``rec``."""
    invs, lost = inventories(ctx, settings, phase, title)
    live = [i for i in invs if i.gpus]
    if not live:
        rec.status = "skipped"
        rec.gaps.append(no_gpu_gap(invs))
        return invs, [], lost
    require_torch(ctx)
    rec.tool_rel = publish_tools(ctx, *MATMUL_TOOLS)[0]
    return invs, live, lost


class PassAborted(Exception):
    """The node's pass stops: foreign compute processes appeared, or the sibling loads would not run.
    It carries the Gap's kind and facts; ``report.gaps`` words them."""

    def __init__(self, kind: str, **facts: Any) -> None:
        super().__init__(kind)
        self.kind, self.facts = kind, facts

    def gap(self, phase: str, node: str) -> Gap:
        return Gap(phase, node=node, kind=self.kind, facts=self.facts)


class Guard:
    """The busy-GPU check: foreign compute processes abort a performance pass."""

    def __init__(self, ctx: RunContext, inv: NodeGpus, settings: GpuSettings) -> None:
        self.ctx, self.inv, self.settings = ctx, inv, settings
        self.uuid_to_index = {g.uuid: g.index for g in inv.gpus}
        self.unchecked = ""  # why the check could not run, when it could not

    def foreign(self, own_pids: set[int] | None = None, own_per_gpu: dict[int, int] | None = None) -> list[str]:
        """Foreign compute processes now; a finding is checked again after a few seconds, so one of
        our own processes that is still exiting is not mistaken for a stranger."""
        if self.settings.cpu:
            return []
        found: list[str] = []
        for attempt in range(2):
            if attempt:
                time.sleep(self.settings.busy_recheck_s)
            res = self.ctx.transport.run(self.inv.node, COMPUTE_APPS_ARGV, timeout_s=self.settings.command_timeout_s)
            if not res.ok:
                self.unchecked = (res.stderr or res.stdout).strip()[:200] or f"exit {res.rc}"
                return []
            found = foreign_apps(parse_compute_apps(res.stdout), self.uuid_to_index, own_pids or set(),
                                 own_per_gpu or {})
            if not found:
                return []
        return found


def launch(ctx: RunContext, node: Node, settings: GpuSettings, mode: str, args: list[str], log_rel: str) -> WorkerProc:
    argv = worker_argv(ctx, "matmul", mode, "--device", settings.device, "--dtype", settings.dtype, *args)
    env = worker_env(ctx, node, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return WorkerProc(ctx, node, argv, env, log_rel)


def check_interpreter(ctx: RunContext, node: Node, proc: WorkerProc) -> str:
    hello = proc.last("hello")
    return interpreter_mismatch(ctx, node.name, hello) if hello else ""


_counter = itertools.count()


class LoadSet:
    """The sibling loads of one node: one continuous-matmul process per GPU, started and stopped
    so that every GPU but the measured one computes."""

    def __init__(self, ctx: RunContext, inv: NodeGpus, settings: GpuSettings, log_dir: str) -> None:
        self.ctx, self.inv, self.settings, self.log_dir = ctx, inv, settings, log_dir
        self.scratch = ""
        self.procs: dict[int, WorkerProc] = {}
        self.stop_files: dict[int, str] = {}
        self._pids: set[int] = set()
        self._made_dir = False

    def _stop_file(self, gpu: int) -> str:
        if not self._made_dir:  # in the run's recorded node-local folder, which the run clears
            self.scratch = f"{ensure_node_scratch(self.ctx, self.inv.node)}/matmul"
            self.ctx.transport.run(self.inv.node, ["mkdir", "-p", self.scratch],
                                   timeout_s=self.settings.command_timeout_s)
            self._made_dir = True
        return f"{self.scratch}/stop-gpu{gpu}-{next(_counter)}"

    def ensure(self, gpus: set[int]) -> dict[str, Any]:
        """Exactly ``gpus`` run a load (each computing); {} or the facts of the load that did not
        start (``load_gpu``, ``load_error``: its worker's error), for the Gap that says so."""
        for g in [g for g in self.procs if g not in gpus]:
            self.stop(g)
        for g in sorted(gpus):
            proc = self.procs.get(g)
            if proc is None or not proc.alive():
                if proc is not None:
                    proc.save_log()
                self._start(g)
        for g in sorted(gpus):
            proc = self.procs[g]
            if proc.wait_event(is_event("running"), self.settings.start_timeout_s) is None:
                return {"load_gpu": g, "load_error": proc.error_text()}
        return {}

    def _start(self, gpu: int) -> None:
        stop_file = self._stop_file(gpu)
        self.stop_files[gpu] = stop_file
        shape = self.settings.cpu_load_shape if self.settings.cpu else self.settings.load_shape
        self.procs[gpu] = launch(self.ctx, self.inv.node, self.settings, "load",
                                 ["--gpu", str(gpu), "--shape", shape, "--stop-file", stop_file,
                                  "--max-seconds", str(self.settings.load_max_s)],
                                 f"{self.log_dir}/load-gpu{gpu}-{next(_counter)}.log")

    def stop(self, gpu: int) -> None:
        self.pids()
        proc = self.procs.pop(gpu, None)
        if proc is None:
            return
        self.ctx.transport.run(self.inv.node, ["touch", self.stop_files[gpu]], timeout_s=self.settings.command_timeout_s)
        if proc.finish(self.settings.load_stop_timeout_s) is None:
            proc.kill()
        proc.save_log()

    def stop_all(self) -> None:
        """Stop every load; a node that stopped answering takes its loads with it (the remote
        commands die with their connection), so its error does not hide the pass's own."""
        for g in list(self.procs):
            try:
                self.stop(g)
            except TransportError:
                proc = self.procs.pop(g, None)
                if proc is not None:
                    proc.kill()

    def pids(self) -> set[int]:
        """Every load process this pass started, running or stopped."""
        for proc in self.procs.values():
            hello = proc.last("hello")
            if hello and isinstance(hello.get("pid"), int):
                self._pids.add(hello["pid"])
        return set(self._pids)

    def per_gpu(self) -> dict[int, int]:
        return {g: 1 for g in self.procs}
