"""Records of the run itself: preflight, cleanup."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord


@dataclass
class ChecklistItem:
    """One row of the runbook's "Ask now, not later" table."""

    need: str
    known: bool
    value: str = ""  # what is known, as the report may show it
    hint: str = ""  # what to supply when missing


@dataclass
class ProbeResult:
    """One reachability probe: SSH hostname, TCP to the rendezvous, gloo all-reduce."""

    kind: str  # "ssh" | "tcp" | "gloo"
    node: str
    ok: bool
    detail: str = ""  # the hostname that came back, or the one-line error
    seconds: float = 0.0


@dataclass
class NodeInfo:
    name: str
    address: str
    index: int
    hostname: str = ""  # what `hostname -s` printed on the node


@dataclass
class PreflightRecord(PhaseRecord):
    access: str = "local"
    nodes: list[NodeInfo] = field(default_factory=list)
    checklist: list[ChecklistItem] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    rendezvous: str = ""  # MASTER_ADDR:port, the first hostfile node
    platform_env: dict[str, str] = field(default_factory=dict)  # NCCL_*/FI_*/AWS_OFI* on rank 0
    final_env: dict[str, str] = field(default_factory=dict)  # what every benchmark ran with
    env_source: dict[str, str] = field(default_factory=dict)  # var -> "platform" | "clustereval default" | "cluster.toml"
    passed: bool = False
