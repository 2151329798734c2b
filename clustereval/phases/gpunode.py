"""What the compute phases (health, matmul, lemon) share: the plan, each node's GPUs, the busy-GPU
guard, worker launching, and the sibling loads.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.pernode import each_node, hostname_of
from clustereval.phases.remote import (
    ensure_node_scratch,
    interpreter_mismatch,
    worker_argv,
    worker_env,
)
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
from clustereval.transport.base import Node

# the code the report links (``publish_tools``): the worker first, then what it imports, beside it
MATMUL_TOOLS = ("clustereval.workers.matmul", ("clustereval.analysis.matmul", "matmul_search.py"),
                ("clustereval.analysis.steady", "matmul_steady.py"), "clustereval.workers.matmul_bench",
                ("clustereval.workers.nvml", "matmul_nvml.py"))


HOT_S = 1.0  # the worker's default timed window of each hot shape (--hot-s)


@dataclass(frozen=True)
class MatmulPlan:
    """How the compute passes run. ``device="cpu"`` runs the same passes on the CPU with tiny
    shapes and ``cpu_gpus`` stand-in GPUs (tests and benchmark smoke runs)."""

    device: str = "cuda"
    dtype: str = "bfloat16"
    grid: str = ""  # the worker's default search space when empty
    coarse_budget: int = 256
    soak_min_s: float = 20.0  # the first held shape soaks until its SM clock settles: at least this long
    soak_max_s: float = 60.0  # ... and at most this long
    settle_s: float = 5.0  # a shape on a board already at its power limit settles at least this long
    sustain_s: float = 10.0  # the timed window after the soak or settle
    load_shape: str = "8192x8192x8192"  # the siblings' continuous matmul
    lemon_size: int = 0  # 0: 16384 on a GPU, 256 on CPU
    cpu_gpus: int = 0
    start_timeout_s: float = 300.0  # a worker must print its first line within this
    search_timeout_s: float = 3600.0
    lemon_gpu_timeout_s: float = 300.0  # one GPU's lemon GEMM; past it the GPU is hung (dead)
    load_max_s: float = 3600.0
    progress_every_s: float = 10.0  # how often the search's progress (shapes timed, time left) is shown

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"

    def search_time_left_s(self, stages: list[str], elapsed_s: float) -> float:
        """Time left of the matmul search, from the stages of the shapes timed so far.

        The large-shape tail has a known duration: the hot shapes (the first warms up, the next
        ones settle briefly, each timed ``HOT_S``), then the held shapes (the first soaks at least
        ``soak_min_s``, the next ones settle ``settle_s``, each timed ``sustain_s``). The screening
        before it adapts to the GPU, so its remainder is the coarse budget and the confirmations
        still to time at the pace measured so far; past the budget (the refinement climbing) only
        the tail is left to estimate."""
        from clustereval.analysis.matmul import HOT, SUSTAINED, SearchPlan
        from clustereval.workers.matmul_bench import HOT_SETTLE_S, HOT_WARM_S

        num_hot, num_held = stages.count(HOT), stages.count(SUSTAINED)
        held_next = self.settle_s + self.sustain_s
        held = (self.soak_min_s + self.sustain_s + (SearchPlan.num_sustain - 1) * held_next if not num_held
                else max(0, SearchPlan.num_sustain - num_held) * held_next)
        hot_next = HOT_SETTLE_S + HOT_S
        if num_hot or num_held:
            return (0.0 if num_held else max(0, SearchPlan.num_hot - num_hot) * hot_next) + held
        tail = HOT_WARM_S + HOT_S + (SearchPlan.num_hot - 1) * hot_next + held
        screened = len(stages)
        if not screened:
            return tail
        expected = self.coarse_budget + SearchPlan.num_confirm
        return max(0, expected - screened) * (elapsed_s / screened) + tail

    def pinned_timeout_s(self) -> float:
        return self.start_timeout_s + self.soak_max_s + self.sustain_s + 120.0

    def held_args(self) -> list[str]:
        """The worker's steadiness flags for this plan."""
        return ["--soak-min-s", f"{self.soak_min_s:g}", "--soak-max-s", f"{self.soak_max_s:g}",
                "--settle-s", f"{self.settle_s:g}", "--sustain-s", f"{self.sustain_s:g}"]


def plan_for(ctx: RunContext) -> MatmulPlan:
    extra = ctx.records.get("_matmul_plan")
    if isinstance(extra, MatmulPlan):
        return extra
    seconds = ctx.profile.matmul_seconds_per_shape
    if ctx.profile.name == "smoke":  # a rehearsal: the small reference grid, short sustained timings
        return MatmulPlan(grid="anchors", coarse_budget=64, soak_min_s=seconds or 0.5, soak_max_s=4 * (seconds or 0.5),
                          settle_s=seconds or 0.5, sustain_s=seconds or 0.5)
    if ctx.profile.name == "quick":  # the report says the window was shortened
        return MatmulPlan(soak_min_s=QUICK_SOAK_MIN_S, sustain_s=seconds or QUICK_WINDOW_S)
    return MatmulPlan(sustain_s=seconds) if seconds else MatmulPlan()


QUICK_SOAK_MIN_S = 10.0
QUICK_WINDOW_S = 5.0


@dataclass
class NodeGpus:
    node: Node
    hostname: str
    gpus: list[GpuRow] = field(default_factory=list)
    error: str = ""  # why there are none

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]


def inventory(ctx: RunContext, node: Node, plan: MatmulPlan) -> NodeGpus:
    """The node's GPUs as nvidia-smi numbers them (or the CPU stand-ins)."""
    out = NodeGpus(node, hostname_of(ctx, node))
    if plan.cpu:
        out.gpus = [GpuRow(i, f"cpu-{i}", "CPU") for i in range(max(1, plan.cpu_gpus))]
        return out
    res = ctx.transport.run(node, GPU_INDEX_ARGV, timeout_s=60)
    out.gpus = parse_gpu_rows(res.stdout) if res.ok else []
    if not out.gpus:
        why = (res.stderr or res.stdout).strip().splitlines()
        out.error = "nvidia-smi is not installed" if res.rc == 127 else (
            why[-1][:200] if why else "nvidia-smi lists no GPU")
    return out


NO_GPU_PLAN = ("run the eval on nodes with NVIDIA GPUs whose driver answers `nvidia-smi`, or accept that this "
               "cluster has no GPU results")


def no_gpu_gap(invs: list[NodeGpus]) -> Gap:
    """One Gap for the three compute phases (phase "compute"), so the close-out lists it once."""
    why = "; ".join(f"{i.node.name}: {i.error}" for i in invs)
    return Gap(phase="compute", text=f"No NVIDIA GPU answered on any node ({why}), so the compute passes did not run.",
               plan=NO_GPU_PLAN)


def inventories(ctx: RunContext, plan: MatmulPlan, phase: str, title: str) -> tuple[list[NodeGpus], list[Gap]]:
    """Every node's GPUs; a node that cannot be asked has none, and a Gap that says why."""
    steps = each_node(ctx, phase, title, ctx.nodes, lambda n: inventory(ctx, n, plan),
                      what="`nvidia-smi` (the GPU inventory)")
    invs = [s.value if s.value is not None else NodeGpus(s.node, hostname_of(ctx, s.node),
                                                         error=s.error.message if s.error else "no answer")
            for s in steps]
    return invs, [s.gap for s in steps if s.gap is not None]



BUSY_PLAN = "find out whose processes these are and re-run the pass when the GPUs are free (`clustereval run --resume RUN_DIR`)"


class PassAborted(Exception):
    """The node's pass stops: foreign compute processes appeared, or the sibling loads would not run."""

    def __init__(self, text: str, plan: str = BUSY_PLAN) -> None:
        super().__init__(text)
        self.text, self.plan = text, plan


class Guard:
    """The busy-GPU check: foreign compute processes abort a performance pass."""

    def __init__(self, ctx: RunContext, inv: NodeGpus, plan: MatmulPlan) -> None:
        self.ctx, self.inv, self.plan = ctx, inv, plan
        self.uuid_to_index = {g.uuid: g.index for g in inv.gpus}
        self.unchecked = ""  # why the check could not run, when it could not

    def foreign(self, own_pids: set[int] | None = None, own_per_gpu: dict[int, int] | None = None) -> list[str]:
        """Foreign compute processes now; a finding is checked again after a few seconds, so one of
        our own processes that is still exiting is not mistaken for a stranger."""
        if self.plan.cpu:
            return []
        found: list[str] = []
        for attempt in range(2):
            if attempt:
                time.sleep(3.0)
            res = self.ctx.transport.run(self.inv.node, COMPUTE_APPS_ARGV, timeout_s=60)
            if not res.ok:
                self.unchecked = (res.stderr or res.stdout).strip()[:200] or f"exit {res.rc}"
                return []
            found = foreign_apps(parse_compute_apps(res.stdout), self.uuid_to_index, own_pids or set(),
                                 own_per_gpu or {})
            if not found:
                return []
        return found


def busy_text(node: Node, found: list[str], what: str) -> str:
    return (f"{what} on {node.name} was stopped: foreign compute processes were on its GPUs "
            f"({'; '.join(found)}), so its numbers would not be this hardware's alone.")


def launch(ctx: RunContext, node: Node, plan: MatmulPlan, mode: str, args: list[str], log_rel: str) -> WorkerProc:
    argv = worker_argv(ctx, "matmul", mode, "--device", plan.device, "--dtype", plan.dtype, *args)
    env = worker_env(ctx, node, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return WorkerProc(ctx, node, argv, env, log_rel)


def check_interpreter(ctx: RunContext, node: Node, proc: WorkerProc) -> str:
    hello = proc.last("hello")
    return interpreter_mismatch(ctx, node.name, hello) if hello else ""


_counter = itertools.count()


class LoadSet:
    """The sibling loads of one node: one continuous-matmul process per GPU, started and stopped
    so that every GPU but the measured one computes."""

    def __init__(self, ctx: RunContext, inv: NodeGpus, plan: MatmulPlan, log_dir: str) -> None:
        self.ctx, self.inv, self.plan, self.log_dir = ctx, inv, plan, log_dir
        self.scratch = ""
        self.procs: dict[int, WorkerProc] = {}
        self.stop_files: dict[int, str] = {}
        self._pids: set[int] = set()
        self._made_dir = False

    def _stop_file(self, gpu: int) -> str:
        if not self._made_dir:  # in the run's recorded node-local folder, which the run clears
            self.scratch = f"{ensure_node_scratch(self.ctx, self.inv.node)}/matmul"
            self.ctx.transport.run(self.inv.node, ["mkdir", "-p", self.scratch], timeout_s=60)
            self._made_dir = True
        return f"{self.scratch}/stop-gpu{gpu}-{next(_counter)}"

    def ensure(self, gpus: set[int]) -> str:
        """Exactly ``gpus`` run a load (each computing); '' or why not."""
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
            if proc.wait_event(is_event("running"), self.plan.start_timeout_s) is None:
                return f"the continuous matmul on gpu{g} did not start ({proc.error_text()})"
        return ""

    def _start(self, gpu: int) -> None:
        stop_file = self._stop_file(gpu)
        self.stop_files[gpu] = stop_file
        shape = "128x128x128" if self.plan.cpu else self.plan.load_shape
        self.procs[gpu] = launch(self.ctx, self.inv.node, self.plan, "load",
                                 ["--gpu", str(gpu), "--shape", shape, "--stop-file", stop_file,
                                  "--max-seconds", str(self.plan.load_max_s)],
                                 f"{self.log_dir}/load-gpu{gpu}-{next(_counter)}.log")

    def stop(self, gpu: int) -> None:
        self.pids()
        proc = self.procs.pop(gpu, None)
        if proc is None:
            return
        self.ctx.transport.run(self.inv.node, ["touch", self.stop_files[gpu]], timeout_s=60)
        if proc.finish(30) is None:
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
