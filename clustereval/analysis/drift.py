"""Version drift across nodes: one CONCERN per item whose value differs, naming which nodes have
which value. Pure.

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


def version_drift(per_node: list[tuple[str, dict[str, str]]]) -> list[Signal]:
    """``per_node``: (node name, {item: version or ""}) in node order."""
    if len(per_node) < 2:
        return []
    items: list[str] = []
    for _, versions in per_node:
        items += [k for k in versions if k not in items]
    signals: list[Signal] = []
    agree: list[str] = []
    for item in items:
        by_value: dict[str, list[str]] = {}
        for node, versions in per_node:
            by_value.setdefault(versions.get(item, "") or NOT_FOUND, []).append(node)
        if list(by_value) == [NOT_FOUND]:
            continue
        if len(by_value) == 1:
            agree.append(item)
            continue
        # the most common value first, then in node order, "not found" last
        first = {value: i for i, value in reversed(list(enumerate(
            versions.get(item, "") or NOT_FOUND for _, versions in per_node)))}
        order = sorted(by_value.items(), key=lambda kv: (kv[0] == NOT_FOUND, -len(kv[1]), first[kv[0]]))
        text = f"{item} differs across nodes: " + "; ".join(
            f"{value} on {_nodes_text(nodes)}" for value, nodes in order)
        signals.append(Signal(node=CLUSTER, key="versions.drift", level="CONCERN", text=text,
                              subject=item, threshold="any difference between nodes", pointer=POINT_VERSIONS))
    if agree:
        signals.append(Signal(node=CLUSTER, key="versions.drift", level="OK",
                              text=f"the same on all {len(per_node)} nodes: " + ", ".join(agree)))
    return signals
