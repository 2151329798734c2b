"""Wordings of the GPU memory and links pass's Gaps (phases/gpupass.py)."""

from __future__ import annotations

from clustereval.probes.nvbandwidth import URL as NVBANDWIDTH_URL
from clustereval.records import Gap
from clustereval.report.gaps._registry import wording
from clustereval.report.gaps.common import raw_output, status_words
from clustereval.report.gaps.compute import BUSY_PLAN, WORKER_LOG_PLAN, busy_text

WHAT = "The GPU memory and links pass"


@wording("gpupass.busy")
def _busy(g: Gap) -> tuple[str, str]:
    return busy_text(g.node, g.facts["processes"], WHAT), BUSY_PLAN


@wording("gpupass.worker-failed")
def _worker_failed(g: Gap) -> tuple[str, str]:
    return (f"{WHAT} on {g.node} gave no complete result: its worker stopped with "
            f"{raw_output(str(g.facts.get('error', '')), 'no output')}, so the GPUs it had not reached are not judged.",
            WORKER_LOG_PLAN)


@wording("gpupass.gpu-error")
def _gpu_error(g: Gap) -> tuple[str, str]:
    # the Gap names no node (one GPU's step); the node is a fact
    return (f"gpu{g.facts['gpu']} of {g.facts['node']} failed the `{g.facts['step']}` step of the GPU memory and "
            f"links pass with {raw_output(str(g.facts.get('error', '')), 'no message')}.",
            "read the worker log in the raw folder; if the GPU fails again, drain it and ask the provider to check it")


@wording("gpupass.nvbandwidth-failed")
def _nvbandwidth_failed(g: Gap) -> tuple[str, str]:
    return (f"[nvbandwidth]({NVBANDWIDTH_URL}) is installed on {g.node} but its run ended with "
            f"{status_words(g.facts.get('rc'))} and {raw_output(str(g.facts.get('error', '')), 'no output')}, so "
            "its figures are not beside ours.",
            "run `nvbandwidth -j` on the node by hand to see why, or accept as-is: the pass's own figures stand")
