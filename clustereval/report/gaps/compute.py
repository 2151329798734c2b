"""Wordings of the compute phases' Gaps: hardware health, the matmul search, lemon GEMM, no GPU visible."""

from __future__ import annotations

from clustereval.probes.dcgmi import DIAG_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import LEMON, MSMF, NO_GPU_PLAN, link_tools, no_gpu_reason, raw_output

RERUN_PLAN = "run `clustereval run --resume RUN_DIR`"


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
    return (f"{g.node} has no NVIDIA driver installed, so the hardware health check did not run there.",
            NO_GPU_PLAN)


@wording("health.dcgm-missing")
def _dcgm_missing(g: Gap) -> tuple[str, str]:
    text = (f"DCGM (Data Center GPU Manager, [`dcgmi`]({DIAG_URL})) is not installed on {g.node}, so the hardware "
            "health check did not run there.")
    num = int(g.facts.get("num_gpupass_nodes") or 0)  # set on one Gap only, where the GPU pass stood in
    if num:
        where = "there" if num == 1 else f"there and on the {num - 1} other node{'s' if num > 2 else ''} without DCGM"
        text += (f" The GPU memory and links pass ran {where}: its memory pattern test, PCIe checks and correctness "
                 f"vote are this run's GPU health evidence {'there' if num == 1 else 'on those nodes'}.")
    return text, dcgm_install_plan(g.facts.get("os", ""), g.facts.get("cuda", ""))


@wording("health.hostengine-unreachable")
def _hostengine(g: Gap) -> tuple[str, str]:
    return (f"The DCGM (Data Center GPU Manager) host engine nv-hostengine could not be reached on {g.node} "
            f"({raw_output(g.facts.get('output', ''), 'no output')}), so the hardware health check did not run there.",
            f"run the eval as root (or with CAP_SYS_ADMIN) so `nv-hostengine` can start, or start it on the node, "
            f"then {RERUN_PLAN}")


@wording("health.diag-incomplete")
def _diag(g: Gap) -> tuple[str, str]:
    f = g.facts
    why = (f"timed out after {f['timeout_min']:g} min" if f.get("timeout_min")
           else raw_output(f.get("output", ""), "no output"))
    return (f"[`dcgmi diag -r {f['level']}`]({DIAG_URL}) did not complete on {g.node} ({why}).",
            f"read the log in the raw folder, fix what it names (privileges, other clients of the GPU diagnostics), and {RERUN_PLAN}")


@wording("matmul.node-without-gpu")
def _node_without_gpu(g: Gap) -> tuple[str, str]:
    return (f"{g.node} has no GPU ({no_gpu_reason(g.facts['error'])}), so the matmul pass has no figures from it.",
            NO_GPU_PLAN)


# -- the matmul pass and lemon GEMM (phases/matmul.py, phases/lemon.py) ----------------------

BUSY_PLAN = ("find out whose processes these are and, once the GPUs are free, run the pass again "
             "(`clustereval run --resume RUN_DIR`)")
WORKER_LOG_PLAN = ("read the worker log in the raw folder, fix the cause and run "
                   "`clustereval run --resume RUN_DIR`")


def busy_text(node: str, found: list[str], what: str) -> str:
    return (f"{what} on {node} was stopped: foreign compute processes were on its GPUs "
            f"({'; '.join(found)}), so its numbers would not be this hardware's alone.")


def load_not_started(f: dict) -> str:
    """Why a sibling load did not run (``LoadSet.ensure``'s facts)."""
    return f"the continuous matmul on gpu{f['load_gpu']} did not start ({raw_output(f['load_error'], 'no output')})"


@wording("matmul.interrupted")
def _matmul_interrupted(g: Gap) -> tuple[str, str]:
    return f"The GPU performance pass on {g.node} was interrupted.", "resume with `clustereval run --resume RUN_DIR`"


@wording("matmul.busy")
def _matmul_busy(g: Gap) -> tuple[str, str]:
    gpu = g.facts.get("gpu")
    what = "The GPU performance pass" if gpu is None else f"The {MSMF} measurement of gpu{gpu}"
    return busy_text(g.node, g.facts["processes"], what), BUSY_PLAN


@wording("matmul.load-failed")
def _matmul_load_failed(g: Gap) -> tuple[str, str]:
    return (f"The GPU performance pass on {g.node} stopped before gpu{g.facts['gpu']}'s measurement: "
            f"{load_not_started(g.facts)}.",
            "read the load logs in the raw folder, fix the cause and run `clustereval run --resume RUN_DIR`")


@wording("matmul.search-not-started")
def _search_not_started(g: Gap) -> tuple[str, str]:
    return f"The search on gpu{g.facts['gpu']} could not start: {load_not_started(g.facts)}.", WORKER_LOG_PLAN


@wording("matmul.search-failed")
def _search_failed(g: Gap) -> tuple[str, str]:
    why = "no output past the time limit" if g.facts.get("timed_out") else raw_output(g.facts["error"], "no output")
    return f"The matmul search on gpu{g.facts['gpu']} of {g.node} failed ({why}).", WORKER_LOG_PLAN


@wording("matmul.no-msmf-shape")
def _no_msmf_shape(g: Gap) -> tuple[str, str]:
    f = g.facts
    pinned = [f"{m}×{n}×{k} ({why or 'not held'})" for m, n, k, why in f.get("pinned", [])]  # analysis' own words
    suspects = f" ({'; '.join(pinned)})" if pinned else " (none was large enough to reach it)"
    rest = " to time the other GPUs at" if f.get("siblings") else ""
    return (f"No matmul shape held gpu{f['gpu']} of {g.node} at its power limit when pinned{suspects}, "
            f"so there is no {MSMF} shape{rest}.",
            link_tools("check the power limit and cooling (the power and performance pages of `nvidia-smi -q` on the "
                       "node), then run `clustereval run --resume RUN_DIR`"))


@wording("matmul.wrong-python")
def _wrong_python(g: Gap) -> tuple[str, str]:
    return (f"The matmul worker did not run on the eval Python ({g.facts['why']}).",
            "check the launcher's PATH and run `clustereval run --resume RUN_DIR`")


@wording("matmul.idle-siblings-twice")
def _idle_twice(g: Gap) -> tuple[str, str]:
    idle = ", ".join(f"gpu{i}" for i in g.facts["idle"])
    return (f"The worker saw idle siblings twice while measuring `{g.facts['label']}` ({idle} stopped computing), "
            f"so its {MSMF} reads high.",
            "check what stopped the siblings' matmul in the load logs in the raw folder, then run "
            "`clustereval run --resume RUN_DIR`")


@wording("matmul.gpu-failed-twice")
def _gpu_failed_twice(g: Gap) -> tuple[str, str]:
    return (f"The {MSMF} measurement of gpu{g.facts['gpu']} on {g.node} failed twice "
            f"({raw_output(g.facts['error'], 'no output')}).",
            "read the worker log in the raw folder; drain the GPU if the error is a hardware fault")


@wording("lemon.busy")
def _lemon_busy(g: Gap) -> tuple[str, str]:
    return busy_text(g.node, g.facts["processes"], f"The {LEMON} pass"), BUSY_PLAN


@wording("lemon.gpu-dead")
def _lemon_gpu_dead(g: Gap) -> tuple[str, str]:
    # the Gap names no node (phases/lemon.py); the node is a fact
    return (f"gpu{g.facts['gpu']} of {g.facts['node']} gave no {LEMON} result "
            f"({raw_output(g.facts['error'], 'no output')}).",
            "drain the GPU and ask the provider to replace it, or run `clustereval run --resume RUN_DIR` to confirm it")


# -- a GPU phase on a cluster whose environment record shows no GPU (analysis/gpus.py) ---------

@wording("gpu.not-visible")
def _gpu_not_visible(g: Gap) -> tuple[str, str]:
    what, nodes = g.facts["what"], g.facts.get("nodes", [])
    reasons = sorted({visibility or "the NVIDIA driver listed no GPU" for _, visibility in nodes})
    names = ", ".join(f"`{name}`" for name, _ in nodes) or "the nodes"
    return (f"{what[:1].upper() + what[1:]} did not run: no NVIDIA GPU was visible on {names} "
            f"({'; '.join(reasons)}).",
            link_tools("run clustereval on the GPU nodes, or make the GPUs visible where it ran (the NVIDIA driver "
                       "loaded, `nvidia-smi` on PATH, the `/dev/nvidia*` devices passed into the container); or accept "
                       "as-is for a CPU-only evaluation"))
