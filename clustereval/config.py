"""cluster.toml + hostfile -> a frozen, validated ``Config``.

The dataclasses below are the schema: every field has a comment saying what it is.
Loading and validation (every problem at once, each with file:line and a hint) live in
``clustereval.configload`` and are re-exported here as ``load_config``.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ACCESS_METHODS = ("local", "ssh", "slurm", "kubectl")
IMPLEMENTED_ACCESS = ("local", "ssh", "slurm", "kubectl")


@dataclass(frozen=True)
class SshConfig:
    port: int | None = None  # None: whatever ~/.ssh/config says (never assumed 22 or 2222)
    user: str | None = None  # None: the ssh client's default
    identity_file: str | None = None
    options: tuple[str, ...] = ()  # extra "-o Key=Value" options, e.g. ProxyJump=bastion
    connect_timeout_s: int = 5  # an unreachable node fails within this many seconds
    config_file: str | None = None  # ssh -F FILE instead of ~/.ssh/config


@dataclass(frozen=True)
class SlurmConfig:
    """``[slurm]``: run inside a Slurm allocation, every command through ``srun``.

    With ``job_id`` unset and ``SLURM_JOB_ID`` in the environment (under ``salloc``), that
    allocation is used and left running. Otherwise one is requested with ``salloc --no-shell``
    from the settings below and cancelled (``scancel``) when the run ends, also on Ctrl-C or an
    error. Node identities come from ``scontrol show hostnames``, addresses from the nodes.
    """

    job_id: str | None = None  # use this allocation; None: $SLURM_JOB_ID, else request one
    partition: str | None = None  # salloc --partition; None: the cluster's default partition
    nodes: int | None = None  # salloc --nodes (node count); required when requesting an allocation
    gpus_per_node: int | None = None  # salloc --gpus-per-node; None: no GPU request (a GRES-free cluster)
    time_limit: str = "02:00:00"  # salloc --time: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS
    account: str | None = None  # salloc --account
    salloc_args: tuple[str, ...] = ()  # extra salloc arguments, e.g. ["--qos=high", "--exclusive"]
    srun_args: tuple[str, ...] = ()  # extra arguments for every srun, e.g. ["--mpi=none"]
    wait_s: int = 300  # how long a pending allocation may wait for resources before the run gives up


@dataclass(frozen=True)
class KubectlConfig:
    """``[kubectl]``: every pod is a node, every command a ``kubectl exec -i POD -c CONTAINER -- argv``.

    The pods are named one way: ``pods`` (an explicit list, in hostfile order), ``selector`` (a
    label selector), ``job`` (a batch Job's pods) or ``jobset`` (a JobSet's pods); the last three
    are ordered by ``order_by``. Addresses come from ``hostfile`` inside the first pod when it is
    named, else from each pod's ``status.podIP``; pod 0's address is the rendezvous endpoint.
    """

    context: str | None = None  # kubeconfig context; None: the kubeconfig's current-context
    namespace: str | None = None  # None: the context's namespace
    pods: tuple[str, ...] = ()  # explicit pod names, node0 first
    selector: str | None = None  # label selector, e.g. "app=trial,role=worker"
    job: str | None = None  # a Job name: its pods (label batch.kubernetes.io/job-name)
    jobset: str | None = None  # a JobSet name: its pods (label jobset.sigs.k8s.io/jobset-name)
    order_by: str = "completion-index"  # "completion-index" (JobSet job index, then the Job's) or "name"
    container: str | None = None  # kubectl exec -c; None: the pod's only (or default) container
    kubeconfig: str | None = None  # --kubeconfig FILE; None: $KUBECONFIG or ~/.kube/config
    args: tuple[str, ...] = ()  # extra global kubectl arguments, e.g. ["--as=alice"]
    hostfile: str | None = None  # the platform's hostfile, a path inside the first pod (never edited)
    request_timeout_s: int = 20  # how long one API call (get pods) may take before it counts as unreachable


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

    gpu_bf16_tflops: float | None = None  # dense BF16 per GPU: judges the GPUs instead of the spec database
    nvlink_uni_gb_s: float | None = None  # advertised intra-node unidirectional bandwidth
    internode_busbw_gb_s: float | None = None
    hbm_copy_gb_s: float | None = None  # device-local copy per GPU, bytes counted once (default: from the spec)
    pcie_gb_s: float | None = None  # pinned host-to-device and device-to-host, each, per GPU (default: from the link)
    storage: tuple[StorageTarget, ...] = ()


# the run's passes an operator may name in `skip` (every phase of runner.PHASES but the preflight gate,
# which always runs; tests/test_skip_passes.py holds the two lists equal)
SKIPPABLE = ("packages", "evalpython", "environment", "connectivity", "health", "gpupass", "matmul", "lemon",
             "allreduce", "pairwise", "storage")


GPU_PEER_KEYS = ("model", "driver", "node")  # what may make two GPUs peers in [verdicts] gpu_peers
MAX_GPU_PASSES = 20  # [verdicts] gpu_passes: ten passes already find a 3% slow GPU at 1% noise at every fleet size


@dataclass(frozen=True)
class Verdicts:
    """How fleet-relative verdicts are judged (``[verdicts]``; docs/statistics.md says why these defaults)."""

    confidence_pct: float = 99.0  # the chance that no healthy unit of the fleet is named slow
    threshold_pct: float = 2.0  # a unit is slow only this far below its peers' median, or further
    gpu_peers: tuple[str, ...] = ("model", "driver")  # GPUs are peers when these agree (GPU_PEER_KEYS)
    # how many passes every GPU's MSMF and lemon GEMM are measured in: 1 is the runbook's (one pass, three when a
    # GPU is more than 2% below its node median); 7 finds a 3% slow GPU at 1% repeat noise in 99% of runs
    gpu_passes: int = 1


@dataclass(frozen=True)
class Config:
    name: str = "cluster"  # report file name prefix: reports/<name>-<stamp>.md
    access: str = "local"  # how to exec on a node: local | ssh | slurm | kubectl
    nodes: tuple[str, ...] = ()  # every node identity (hostname, pod, IP)
    hostfile: str | None = None  # path of the hostfile (required with >= 2 nodes)
    hosts: tuple[HostEntry, ...] = ()  # parsed hostfile data lines, in order
    ssh: SshConfig = field(default_factory=SshConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    kubectl: KubectlConfig = field(default_factory=KubectlConfig)
    gpus_per_node: int | None = None  # None: detect with nvidia-smi -L
    local_scratch: str = "/tmp"  # local disk path fio scans
    shared_paths: tuple[str, ...] = ()  # shared-FS paths (scanned, grouped by type and size)
    scratch_user: str = field(default_factory=lambda: _user())  # <mount>/<user>/cluster-eval-…
    scratch_root: str | None = None  # overrides <mount>/<user> when set
    eval_python: str | None = None  # interpreter on the nodes; None: build an isolated venv
    fallback_python: str | None = None  # interpreter with torch, used only when no index gives a venv torch
    torch_index: str = "https://download.pytorch.org/whl"  # PyTorch wheel index base (or a mirror): <base>/cu130
    install_packages: bool = True  # install missing host packages (fio, infiniband-diags, ...)
    skip: tuple[str, ...] = ()  # passes the operator does not want (e.g. "health" without DCGM): not run, exit 0
    nccl_env: tuple[tuple[str, str], ...] = ()  # NCCL_* overrides the operator asks for
    rdzv_port: int = 29500  # rendezvous port on the first hostfile node; the run uses up to rdzv_port + N
    cpu_ranks_per_node: int = 2  # gloo ranks per node for the network phases when a node has no GPU
    reports_dir: str = "reports"
    targets: Targets = field(default_factory=Targets)
    verdicts: Verdicts = field(default_factory=Verdicts)
    source: str = ""  # the cluster.toml path this came from; "" for the built-in default
    given: tuple[str, ...] = ()  # dotted keys cluster.toml set explicitly ("ssh.port", "shared_paths")

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


_SLURM_TIME = r"(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)"


def _known_items(table: dict, cls: type, section: str, problems: list[tuple[str, str, str]],
                 ) -> Iterator[tuple[str, Any]]:
    """The table's (key, value) pairs whose key is a field of ``cls``; each other key is added to
    ``problems`` as it comes, so the problems keep the table's order."""
    known = {f.name for f in fields(cls)}
    for key, value in table.items():
        if key in known:
            yield key, value
        else:
            problems.append((key, f"unknown key `{key}` in [{section}]", f"known keys: {', '.join(sorted(known))}"))


def slurm_config_from_table(table: dict) -> tuple[SlurmConfig, list[tuple[str, str, str]]]:
    """The ``[slurm]`` table -> ``SlurmConfig`` plus every problem as (key, message, hint).

    The cluster.toml loader turns each problem into a ``Problem`` with the key's file:line."""
    import re

    problems: list[tuple[str, str, str]] = []
    values: dict = {}
    for key, value in _known_items(table, SlurmConfig, "slurm", problems):
        if key in ("nodes", "gpus_per_node", "wait_s"):
            low = 0 if key == "gpus_per_node" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append((key, f"[slurm] {key} must be an integer >= {low}, not {value!r}",
                                 "e.g. nodes = 2" if key == "nodes" else ""))
                continue
        elif key in ("salloc_args", "srun_args"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append((key, f"[slurm] {key} must be a list of strings",
                                 f'e.g. {key} = ["--qos=high"]'))
                continue
            value = tuple(value)
        elif key == "job_id":
            if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
                problems.append((key, f"[slurm] job_id must be a Slurm job id (digits), not {value!r}",
                                 "see `squeue --me` for your allocations"))
                continue
            value = str(value).strip()
        elif key == "time_limit":
            text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if not re.fullmatch(_SLURM_TIME, text):
                problems.append((key, f"[slurm] time_limit {value!r} is not a Slurm time",
                                 'use minutes, "MM:SS", "HH:MM:SS" or "D-HH:MM:SS", e.g. time_limit = "02:00:00"'))
                continue
            value = text
        elif not isinstance(value, str) or not value.strip():
            problems.append((key, f"[slurm] {key} must be a non-empty string, not {value!r}", ""))
            continue
        values[key] = value
    return SlurmConfig(**values), problems


_K8S_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"  # a DNS-1123 subdomain: pod, namespace, Job names
_SELECTOR = r"!?[A-Za-z0-9./_-]+(\s*(==|=|!=)\s*[A-Za-z0-9._-]*)?(\s*,\s*!?[A-Za-z0-9./_-]+(\s*(==|=|!=)\s*[A-Za-z0-9._-]*)?)*"
KUBECTL_POD_SOURCES = ("pods", "selector", "job", "jobset")
KUBECTL_ORDERS = ("completion-index", "name")


def kubectl_access_problems(data: dict) -> list[tuple[str, str, str]]:
    """What access = "kubectl" rules out in the top level of cluster.toml, as (key, message, hint):
    the pods are the nodes and their addresses come from the platform."""
    problems = []
    if "kubectl" not in data:
        problems.append(("access", "access = \"kubectl\" needs a [kubectl] table saying which pods are the nodes",
                         '[kubectl] with namespace = "NS" and one of pods = [...], selector = "app=trial", '
                         'job = "NAME" or jobset = "NAME" (see `clustereval init`)'))
    if "nodes" in data:
        problems.append(("nodes", "with access = \"kubectl\" the nodes are the pods [kubectl] names",
                         "drop nodes; list the pods as [kubectl] pods = [...] or select them with [kubectl] selector"))
    if "hostfile" in data:
        problems.append(("hostfile", "with access = \"kubectl\" the addresses come from the platform",
                         "drop hostfile: name the hostfile inside the pods as [kubectl] hostfile = \"/path\", "
                         "or leave it out to use every pod's IP"))
    return problems


def kubectl_config_from_table(table: dict, base_dir: Path | None = None,
                              ) -> tuple[KubectlConfig, list[tuple[str, str, str]]]:
    """The ``[kubectl]`` table -> ``KubectlConfig`` plus every problem as (key, message, hint).

    ``kubeconfig`` is resolved against ``base_dir`` (cluster.toml's folder) and must exist."""
    import re

    problems: list[tuple[str, str, str]] = []
    values: dict = {}
    for key, value in _known_items(table, KubectlConfig, "kubectl", problems):
        if key in ("pods", "args"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append((key, f"[kubectl] {key} must be a list of strings",
                                 'e.g. pods = ["trial-0", "trial-1"]' if key == "pods" else
                                 'e.g. args = ["--as=alice"]'))
                continue
            if key == "pods":
                bad = [v for v in value if not re.fullmatch(_K8S_NAME, v)]
                if bad:
                    problems.append((key, f"[kubectl] pods: {bad[0]!r} is not a pod name",
                                     "pod names are lower-case letters, digits, '-' and '.'"))
                    continue
                twice = sorted({v for v in value if value.count(v) > 1})
                if twice:
                    problems.append((key, f"[kubectl] pods lists {twice[0]} twice", "list each pod once"))
                    continue
                if not value:
                    problems.append((key, "[kubectl] pods is empty", 'e.g. pods = ["trial-0", "trial-1"]'))
                    continue
            if key == "args" and any("\n" in v or not v.startswith("-") for v in value):
                problems.append((key, "[kubectl] args must be kubectl options (each starting with '-')",
                                 'e.g. args = ["--as=alice", "--insecure-skip-tls-verify"]'))
                continue
            value = tuple(value)
        elif key == "request_timeout_s":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append((key, f"[kubectl] request_timeout_s must be an integer >= 1, not {value!r}",
                                 "e.g. request_timeout_s = 20"))
                continue
        elif not isinstance(value, str) or not value.strip():
            problems.append((key, f"[kubectl] {key} must be a non-empty string, not {value!r}", ""))
            continue
        elif key in ("namespace", "job", "jobset") and not re.fullmatch(_K8S_NAME, value):
            problems.append((key, f"[kubectl] {key} {value!r} is not a Kubernetes name",
                             "lower-case letters, digits, '-' and '.', e.g. namespace = \"ml-trial\""))
            continue
        elif key == "selector" and not re.fullmatch(_SELECTOR, value.strip()):
            problems.append((key, f"[kubectl] selector {value!r} is not a label selector",
                             'key=value pairs joined by commas, e.g. selector = "app=trial,role=worker"'))
            continue
        elif key == "order_by" and value not in KUBECTL_ORDERS:
            problems.append((key, f"[kubectl] order_by {value!r} is not known",
                             f"choose one of: {', '.join(KUBECTL_ORDERS)}"))
            continue
        elif key == "hostfile" and (not value.startswith("/") or re.search(r"[\s'\"`$;|&<>()\\]", value)):
            problems.append((key, f"[kubectl] hostfile {value!r} must be an absolute path inside the first pod",
                             'e.g. hostfile = "/etc/mpi/hostfile"'))
            continue
        elif key in ("context", "container") and re.search(r"[\s'\"`$;|&<>()\\]", value):
            problems.append((key, f"[kubectl] {key} {value!r} contains characters a name cannot have", ""))
            continue
        values[key] = value
    given = [k for k in KUBECTL_POD_SOURCES if k in values]
    if len(given) > 1:
        problems.append((given[1], f"[kubectl] names the pods twice ({' and '.join(given)})",
                         "keep one of pods, selector, job or jobset"))
    elif not given and not any(p[0] in KUBECTL_POD_SOURCES for p in problems):
        problems.append(("", "[kubectl] does not say which pods are the nodes",
                         'set one of pods = ["trial-0", "trial-1"], selector = "app=trial", job = "NAME" or '
                         'jobset = "NAME"'))
    if "kubeconfig" in values:
        path = Path(values["kubeconfig"]).expanduser()
        path = path if path.is_absolute() or base_dir is None else base_dir / path
        if not path.is_file():
            problems.append(("kubeconfig", f"[kubectl] kubeconfig {values['kubeconfig']} does not exist",
                             "paths are relative to cluster.toml; leave it out to use $KUBECONFIG or ~/.kube/config"))
        values["kubeconfig"] = str(path)
    if "order_by" in values and "pods" in values:
        problems.append(("order_by", "[kubectl] order_by applies to selector, job or jobset, not to a pods list",
                         "the pods list is already in hostfile order"))
    return KubectlConfig(**values), problems


def load_config(path):  # noqa: ANN001, ANN201 - re-exported; see configload.load_config
    from clustereval.configload import load_config as _load

    return _load(path)
