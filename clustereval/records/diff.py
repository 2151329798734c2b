"""What ``clustereval diff OLD NEW`` found: the figure changes judged against noise, what one run
alone holds, software and configuration drift, verdict and phase changes."""

from __future__ import annotations

from dataclasses import dataclass, field

DIFF_SCHEMA_VERSION = 2  # 2: changes judged on both runs' repeat noise (se_frac, p_value); "not judged"
BEYOND = "changed beyond noise"
WITHIN = "within noise"
NOT_JUDGED = "not judged"  # a run holds one value of it and no repeat noise to judge the change by


@dataclass
class RunRef:
    """One side of the comparison."""

    id: str  # <name>-<stamp>, the report's file name without .md
    stamp: str = ""
    report: str = ""
    profile: str = ""
    access: str = ""
    num_nodes: int = 0
    gpu_model: str = ""
    gpus_per_node: int = 0
    hostnames: list[str] = field(default_factory=list)  # hostfile order


@dataclass
class NodePairing:
    """Node N of each run, when the two runs are not of the same hosts."""

    index: int
    old: str = ""  # hostname(nodeN), "" when the earlier run had no node N
    new: str = ""


@dataclass
class FigureChange:
    id: str  # the summary figure id: msmf/node0/gpu3, fio/node0/tmp/1MiB-write
    kind: str  # msmf | mamf | lemon | busbw-intra | busbw-inter | pairwise | fio | concurrent-write
    subject: str  # hostname(node0):gpu3, `/tmp` on hostname(node0), 1 MiB write
    unit: str
    old_value: float | None
    new_value: float | None
    change_frac: float | None  # (new - old) / old; None when either has no value
    noise_frac: float | None  # the change's standard error from both runs' repeat noise (or the fio tolerance)
    noise_basis: str
    judgement: str  # BEYOND | WITHIN | NOT_JUDGED
    old_state: str = "ok"
    new_state: str = "ok"
    old_subject: str = ""  # the earlier run's name for it, when the hosts differ
    p_value: float | None = None  # two-sided, Welch's t on both runs' repeat noise; None: not from repeats

    @property
    def beyond(self) -> bool:
        return self.judgement == BEYOND


@dataclass
class OneSided:
    """A node, a GPU or a figure that only one run holds."""

    run: str  # "old" | "new"
    what: str  # node | gpu | figure
    subject: str
    kind: str = ""  # for figures: the figure kind


@dataclass
class Drift:
    """A software or configuration item that differs between the runs."""

    item: str  # NCCL, driver, NCCL_IB_HCA, mount /data fstype, profile, ...
    category: str  # software | host | nccl-env | mount | run | gpu
    old: str
    new: str
    where: list[str] = field(default_factory=list)  # node labels (empty: the whole cluster)


@dataclass
class VerdictChange:
    subsystem: str
    old: list[str] = field(default_factory=list)  # verdict words, one per finding
    new: list[str] = field(default_factory=list)
    new_texts: list[str] = field(default_factory=list)  # the later run's sentences for this subsystem


@dataclass
class PhaseChange:
    phase: str
    old: str
    new: str


@dataclass
class DiffRecord:
    old: RunRef
    new: RunRef
    same_cluster: bool = True
    matched_by: str = "hostname"  # hostname | node order and GPU index
    pairing: list[NodePairing] = field(default_factory=list)  # filled when the hosts differ
    fio_tolerance: float = 0.05
    confidence: float = 0.99  # changes are judged at this confidence, Holm-corrected over the figures judged
    changes: list[FigureChange] = field(default_factory=list)  # every figure both runs hold
    one_sided: list[OneSided] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    verdicts: list[VerdictChange] = field(default_factory=list)
    phases: list[PhaseChange] = field(default_factory=list)
    gaps_new: list[str] = field(default_factory=list)
    gaps_resolved: list[str] = field(default_factory=list)
    schema_version: int = DIFF_SCHEMA_VERSION

    @property
    def beyond(self) -> list[FigureChange]:
        return [c for c in self.changes if c.beyond]

    @property
    def within(self) -> list[FigureChange]:
        return [c for c in self.changes if c.judgement == WITHIN]

    @property
    def not_judged(self) -> list[FigureChange]:
        return [c for c in self.changes if c.judgement == NOT_JUDGED]
