"""The three-pass rule's words (a GPU flagged in one pass, confirmed in three), how many passes every GPU had when
the operator asked for more than one (``[verdicts] gpu_passes``), and the Compute section's Find underperforming
GPUs subsection (the lemon GEMM). Pure."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from clustereval.analysis.gpu_passes import BELOW_MEDIAN, gpu_label, node_label, sm_coverage
from clustereval.analysis.gpu_rules import GpuJudgement
from clustereval.analysis.rules import rule
from clustereval.records.compute import LemonRecord
from clustereval.report.compute_fold import ComputeFold
from clustereval.report.markdown import Document
from clustereval.report.units import plural


def tf1(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else ""


def in_three(n: Any) -> str:
    """The passes a GPU's three figures come from: all of them, or the first three of more."""
    return "in three passes" if n.num_passes <= 3 else f"in the first three of {n.num_passes} passes"


def passes_sentence(nodes: Sequence[Any], num_asked: int, what: str, where: str) -> str:
    """How many passes every GPU was measured in, when ``[verdicts] gpu_passes`` asked for more than one
    (empty otherwise: the runbook's rule is said where the pass is described). ``where``: how a pass ran."""
    if num_asked < 2:
        return ""
    counts = [sum(v is not None for v in g.tflops) for n in nodes for g in n.gpus]
    counts = [c for c in counts if c]  # a GPU without a figure is said as dead or failed elsewhere
    if not counts:
        return ""
    key = f"`gpu_passes = {num_asked}` under `[verdicts]` in cluster.toml"
    if min(counts) >= num_asked:
        every = (f"every GPU ran {what} in {num_asked} passes" if max(counts) == num_asked else
                 f"every GPU ran {what} in {num_asked} passes or more (three on a node whose first pass flagged a GPU)")
    else:
        full = sum(c >= num_asked for c in counts)
        every = f"{full} of the {plural(len(counts), 'GPU')} ran {what} in all {num_asked} passes"
    return (f"The operator's {key} asks for {num_asked} passes of every GPU: {every}{where}. Where a GPU has "
            "one figure below, it is the first pass's; the fleet-relative verdict judges each GPU on the mean of its passes.")


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
            all_three = "all three passes" if n.num_passes <= 3 else f"each of the first three of {n.num_passes} passes"
            out.append(f"{label} was more than {BELOW_MEDIAN:.0%} below the node median in {all_three}: "
                       f"{what} {nums} {unit}, {frac_range(fracs)} below.")
        else:
            out.append(f"{label} was {first:.1%} below the node median in the first pass; the dip did not repeat: "
                       f"{what} {nums} {unit} {in_three(n)}.")
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
                f"{measure} {nums} TFLOPS {in_three(n)}, {frac_range(fracs)} below the node median each time")
        for gpu in n.dead:
            g = next(x for x in n.gpus if x.gpu == gpu)
            bad.setdefault(gpu_label(n.hostname, n.index, gpu), []).append(dead_text(g))


def frac_range(fracs: list[float]) -> str:
    lo, hi = min(fracs), max(fracs)
    return f"{lo:.1%}" if f"{lo:.1%}" == f"{hi:.1%}" else f"{100 * lo:.1f}–{hi:.1%}"


# -- Find underperforming GPUs ---------------------------------------------------------------


def lemon_rule(lemon: LemonRecord) -> str:
    """The lemon pass and its rule in one paragraph, with the passes every GPU had."""
    size = lemon.size
    if lemon.num_gpu_passes < 2:
        rule = ("; a flagged card gets two more passes and counts as under-performing only if it is below in all "
                "three")
    else:
        rule = (" in the first pass, and counts a flagged card as under-performing only if it is below in each of its "
                "first three passes")
    text = ("An under-performing GPU is slow or throttled; a dead GPU, one that errors or hangs, is the extreme case. "
            f"This pass ran the same matmul shape (M=N=K={size}, {lemon.dtype}) on every GPU, one GPU at a time with "
            f"its siblings idle, and flags a card more than {BELOW_MEDIAN:.0%} below its node's median{rule}. It is "
            "not MAMF: there is no search over matmul shapes and no boost/sustain split.")
    more = passes_sentence(lemon.nodes, lemon.num_gpu_passes, "this matmul", "")
    return f"{text} {more}" if more else text


def render_lemon(doc: Document, lemon: LemonRecord, fold: ComputeFold | None = None,
                 judged: GpuJudgement | None = None) -> None:
    """Find underperforming GPUs: the TLDR, the rule, SM coverage, every GPU's score per node (at fleet size only the
    nodes a reader must act on, compute_fold.py) and the three-pass sentences. ``judged``: the lemon figures
    against the rules table's bar (None, or no reference: only the node-median rule)."""
    size = lemon.size
    doc.heading(3, "Find underperforming GPUs", note=f"fixed {size}³ `matmul` on every GPU")
    slow = [gpu_label(n.hostname, n.index, g) for n in lemon.nodes for g in n.underperforming]
    under = sorted({j.subject.split(" ")[0] for j in judged.misses()} - set(slow)) if judged else []
    slow += under
    dead = [gpu_label(n.hostname, n.index, g) for n in lemon.nodes for g in n.dead]
    num = sum(len(n.gpus) for n in lemon.nodes)
    bar = (rule("gpu.lemon").bar(judged.reference.tflops, judged.reference.source)
           if judged and judged.reference.tflops else None)
    if not slow and not dead:
        if bar is not None:
            doc.para(f"**TLDR: no under-performing or dead GPUs**: {'the GPU' if num == 1 else 'both GPUs' if num == 2 else f'all {num} GPUs'} "
                     f"at or above the bar of {bar:.0f} TFLOPS")
        elif num == 1 or all(len(n.gpus) == 1 for n in lemon.nodes):
            doc.para("**TLDR: no dead GPU**; with one GPU a node has no median to compare it with, and without a "
                     "published or operator figure there is no bar (Findings ask for one)")
        else:
            doc.para("**TLDR: no under-performing or dead GPUs**")
    else:
        parts = []
        if slow:
            parts.append("under-performing: " + ", ".join(f"`{s}`" for s in slow))
        if dead:
            parts.append("dead: " + ", ".join(f"`{d}`" for d in dead))
        doc.para("**TLDR:** " + "; ".join(parts))
    doc.para(lemon_rule(lemon) + (f" A GPU under {bar:.0f} TFLOPS ({rule('gpu.lemon').bar(1.0, judged.reference.source):.0%} "
                                  f"of {judged.reference.words}) in any pass is under-performing too."
                                  if bar is not None and judged else ""))
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
