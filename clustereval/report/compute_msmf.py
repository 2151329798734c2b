"""The sustained half of the GPU performance section: how the held shapes were soaked and timed,
GPU0's trace plot with where MAMF and MSMF were read, UNSTEADY shapes, and GPUs that ran far hotter
or drew far less power than their siblings while every GPU computed.

Pure: records in, sentences and PNG bytes out (the renderer returns the bytes as a file to write).
"""

from __future__ import annotations

from clustereval.analysis.gpu_passes import gpu_label
from clustereval.analysis.gpus import HOT_DELTA_C, LOW_POWER_FRAC
from clustereval.analysis.matmul import held_rate
from clustereval.analysis.steady import STANDARD_WINDOW_S, UNSTEADY, reasons_seen
from clustereval.names import slug
from clustereval.records.compute import MatmulRecord, NodeMatmul, SearchSummary, ShapeTiming
from clustereval.report.compute_plots import TraceLabels, trace_png
from clustereval.report.gaps.common import link_tools
from clustereval.report.markdown import Document
from clustereval.report.render import SectionResult


def _shape(t: ShapeTiming) -> str:
    return f"{t.m}×{t.n}×{t.k}"


def is_held(search: SearchSummary) -> bool:
    """The record comes from a worker that soaks and times windows (older records pinned briefly)."""
    return search.held_window_s > 0


def held_method(search: SearchSummary, mm: MatmulRecord) -> str:
    """The clause of the method paragraph that says how the sustained candidates were measured."""
    n = search.num_sustained
    which = "the best shape" if n == 1 else f"the {n} best shapes"
    return (f", and of those {which} then held back to back, one after another, until the GPU clock settled: the first for "
            f"at least {search.soak_min_s:g} s and at most {search.soak_max_s:g} s, until the clock's mean over the "
            f"last {search.steady_window_s:g} s was within {100 * search.steady_tol_frac:.1f}% of the "
            f"{search.steady_window_s:g} s before, the next ones, on a board already at its power limit, for at least "
            f"{mm.settle_s:g} s by the same test; then each was timed for {search.held_window_s:g} s. MSMF is the best "
            "of those timed windows' medians, not of the short holds, and a shape whose rate moved by more than "
            f"{100 * search.max_drift_frac:.1f}% from the first to the second half of its window is labelled "
            "UNSTEADY and cannot be MSMF")


def shortened(mm: MatmulRecord) -> str:
    if 0 < mm.sustain_s < STANDARD_WINDOW_S:
        return (f" This run's profile timed each held shape for {mm.sustain_s:g} s, shorter than the standard "
                f"profile's {STANDARD_WINDOW_S:g} s.")
    return ""


def trace_block(doc: Document, raw_rel: str, n: NodeMatmul, multi: bool, result: SectionResult) -> None:
    """GPU0's trace plot and the one sentence that reads it."""
    s = n.search
    if s is None or s.trace is None or s.msmf is None or not s.msmf.held:
        return
    if not any(p.stage == "telemetry" for p in s.trace.points):  # no NVML (a CPU stand-in): no board to show
        return
    gpu0 = n.gpus[0].gpu if n.gpus else 0
    label = gpu_label(n.hostname, n.index, gpu0)
    rel = f"plots/matmul-{slug(n.node, default='node')}-gpu{gpu0}.png"
    png = trace_png(s.trace, TraceLabels(f"{label}: {n.gpu_name}", n.power_limit_w,
                                         s.mamf.mean_tflops if s.mamf else None, held_rate(s.msmf)))
    if png is None:
        return
    result.files[rel] = png
    doc.image(f"TFLOPS, board power and SM clock of {label} over its search, soak and timed windows",
              f"{raw_rel}/{rel}")
    m = s.msmf
    parts = []
    if s.mamf is not None and s.trace.mamf_t_s is not None:
        parts.append(f"MAMF was read {s.trace.mamf_t_s:.0f} s in, in a burst of {_shape(s.mamf)}"
                     + (f" at {s.mamf.sm_mhz:.0f} MHz and {s.mamf.power_w:.0f} W" if s.mamf.sm_mhz and s.mamf.power_w
                        else ""))
    span = s.trace.msmf_span
    if span is not None:
        board = (f" at {m.power_w:.0f} W, {m.sm_mhz:.0f} MHz and up to {m.temp_c:.0f} °C"
                 if m.power_w is not None and m.sm_mhz is not None and m.temp_c is not None else "")
        parts.append(f"MSMF in the window from {span.t0_s:.0f} s to {span.t1_s:.0f} s, after {m.soak_s:.0f} s at "
                     f"{_shape(m)}{board}, its halves' medians {m.first_half_tflops:.1f} TFLOPS and "
                     f"{m.second_half_tflops:.1f} TFLOPS ({100 * m.drift_frac:+.2f}%)")
    where = f" of {label}" if multi else ""
    text = (f"The plot is GPU0's trace{where}: the search's bursts at boost clock, the fall to the power limit once "
            f"the large shapes were held, and the plateau; {'; '.join(parts)}.")
    reasons = reasons_seen([p.reasons for p in s.trace.points if p.stage == "window"])
    if s.trace.reasons_available and reasons:
        text += f" NVML gave {', '.join(reasons)} as the clock-event reason in the timed windows."
    doc.para(text)


def steadiness_sentences(n: NodeMatmul, multi: bool) -> list[str]:
    out = []
    for t in (n.search.sustained if n.search else []):
        if t.label == UNSTEADY:
            out.append(f"The held shape {_shape(t)}: {t.why}, so it was labelled UNSTEADY and is not an MSMF candidate.")
    for g in n.gpus:
        for gt in g.timings:
            if gt is not None and gt.label == UNSTEADY:
                out.append(f"`{gpu_label(n.hostname, n.index, g.gpu)}` at the MSMF shape: {gt.why}, so its MSMF "
                           "was still moving when it was read.")
                break
    return out


def loaded_sentences(n: NodeMatmul) -> list[str]:
    first = {g.gpu: (g.timings[0] if g.timings else None) for g in n.gpus}
    temps = [t.temp_c for t in first.values() if t is not None and t.temp_c is not None]
    powers = [t.power_w for t in first.values() if t is not None and t.power_w is not None]
    out = []
    for gpu in n.hot_gpus:
        t = first.get(gpu)
        if t is not None and t.temp_c is not None and temps:
            out.append(f"`{gpu_label(n.hostname, n.index, gpu)}` ran at {t.temp_c:.0f} °C while every GPU computed, "
                       f"{t.temp_c - min(temps):.0f} °C above the coolest GPU of the node ({min(temps):.0f} °C; "
                       f"flagged at {HOT_DELTA_C:.0f} °C): check its cooling.")
    for gpu in n.low_power_gpus:
        t = first.get(gpu)
        if t is not None and t.power_w is not None and powers:
            out.append(f"`{gpu_label(n.hostname, n.index, gpu)}` drew {t.power_w:.0f} W while every GPU computed, "
                       f"below {LOW_POWER_FRAC:.0%} of the top GPU's {max(powers):.0f} W: check its power limit "
                       f"({link_tools('`nvidia-smi -q -d POWER`')}).")  # linked: Environment may not have run
    return out


def write_windows(doc: Document, windows: list[list[str]], num_rows: int) -> None:
    """Each GPU's timed MSMF window: the highest GPU temperature over it, and how far the median rate moved
    from its first half to its second (only when every row of the MSMF table has one: a table of its own,
    never extra columns on the runbook's)."""
    if not windows or len(windows) != num_rows:
        return
    doc.para("Over each GPU's timed window, the highest GPU temperature, and the window drift: how far the "
             "median rate moved from the window's first half to its second.")
    doc.table(["GPU", "temperature (°C)", "window drift (%)"], windows, "lrr")
