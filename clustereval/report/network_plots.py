"""Network plots as PNG bytes: busbw vs payload (log-x), and the pairwise busbw matrix.

Pure: data in, PNG bytes out (None when matplotlib is not installed); the phase writes the file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from clustereval.report.plotting import pyplot
from clustereval.report.units import iec_precise


@dataclass
class Series:
    label: str
    payload_bytes: Sequence[int]
    busbw_gb_s: Sequence[float]
    dashed: bool = False





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
