"""`clustereval debug nccl`: uneven NCCL performance across nodes.

1. the pairwise hunt (all-reduce busbw for every node pair, the 5% rule; ``phases.pairwise``), or a
   pairwise record saved by an earlier run (``--pairs``);
2. the read-only snapshot on the nodes it names (every node in a slow pair, plus the fastest node
   as a healthy reference for the version comparison), or on every node (``--snapshot-all``);
3. one ranked list of suspect nodes with their evidence (the hunt's failing nodes first, as failing,
   with the launcher's error), the topology facts that can be read (Slurm switches / blocks and
   features, address subnets), and an evidence bundle per suspect.

Everything lands in one run folder (``reports/raw-<name>-debug-nccl-<stamp>/``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clustereval.analysis.nccl_debug import (
    failing_from_pairs,
    grouping_fact,
    rank_suspects,
    report_lines,
    subnet_groups,
)
from clustereval.config import Config
from clustereval.debug.evidence import write_node_bundle
from clustereval.debug.snapshot import DEFAULT_SAMPLE_S, collect
from clustereval.errors import TransportError, UsageError
from clustereval.phases.base import ProgressFn, RunContext
from clustereval.phases.scratch import scratch_for
from clustereval.probes.slurm_topology import parse_node_features, parse_topology
from clustereval.records import from_dict, to_dict
from clustereval.records.debug import NcclDebugRecord, TopologyFact
from clustereval.records.network import FailingNode, PairResult
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Node, Transport
from clustereval.transport.factory import make_transport, nodes_of, with_nodes

# (ctx, nodes) -> a pairwise record (the network phase's ``run_pairwise``) or its JSON-able dict
PairwiseHunt = Callable[[RunContext, list[Node]], Any]


def _default_hunt(ctx: RunContext, nodes: list[Node]) -> Any:
    from clustereval.phases.pairwise import run_pairwise

    return run_pairwise(ctx, nodes)


def load_pairs_file(path: Path) -> dict:
    """A pairwise record saved by `clustereval run` / `clustereval pairwise` (its JSON)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read a pairwise record ({exc})",
                         "pass the pairwise.record.json of a run folder") from exc
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise UsageError(f"{path}: no \"pairs\" list in it", "pass the pairwise.record.json of a run folder")
    return data


def pairs_from(data: dict) -> tuple[list[PairResult], float, float]:
    """(pairs, mean busbw, threshold %) from a pairwise record dict; slow flags recomputed with the
    5% rule when the record has none (a pair that did not complete is never slow)."""
    threshold = float(data.get("threshold_pct") or 5.0)
    pairs = [PairResult(a=str(p["a"]), b=str(p["b"]), round=int(p.get("round", 0)),
                        busbw_gb_s=float(p["busbw_gb_s"]) if p.get("busbw_gb_s") is not None else None,
                        slow=bool(p.get("slow", False)), error=str(p.get("error", "")),
                        samples_gb_s=[float(v) for v in p.get("samples_gb_s") or []])
             for p in data["pairs"]]
    done = [p.busbw_gb_s for p in pairs if p.busbw_gb_s is not None]
    mean = float(data.get("mean_busbw_gb_s") or (sum(done) / len(done) if done else 0.0))
    if not any("slow" in p for p in data["pairs"]):
        limit = mean * (1 - threshold / 100)
        for p in pairs:
            p.slow = p.busbw_gb_s is not None and p.busbw_gb_s < limit  # a failed pair is failed, not slow
    return pairs, mean, threshold


def _slurm_facts(transport: Transport, node: Node, names: dict[str, str], pairs: list[PairResult]
                 ) -> list[TopologyFact]:
    """Switch / block placement and node features from Slurm, read on ``node``."""
    facts: list[TopologyFact] = []
    try:
        topo = transport.run(node, ["scontrol", "show", "topology"], timeout_s=20)
        feats = transport.run(node, ["scontrol", "show", "node", "-o"], timeout_s=20)
    except TransportError as exc:
        return [TopologyFact(source="slurm", text=f"Slurm topology not read: {exc.message}")]
    if topo.rc == 127:
        return [TopologyFact(source="slurm", text="no Slurm topology: `scontrol` is not installed on "
                             f"{node.name}")]
    if not topo.ok:
        why = (topo.stderr.strip().splitlines() or [f"exit {topo.rc}"])[-1]
        return [TopologyFact(source="slurm", text=f"`scontrol show topology` failed on {node.name}: {why}")]
    placed = {names.get(k, k): v for k, v in parse_topology(topo.stdout).items()}
    fact = grouping_fact("scontrol show topology", placed, pairs, label="switch")
    if fact is not None:
        facts.append(fact)
    else:
        facts.append(TopologyFact(source="slurm", text="`scontrol show topology` lists no switch or block "
                                  "for the measured nodes (no topology plugin configured)"))
    if feats.ok:
        labels = {names.get(k, k): v for k, v in parse_node_features(feats.stdout).items()}
        fact = grouping_fact("node features", labels, pairs, label="feature set")
        if fact is not None:
            facts.append(fact)
    return facts


def debug_nccl(config: Config, *, pairs_file: Path | None = None, snapshot_all: bool = False,
               reports_dir: Path | None = None, sample_s: float = DEFAULT_SAMPLE_S,
               progress: ProgressFn | None = None, hunt: PairwiseHunt | None = None,
               transport: Transport | None = None, nodes: list[Node] | None = None) -> tuple[NcclDebugRecord, RunStore]:
    if transport is not None:
        return _debug_nccl(config, transport, nodes, pairs_file=pairs_file, snapshot_all=snapshot_all,
                           reports_dir=reports_dir, sample_s=sample_s, progress=progress, hunt=hunt)
    own = make_transport(config)
    try:  # closing gives back a Slurm allocation this command asked for
        return _debug_nccl(config, own, nodes, pairs_file=pairs_file, snapshot_all=snapshot_all,
                           reports_dir=reports_dir, sample_s=sample_s, progress=progress, hunt=hunt)
    finally:
        own.close()


def _debug_nccl(config: Config, transport: Transport, nodes: list[Node] | None, *, pairs_file: Path | None,
                snapshot_all: bool, reports_dir: Path | None, sample_s: float, progress: ProgressFn | None,
                hunt: PairwiseHunt | None) -> tuple[NcclDebugRecord, RunStore]:
    nodes = list(nodes if nodes is not None else nodes_of(config, transport))
    config = with_nodes(config, nodes, transport)  # Slurm: the allocation's nodes and addresses
    if len(nodes) < 2 and pairs_file is None:
        raise UsageError("the uneven-NCCL workflow needs at least 2 nodes in the cluster config",
                         "list every node in cluster.toml, or pass a saved pairwise record with --pairs")
    store = RunStore.create(Path(reports_dir or config.reports_dir), f"{config.name}-debug-nccl")
    store.save_state(RunState(name=f"{config.name}-debug-nccl", stamp=utc_stamp(), profile="quick",
                              phases_planned=["pairwise", "snapshot"], started_utc=utc_now_iso(),
                              config_path=str(Path(config.source).resolve()) if config.source else ""))
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store)
    if progress is not None:
        ctx.progress = progress
    rec = NcclDebugRecord(phase="debug-nccl", started_utc=utc_now_iso())
    try:

        # 1. the pairwise hunt
        if pairs_file is not None:
            data = load_pairs_file(pairs_file)
        else:
            ctx.progress("debug nccl", nodes[0].name, f"pairwise hunt over {len(nodes)} nodes", None)
            result = (hunt or _default_hunt)(ctx, nodes)
            data = result if isinstance(result, dict) else to_dict(result)
            store.save_record("pairwise", result)
        rec.pairs, rec.mean_busbw_gb_s, rec.threshold_pct = pairs_from(data)
        rec.backend = str(data.get("backend", ""))
        rec.ranks_per_node = int(data.get("ranks_per_node") or 0)
        rec.payload_bytes = int(data.get("payload_bytes") or 0)
        stragglers = [str(s) for s in data.get("stragglers", [])]
        rec.stragglers = stragglers
        rec.failing = failing_of(data, rec.pairs)
        rec.healthy_floor_gb_s = float(data.get("healthy_floor_gb_s") or 0.0)
        rec.limit_gb_s = float(data.get("limit_gb_s") or 0.0)
        rec.why_not_judged = str(data.get("why_not_judged") or "")
        for g in data.get("gaps", []) or []:
            if isinstance(g, dict) and (g.get("text") or g.get("kind")):  # worded (an older record's) or its facts
                rec.gaps.append(_gap(g))

        # 2. the snapshot on the nodes the hunt names, and a healthy reference
        by_name = {n.name: n for n in nodes}
        lost = [f.node for f in rec.failing]
        named = list(dict.fromkeys(lost + stragglers + [n for p in rec.pairs if p.slow for n in (p.a, p.b)]))
        measured = {n for p in rec.pairs for n in (p.a, p.b)}
        means = {n: _mean([p.busbw_gb_s for p in rec.pairs if n in (p.a, p.b)]) for n in measured}
        healthy = sorted((n for n in measured if n not in named), key=lambda n: -means[n])
        wanted = nodes if snapshot_all else [by_name[n] for n in named + healthy[:1] if n in by_name]
        if wanted:
            ctx.progress("debug nccl", wanted[0].name, f"snapshot of {len(wanted)} node(s)", None)
            rec.snapshot = collect(config, transport, wanted, sample_s=sample_s)
            store.save_record("snapshot", rec.snapshot)
    finally:
        # the hunt shipped the package and ran torchrun under the run's scratch: it goes to trash now
        scratch = scratch_for(ctx)
        rec.scratch = scratch.cleanup(nodes) if scratch.areas() else []
    snaps = {s.node: s for s in (rec.snapshot.nodes if rec.snapshot else [])}
    concerns = {n: s.concerns for n, s in snaps.items() if s.concerns}

    # 3. rank, topology, evidence
    rec.suspects = rank_suspects(rec.pairs, stragglers, concerns, rec.failing)
    hostnames = {s.hostname: s.node for s in snaps.values() if s.hostname}
    names = {**hostnames, **{n.name.split(".")[0]: n.name for n in nodes}, **{n.name: n.name for n in nodes}}
    # Slurm's topology only where Slurm runs the nodes: over SSH, scontrol would only print its own error
    rec.topology = _slurm_facts(transport, nodes[0], names, rec.pairs) if config.access == "slurm" else []
    addresses = {n: s.readings.addresses for n, s in snaps.items() if s.readings is not None}
    fact = grouping_fact("address subnet", subnet_groups(addresses), rec.pairs, label="subnet")
    if fact is not None:
        rec.topology.append(fact)
    evidence_root = store.raw_dir / "evidence"
    for s in rec.suspects:
        snap = snaps.get(s.node)
        if snap is None or not snap.reachable:
            continue
        pairs = [to_dict(p) for p in rec.pairs if s.node in (p.a, p.b)]
        verdict = [f"rank {s.rank}: {s.why}", f"mean busbw of all pairs {rec.mean_busbw_gb_s:.2f} GB/s"]
        verdict += [f"slow pair {p.a} + {p.b}: " + (f"{p.busbw_gb_s:.2f} GB/s" if p.busbw_gb_s is not None
                                                    else "did not complete") for p in s.slow_pairs]
        verdict += [f"pair {p.a} + {p.b}: did not complete ({p.error or 'no result'})" for p in s.failed_pairs]
        archive = write_node_bundle(evidence_root, snap, verdict=verdict,
                                    extra={"pairs.json": json.dumps({"mean_busbw_gb_s": rec.mean_busbw_gb_s,
                                                                     "threshold_pct": rec.threshold_pct,
                                                                     "pairs": pairs}, indent=2)},
                                    drift=rec.snapshot.drift if rec.snapshot else None)
        s.evidence = str(archive)
    rec.evidence_dir = str(evidence_root) if evidence_root.exists() else ""
    rec.finished_utc = utc_now_iso()
    store.save_record("debug-nccl", rec)
    store.write_raw("debug-nccl.txt", "\n".join(report_lines(rec)) + "\n")
    return rec, store


def failing_of(data: dict, pairs: list[PairResult]) -> list[FailingNode]:
    """The failing nodes a pairwise record lists; a record without the list (an older one, or a pairs
    file written by hand) has them found again from its pairs by the hunt's rule."""
    if isinstance(data.get("failing"), list):
        return [from_dict(FailingNode, f) for f in data["failing"] if isinstance(f, dict) and f.get("node")]
    return failing_from_pairs(pairs)


def _mean(values: list[float | None]) -> float:
    done = [v for v in values if v is not None]
    return sum(done) / len(done) if done else 0.0


def _gap(g: dict):  # noqa: ANN202
    """A saved record's Gap: its kind and facts (worded when the report is built), or an older run's words."""
    from clustereval.records import Gap, from_dict

    kept = {k: v for k, v in g.items() if v is not None and (k != "facts" or isinstance(v, dict))}
    return from_dict(Gap, {"phase": "pairwise", **kept})
