"""Every phase's tunables in one place: the profiles (``PROFILES``: how long the measurements run)
and a frozen settings dataclass per phase, built from the run's profile by ``settings_for`` and
handed to the phase's constructor.

    phase = StoragePhase(settings_for("storage", PROFILES["quick"]))
    phase = StoragePhase(StorageSettings(fio_runtime_s=1, file_sizes=(16 * 2**10,)))   # a test's own

A field's docstring says what it is and its unit. Values are checked when the settings are built, so
a wrong one stops the run before anything is launched. What describes the cluster itself (ports,
paths, GPUs per node) stays in ``Config``; constants of a tool or protocol (fio's job count, the
worker's flags) stay beside the code that speaks it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from clustereval.errors import UsageError
from clustereval.records.storage import FILE_SIZES, PUBLISHED_RUNTIME_S, RAMP_S


@dataclass(frozen=True)
class Profile:
    """How long the measurements run. ``standard`` is the published recipe; ``quick`` shortens it,
    and the report says what was shortened."""

    name: str = "standard"
    fio_runtime_s: int = 180  # published fio-scan: 3 min per run
    fio_ramp_s: int = 2
    allreduce_max_bytes: int = 16 * 2**30
    matmul_seconds_per_shape: float = 0.0  # 0: the worker's default
    fio_file_sizes: tuple[int, ...] = ()  # (): the published 16 KiB / 1 MiB / 1 GiB
    concurrent_write_bytes: int = 0  # 0: the published 1 GiB per node
    # (phase, sentence) per shortening: the report's header says each one whose phase measured something
    shortenings: tuple[tuple[str, str], ...] = ()


PROFILES = {
    "standard": Profile(),
    "quick": Profile(
        name="quick",
        fio_runtime_s=10,
        allreduce_max_bytes=1 * 2**30,
        shortenings=(
            ("storage", "each storage IO run lasted 10 s of timed IO instead of the published 3 min"),
            ("allreduce", "the all-reduce sweep stopped at 1 GiB instead of 16 GiB"),
        ),
    ),
    # A rehearsal of the whole pipeline with tiny measurements (what the test suite runs): every
    # measurement is far too small to judge hardware by, and the report says so.
    "smoke": Profile(
        name="smoke",
        fio_runtime_s=1,
        fio_ramp_s=0,
        allreduce_max_bytes=1 * 2**20,
        matmul_seconds_per_shape=0.5,
        fio_file_sizes=(16 * 2**10, 256 * 2**10, 4 * 2**20),
        concurrent_write_bytes=4 * 2**20,
        shortenings=(
            ("", "this was a smoke run, a rehearsal of the pipeline whose figures are too small to judge the "
             "hardware by"),
            ("storage", "each storage IO run lasted 1 s over files of 16 KiB, 256 KiB and 4 MiB instead of 3 min "
             "over 16 KiB, 1 MiB and 1 GiB"),
            ("matmul", "each matmul shape was timed for 0.5 s with at most 2 s to settle, too short for a GPU to "
             "reach a steady clock at its power limit"),
            ("allreduce", "the all-reduce sweep stopped at 1 MiB instead of 16 GiB"),
            ("concurrent", "the concurrent write wrote 4 MiB per node instead of 1 GiB"),
        ),
    ),
}



HOT_S = 1.0  # the worker's default timed window of each hot shape (--hot-s)


def _check_positive(settings: object, *names: str) -> None:
    """Every named field is > 0, else an error naming the field, its value and an example."""
    for name in names:
        value = getattr(settings, name)
        if not value > 0:
            raise UsageError(f"{type(settings).__name__}.{name} must be > 0, not {value!r}",
                             f"e.g. {type(settings).__name__}({name}={getattr(type(settings), name)!r})")


def _positive_fields(cls: type) -> tuple[str, ...]:
    """The fields whose name says they are a duration, a size or a count (``_s``, ``_bytes``, ``num_``)."""
    return tuple(f.name for f in fields(cls) if f.name.endswith(("_s", "_bytes")) or f.name.startswith("num_"))


@dataclass(frozen=True)
class PreflightSettings:
    """How long the gate's checks may take."""

    command_timeout_s: float = 60.0
    """One node's probe (GPUs, scratch paths, NCCL environment) or its torch import, in seconds."""
    login_allowance_s: float = 60.0
    """Added to the SSH connect timeout for ``hostname``: a live node whose login is slow (shell
    start-up files, a loaded host) still answers; a dead one fails at connect either way. Seconds."""
    hop_timeout_s: float = 20.0
    """One node's TCP check of the ports its plan tries (plus ``connect_s`` per 64 of them), or one SSH hop
    from the first node, in seconds."""
    listen_s: int = 30
    """How long every node listens on the run's ports for its peers' connects (plus the connect time), in seconds."""
    listen_start_timeout_s: float = 20.0
    """The listener must say it is listening within this, in seconds."""
    connect_s: int = 5
    """One TCP connect attempt to one node's port, in seconds."""
    gloo_join_timeout_s: int = 60
    """The gloo check worker's own limit on joining and all-reducing (``--timeout-s``), in seconds."""
    gloo_timeout_s: float = 90.0
    """The whole CPU gloo all-reduce job through torchrun, in seconds; past it the check failed."""

    def __post_init__(self) -> None:
        _check_positive(self, *_positive_fields(type(self)))


@dataclass(frozen=True)
class HealthSettings:
    """How the hardware health check (``dcgmi diag``) runs."""

    level: int = 2
    """The ``dcgmi diag -r`` level: 2 is the runbook's few-minute check (1 quick, 3 and 4 long)."""
    device: str = "cuda"
    """``cuda``: the node's GPUs; ``cpu``: CPU stand-ins (tests, benchmark smoke runs), no check runs."""
    command_timeout_s: float = 60.0
    """One short DCGM command (the tools probe, ``dcgmi discovery``, starting or stopping
    ``nv-hostengine``), in seconds."""
    diag_expected_s: float = 600.0
    """How long ``dcgmi diag`` usually takes, for the progress display, in seconds."""
    diag_timeout_s: float = 1800.0
    """``dcgmi diag`` on one node, in seconds; past it the check did not complete there."""

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3, 4):
            raise UsageError(f"HealthSettings.level must be 1, 2, 3 or 4 (`dcgmi diag -r`), not {self.level!r}",
                             "e.g. HealthSettings(level=2)")
        _check_device(self)
        _check_positive(self, *_positive_fields(type(self)))

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"


def _check_device(settings: HealthSettings | GpuSettings | GpuPassSettings) -> None:
    if settings.device not in ("cuda", "cpu"):
        raise UsageError(f"{type(settings).__name__}.device must be 'cuda' or 'cpu', not {settings.device!r}",
                         f"e.g. {type(settings).__name__}(device='cpu') for CPU stand-in GPUs")


@dataclass(frozen=True)
class GpuSettings:
    """How the GPU performance passes run: the matmul MAMF/MSMF pass and the lemon GEMM share the
    worker, the inventory and the busy-GPU guard, so they share these. ``device="cpu"`` runs the
    same passes on the CPU with tiny shapes and ``cpu_gpus`` stand-in GPUs (tests and benchmark
    smoke runs)."""

    device: str = "cuda"
    """``cuda`` or ``cpu`` (CPU stand-in GPUs)."""
    dtype: str = "bfloat16"
    """The matmul's element type, as torch names it."""
    grid: str = ""
    """The matmul search space (the worker's ``--grid``); empty: the worker's default."""
    coarse_budget: int = 256
    """How many shapes the search's coarse screening may time."""
    soak_min_s: float = 20.0
    """The first held shape soaks until its SM clock settles: at least this long, in seconds."""
    soak_max_s: float = 60.0
    """... and at most this long, in seconds."""
    settle_s: float = 5.0
    """A shape on a board already at its power limit settles at least this long, in seconds."""
    sustain_s: float = 10.0
    """The timed window after the soak or the settle, in seconds."""
    load_shape: str = "8192x8192x8192"
    """The siblings' continuous matmul, MxNxK."""
    cpu_load_shape: str = "128x128x128"
    """The siblings' continuous matmul on CPU stand-ins, MxNxK."""
    lemon_size: int = 0
    """The lemon GEMM's square size; 0: 16384 on a GPU, 256 on the CPU."""
    cpu_gpus: int = 0
    """How many CPU stand-in GPUs a node has with ``device="cpu"`` (0: one)."""
    start_timeout_s: float = 300.0
    """A worker must print its first line (and then a line again) within this, in seconds."""
    search_timeout_s: float = 3600.0
    """GPU0's whole MAMF/MSMF search, in seconds."""
    pinned_margin_s: float = 120.0
    """Added to a pinned measurement's start, soak and window for its limit, in seconds."""
    lemon_gpu_timeout_s: float = 300.0
    """One GPU's lemon GEMM, in seconds; past it the GPU is hung (dead)."""
    load_max_s: float = 3600.0
    """A sibling load stops by itself after this, should the pass never stop it, in seconds."""
    load_stop_timeout_s: float = 30.0
    """A sibling load must exit this soon after its stop file appears, or it is killed; seconds."""
    progress_every_s: float = 10.0
    """How often the search's progress (shapes timed, time left) is shown, in seconds."""
    command_timeout_s: float = 60.0
    """One short command on a node (``nvidia-smi``, ``mkdir``, ``touch``), in seconds."""
    busy_recheck_s: float = 3.0
    """A foreign compute process is looked for again after this, so one of our own that is still
    exiting is not mistaken for a stranger; seconds."""

    def __post_init__(self) -> None:
        _check_device(self)
        _check_positive(self, *_positive_fields(type(self)))
        if self.soak_max_s < self.soak_min_s:
            raise UsageError(f"GpuSettings.soak_max_s ({self.soak_max_s:g}) is below soak_min_s ({self.soak_min_s:g})",
                             "give soak_max_s >= soak_min_s, e.g. soak_min_s=20, soak_max_s=60")
        if self.lemon_size < 0 or self.cpu_gpus < 0 or self.coarse_budget < 1:
            raise UsageError("GpuSettings.lemon_size and cpu_gpus must be >= 0 and coarse_budget >= 1",
                             "e.g. GpuSettings(lemon_size=0, cpu_gpus=0, coarse_budget=256)")

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def lemon_square(self) -> int:
        """The lemon GEMM's square size that runs."""
        return self.lemon_size or (256 if self.cpu else 16384)

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

    def wave_search_time_left_s(self, stages: list[str], elapsed_s: float) -> float:
        """Time left of the whole-wave search (``clustereval.analysis.waves``), from the stages of the
        timings so far: the burst timings at the pace measured so far, then the ladder's rungs (their
        number and length are the plan's) and the final settle and window."""
        from clustereval.analysis.matmul import HOT, SUSTAINED
        from clustereval.analysis.waves import WavePlan, ladder_rungs

        plan = WavePlan()
        round1, round2 = ladder_rungs(plan)
        final = self.settle_s + self.sustain_s
        rungs = stages.count(HOT)
        if stages.count(SUSTAINED):
            return 0.0
        if rungs:
            done1 = min(rungs, round1)
            return (round1 - done1) * plan.rung_s + (round2 - (rungs - done1)) * plan.rung2_s + final
        tail = round1 * plan.rung_s + round2 * plan.rung2_s + final
        expected = plan.expected_bursts
        return max(0, expected - len(stages)) * (elapsed_s / len(stages) if stages else 0.05) + tail

    def pinned_timeout_s(self) -> float:
        return self.start_timeout_s + self.soak_max_s + self.sustain_s + self.pinned_margin_s

    def held_args(self) -> list[str]:
        """The worker's steadiness flags for these settings."""
        return ["--soak-min-s", f"{self.soak_min_s:g}", "--soak-max-s", f"{self.soak_max_s:g}",
                "--settle-s", f"{self.settle_s:g}", "--sustain-s", f"{self.sustain_s:g}"]


@dataclass(frozen=True)
class GpuPassSettings:
    """How the GPU memory and links pass runs (HBM, PCIe, GPU pairs, the memory pattern test, the
    correctness vote; ``workers/gpu_pass.py``)."""

    device: str = "cuda"
    """``cuda`` or ``cpu`` (CPU stand-in GPUs with tiny sizes)."""
    cpu_gpus: int = 0
    """How many CPU stand-in GPUs a node has with ``device="cpu"`` (0: one)."""
    quick: bool = False
    """The quick profile's sizes (shorter copies: the pass within a minute a node)."""
    expected_s: float = 150.0
    """How long the pass usually takes on a node, for the time-left display, in seconds."""
    worker_timeout_s: float = 900.0
    """The whole pass on one node, in seconds; past it the worker is stopped and its GPUs unjudged."""
    start_timeout_s: float = 300.0
    """The worker must print its first line within this (importing torch, NVML), in seconds."""
    nvbandwidth_timeout_s: float = 300.0
    """nvbandwidth's run on one node, when it is installed, in seconds."""
    command_timeout_s: float = 60.0
    """One short command on a node (``nvidia-smi``, ``command -v``, the kernel log), in seconds."""
    busy_recheck_s: float = 3.0
    """A foreign compute process is looked for again after this, in seconds."""

    def __post_init__(self) -> None:
        _check_device(self)
        _check_positive(self, *_positive_fields(type(self)))
        if self.cpu_gpus < 0:
            raise UsageError(f"GpuPassSettings.cpu_gpus must be >= 0, not {self.cpu_gpus!r}",
                             "e.g. GpuPassSettings(device='cpu', cpu_gpus=2)")

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"


def gpupass_settings(profile: Profile) -> GpuPassSettings:
    if profile.name in ("quick", "smoke"):
        return GpuPassSettings(quick=True, expected_s=45.0, worker_timeout_s=300.0)
    return GpuPassSettings()


@dataclass(frozen=True)
class StorageSettings:
    """How the storage scans and the concurrent write run."""

    fio_runtime_s: int = PUBLISHED_RUNTIME_S
    """Timed IO of one fio run, in seconds (the published fio-scan: 3 min)."""
    fio_ramp_s: int = RAMP_S
    """fio's ramp before the timed IO of each run, in seconds."""
    file_sizes: tuple[int, ...] = tuple(size for _, size, _ in FILE_SIZES)
    """The scan's file sizes, in bytes (published: 16 KiB, 1 MiB, 1 GiB)."""
    concurrent_bytes: int = 2**30
    """What each node writes in the concurrent write, in bytes (published: 1 GiB)."""
    fio: str = "fio"
    """The fio executable on the nodes."""
    space_margin_bytes: int = 256 * 2**20
    """Free space asked for beyond what a run writes: fio's own bookkeeping and the filesystem's, bytes."""
    progress_every_s: float = 30.0
    """How often a running fio run's progress is shown, in seconds."""
    command_timeout_s: float = 60.0
    """One short command on the node (``fio --version``, ``df``, ``mkdir``), in seconds."""
    stop_timeout_s: float = 30.0
    """Stopping a running fio (Ctrl-C), in seconds."""
    stop_grace_s: float = 5.0
    """How long a stopped fio run has to end after SIGINT before its processes are killed, in seconds."""
    layout_timeout_s: float = 120.0
    """One layout command of a parallel FS (``lfs``, ``mmlsfs``, ``beegfs-ctl``, ``nfsstat``), seconds."""
    concurrent_timeout_s: float = 3600.0
    """One node's ``dd`` in the concurrent write, in seconds."""

    def __post_init__(self) -> None:
        _check_positive(self, *(n for n in _positive_fields(type(self)) if n != "fio_ramp_s"))
        if self.fio_ramp_s < 0:
            raise UsageError(f"StorageSettings.fio_ramp_s must be >= 0, not {self.fio_ramp_s!r}",
                             "e.g. StorageSettings(fio_ramp_s=2)")
        if self.stop_grace_s >= self.stop_timeout_s:
            raise UsageError(f"StorageSettings.stop_grace_s ({self.stop_grace_s!r}) must be below stop_timeout_s "
                             f"({self.stop_timeout_s!r}): the stop kills the run after the grace, within the timeout",
                             "e.g. StorageSettings(stop_grace_s=5, stop_timeout_s=30)")
        if not self.file_sizes or any(size <= 0 for size in self.file_sizes):
            raise UsageError(f"StorageSettings.file_sizes must be one or more sizes > 0, not {self.file_sizes!r}",
                             "e.g. StorageSettings(file_sizes=(16 * 2**10, 2**20, 2**30))")


@dataclass(frozen=True)
class NetworkSettings:
    """How the connectivity test and the all-reduce sweeps run."""

    connectivity_timeout_s: float = 300.0
    """The connectivity job (join and one all-reduce on every rank), in seconds."""
    sweep_timeout_s: float = 1800.0
    """One all-reduce sweep job (intra-node on one node, or inter-node), in seconds."""
    min_bytes: int = 32 * 2**10
    """The sweep's smallest payload, in bytes."""
    max_bytes: int = 16 * 2**30
    """The sweep's largest payload, in bytes (published: 16 GiB)."""
    gloo_max_bytes: int = 4 * 2**20
    """The largest payload of a gloo sweep (CPU ranks over loopback or TCP: small payloads only), bytes."""

    def __post_init__(self) -> None:
        _check_positive(self, *_positive_fields(type(self)))
        if self.max_bytes < self.min_bytes:
            raise UsageError(f"NetworkSettings.max_bytes ({self.max_bytes}) is below min_bytes ({self.min_bytes})",
                             "e.g. NetworkSettings(min_bytes=32 * 2**10, max_bytes=16 * 2**30)")


@dataclass(frozen=True)
class PairwiseSettings:
    """How the pairwise straggler hunt measures node pairs."""

    payload_bytes: int = 0
    """The one payload every pair all-reduces, in bytes; 0: ``gpu_payload_bytes`` with NCCL,
    ``cpu_payload_bytes`` with gloo."""
    gpu_payload_bytes: int = 2**30
    """The NCCL payload, in bytes: 1 GiB is bandwidth-bound on every fabric."""
    cpu_payload_bytes: int = 2 * 2**20
    """The gloo payload, in bytes: over TCP, milliseconds per call, far past the per-message latency."""
    samples_per_pair: int = 5
    """How many times each pair is measured, so its own noise is known."""
    threshold_pct: float = 5.0
    """A node is named only when every sample of its pairs is slower than any healthy pair ran,
    less this much, in percent."""
    round_robin_max_nodes: int = 4
    """Up to this many nodes every pair is measured; above, slow nodes are screened in a few rounds.
    The full schedule's N-1 rounds stay within the hunt's budget of 2·log2 N rounds up to 4 nodes
    (8 nodes would take 7 rounds against a budget of 6)."""
    sweep_timeout_s: float = 1800.0
    """One pair's job, in seconds."""

    def __post_init__(self) -> None:
        _check_positive(self, *(n for n in _positive_fields(type(self)) if n != "payload_bytes"),
                        "samples_per_pair", "threshold_pct", "round_robin_max_nodes")
        if self.payload_bytes < 0:
            raise UsageError(f"PairwiseSettings.payload_bytes must be >= 0, not {self.payload_bytes!r}",
                             "e.g. PairwiseSettings(payload_bytes=2**30), or 0 for the backend's default")


# The quick profile's shortened matmul timings (the report says the window was shortened).
QUICK_SOAK_MIN_S = 10.0
QUICK_WINDOW_S = 5.0


def gpu_settings(profile: Profile) -> GpuSettings:
    seconds = profile.matmul_seconds_per_shape
    if profile.name == "smoke":  # a rehearsal: the small reference grid, short sustained timings
        return GpuSettings(grid="anchors", coarse_budget=64, soak_min_s=seconds or 0.5, soak_max_s=4 * (seconds or 0.5),
                           settle_s=seconds or 0.5, sustain_s=seconds or 0.5)
    if profile.name == "quick":
        return GpuSettings(soak_min_s=QUICK_SOAK_MIN_S, sustain_s=seconds or QUICK_WINDOW_S)
    return GpuSettings(sustain_s=seconds) if seconds else GpuSettings()


def storage_settings(profile: Profile) -> StorageSettings:
    published = StorageSettings()
    return StorageSettings(fio_runtime_s=profile.fio_runtime_s, fio_ramp_s=profile.fio_ramp_s,
                           file_sizes=profile.fio_file_sizes or published.file_sizes,
                           concurrent_bytes=profile.concurrent_write_bytes or published.concurrent_bytes)


def network_settings(profile: Profile) -> NetworkSettings:
    return NetworkSettings(max_bytes=profile.allreduce_max_bytes)


def settings_for(phase: str, profile: Profile) -> object | None:
    """The settings ``phase`` runs with under ``profile``; None for a phase without tunables."""
    builders = {
        "preflight": lambda p: PreflightSettings(),
        "health": lambda p: HealthSettings(),
        "matmul": gpu_settings,
        "lemon": gpu_settings,
        "gpupass": gpupass_settings,
        "connectivity": network_settings,
        "allreduce": network_settings,
        "pairwise": lambda p: PairwiseSettings(),
        "storage": storage_settings,
    }
    build = builders.get(phase)
    return build(profile) if build else None
