"""Helpers every GPU phase shares: the GPU name form Findings use, and the Gap for "no GPU here".

``gpu_label``: ``blah-176(node0):gpu7`` — the hostname the Environment Host table shows, the node's
0-based position in the hostfile, the index nvidia-smi prints.

``no_gpu_gap``: a GPU phase asks it first; on a cluster where no node showed a GPU it returns the
Gap (kind ``gpu.not-visible`` and its facts; ``report.gaps`` words it) the phase puts in its record
instead of running.
"""

from __future__ import annotations

from typing import Any

from clustereval.records import Gap


def gpu_label(hostname: str, node_index: int, gpu_index: int) -> str:
    return f"{hostname}(node{node_index}):gpu{gpu_index}"


def node_gpu_label(node: Any, gpu_index: int) -> str:
    """``gpu_label`` for a ``NodeEnvironment`` (its hostname, falling back to the configured name)."""
    return gpu_label(node.hostname or node.node, node.index, gpu_index)


def gpu_nodes(env: Any) -> list[Any]:
    """The ``NodeEnvironment`` entries that showed at least one GPU (empty without an environment record)."""
    return [n for n in getattr(env, "nodes", []) or [] if getattr(n, "has_gpu", False)]


def no_gpu_gap(phase: str, env: Any, what: str) -> Gap | None:
    """The Gap for a GPU phase on a cluster without visible GPUs; None when some node has one.

    ``what`` names the pass in the report's words, e.g. "the GPU performance benchmarks".
    With no environment record (the phase did not run) nothing is known, so no Gap either.
    """
    if env is None or gpu_nodes(env):
        return None
    nodes = getattr(env, "nodes", []) or []
    return Gap(phase=phase, kind="gpu.not-visible",
               facts={"what": what, "nodes": [[n.hostname or n.node, getattr(n, "gpu_visibility", "") or ""]
                                              for n in nodes]})


HOT_DELTA_C = 15.0  # a loaded GPU this much hotter than its coolest sibling is flagged
LOW_POWER_FRAC = 0.90  # ... or drawing less than this fraction of its top sibling's power


def loaded_outliers(temps_c: dict[int, float | None], powers_w: dict[int, float | None]
                    ) -> tuple[list[int], list[int]]:
    """(GPUs >= ``HOT_DELTA_C`` hotter than the coolest, GPUs below ``LOW_POWER_FRAC`` of the top
    power), from each GPU's reading while every GPU of the node computed. Needs two readings."""
    temps = {g: t for g, t in temps_c.items() if t is not None}
    powers = {g: p for g, p in powers_w.items() if p is not None}
    hot = sorted(g for g, t in temps.items() if len(temps) > 1 and t - min(temps.values()) >= HOT_DELTA_C)
    top = max(powers.values()) if powers else 0.0
    low = sorted(g for g, p in powers.items() if len(powers) > 1 and p < LOW_POWER_FRAC * top)
    return hot, low
