"""What the debug workflows produce: the ranked suspect nodes of an uneven-NCCL hunt, and the
slow-filesystem diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord
from clustereval.records.network import FailingNode, PairResult
from clustereval.records.scratch import ScratchMove
from clustereval.records.snapshot import Signal, SnapshotRecord
from clustereval.records.storage import MountScan


@dataclass
class SuspectNode:
    node: str
    rank: int  # 1 = most likely
    straggler: bool = False  # named by the pairwise hunt itself
    failing: bool = False  # a failing node of the hunt (completed no pair, or none from a round on): listed first
    error: str = ""  # a failing node's launcher error, as the hunt recorded it
    failed_pairs: list[PairResult] = field(default_factory=list)  # a failing node's pairs that did not complete
    slow_pairs: list[PairResult] = field(default_factory=list)
    num_pairs: int = 0  # pairs this node was measured in
    concerns: list[Signal] = field(default_factory=list)  # the snapshot's CONCERN lines on this node
    why: str = ""  # one line: why it ranks where it does
    evidence: str = ""  # path of its evidence archive


@dataclass
class TopologyFact:
    source: str  # "scontrol show topology", "subnet", "system model", ...
    text: str
    explains: bool = False  # the slow pairs line up with this grouping


@dataclass
class NcclDebugRecord(PhaseRecord):
    payload_bytes: int = 0
    backend: str = ""
    ranks_per_node: int = 0
    threshold_pct: float = 5.0
    mean_busbw_gb_s: float = 0.0
    healthy_floor_gb_s: float = 0.0  # the slowest sample of the pairs without a named node (0.0: an older record)
    limit_gb_s: float = 0.0  # a pair is slow when even its fastest sample is below this
    why_not_judged: str = ""  # why the hunt named no node (too few pairs completed)
    stragglers: list[str] = field(default_factory=list)  # the nodes the hunt named
    failing: list[FailingNode] = field(default_factory=list)  # the hunt's failing nodes (never ranked by a figure)
    pairs: list[PairResult] = field(default_factory=list)
    suspects: list[SuspectNode] = field(default_factory=list)
    topology: list[TopologyFact] = field(default_factory=list)
    snapshot: SnapshotRecord | None = None
    evidence_dir: str = ""
    scratch: list[ScratchMove] = field(default_factory=list)  # what became of the scratch it created


@dataclass
class FsDebugRecord(PhaseRecord):
    node: str = ""
    mount: str = ""  # the mount point holding the path asked about
    path: str = ""  # the path asked about
    fstype: str = ""
    local: MountScan | None = None  # the quick scan of the local disk (None: no other local filesystem)
    local_note: str = ""  # which local folder was compared and why, or why none was
    shared: MountScan | None = None  # the quick scan of the mount, with its layout
    runtime_s: int = 0  # timed IO per fio run
    storage_signals: list[Signal] = field(default_factory=list)  # the snapshot's storage / iowait lines
    verdict: str = ""  # saturated | pattern | undecided
    facts: list[str] = field(default_factory=list)
    guidance: list[str] = field(default_factory=list)
    cleanup: list[str] = field(default_factory=list)  # where the scratch went, one line per folder
    evidence: str = ""
