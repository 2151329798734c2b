"""Network plots as PNG bytes: busbw vs payload (log-x), and the pairwise busbw matrix.

Pure: records in, PNG bytes out (None when matplotlib is not installed). Drawn when the report is
rendered, so `clustereval report RUN_DIR` draws them again from the saved records.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from clustereval.records.network import PairwiseRecord, Sweep
from clustereval.report.plotting import memo_png, pyplot
from clustereval.report.units import iec_precise


@dataclass
class Series:
    label: str
    payload_bytes: Sequence[int]
    busbw_gb_s: Sequence[float]
    dashed: bool = False


def sweep_plot_path(sweeps: Sequence[Sweep]) -> str:
    """Raw-folder path of the busbw plot of these sweeps (the intra-node ones together, or the inter-node one);
    a record from a run that drew its plot itself names it."""
    s = sweeps[0]
    return s.plot or f"network/busbw-{s.scope}-{s.num_ranks}.png"


def sweeps_png(sweeps: Sequence[Sweep]) -> bytes | None:
    """busbw against payload for each sweep, back-to-back solid and (one sweep alone) blocking dashed."""
    measured = [s for s in sweeps if s.rows]
    if not measured:
        return None
    first = measured[0]
    devices = ", ".join(sorted({s.device_name for s in measured if s.device_name}))
    label = "gloo" if first.backend == "gloo" else devices
    if first.scope == "intra-node":
        title = f"All-reduce busbw, intra-node: {first.num_ranks} ranks per node ({label})"
    else:
        title = f"All-reduce busbw, inter-node: {first.num_ranks} ranks on {len(first.nodes)} nodes ({label})"
    series = []
    for s in measured:
        name = s.nodes[0] if s.scope == "intra-node" and len(measured) > 1 else f"{s.num_ranks} ranks"
        series.append(Series(f"{name} back-to-back", [r.payload_bytes for r in s.rows],
                             [r.busbw_gb_s for r in s.rows]))
        if s.blocking_rows and len(measured) == 1:
            series.append(Series(f"{name} blocking", [r.payload_bytes for r in s.blocking_rows],
                                 [r.busbw_gb_s for r in s.blocking_rows], dashed=True))
    return busbw_png(series, title)


def pairwise_png(pw: PairwiseRecord) -> bytes | None:
    """The pair matrix of median busbw, nodes in the order they first appear in the pairs."""
    nodes: list[str] = []
    for p in pw.pairs:
        nodes += [n for n in (p.a, p.b) if n not in nodes]
    busbw = {(p.a, p.b): p.busbw_gb_s for p in pw.pairs}
    return pair_heatmap_png(nodes, busbw, f"Pairwise all-reduce busbw (GB/s), {pw.ranks_per_node * 2} ranks per pair")


@memo_png
def busbw_png(series: Sequence[Series], title: str) -> bytes | None:
    plt = pyplot()
    if plt is None or not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    ticks: set[int] = set()
    for s in series:
        ax.plot(list(s.payload_bytes), list(s.busbw_gb_s), marker="o", markersize=3,
                linestyle="--" if s.dashed else "-", label=s.label)
        ticks.update(s.payload_bytes)
    ax.set_xscale("log", base=2)
    shown = sorted(ticks)[::2] if len(ticks) > 12 else sorted(ticks)
    ax.set_xticks(shown)
    ax.set_xticklabels([iec_precise(t) for t in shown], rotation=45, ha="right")
    ax.set_xlabel("payload per rank (bytes, log scale)")
    ax.set_ylabel("busbw (GB/s, 1 GB = 10^9 bytes)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


@memo_png
def pair_heatmap_png(nodes: Sequence[str], busbw: dict[tuple[str, str], float | None], title: str) -> bytes | None:
    plt = pyplot()
    if plt is None or len(nodes) < 2:
        return None
    import math

    idx = {n: i for i, n in enumerate(nodes)}
    n = len(nodes)
    grid = [[math.nan] * n for _ in range(n)]
    for (a, b), v in busbw.items():
        if a in idx and b in idx and v is not None:
            grid[idx[a]][idx[b]] = grid[idx[b]][idx[a]] = v
    size = min(12, 3 + 0.35 * n)
    fig, ax = plt.subplots(figsize=(size + 1.5, size), dpi=110)
    im = ax.imshow(grid, cmap="viridis", interpolation="nearest")
    if n <= 32:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xticklabels(nodes, rotation=90, fontsize=7)
        ax.set_yticklabels(nodes, fontsize=7)
        if n <= 12:
            for i in range(n):
                for j in range(n):
                    if not math.isnan(grid[i][j]):
                        ax.text(j, i, f"{grid[i][j]:.0f}", ha="center", va="center", fontsize=7, color="white")
    fig.colorbar(im, ax=ax, label="busbw (GB/s)")
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
