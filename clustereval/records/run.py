"""Records of the run itself: preflight, cleanup."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord
from clustereval.records.network import RendezvousPlan, RendezvousProbe


@dataclass
class ChecklistItem:
    """One row of the runbook's "Ask now, not later" table."""

    need: str
    known: bool
    value: str = ""  # what is known, as the report may show it
    hint: str = ""  # what to supply when missing
    required: bool = True  # False: optional (targets); missing is fine


@dataclass
class ProbeResult:
    """One reachability probe: SSH hostname, TCP to the rendezvous, gloo all-reduce."""

    kind: str  # "ssh" | "exec" (local) | "srun" | "slurm" (the allocation) | "kubectl" | "tcp" | "gloo" | "peer-ssh" | "paths"
    # | "torch" (informational: whether the node's interpreter imports torch before the eval Python phase)
    node: str
    ok: bool
    detail: str = ""  # the hostname that came back, or the one-line error
    seconds: float = 0.0
    gating: bool = True  # False: informational; a failure does not stop the run
    skipped: bool = False  # could not run (detail says why); never counts as passed or failed


@dataclass
class NodeInfo:
    name: str
    address: str
    index: int
    hostname: str = ""  # what `hostname -s` printed on the node


@dataclass
class AcrossNodesNotRun:
    """Why preflight ran without its checks across nodes (TCP from every node to every node's ports,
    passwordless SSH between nodes, the CPU gloo all-reduce): none of ``phases``, what the run went on
    to after preflight, starts a job across nodes, so the checks would have gated nothing."""

    phases: list[str] = field(default_factory=list)  # the phases after preflight (a resume: those it ran again)
    across_nodes: list[str] = field(default_factory=list)  # the phases that do start a job across nodes
    resume: bool = False  # a --resume: the earlier attempts' phases and their results stand


@dataclass
class TcpCoverage:
    """What preflight's TCP check across nodes tried, by its rule (``phases/preflight_tcp.py``): every
    node's ports opened on that node, port ``rdzv_port`` on the first node reached from every node, and
    each node's ports reached from its peers (every other node up to 16 nodes; above, the nodes
    1, 2, 4, ... before it in hostfile order and one node of each subnet, at most ``max_stride``
    apart); what it did not try is counted here, and every pair it tried is listed in ``pairs_file``."""

    num_connections: int = 0  # TCP connections the check made in all
    pairs_tried: int = 0  # ordered pairs of distinct nodes (from, to) with a connection between them
    pairs_total: int = 0  # every ordered pair of distinct nodes: N(N-1)
    max_stride: int = 0  # the longest stride between a node and a peer; 0 when every pair was tried
    subnets: int = 0  # subnets the hostfile's addresses fall in (/24, /64 for IPv6); 0 when they are names
    subnet_pairs_untried: int = 0  # ordered pairs of those subnets with no connection from the first to the second
    pairs_file: str = ""  # the raw folder's list of every connection tried and how it ended


@dataclass
class PreflightRecord(PhaseRecord):
    access: str = "local"
    access_detail: str = ""  # kubectl: context, namespace and how the pods were chosen (the report's Access line)
    nodes: list[NodeInfo] = field(default_factory=list)
    checklist: list[ChecklistItem] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    rendezvous: str = ""  # MASTER_ADDR:port, the first hostfile node
    platform_env: dict[str, str] = field(default_factory=dict)  # NCCL_*/FI_*/AWS_OFI* on rank 0
    final_env: dict[str, str] = field(default_factory=dict)  # what every benchmark ran with
    env_source: dict[str, str] = field(default_factory=dict)  # var -> "platform" | "clustereval default" | "cluster.toml"
    passed: bool = False
    gpus_per_node: int | None = None  # configured or detected (the most common count when nodes differ)
    gpus_by_node: dict[str, int] = field(default_factory=dict)  # node -> GPUs nvidia-smi -L listed
    gpu_source: str = ""  # "cluster.toml" | "hostfile slots" | "nvidia-smi -L" | "" (unknown)
    rendezvous_fixes: list[str] = field(default_factory=list)  # is_host / --local_addr applied, and why
    rendezvous_plan: RendezvousPlan | None = None  # what the gloo check proved; every torchrun job reuses it
    # the nodes' interpreter had no torch at preflight: the gloo check runs right after the eval-Python
    # phase, as part of the gate (``preflight.deferred_gloo``); True until it has run
    gloo_deferred: bool = False
    gloo_after_eval_python: bool = False  # the gloo probes are from that deferred check
    rendezvous_probes: list[RendezvousProbe] = field(default_factory=list)
    tcp_coverage: TcpCoverage | None = None  # what the TCP check across nodes tried; None when it did not run
    # >= 2 nodes and no phase of the run starts a job across nodes: the checks across nodes did not run
    across_nodes_not_run: AcrossNodesNotRun | None = None
    missing: list[str] = field(default_factory=list)  # required checklist items not known (the exact list)
    gpu_bf16_target_tflops: float | None = None  # [targets] gpu_bf16_tflops: judges the GPUs instead of the spec database


@dataclass
class NodePackages:
    node: str
    manager: str = ""  # apt | dnf | "" (none found)
    sudo: bool = False  # installs went through sudo (not root)
    present: list[str] = field(default_factory=list)  # binaries already there
    installed: list[str] = field(default_factory=list)  # packages this run installed
    missing: list[str] = field(default_factory=list)  # binaries still missing afterwards
    errors: list[str] = field(default_factory=list)  # one line per failed install


@dataclass
class PackagesRecord(PhaseRecord):
    enabled: bool = True  # cluster.toml install_packages
    nodes: list[NodePackages] = field(default_factory=list)


@dataclass
class EvalPythonRecord(PhaseRecord):
    """Which interpreter every worker ran with, and whether its torch was the newest release."""

    mode: str = ""  # venv | configured | fallback | node-python
    source: str = ""  # pytorch-index | default-index | configured | fallback-python | node-python
    interpreter: str = ""  # path on the nodes (raw folder only; the report never shows it)
    venv_shared: bool = False  # the venv sits on a shared FS every node sees
    torch: str = ""  # "2.11.0+cu130"
    nccl: str = ""
    python: str = ""
    index_url: str = ""  # the PyTorch wheel index the venv used
    newest_on_index: str = ""  # newest torch that index listed at eval time
    index_kind: str = ""  # "pytorch" (the PyTorch wheel index for index_tag) | "default" (pip's configured index)
    index_tag: str = ""  # cu130 | ... | cpu: the build the driver asked for
    verified_newest: bool = False  # torch == the newest on that index at eval time
    tried: list[str] = field(default_factory=list)  # "cu130: <why it was not used>"
    # a later step built the venv after the PyTorch index's newest torch could not be installed:
    refused_newest: str = ""  # that newest torch ("2.12.0+cu130"), so the Gap can name it
    refused_url: str = ""  # the PyTorch index (tag included) that listed it
    refused_why: str = ""  # the last line pip said
    executables: dict[str, str] = field(default_factory=dict)  # node -> sys.executable the interpreter resolves to
    # the cached venv (``phases/venvcache.py``): the nodes that found it from an earlier run, and
    # the nodes that built it in this one
    venv_reused: list[str] = field(default_factory=list)
    venv_built: list[str] = field(default_factory=list)
