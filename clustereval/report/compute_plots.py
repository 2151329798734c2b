"""The matmul trace as a PNG: TFLOPS, board power and SM clock of one GPU over its measurement,
the burst search, the fall to the power limit and the plateau, with the soaks and windows shaded.

Pure: a ``MatmulTrace`` in, PNG bytes out (None without matplotlib or without data); the report
renderer hands the bytes to the caller, which writes them into the raw folder.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from clustereval.records.compute import MatmulTrace
from clustereval.report.plotting import memo_png, pyplot

SPAN_COLOURS = {"soak": "#f4a259", "window": "#5b8e7d"}


@dataclass(frozen=True)
class TraceLabels:
    title: str
    power_limit_w: float | None = None
    mamf_tflops: float | None = None
    msmf_tflops: float | None = None



@memo_png
def trace_png(trace: MatmulTrace, labels: TraceLabels) -> bytes | None:
    plt = pyplot()
    rated = [p for p in trace.points if p.tflops > 0]
    board = [p for p in trace.points if p.stage == "telemetry" and p.power_w is not None]
    if plt is None or not rated:
        return None
    rows = 3 if board else 1
    fig, axes = plt.subplots(rows, 1, figsize=(9, 2.3 * rows + 0.8), dpi=110, sharex=True, squeeze=False)
    ax_tf = axes[0][0]
    bursts = [p for p in rated if p.stage in ("screen", "burst", "warmup")]
    held = [p for p in rated if p.stage in ("hot", "soak", "window")]
    if bursts:
        ax_tf.scatter([p.t_s for p in bursts], [p.tflops for p in bursts], s=4, color="#4062bb",
                      label="search: one shape per point (bursts)")
    if held:
        ax_tf.scatter([p.t_s for p in held], [p.tflops for p in held], s=4, color="#d1495b",
                      label="held shapes: one chunk per point")
    if trace.mamf_t_s is not None and labels.mamf_tflops:
        ax_tf.annotate(f"MAMF {labels.mamf_tflops:.0f}", (trace.mamf_t_s, labels.mamf_tflops),
                       textcoords="offset points", xytext=(6, 6), fontsize=8)
    if trace.msmf_span is not None and labels.msmf_tflops:
        ax_tf.hlines(labels.msmf_tflops, trace.msmf_span.t0_s, trace.msmf_span.t1_s, color="black", linewidth=1.5)
        ax_tf.annotate(f"MSMF {labels.msmf_tflops:.0f}", (trace.msmf_span.t0_s, labels.msmf_tflops),
                       textcoords="offset points", xytext=(0, -14), fontsize=8)
    top = max(p.tflops for p in rated)
    ax_tf.set_ylim(bottom=max(0.0, min(p.tflops for p in (held or rated)) * 0.6), top=top * 1.08)
    ax_tf.set_ylabel("TFLOPS")
    ax_tf.legend(loc="lower left", fontsize=7)
    if board:
        ts = [p.t_s for p in board]
        ax_w, ax_mhz = axes[1][0], axes[2][0]
        ax_w.plot(ts, [p.power_w for p in board], color="#edae49", linewidth=1)
        if labels.power_limit_w:
            ax_w.axhline(labels.power_limit_w, color="grey", linestyle="--", linewidth=0.8)
            ax_w.annotate(f"power limit {labels.power_limit_w:.0f} W", (ts[0], labels.power_limit_w),
                          textcoords="offset points", xytext=(2, -10), fontsize=7, color="grey")
        ax_w.set_ylabel("board W")
        clocks = [(p.t_s, p.sm_mhz) for p in board if p.sm_mhz is not None]
        ax_mhz.plot([t for t, _ in clocks], [c for _, c in clocks], color="#00798c", linewidth=1)
        ax_mhz.set_ylabel("SM MHz")
    for row in axes:
        ax = row[0]
        for sp in trace.spans:
            colour = SPAN_COLOURS.get(sp.name)
            if colour:
                ax.axvspan(sp.t0_s, sp.t1_s, color=colour, alpha=0.15, linewidth=0)
        ax.grid(True, alpha=0.3)
    axes[-1][0].set_xlabel("seconds since the worker started (orange: soak or settle, green: timed window)")
    axes[0][0].set_title(labels.title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
