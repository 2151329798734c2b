"""The Compute section at fleet size (``report/fold.py``): above ``FOLD_NODES`` nodes the per-GPU and per-node
tables of the hardware health, GPU performance and lemon passes list only the GPUs and nodes a reader
must act on, with the fleet's figures per peer group and where every row is. Pure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from clustereval.analysis.gpu_passes import BELOW_MEDIAN, gpu_label, node_label
from clustereval.analysis.steady import UNSTEADY
from clustereval.records.compute import HealthRecord, LemonRecord, MatmulRecord, NodeMatmul
from clustereval.report.fold import (
    FleetFacts,
    Measure,
    Unit,
    fleet_facts,
    left_out_sentence,
    run_files,
    summary_sentences,
)
from clustereval.report.markdown import Document

MSMF_CRITERIA = (f"more than {BELOW_MEDIAN:.0%} below its node's median in the first pass, named slow against its "
                 "peers by the fleet-relative verdict, running hot or at low power beside its siblings, or still "
                 "moving when read")
LEMON_CRITERIA = (f"a GPU more than {BELOW_MEDIAN:.0%} below its node's median, dead, without a figure, or named slow "
                  "against its peers by the fleet-relative verdict")
HEALTH_CRITERIA = "a plugin result that differs from the fleet's common one, or an error"


def _tf(v: float) -> str:
    return f"{v:.0f}"


def _tf1(v: float) -> str:
    return f"{v:.1f}"


class ComputeFold:
    """What the folded Compute tables need: the run folder and the fleet-relative verdicts."""

    def __init__(self, view: Any) -> None:
        self.raw_rel: str = view.raw_rel
        self.facts: FleetFacts = fleet_facts(view)

    # -- GPU performance benchmarks --------------------------------------------------------------

    def msmf_listed(self, n: NodeMatmul, gpu: int) -> bool:
        label = gpu_label(n.hostname or n.node, n.index, gpu)
        g = next((x for x in n.gpus if x.gpu == gpu), None)
        unsteady = bool(g and any(t is not None and t.label == UNSTEADY for t in g.timings))
        return (gpu in n.flagged or gpu in n.underperforming or gpu in n.hot_gpus or gpu in n.low_power_gpus
                or unsteady or self.facts.named("msmf", label))

    def msmf_group(self, n: NodeMatmul, gpu: int) -> str:
        return self.facts.group_of("msmf", gpu_label(n.hostname or n.node, n.index, gpu)) or n.gpu_name

    def msmf_text(self, units: list[Unit], num_listed: int, records: str = "matmul") -> str:
        """The paragraph before the folded MSMF table: the fleet's figures per peer group, then the rule."""
        measures = [Measure("MSMF", "TFLOPS", _tf)]
        return " ".join(summary_sentences(units, measures, "GPU")
                        + [left_out_sentence(num_listed, len(units), "GPU", MSMF_CRITERIA,
                                             run_files(self.raw_rel, records))])

    def windows_text(self, units: list[Unit]) -> str:
        measures = [Measure("highest temperature", "°C", lambda v: f"{v:.0f}"),
                    Measure("window drift", "%", lambda v: f"{v:+.2f}")]
        return " ".join(summary_sentences(units, measures, "GPU"))

    # -- Find underperforming GPUs ------------------------------------------------------------

    def lemon_listed(self, n: Any) -> bool:
        for g in n.gpus:
            label = gpu_label(n.hostname or n.node, n.index, g.gpu)
            if (g.error or not g.tflops or g.tflops[0] is None or g.gpu in n.flagged or g.gpu in n.dead
                    or g.gpu in n.underperforming or self.facts.named("lemon", label)):
                return True
        return False

    def lemon_text(self, lemon: LemonRecord, listed: int) -> str:
        units = []
        for n in lemon.nodes:
            labels = [gpu_label(n.hostname or n.node, n.index, g.gpu) for g in n.gpus]
            # a dead GPU is not judged, so its peer group is its siblings'
            group = next((x for x in (self.facts.group_of("lemon", label) for label in labels) if x), n.gpu_name)
            units += [Unit(f"`{label}`", (g.tflops[0] if g.tflops and not g.error else None,), group)
                      for label, g in zip(labels, n.gpus, strict=True)]
        return " ".join(summary_sentences(units, [Measure("lemon GEMM", "TFLOPS", _tf1)], "GPU")
                        + [left_out_sentence(listed, len(lemon.nodes), "node", LEMON_CRITERIA,
                                             run_files(self.raw_rel, "lemon"))])


def health_table(doc: Document, health: HealthRecord, fold: ComputeFold) -> None:
    """Above ``FOLD_NODES`` nodes: one row per node whose plugin results differ from the fleet's common
    results (or that logged an error), after one row with the common results and their node count."""
    ran = [n for n in health.nodes if n.ran]
    plugins: list[str] = []
    for n in ran:
        for r in n.results:
            if r.plugin not in plugins:
                plugins.append(r.plugin)

    def results(n: Any) -> tuple[str, ...]:
        cells = []
        for p in plugins:
            found = next((x for x in n.results if x.plugin == p), None)
            if found is None:
                cells.append("without a result")
            elif found.result == "Fail" and found.gpus:
                cells.append("Fail: " + ", ".join(f"gpu{g}" for g in sorted(g for g, v in found.gpus.items()
                                                                            if v == "Fail")))
            else:
                cells.append(found.result)
        return tuple(cells)

    rows = {n.node: results(n) for n in ran}
    common, count = Counter(rows.values()).most_common(1)[0]
    listed = [n for n in ran if rows[n.node] != common or n.errors]
    others = len(ran) - len(listed)
    table = [[f"the other {others} nodes" if listed else f"all {len(ran)} nodes", *common]] if others else []
    table += [[node_label(n.hostname or n.node, n.index), *rows[n.node]] for n in listed]
    doc.table(["node", *[f"`{p}`" for p in plugins]], table)
    doc.para(left_out_sentence(len(listed), len(ran), "node", HEALTH_CRITERIA, run_files(fold.raw_rel, "health", in_summary=False),
                               lists="this table gives the fleet's common results in one row and lists only"))


def node_msmf_units(mm: MatmulRecord, fold: ComputeFold, values: Any) -> list[Unit]:
    """Each node's MSMF (its slowest GPU) as a unit of the fleet summary."""
    out = []
    for n in mm.nodes:
        vals = [round(v) for v in values(n, 0).values() if v is not None]
        if vals:
            g0 = n.gpus[0].gpu if n.gpus else 0
            out.append(Unit(f"`{node_label(n.hostname or n.node, n.index)}`", (float(min(vals)),),
                            fold.msmf_group(n, g0)))
    return out


def node_msmf_text(units: list[Unit]) -> str:
    """The node MSMF (each node's slowest GPU) over the fleet, one sentence per peer group."""
    return " ".join(summary_sentences(units, [Measure("node MSMF (the node's slowest GPU)", "TFLOPS", _tf)], "node"))
