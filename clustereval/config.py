"""cluster.toml + hostfile -> a frozen, validated ``Config``.

The dataclasses below are the schema: every field has a docstring-comment saying what it is.
Loading and validation (every problem at once, each with file:line and a hint) live in
``load_config``.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass, field

ACCESS_METHODS = ("local", "ssh", "slurm", "kubectl")
IMPLEMENTED_ACCESS = ("local", "ssh")


@dataclass(frozen=True)
class SshConfig:
    port: int | None = None  # None: whatever ~/.ssh/config says (never assumed 22 or 2222)
    user: str | None = None  # None: the ssh client's default
    identity_file: str | None = None
    options: tuple[str, ...] = ()  # extra "-o Key=Value" options, e.g. ProxyJump=bastion
    connect_timeout_s: int = 5  # an unreachable node fails within this many seconds
    config_file: str | None = None  # ssh -F FILE instead of ~/.ssh/config


@dataclass(frozen=True)
class HostEntry:
    """One data line of the hostfile."""

    address: str
    slots: int | None = None
    line: int = 0


@dataclass(frozen=True)
class StorageTarget:
    """Operator-supplied expected figures for one mount: one value per fio-scan cell.

    Keys are ``"16KiB-read"``, ``"1MiB-write"``, ...; values in MiB/s (bw) or IOPS.
    """

    mount: str
    bw_mib_s: dict[str, float] = field(default_factory=dict)
    iops: dict[str, float] = field(default_factory=dict)
    source: str = ""  # where the figures come from (a contract, a tier name)


@dataclass(frozen=True)
class Targets:
    """What the operator says the cluster should deliver; later phases judge against these."""

    gpu_bf16_tflops: float | None = None  # overrides the spec database
    nvlink_uni_gb_s: float | None = None  # advertised intra-node unidirectional bandwidth
    internode_busbw_gb_s: float | None = None
    storage: tuple[StorageTarget, ...] = ()


@dataclass(frozen=True)
class Config:
    name: str = "cluster"  # report file name prefix: reports/<name>-<stamp>.md
    access: str = "local"  # how to exec on a node: local | ssh | slurm | kubectl
    nodes: tuple[str, ...] = ()  # every node identity (hostname, pod, IP)
    hostfile: str | None = None  # path of the hostfile (required with >= 2 nodes)
    hosts: tuple[HostEntry, ...] = ()  # parsed hostfile data lines, in order
    ssh: SshConfig = field(default_factory=SshConfig)
    gpus_per_node: int | None = None  # None: detect with nvidia-smi -L
    local_scratch: str = "/tmp"  # local disk path fio scans
    shared_paths: tuple[str, ...] = ()  # shared-FS paths (scanned, grouped by type and size)
    scratch_user: str = field(default_factory=lambda: _user())  # <mount>/<user>/cluster-eval-…
    scratch_root: str | None = None  # overrides <mount>/<user> when set
    eval_python: str | None = None  # interpreter on the nodes; None: build an isolated venv
    torch_index: str = "https://download.pytorch.org/whl"  # PyTorch wheel index base (or a mirror): <base>/cu130
    install_packages: bool = True  # install missing host packages (fio, infiniband-diags, ...)
    nccl_env: tuple[tuple[str, str], ...] = ()  # NCCL_* overrides the operator asks for
    rdzv_port: int = 29500  # rendezvous port on the first hostfile node
    cpu_ranks_per_node: int = 2  # gloo ranks per node for the network phases when a node has no GPU
    reports_dir: str = "reports"
    targets: Targets = field(default_factory=Targets)
    source: str = ""  # the cluster.toml path this came from; "" for the built-in default

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) >= 2


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "clustereval"


def default_local_config() -> Config:
    """No cluster.toml: evaluate this machine as a 1-node cluster over local exec."""
    host = socket.gethostname().split(".")[0] or "localhost"
    return Config(name=host, access="local", nodes=(host,))
