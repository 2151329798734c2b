"""Drift across nodes: which nodes have which value of each item (``nodes_by_value``, shared by
the environment's drift lines), and the snapshot's version drift, one CONCERN per item whose value
differs. Pure.

Host-scope values: a node whose job runs in a container may carry its own CUDA / NCCL / EFA stack
there, so "not found" on the host is a difference worth knowing, not by itself a defect.
"""

from __future__ import annotations

from clustereval.analysis.snapshot_rules import POINT_VERSIONS
from clustereval.records.snapshot import Signal

NOT_FOUND = "not found"
CLUSTER = "cluster"


def _nodes_text(nodes: list[str], limit: int = 8) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def nodes_by_value(per_node: list[tuple[str, dict[str, str]]],
                   missing: str = NOT_FOUND) -> dict[str, dict[str, list[str]]]:
    """``per_node``: (node name, {item: value or ""}) in node order -> item -> value -> the nodes
    with that value, items and values in the order first seen; ``missing`` stands for "" and
    for an item a node does not have."""
    out: dict[str, dict[str, list[str]]] = {}
    for _, values in per_node:
        for item in values:
            out.setdefault(item, {})
    for item, by_value in out.items():
        for node, values in per_node:
            by_value.setdefault(values.get(item, "") or missing, []).append(node)
    return out


def version_drift(per_node: list[tuple[str, dict[str, str]]]) -> list[Signal]:
    """``per_node``: (node name, {item: version or ""}) in node order."""
    if len(per_node) < 2:
        return []
    signals: list[Signal] = []
    agree: list[str] = []
    for item, by_value in nodes_by_value(per_node).items():
        if list(by_value) == [NOT_FOUND]:
            continue
        if len(by_value) == 1:
            agree.append(item)
            continue
        # the most common value first, then in node order (a stable sort of the first-seen order),
        # "not found" last
        order = sorted(by_value.items(), key=lambda kv: (kv[0] == NOT_FOUND, -len(kv[1])))
        text = f"{item} differs across nodes: " + "; ".join(
            f"{value} on {_nodes_text(nodes)}" for value, nodes in order)
        signals.append(Signal(node=CLUSTER, key="versions.drift", level="CONCERN", text=text,
                              subject=item, threshold="any difference between nodes", pointer=POINT_VERSIONS))
    if agree:
        signals.append(Signal(node=CLUSTER, key="versions.drift", level="OK",
                              text=f"the same on all {len(per_node)} nodes: " + ", ".join(agree)))
    return signals
