"""Network records: connectivity, all-reduce sweeps, the pairwise straggler hunt.

Bandwidths are GB/s with GB = 1e9 bytes; payloads in bytes. busbw = algbw * 2(n-1)/n.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord


@dataclass
class RankInfo:
    """What one rank reported about itself (the worker's ``hello`` line)."""

    rank: int
    local_rank: int
    node: str  # the node as configured
    host: str = ""  # socket.gethostname() on the node
    device: str = ""  # cuda:0 / cpu
    device_name: str = ""
    numa_node: int = -1  # -1: unknown (no PCI NUMA information, or a CPU rank)
    cpu_affinity: str = ""  # 0-31
    executable: str = ""
    torch: str = ""
    nccl: str = ""
    backend: str = ""


@dataclass
class RendezvousProbe:
    """One node's answers to the rendezvous questions of the runbook."""

    node: str
    hostname: str = ""
    hostname_addrs: list[str] = field(default_factory=list)  # what the hostname resolves to
    route_addr: str = ""  # this node's source address toward the endpoint
    matches_endpoint: bool | None = None  # torch's _matches_machine_hostname(endpoint host)
    num_gpus: int = 0
    error: str = ""
    matches: dict[str, bool] = field(default_factory=dict)  # node address -> _matches_machine_hostname
    routes: dict[str, str] = field(default_factory=dict)  # node address -> this node's source address to it
    route_ifname: str = ""  # the interface holding route_addr (eth0, ens5): where gloo and NCCL sockets go
    env_ifnames: dict[str, str] = field(default_factory=dict)  # GLOO_/NCCL_SOCKET_IFNAME the node's shell sets
    peer_names: dict[str, list[str]] = field(default_factory=dict)  # peer hostname -> what it resolves to here


@dataclass
class RendezvousPlan:
    """How every torchrun job of a run meets: what preflight's gloo check proved, reused unchanged.

    For a job on a subset of the nodes (a pair), the endpoint is the subset's first node and
    ``is_host`` goes there; ``--local_addr`` and the socket interfaces stay per node.
    """

    nodes: list[str] = field(default_factory=list)  # the nodes it was decided for, endpoint node first
    endpoint_host: str = ""  # the first node's address (the c10d store)
    is_host_node: str = ""  # node given --rdzv_conf is_host=1 ("" = let torch decide)
    local_addrs: dict[str, str] = field(default_factory=dict)  # node -> --local_addr ({} when not needed)
    socket_ifnames: dict[str, str] = field(default_factory=dict)  # node -> GLOO/NCCL_SOCKET_IFNAME we set
    ifname_source: dict[str, str] = field(default_factory=dict)  # node -> "route to <endpoint>" | "platform"
    reasons: list[str] = field(default_factory=list)  # why is_host / --local_addr were added
    proven: bool = False  # a gloo all-reduce across every node completed with this plan

    @property
    def needed(self) -> bool:
        return bool(self.is_host_node or self.local_addrs)


@dataclass
class NodeExit:
    """How one node's launcher ended, as it was seen (not as the slowest node's timeout)."""

    node: str
    state: str = ""  # ok | failed | stopped (another node failed) | timed-out | interrupted | unreachable
    rc: int | None = None  # None: we stopped it
    seconds: float = 0.0  # from the start of the launch to its exit (or to our stop)
    cause: str = ""  # the telling line of its output ("" when ok)
    joined: bool = False  # its workers started (the rendezvous completed for it)
    reaped: int = 0  # processes of the job still alive on the node after the stop, killed by us


@dataclass
class LaunchInfo:
    """One torchrun launch across one or more nodes."""

    label: str = ""  # connectivity, allreduce-intra-node0, pair-3-7, ...
    nodes: list[str] = field(default_factory=list)
    nproc_per_node: int = 0
    world_size: int = 0
    endpoint: str = ""  # host:port of the c10d rendezvous
    is_host_node: str = ""  # node given --rdzv_conf is_host=1 ("" when not needed)
    local_addrs: dict[str, str] = field(default_factory=dict)  # node -> --local_addr ({} when not needed)
    fix_reasons: list[str] = field(default_factory=list)  # why is_host / local_addr were added
    rc_by_node: dict[str, int] = field(default_factory=dict)
    ok: bool = False
    seconds: float = 0.0
    diagnosis: str = ""  # store-not-listening | unreachable-port | unresolvable-master | other | ""
    diagnosis_text: str = ""  # one or two sentences for the Gap
    error: str = ""  # last meaningful error line of the failing node
    logs: list[str] = field(default_factory=list)  # raw-folder paths of the prefixed logs
    interpreter_problems: list[str] = field(default_factory=list)  # worker ran on another Python/torch
    socket_ifnames: dict[str, str] = field(default_factory=dict)  # node -> GLOO/NCCL_SOCKET_IFNAME set by us
    exits: list[NodeExit] = field(default_factory=list)  # per node, in node order
    stop_reason: str = ""  # why we stopped the job: "<node> exited 1" | "timeout" | "interrupted" | ""
    not_joined: list[str] = field(default_factory=list)  # nodes whose workers never started
    port_free: bool | None = None  # the rendezvous port was free on the endpoint node after the job


@dataclass
class NcclDebugInfo:
    """What one ``NCCL_DEBUG=INFO`` pass said about the path NCCL took."""

    scope: str = ""  # intra-node | inter-node
    version: str = ""  # 2.28.9+cuda13.0
    transports: list[str] = field(default_factory=list)  # P2P/CUMEM, SHM, NET/IB, NET/Socket, NET/Libfabric
    network: str = ""  # what "Using network X" named: IB, Socket, Libfabric, AWS Libfabric, IBext_v8
    nvls_available: bool | None = None  # "NVLS multicast support is (not) available"
    nvls_used: bool | None = None  # NVLS buffers or connections were set up
    nvls_env: str = ""  # NCCL_NVLS_ENABLE as NCCL reported it
    log: str = ""  # raw-folder path of the full INFO log


@dataclass
class SweepRow:
    payload_bytes: int
    time_s: float  # per call, slowest rank
    algbw_gb_s: float
    busbw_gb_s: float
    iterations: int = 0
    method: str = ""  # cuda-graph | events | wall-clock | barrier+sync
    check_ok: bool = True  # every element came back as n(n+1)/2


@dataclass
class Sweep:
    """One all-reduce sweep over payloads on one set of ranks."""

    scope: str  # intra-node | inter-node | pair
    nodes: list[str] = field(default_factory=list)
    num_ranks: int = 0
    backend: str = ""  # nccl | gloo
    device_name: str = ""
    rows: list[SweepRow] = field(default_factory=list)  # back-to-back (the nccl-tests way)
    blocking_rows: list[SweepRow] = field(default_factory=list)  # one call at a time
    max_bytes_requested: int = 0
    max_bytes_fit: int = 0  # smaller than requested when free memory did not allow it
    sweep_seconds: float = 0.0
    plot: str = ""  # raw-folder path of a busbw PNG drawn by the run (older runs; the report draws it now)
    launch: LaunchInfo = field(default_factory=LaunchInfo)
    nccl: NcclDebugInfo | None = None
    ok: bool = False
    error: str = ""

    @property
    def peak(self) -> SweepRow | None:
        return max(self.rows, key=lambda r: r.busbw_gb_s) if self.rows else None

    def row_at(self, payload_bytes: int) -> SweepRow | None:
        return next((r for r in self.rows if r.payload_bytes == payload_bytes), None)


@dataclass
class NcclEnvInfo:
    """The NCCL environment every collective ran with, and who set NCCL_NVLS_ENABLE."""

    final_env: dict[str, str] = field(default_factory=dict)
    env_source: dict[str, str] = field(default_factory=dict)  # var -> platform | clustereval default | cluster.toml
    nvls_enable: str = ""
    nvls_source: str = ""


@dataclass
class ConnectivityRecord(PhaseRecord):
    scope: str = ""  # intra-node | inter-node: what actually ran
    backend: str = ""  # nccl | gloo
    num_nodes: int = 0
    num_ranks: int = 0
    ranks: list[RankInfo] = field(default_factory=list)
    allreduce_ok: bool = False
    launch: LaunchInfo = field(default_factory=LaunchInfo)
    probes: list[RendezvousProbe] = field(default_factory=list)
    nccl_env: NcclEnvInfo = field(default_factory=NcclEnvInfo)


@dataclass
class AllreduceRecord(PhaseRecord):
    intra: list[Sweep] = field(default_factory=list)  # one per node
    inter: Sweep | None = None  # all nodes x all GPUs (>= 2 nodes)
    min_bytes: int = 0
    max_bytes: int = 0
    nccl_env: NcclEnvInfo = field(default_factory=NcclEnvInfo)
    nvlink_target_gb_s: float | None = None  # cluster.toml targets: overrides the spec database
    internode_target_gb_s: float | None = None  # cluster.toml targets: expected inter-node busbw


@dataclass
class PairResult:
    """One node pair's all-reduce busbw: the pairwise phase writes it, and `debug nccl` reads it
    back from a saved pairwise record (an old debug record's pairs, without round or samples, load
    with those empty)."""

    a: str
    b: str
    round: int = 0
    busbw_gb_s: float | None = None  # the median sample; None: the pair did not complete
    error: str = ""
    slow: bool = False  # below the healthy pairs' slowest sample less the threshold
    samples_gb_s: list[float] = field(default_factory=list)  # every timed sample of the pair
    # when the pair's job ran, as the controller saw it: seconds from the hunt's start to its
    # launchers' start and to their end
    started_s: float | None = None
    ended_s: float | None = None
    # every sample's start and end on its first node's clock (Unix seconds): the pairs of a round
    # take each sample together (workers.roundgate), which these show
    sample_starts_unix_s: list[float] = field(default_factory=list)
    sample_ends_unix_s: list[float] = field(default_factory=list)
    gated: bool = False  # every sample passed the round's gate with every pair of the round
    # in a round of several pairs, completed without passing every gate with the round: its samples
    # are neither a healthy reference nor evidence of a slow pair (analysis.stragglers)
    ungated: bool = False
    gate_error: str = ""  # why the pair's job left the gate ("": it passed every gate, or had none)


@dataclass
class NodeSuspect:
    node: str
    slow_pairs: int
    pairs: int
    share: float  # slow_pairs / pairs
    mean_busbw_gb_s: float = 0.0
    failed_pairs: int = 0


@dataclass
class FailingNode:
    """A node of the pairwise hunt that completed no pair, or none from a round on while its partners
    went on (``analysis.stragglers.failing_nodes``): failing, with the launcher's error, never a
    straggler on its failed pairs (a node is named slow on samples only)."""

    node: str
    error: str  # the error of its first failed pair (from the round it stopped), as the launcher gave it
    partners: list[str] = field(default_factory=list)  # the partners of its failed pairs (from that round)
    # a partner completed another pair (from that round on), so the failure is this node's; False: no
    # partner completed one either, so which node of the pair failed is not known
    carries: bool = True
    completed_pairs: int = 0  # the pairs it completed before it stopped (0: it completed none)
    from_round: int = 0  # the round it stopped in: its first failed pair's (0: not known, an older record)


@dataclass
class PairwiseRecord(PhaseRecord):
    payload_bytes: int = 0
    backend: str = ""
    ranks_per_node: int = 0
    num_rounds: int = 0
    pairs: list[PairResult] = field(default_factory=list)
    mean_busbw_gb_s: float = 0.0  # over the completed pairs' medians (0.0 when none completed)
    threshold_pct: float = 5.0
    samples_per_pair: int = 1
    judged: bool = False  # False: too few pairs completed to name a node
    why_not_judged: str = ""
    healthy_pairs: int = 0  # pairs without a named node: the reference
    healthy_samples: int = 0
    healthy_median_gb_s: float = 0.0
    healthy_floor_gb_s: float = 0.0  # the slowest healthy sample
    limit_gb_s: float = 0.0  # a pair whose median is below this is slow
    not_joined: list[str] = field(default_factory=list)  # nodes that joined no pair's rendezvous
    rendezvous: RendezvousPlan | None = None  # the run's plan every pair's job used
    suspects: list[NodeSuspect] = field(default_factory=list)  # most slow pairs first
    stragglers: list[str] = field(default_factory=list)  # nodes named as stragglers
    failing: list[FailingNode] = field(default_factory=list)  # nodes that completed no pair, or none from a round on
    unresolved: list[str] = field(default_factory=list)  # screened suspects the round budget left unconfirmed
    heatmap: str = ""  # raw-folder path of a pair-matrix PNG drawn by the run (older runs; the report draws it now)
    wall_seconds: float = 0.0
