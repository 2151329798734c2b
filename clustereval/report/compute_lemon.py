"""The three-pass rule's words (a GPU flagged in one pass, confirmed in three) and the Compute section's Find
underperforming GPUs subsection (the lemon GEMM). Pure."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from clustereval.analysis.gpu_passes import BELOW_MEDIAN, gpu_label, node_label, sm_coverage
from clustereval.records.compute import LemonRecord
from clustereval.report.compute_fold import ComputeFold
from clustereval.report.markdown import Document


def tf1(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else ""


def three_pass_sentences(n: Any, multi: bool, what: str, fmt: Any, unit: str) -> list[str]:
    out: list[str] = []
    if n.num_passes < 3:
        return out
    for gpu in n.flagged:
        g = next(x for x in n.gpus if x.gpu == gpu)
        nums = " / ".join(fmt(v) for v in g.tflops[:3])
        label = f"`{gpu_label(n.hostname, n.index, gpu)}`" if multi else f"gpu{gpu}"
        first = below(n, gpu, 0)
        if gpu in n.underperforming:
            fracs = [below(n, gpu, p) for p in range(3)]
            out.append(f"{label} was more than {BELOW_MEDIAN:.0%} below the node median in all three passes: "
                       f"{what} {nums} {unit}, {frac_range(fracs)} below.")
        else:
            out.append(f"{label} was {first:.1%} below the node median in the first pass; the dip did not repeat: "
                       f"{what} {nums} {unit} in three passes.")
    return out


def below(n: Any, gpu: int, passno: int) -> float:
    """How far below its node median a GPU was in one pass (the phase's median when it kept one)."""
    vals = {g.gpu: (g.tflops[passno] if len(g.tflops) > passno else None) for g in n.gpus}
    alive = [v for v in vals.values() if v is not None]
    v = vals.get(gpu)
    if not alive or v is None:
        return 0.0
    med = n.medians[passno] if len(n.medians) > passno and n.medians[passno] else statistics.median(alive)
    return (med - v) / med if med else 0.0


def note_bad_gpus(bad: dict[str, list[str]], nodes: Sequence[Any], measure: str, fmt: Callable[[float | None], str],
                   dead_text: Callable[[Any], str]) -> None:
    """Add each underperforming GPU's three passes and each dead GPU's cause under its label in
    ``bad``; ``nodes`` are one three-pass phase's (matmul or lemon) nodes, ``measure`` what it timed."""
    for n in nodes:
        for gpu in n.underperforming:
            g = next(x for x in n.gpus if x.gpu == gpu)
            fracs = [below(n, gpu, p) for p in range(3)]
            nums = " / ".join(fmt(v) for v in g.tflops[:3])
            bad.setdefault(gpu_label(n.hostname, n.index, gpu), []).append(
                f"{measure} {nums} TFLOPS in three passes, {frac_range(fracs)} below the node median each time")
        for gpu in n.dead:
            g = next(x for x in n.gpus if x.gpu == gpu)
            bad.setdefault(gpu_label(n.hostname, n.index, gpu), []).append(dead_text(g))


def frac_range(fracs: list[float]) -> str:
    lo, hi = min(fracs), max(fracs)
    return f"{lo:.1%}" if f"{lo:.1%}" == f"{hi:.1%}" else f"{100 * lo:.1f}–{hi:.1%}"


# -- Find underperforming GPUs ---------------------------------------------------------------


def render_lemon(doc: Document, lemon: LemonRecord, fold: ComputeFold | None = None) -> None:
    """Find underperforming GPUs: the TLDR, the rule, SM coverage, every GPU's score per node (at fleet size only the
    nodes a reader must act on, compute_fold.py) and the three-pass sentences."""
    size = lemon.size
    doc.heading(3, "Find underperforming GPUs", note=f"fixed {size}³ `matmul` on every GPU")
    slow = [gpu_label(n.hostname, n.index, g) for n in lemon.nodes for g in n.underperforming]
    dead = [gpu_label(n.hostname, n.index, g) for n in lemon.nodes for g in n.dead]
    if not slow and not dead:
        doc.para("**TLDR: no under-performing or dead GPUs**")
    else:
        parts = []
        if slow:
            parts.append("under-performing: " + ", ".join(f"`{s}`" for s in slow))
        if dead:
            parts.append("dead: " + ", ".join(f"`{d}`" for d in dead))
        doc.para("**TLDR:** " + "; ".join(parts))
    doc.para("An under-performing GPU is slow or throttled; a dead GPU, one that errors or hangs, is the extreme case. "
             f"This pass ran the same matmul shape (M=N=K={size}, {lemon.dtype}) on every GPU, one GPU at a time with "
             f"its siblings idle, and flags a card more than {BELOW_MEDIAN:.0%} below its node's median; a flagged card "
             "gets two more passes and counts as under-performing only if it is below in all three. It is not MAMF: "
             "there is no search over matmul shapes and no boost/sustain split.")
    sms = sorted({g.sm_count for n in lemon.nodes for g in n.gpus if g.sm_count})
    for count in sms:
        cov = sm_coverage(count, size)
        which = "this GPU's" if len(sms) == 1 else f"a {count}-SM GPU's"
        doc.para(f"SM coverage: with 128×256 output tiles the {size}×{size} result is {cov.num_ctas} CTAs (cooperative "
                 f"thread arrays, each one CUDA thread block); {which} {count} SMs run them as {cov.full_waves} full "
                 f"waves (one CTA on every SM at once) and a tail of {cov.tail_ctas} CTAs, a wave efficiency of "
                 f"{100 * cov.wave_efficiency:.1f}%.")
    # one table when every node has the same GPUs, else one per node (a table holds numbers, never blanks)
    groups: dict[tuple[int, ...], list[Any]] = {}
    listed = [n for n in lemon.nodes if fold is None or fold.lemon_listed(n)]
    if fold is not None:  # at fleet size: the fleet's figures and the rule, then only the nodes to act on
        doc.para(fold.lemon_text(lemon, len(listed)))
    for n in listed:
        groups.setdefault(tuple(g.gpu for g in n.gpus), []).append(n)
    for idx, members in groups.items():
        rows = []
        for n in members:
            cells = {g.gpu: ("dead" if g.error else tf1(g.tflops[0] if g.tflops else None)) for g in n.gpus}
            alive = [(g.gpu, g.tflops[0]) for g in n.gpus if not g.error and g.tflops and g.tflops[0] is not None]
            lo = min(alive, key=lambda x: x[1]) if alive else None
            hi = max(alive, key=lambda x: x[1]) if alive else None
            rows.append([node_label(n.hostname, n.index)] + [cells[i] for i in idx]
                        + [f"{lo[1]:.1f} (gpu{lo[0]})" if lo else "dead", f"{hi[1]:.1f}" if hi else "dead"])
        doc.table(["node", *[f"gpu{i}" for i in idx], "min (gpu)", "max"], rows, "l" + "r" * (len(idx) + 2))
    sentences = []
    for n in lemon.nodes:
        sentences += three_pass_sentences(n, True, "lemon GEMM", tf1, "TFLOPS")
        for g in n.gpus:
            if g.error:
                sentences.append(f"`{gpu_label(n.hostname, n.index, g.gpu)}` is dead ({g.error}).")
    if sentences:
        doc.para(" ".join(sentences))
