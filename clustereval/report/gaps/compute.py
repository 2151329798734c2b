"""Wordings of the compute phases' Gaps: hardware health, the matmul search, lemon GEMM."""

from __future__ import annotations

from clustereval.probes.dcgmi import DIAG_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import NO_GPU_PLAN

RERUN_PLAN = "re-run with `clustereval run --resume RUN_DIR`"


def dcgm_install_plan(os_line: str, cuda: str) -> str:
    """The package and commands for this OS; the CUDA major comes from the driver."""
    pkg = f"datacenter-gpu-manager-4-cuda{cuda or '<CUDA major from nvidia-smi>'}"
    ident = os_line.lower()
    if any(d in ident for d in ("ubuntu", "debian")):
        how = f"add NVIDIA's CUDA repository (the `cuda-keyring` package), then `sudo apt-get install -y {pkg}`"
    elif any(d in ident for d in ("rhel", "rocky", "centos", "fedora", "almalinux", "amzn")):
        how = f"add NVIDIA's CUDA repository, then `sudo dnf install -y {pkg}`"
    else:
        how = (f"add NVIDIA's CUDA repository, then install `{pkg}` (`apt-get` on Debian/Ubuntu, "
               "`dnf` on RHEL/Rocky)")
    return f"{how}; then {RERUN_PLAN} (or accept the gap)"


@wording("health.cpu-stand-ins")
def _cpu(g: Gap) -> tuple[str, str]:
    return "The GPUs were CPU stand-ins, so the hardware health check did not run.", NO_GPU_PLAN


@wording("health.no-driver")
def _no_driver(g: Gap) -> tuple[str, str]:
    return (f"{g.node} has no NVIDIA driver (nvidia-smi is not installed), so the hardware health check did not "
            "run there.", NO_GPU_PLAN)


@wording("health.dcgm-missing")
def _dcgm_missing(g: Gap) -> tuple[str, str]:
    return (f"DCGM (Data Center GPU Manager, [`dcgmi`]({DIAG_URL})) is not installed on {g.node}, so the hardware "
            "health check did not run there.", dcgm_install_plan(g.facts.get("os", ""), g.facts.get("cuda", "")))


@wording("health.hostengine-unreachable")
def _hostengine(g: Gap) -> tuple[str, str]:
    return (f"The DCGM (Data Center GPU Manager) host engine nv-hostengine could not be reached on {g.node} "
            f"({g.facts['why']}), so the hardware health check did not run there.",
            f"run the eval as root (or with CAP_SYS_ADMIN) so `nv-hostengine` can start, or start it on the node, "
            f"then {RERUN_PLAN}")


@wording("health.diag-incomplete")
def _diag(g: Gap) -> tuple[str, str]:
    return (f"[`dcgmi diag -r {g.facts['level']}`]({DIAG_URL}) did not complete on {g.node} ({g.facts['why']}).",
            f"read the log in the raw folder, fix what it names (privileges, other DCGM clients), and {RERUN_PLAN}")


@wording("matmul.node-without-gpu")
def _node_without_gpu(g: Gap) -> tuple[str, str]:
    return f"{g.node} has no GPU ({g.facts['error']}), so it has no MSMF.", NO_GPU_PLAN
