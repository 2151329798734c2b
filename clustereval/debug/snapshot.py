"""Collect the read-only host snapshot on one node or every node in parallel.

One transport call per node runs the constant collection script (probes/snapshot_script.py);
nothing is shipped to the node and nothing is written there. The output is parsed into
``NodeReadings`` and judged by ``analysis.snapshot``; versions are compared across nodes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from clustereval.analysis.drift import version_drift
from clustereval.analysis.snapshot import evaluate as evaluate_node
from clustereval.analysis.snapshot import format_signal
from clustereval.config import Config
from clustereval.errors import TransportError, UsageError
from clustereval.phases.base import configured_python
from clustereval.probes.snapshot_script import build_argv, parse_output, split_sections
from clustereval.records import to_dict
from clustereval.records.snapshot import NodeSnapshot, Signal, SnapshotRecord
from clustereval.store import utc_now_iso
from clustereval.transport.base import Node, Transport, run_parallel

DEFAULT_SAMPLE_S = 3.0
NODE_TIMEOUT_S = 120.0
POINT_UNREACHABLE = "connectivity: `clustereval preflight` checks how every node is reached"


def select_nodes(nodes: list[Node], name: str | None, every: bool) -> list[Node]:
    """``--all``: every node; ``--node NAME``: that one (name, address, hostname or ``node<N>``);
    neither: the first node, as the seed's snapshot samples one node by default."""
    if every and name:
        raise UsageError("--node and --all exclude each other", "pass one of them")
    if every:
        return list(nodes)
    if name is None:
        return nodes[:1]
    for n in nodes:
        if name in (n.name, n.address, f"node{n.index}") or n.name.split(".")[0] == name:
            return [n]
    raise UsageError(f"no node named {name!r} in the cluster config",
                     "choose from: " + ", ".join(f"{n.name} (node{n.index})" for n in nodes))


def snapshot_node(transport: Transport, node: Node, *, python: str = "python3",
                  shared_paths: tuple[str, ...] = (), sample_s: float = DEFAULT_SAMPLE_S,
                  timeout_s: float = NODE_TIMEOUT_S) -> NodeSnapshot:
    """One node's snapshot; an unreachable node gives a CONCERN line, never an exception."""
    t0 = time.monotonic()
    argv = build_argv(python=python, shared_paths=shared_paths, sample_s=sample_s)
    try:
        result = transport.run(node, argv, timeout_s=timeout_s)
    except TransportError as exc:
        return _unreachable(node, exc.message, time.monotonic() - t0)
    if result.timed_out or (result.rc != 0 and "@@ce " not in result.stdout):
        why = (f"the snapshot did not finish within {timeout_s:.0f} s" if result.timed_out
               else f"the snapshot could not start (exit {result.rc}: {result.stderr.strip()[-200:]})")
        return _unreachable(node, why, time.monotonic() - t0)
    readings = parse_output(node.name, result.stdout, sample_s=sample_s, shared_requested=shared_paths)
    raw = {name: sec.text for name, sec in split_sections(result.stdout).items()}
    return NodeSnapshot(node=node.name, index=node.index, hostname=readings.hostname,
                        seconds=round(time.monotonic() - t0, 2), signals=evaluate_node(readings),
                        versions=readings.versions, readings=readings, raw=raw)


def _unreachable(node: Node, why: str, seconds: float) -> NodeSnapshot:
    sig = Signal(node=node.name, key="node.reachable", level="CONCERN", text=f"not snapshotted: {why}",
                 threshold="the node must answer", pointer=POINT_UNREACHABLE)
    return NodeSnapshot(node=node.name, index=node.index, reachable=False, error=why,
                        seconds=round(seconds, 2), signals=[sig])


def collect(config: Config, transport: Transport, nodes: list[Node], *,
            sample_s: float = DEFAULT_SAMPLE_S,
            on_node: Callable[[NodeSnapshot], None] | None = None) -> SnapshotRecord:
    """Snapshot ``nodes`` in parallel (bounded by the transport's fan-out) and compare versions."""
    started = utc_now_iso()
    t0 = time.monotonic()
    python = configured_python(config)

    def one(node: Node) -> NodeSnapshot:
        snap = snapshot_node(transport, node, python=python, shared_paths=tuple(config.shared_paths),
                             sample_s=sample_s)
        if on_node is not None:
            on_node(snap)
        return snap

    record = SnapshotRecord(phase="snapshot", started_utc=started)
    record.nodes = run_parallel(nodes, one, transport.fanout)
    reached = [n for n in record.nodes if n.reachable]
    record.drift = version_drift([(n.node, n.versions) for n in reached])
    record.finished_utc = utc_now_iso()
    record.seconds = round(time.monotonic() - t0, 2)
    if len(reached) < len(record.nodes):
        record.status = "partial" if reached else "failed"
    return record


def snapshot_lines(record: SnapshotRecord) -> list[str]:
    """The tagged lines, node by node, then the cross-node version comparison."""
    lines: list[str] = []
    for snap in record.nodes:
        lines += [format_signal(s) for s in snap.signals]
    lines += [format_signal(s) for s in record.drift]
    return lines


def snapshot_json(record: SnapshotRecord) -> str:
    """The same content as the lines, as JSON (raw tool output left out: it goes in evidence)."""
    def sig(s: Signal) -> dict:
        d = to_dict(s)
        d["line"] = format_signal(s)
        return d

    data = {
        "started_utc": record.started_utc,
        "seconds": record.seconds,
        "nodes": [{"node": n.node, "index": n.index, "hostname": n.hostname, "reachable": n.reachable,
                   "error": n.error, "seconds": n.seconds, "signals": [sig(s) for s in n.signals],
                   "versions": n.versions} for n in record.nodes],
        "drift": [sig(s) for s in record.drift],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


def summary(record: SnapshotRecord) -> str:
    parts = []
    for n in record.nodes:
        c = len(n.concerns)
        parts.append(f"{n.node}: " + ("unreachable" if not n.reachable else
                                      f"{c} CONCERN{'s' if c != 1 else ''}"))
    drift = sum(1 for s in record.drift if s.concern)
    if len(record.nodes) > 1:
        parts.append(f"version drift: {drift} item{'s' if drift != 1 else ''}")
    return "; ".join(parts)
