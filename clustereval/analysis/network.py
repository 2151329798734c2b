"""Pure judgements on the network records: the intra-node spec, peak % of spec, scale-out cost.

Intra-node all-reduce is the one place "% of spec" is a wire comparison (NVLink or PCIe). The
inter-node busbw is never divided by a NIC rate: it mixes NVLink, the NICs and (with NVLS) the
switch; it is compared with the 1-node busbw at the same payload instead.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clustereval.analysis.rules import rule
from clustereval.records.network import Sweep, SweepRow

# A healthy ring all-reduce reaches roughly 75-85% of the NVLink unidirectional spec (NVLS goes past
# 100%); below this share of the spec the intra-node fabric is called underperforming (the rules table's row)
HEALTHY_SHARE_OF_SPEC = rule("network.intra-allreduce").fraction
NODE_SLOW_PCT = 5.0  # a node whose intra-node peak is this far below the node median is named

# PCIe unidirectional GB/s per lane by generation (x16 Gen5 ~ 63 GB/s, as the runbook says)
PCIE_GB_S_PER_LANE = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass
class IntraSpec:
    kind: str  # "NVLink 4" / "PCIe Gen5 x16" / ""
    bond: str  # "NV18"
    spec_uni_gb_s: float  # 0: unknown
    source: str  # "spec" | "cluster.toml" | ""


def intra_spec(env_node, override_gb_s: float | None = None) -> IntraSpec:
    """The intra-node wire spec from the environment record's node (duck-typed NodeEnvironment)."""
    nv = getattr(env_node, "nvlink", None)
    if nv is not None and getattr(nv, "generation", None):
        spec = override_gb_s or nv.spec_uni_gb_s
        return IntraSpec(f"NVLink {nv.generation}", nv.topo_bond or (f"NV{nv.num_links_per_gpu}" if nv.num_links_per_gpu
                                                                      else ""),
                         spec, "cluster.toml" if override_gb_s else ("spec" if spec else ""))
    gpus = getattr(env_node, "gpus", None) or []
    if gpus:
        g = gpus[0]
        gen, width = g.pcie_gen_max or g.pcie_gen_current, g.pcie_width_max or g.pcie_width_current
        if gen in PCIE_GB_S_PER_LANE and width:
            spec = override_gb_s or round(PCIE_GB_S_PER_LANE[gen] * width, 1)
            return IntraSpec(f"PCIe Gen{gen} x{width}", "", spec, "cluster.toml" if override_gb_s else "spec")
    if override_gb_s:
        return IntraSpec("", "", override_gb_s, "cluster.toml")
    return IntraSpec("", "", 0.0, "")


def peak(sweep: Sweep) -> SweepRow | None:
    return max(sweep.rows, key=lambda r: r.busbw_gb_s) if sweep.rows else None


def share_of_spec(busbw_gb_s: float, spec_gb_s: float) -> float | None:
    return busbw_gb_s / spec_gb_s if spec_gb_s else None


def median_row(sweeps: list[Sweep], payload_bytes: int) -> float | None:
    vals = [r.busbw_gb_s for s in sweeps for r in s.rows if r.payload_bytes == payload_bytes]
    return statistics.median(vals) if vals else None


@dataclass
class ScaleOut:
    payload_bytes: int
    inter_busbw_gb_s: float
    intra_busbw_gb_s: float

    @property
    def ratio(self) -> float:
        return self.inter_busbw_gb_s / self.intra_busbw_gb_s if self.intra_busbw_gb_s else 0.0


def scale_out(inter: Sweep, intra: list[Sweep]) -> ScaleOut | None:
    """The inter-node peak against the median 1-node busbw at the same payload."""
    p = peak(inter)
    if p is None:
        return None
    one = median_row([s for s in intra if s.rows], p.payload_bytes)
    if one is None:
        return None
    return ScaleOut(p.payload_bytes, p.busbw_gb_s, one)


def slow_nodes(intra: list[Sweep], pct: float = NODE_SLOW_PCT) -> list[tuple[Sweep, float, float]]:
    """(sweep, its peak, node median of peaks) for nodes more than ``pct`` below the median."""
    peaks = [(s, peak(s)) for s in intra if s.rows]
    if len(peaks) < 2:
        return []
    med = statistics.median(p.busbw_gb_s for _, p in peaks if p)
    return [(s, p.busbw_gb_s, med) for s, p in peaks if p and p.busbw_gb_s < med * (1 - pct / 100)]
