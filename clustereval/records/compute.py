"""Records of the Compute phases: hardware health (DCGM), the matmul search and all-GPU pass, lemon GEMM.

``ShapeTiming`` is also what the matmul worker prints for every measurement, so a worker's JSON
line and the record hold the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord

# -- hardware health -----------------------------------------------------------------------


@dataclass
class DiagResult:
    """One plugin row of ``dcgmi diag``."""

    plugin: str  # as dcgmi prints it: "GPU Memory", "memory_bandwidth"
    category: str = ""  # Deployment | Integration | Hardware | Stress
    result: str = ""  # Pass | Fail | Skip | Warn (the plugin as a whole)
    gpus: dict[int, str] = field(default_factory=dict)  # GPU index -> Pass | Fail | Skip | Warn
    messages: list[str] = field(default_factory=list)  # the Warning / Error / Info text under it


@dataclass
class NodeHealth:
    node: str
    index: int = 0
    hostname: str = ""
    ran: bool = False  # dcgmi diag produced a result table
    level: int = 2
    dcgm_version: str = ""
    results: list[DiagResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # top-level Error rows, or why it did not run
    log_rel: str = ""  # the console log in the raw folder
    hostengine_started: bool = False  # this run started nv-hostengine (and stopped it afterwards)

    @property
    def passed(self) -> bool:
        return self.ran and not self.errors and all(r.result in ("Pass", "Skip") for r in self.results)


@dataclass
class HealthRecord(PhaseRecord):
    level: int = 2
    nodes: list[NodeHealth] = field(default_factory=list)


# -- matmul ----------------------------------------------------------------------------------


@dataclass
class ShapeTiming:
    """One measurement of one matmul shape (M×K times K×N) on one GPU."""

    m: int
    n: int
    k: int
    stage: str = ""  # screen | burst | sustained | lemon
    mean_tflops: float = 0.0  # 2·M·N·K / mean iteration time
    median_tflops: float = 0.0
    max_tflops: float = 0.0  # from the fastest iteration
    iterations: int = 0
    kernel_s: float = 0.0  # summed time of the timed matmuls
    wall_s: float = 0.0  # the whole measurement, warm-up included
    power_w: float | None = None  # mean board power over the timed window (NVML)
    power_max_w: float | None = None
    sm_mhz: float | None = None  # mean SM clock over the timed window
    sm_mhz_low: float | None = None  # 5th / 95th percentile of the SM clock samples
    sm_mhz_high: float | None = None
    num_samples: int = 0  # NVML samples behind power_w / sm_mhz
    temp_c: float | None = None  # highest GPU temperature over the timed window (NVML)
    clock_reasons: list[str] = field(default_factory=list)  # NVML clock-event reasons seen in the window
    label: str = ""  # "" | "SUSPECT" (never reached the power limit) | "UNSTEADY" (the rate still drifted)
    why: str = ""  # why the label
    idle_siblings: list[int] = field(default_factory=list)  # sibling GPUs seen idle during the window
    siblings_sampled: bool = False  # every sibling's utilisation was really read during the window
    siblings_unread: list[int] = field(default_factory=list)  # siblings NVML could not read in the window
    sibling_error: str = ""  # the last NVML error reading a sibling
    # a held measurement (the sustained regime): soak until the clock settles, then a timed window
    soak_s: float = 0.0  # seconds held at this shape before the window
    settled: bool = False  # the soak ended because the clock stopped changing (not at its time limit)
    window_s: float = 0.0  # seconds of the timed window
    first_half_tflops: float = 0.0  # median TFLOPS of the window's first / second half
    second_half_tflops: float = 0.0
    drift_frac: float = 0.0  # (second half - first half) / first half
    layout: str = "nn"  # the B operand in memory: nn (K×N, rows of N) | tn (N×K, read transposed)
    ref_ratio: float = 0.0  # a held rung: its rate over the reference shape's, interpolated to the same moment

    @property
    def held(self) -> bool:
        return self.window_s > 0

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def kernel_ms(self) -> float:
        return self.flops / (self.mean_tflops * 1e12) * 1e3 if self.mean_tflops else 0.0


@dataclass
class TracePoint:
    """One moment of a GPU's trace: the rate of the matmuls that just ran (0 when none was timed
    then) and NVML's reading of the board over the same stretch."""

    t_s: float  # seconds since the trace began
    tflops: float = 0.0
    power_w: float | None = None
    sm_mhz: float | None = None
    temp_c: float | None = None
    reasons: int = 0  # NVML clock-event reasons bitmask (0: none reported or not available)
    stage: str = ""  # screen | burst | hot | soak | window | telemetry (a board reading alone)


@dataclass
class TraceSpan:
    """A stretch of the trace: one stage, or one held shape's soak or window."""

    name: str  # search | hot | soak | window
    t0_s: float
    t1_s: float
    shape: tuple[int, int, int] | None = None


@dataclass
class MatmulTrace:
    """TFLOPS, board power, SM clock and temperature of one GPU over its measurement."""

    gpu: int = 0
    points: list[TracePoint] = field(default_factory=list)
    spans: list[TraceSpan] = field(default_factory=list)
    mamf_t_s: float | None = None  # when MAMF was read (the middle of its timing)
    msmf_span: TraceSpan | None = None  # the window MSMF was read in
    reasons_available: bool = False  # the driver answered the clock-event-reasons query


@dataclass
class SearchStage:
    """One stage of the whole-wave search: what it timed and how long it took."""

    name: str  # screen | refine | confirm | ladder | final (the worker's stage names)
    num_timings: int = 0  # measurements taken (a shape in two operand layouts counts twice)
    seconds: float = 0.0
    shapes: list[str] = field(default_factory=list)  # every shape it timed, MxNxK/layout


@dataclass
class SearchSummary:
    """What GPU0's search (or an exhaustive pass) found."""

    mode: str = "search"  # search | exhaustive
    grid: str = ""  # the search space as the worker names it
    shapes_tried: int = 0  # distinct shapes timed
    num_screened: int = 0
    num_confirmed: int = 0
    num_hot: int = 0  # large shapes held at full power one after another
    num_sustained: int = 0  # ... of which pinned for the full sustained timing
    mamf: ShapeTiming | None = None
    msmf: ShapeTiming | None = None
    sustained: list[ShapeTiming] = field(default_factory=list)  # every hot (ladder rung) and held timing, labels included
    screen_min_iters: int = 0  # what each stage timed at least (the worker's rules, for the report)
    confirm_min_iters: int = 0
    confirm_min_s: float = 0.0
    burst_duty: float = 1.0  # fraction of the burst timings the GPU computed (it idled the rest)
    hot_s: float = 0.0  # how long each hot shape was timed
    burst_s: float = 0.0  # screen + refine + confirm
    sustain_s: float = 0.0  # hot + soak + every held window
    hot_stage_s: float = 0.0  # the short holds of the large leaders
    soak_stage_s: float = 0.0  # soaks and settles before the held windows
    window_stage_s: float = 0.0  # the held windows themselves
    total_s: float = 0.0
    stop_reason: str = ""
    soak_min_s: float = 0.0  # the steadiness rule the held shapes followed
    soak_max_s: float = 0.0
    steady_window_s: float = 0.0  # the clock's median over this stretch vs the one before it
    steady_tol_frac: float = 0.0
    held_window_s: float = 0.0  # each held shape's timed window
    max_drift_frac: float = 0.0  # beyond this first-half/second-half drift a held shape is UNSTEADY
    trace: MatmulTrace | None = None
    # the whole-wave search (mode "waves"): what each stage timed, and how MSMF was ranked
    sm_count: int = 0  # the SM count the wave families were built for
    tile: tuple[int, int] = (0, 0)  # the output tile (M, N) a wave is counted in
    stages: list[SearchStage] = field(default_factory=list)
    reference: tuple[int, int, int] | None = None  # the shape held again between candidates
    reference_layout: str = "nn"
    msmf_ratio: float = 0.0  # the MSMF shape's mean rate over the reference's on the ladder


@dataclass
class GpuMsmf:
    """One GPU's MSMF at the node's MSMF shape, one value per pass (None: the run failed)."""

    gpu: int
    tflops: list[float | None] = field(default_factory=list)
    timings: list[ShapeTiming | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    idle_sibling_retries: int = 0
    trace: MatmulTrace | None = None  # the first pass's measurement (GPU0: its search)
    wall_s: float = 0.0  # the first pass's worker, start-up included


@dataclass
class NodeMatmul:
    node: str
    index: int = 0  # 0-based hostfile position: the "node<N>" in GPU names
    hostname: str = ""
    gpu_name: str = ""
    num_gpus: int = 0
    sm_count: int = 0
    memory_gib: float = 0.0
    power_limit_w: float | None = None
    boost_mhz: float | None = None
    search: SearchSummary | None = None  # GPU0's search
    msmf_shape: tuple[int, int, int] | None = None
    msmf_layout: str = "nn"  # the MSMF shape's B operand layout: every GPU measures it the same way
    gpus: list[GpuMsmf] = field(default_factory=list)
    num_passes: int = 0
    medians: list[float] = field(default_factory=list)  # node median MSMF per pass
    flagged: list[int] = field(default_factory=list)  # > 2% below the median in the first pass
    underperforming: list[int] = field(default_factory=list)  # below in all three passes
    dead: list[int] = field(default_factory=list)  # the measurement failed twice
    warnings: list[str] = field(default_factory=list)  # "saw idle siblings ..." and the like
    hot_gpus: list[int] = field(default_factory=list)  # >= 15 °C hotter than the coolest sibling, loaded
    low_power_gpus: list[int] = field(default_factory=list)  # < 90% of the top sibling's power, loaded
    search_wall_s: float = 0.0  # GPU0's search worker, start-up included
    all_gpu_wall_s: float = 0.0  # the other GPUs' first pass
    extra_passes_wall_s: float = 0.0  # every GPU's passes after the first (2 and 3, or 2 to gpu_passes), when they ran
    total_wall_s: float = 0.0  # the node's whole matmul pass
    error: str = ""  # why the pass stopped early: its Gap's kind (``matmul.busy``), or the node's own error


@dataclass
class MatmulRecord(PhaseRecord):
    dtype: str = "bfloat16"
    tool_rel: str = ""  # the worker's source in the raw folder: tools/matmul.py
    grid: str = ""
    soak_min_s: float = 0.0  # the first held shape's soak, at least / at most
    soak_max_s: float = 0.0
    settle_s: float = 0.0  # a shape on a board already at its power limit settles at least this long
    sustain_s: float = 0.0  # the timed window of every held shape
    num_gpu_passes: int = 1  # passes every GPU was to be measured in ([verdicts] gpu_passes; 1: three when flagged)
    nodes: list[NodeMatmul] = field(default_factory=list)
    saturated_sm_mhz: tuple[int, int] | None = None  # SM clock range at the power limit (Environment GPU table)


# -- lemon GEMM ------------------------------------------------------------------------------


@dataclass
class LemonGpu:
    gpu: int
    tflops: list[float | None] = field(default_factory=list)  # one per pass
    power_w: float | None = None
    sm_mhz: float | None = None
    sm_count: int = 0
    error: str = ""  # set when the GPU errored or hung: a dead GPU


@dataclass
class NodeLemon:
    node: str
    index: int = 0
    hostname: str = ""
    gpu_name: str = ""
    sm_count: int = 0
    gpus: list[LemonGpu] = field(default_factory=list)
    num_passes: int = 0
    medians: list[float] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)
    underperforming: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    error: str = ""  # why the pass stopped early: its Gap's kind (``lemon.busy``), or the node's own error


@dataclass
class LemonRecord(PhaseRecord):
    size: int = 16384
    dtype: str = "bfloat16"
    tool_rel: str = ""  # the worker's source in the raw folder (its lemon mode ran)
    num_gpu_passes: int = 1  # passes every GPU was to be measured in ([verdicts] gpu_passes; 1: three when flagged)
    nodes: list[NodeLemon] = field(default_factory=list)
