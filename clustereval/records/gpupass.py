"""The GPU memory and links pass (phase ``gpupass``): per GPU its HBM, PCIe and memory-test
figures, NVML's link and memory-health counters before and after, the vote's hashes; per node the
GPU pair matrix and nvbandwidth's figures when it was installed.

Every copy figure is the rate over all its timed repeats together (the bytes of every repeat over
their summed time), and beside it, in ``*_samples_gb_s``, each repeat's own rate in order, so a
later run or the fleet can judge a change against the figure's repeat noise. A record written
before the repeats were kept has empty sample lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord


@dataclass
class PcieLink:
    """The PCIe link as NVML reports it; None: not read."""

    gen_current: int | None = None  # at rest (an idle link steps down to save power)
    gen_max: int | None = None  # the most the GPU and its slot allow
    gen_gpu_max: int | None = None  # the GPU's own maximum
    width_current: int | None = None
    width_max: int | None = None
    gen_under_load: int | None = None  # the highest generation seen while the copies ran
    width_under_load: int | None = None


@dataclass
class MemoryHealth:
    """NVML's memory-health counters at one moment; None: the GPU or driver does not offer it."""

    ecc_enabled: bool | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_corrected: int | None = None
    remapped_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None


@dataclass
class PcieRates:
    """Pinned host↔device copies, GB/s (10^9 bytes a second)."""

    h2d_gb_s: float | None = None
    d2h_gb_s: float | None = None
    bidir_h2d_gb_s: float | None = None  # each direction while the other runs (twice its size, so all along)
    bidir_d2h_gb_s: float | None = None
    h2d_samples_gb_s: list[float] = field(default_factory=list)  # each timed repeat's own rate
    d2h_samples_gb_s: list[float] = field(default_factory=list)
    bidir_h2d_samples_gb_s: list[float] = field(default_factory=list)
    bidir_d2h_samples_gb_s: list[float] = field(default_factory=list)
    near_gpu_cpus: bool | None = None  # the copying thread ran on the CPUs NVML names nearest the GPU; None: not said


@dataclass
class MemMismatch:
    pattern: str
    num_words: int  # 8-byte words that read back wrong
    first_offset_bytes: int
    expected: int
    got: int


@dataclass
class VoteCase:
    dtype: str
    shape: list[int]  # M, N, K
    hashes: list[str]  # one per round, in order
    ref_rel_err: float | None = None  # against the CPU fp64 product; None: too large to check
    tolerance: float = 0.0


@dataclass
class PassGpu:
    gpu: int
    name: str = ""
    uuid: str = ""
    sm_count: int = 0
    memory_gib: float = 0.0
    compute_capability: str = ""
    link: PcieLink = field(default_factory=PcieLink)
    health_before: MemoryHealth | None = None
    health_after: MemoryHealth | None = None
    copy_gb_s: float | None = None  # HBM device-local copy, bytes counted once
    read_gb_s: float | None = None
    write_gb_s: float | None = None
    copy_samples_gb_s: list[float] = field(default_factory=list)  # each timed repeat's own rate
    read_samples_gb_s: list[float] = field(default_factory=list)
    write_samples_gb_s: list[float] = field(default_factory=list)
    pcie_solo: PcieRates | None = None  # this GPU alone
    pcie_all: PcieRates | None = None  # every GPU of the node at once
    mem_bytes_tested: int = 0
    mem_patterns: list[str] = field(default_factory=list)
    mem_mismatches: list[MemMismatch] = field(default_factory=list)
    vote: list[VoteCase] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "<step>: <error>" per step that failed on this GPU


@dataclass
class P2pCell:
    src: int
    dst: int
    peer: bool = True  # False: the two GPUs cannot reach each other's memory
    write_gb_s: float | None = None  # the row's GPU writing into the column's
    read_gb_s: float | None = None  # the row's GPU reading the column's memory into its own; None: not measured
    bidir_gb_s: float | None = None  # both directions at once, summed
    write_samples_gb_s: list[float] = field(default_factory=list)  # each timed repeat's own rate
    read_samples_gb_s: list[float] = field(default_factory=list)


@dataclass
class NvbFigure:
    """One nvbandwidth testcase's figure for one GPU (or pair), GB/s."""

    testcase: str
    gpu: int
    gb_s: float
    peer_gpu: int | None = None


@dataclass
class NodePass:
    node: str
    index: int = 0
    hostname: str = ""
    torch: str = ""
    cuda: str = ""
    device: str = ""  # cuda, or cpu for CPU stand-ins
    telemetry: bool = False  # NVML answered
    gpus: list[PassGpu] = field(default_factory=list)
    p2p: list[P2pCell] = field(default_factory=list)
    seconds: float = 0.0
    new_xids: list[str] = field(default_factory=list)  # kernel-log Xid lines that appeared during the pass
    xid_unread: str = ""  # why the kernel log could not be read ('' when it was)
    nvbandwidth: str = ""  # '' not installed; its version when it ran; "error: ..." when it failed
    nvb_figures: list[NvbFigure] = field(default_factory=list)
    error: str = ""  # why the pass stopped early: its Gap's kind, or the node's own error


@dataclass
class GpuPassRecord(PhaseRecord):
    quick: bool = False
    tool_rel: str = ""  # the worker's source in the raw folder
    # the operator's targets ([targets] in cluster.toml) when the pass ran; None: judged by the spec
    target_hbm_copy_gb_s: float | None = None
    target_pcie_gb_s: float | None = None
    target_nvlink_uni_gb_s: float | None = None
    nodes: list[NodePass] = field(default_factory=list)
