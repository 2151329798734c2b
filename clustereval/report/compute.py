"""The Compute section: Introduction, Hardware health, GPU performance benchmarks, Find
underperforming GPUs (and Gaps when something is missing), plus the GPU Findings bullets.

Follows the runbook's Compute template: GPUs first, a numbered list of the passes that ran, MAMF
and MSMF against the official BF16 figure, every GPU's number, slow and dead GPUs named
``<hostname>(node<N>):gpu<i>``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from clustereval.analysis.gpu_passes import gpu_label, node_label
from clustereval.analysis.gpu_rules import GpuJudgement, GpuReference, judge_gpus, reference
from clustereval.analysis.matmul import held_rate
from clustereval.analysis.rules import MAMF_READ_ON, MAMF_TABLE_URL, rule
from clustereval.analysis.specs import lookup_gpu
from clustereval.probes.dcgmi import DIAG_URL
from clustereval.records import Finding
from clustereval.records.compute import HealthRecord, LemonRecord, MatmulRecord, NodeMatmul, ShapeTiming
from clustereval.records.gpupass import GpuPassRecord
from clustereval.report import compute_gpupass
from clustereval.report.compute_fold import ComputeFold, health_table, node_msmf_text, node_msmf_units
from clustereval.report.compute_lemon import (
    note_bad_gpus,
    passes_sentence,
    render_lemon,
    three_pass_sentences,
)
from clustereval.report.compute_msmf import (
    held_method,
    is_held,
    loaded_sentences,
    shortened,
    steadiness_sentences,
    trace_block,
    write_windows,
)
from clustereval.report.compute_waves import is_waves, mamf_statistic, msmf_sentences, wave_method
from clustereval.report.fold import Unit, folds
from clustereval.report.gaps.common import raw_output
from clustereval.report.markdown import Document
from clustereval.report.render import RunView, SectionResult, render_gaps, setup_gaps

TFLOPS_TABLE_URL = ("https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
                    "#tflops-comparison-table")
SUBSYSTEM = "GPUs"


def _of(view: RunView, phase: str, cls: type) -> Any:
    rec = view.get(phase)
    return rec if isinstance(rec, cls) else None


def _shape(t: ShapeTiming | tuple[int, int, int] | None) -> str:
    if t is None:
        return ""
    m, n, k = t.shape if isinstance(t, ShapeTiming) else t
    return f"{m}×{n}×{k}"


def _wmhz(t: ShapeTiming | None, sep: str = " W / ", tail: str = " MHz") -> str:
    if t is None or t.power_w is None or t.sm_mhz is None:
        return ""
    return f"{t.power_w:.0f}{sep}{t.sm_mhz:.0f}{tail}"


def _pct(value: float, spec: float | None) -> str:
    return f"{100 * value / spec:.1f}%" if spec else ""


def _tf(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else ""


def _tf1(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else ""


@dataclass
class GpuFacts:
    name: str
    count: int
    sm_count: int
    memory_gib: float
    tdp_w: float | None
    nodes: list[str] = field(default_factory=list)


@dataclass
class Spec:
    name: str  # the product the figure is for ("H200 SXM")
    bf16_tflops: float | None
    from_target: bool = False  # the figure is the operator's ([targets] gpu_bf16_tflops), not the spec database's

    @property
    def word(self) -> str:
        """What the figure is called in a sentence: the official figure, or the operator's target."""
        return "target" if self.from_target else "official"


def _facts(view: RunView, mm: MatmulRecord | None, lemon: LemonRecord | None) -> list[GpuFacts]:
    """The GPUs that are here, one entry per distinct (name, count, SMs, HBM, TDP)."""
    groups: dict[tuple, GpuFacts] = {}
    env = view.get("environment")
    env_nodes = [n for n in getattr(env, "nodes", []) or [] if getattr(n, "gpus", None)]
    if env_nodes:
        for n in env_nodes:
            g = n.gpus[0]
            key = (g.name, len(n.gpus), g.sm_count, round(g.memory_total_mib / 1024, 1), g.power_limit_w)
            groups.setdefault(key, GpuFacts(*key)).nodes.append(node_label(n.hostname or n.node, n.index))
    elif mm and mm.nodes:
        for n in mm.nodes:
            key = (n.gpu_name, n.num_gpus, n.sm_count, n.memory_gib, n.power_limit_w)
            groups.setdefault(key, GpuFacts(*key)).nodes.append(node_label(n.hostname, n.index))
    elif lemon and lemon.nodes:
        for ln in lemon.nodes:
            key = (ln.gpu_name, len(ln.gpus), ln.sm_count, 0.0, None)
            groups.setdefault(key, GpuFacts(*key)).nodes.append(node_label(ln.hostname, ln.index))
    return list(groups.values())


def gpu_target_tflops(view: RunView) -> float | None:
    """The operator's dense BF16 figure per GPU (``[targets] gpu_bf16_tflops``), frozen in the run's preflight record."""
    return getattr(view.get("preflight"), "gpu_bf16_target_tflops", None)


def _spec(facts: list[GpuFacts], target_tflops: float | None = None) -> Spec | None:
    if not facts:
        return None
    f = facts[0]
    if target_tflops:
        return Spec(f.name, target_tflops, from_target=True)
    found = lookup_gpu(f.name, power_limit_w=f.tdp_w)
    return Spec(found.key if found else f.name, found.bf16_dense_tflops if found else None)


# -- sections --------------------------------------------------------------------------------


def render_compute(view: RunView, doc: Document) -> SectionResult:
    health = _of(view, "health", HealthRecord)
    mm = _of(view, "matmul", MatmulRecord)
    lemon = _of(view, "lemon", LemonRecord)
    gp = _of(view, "gpupass", GpuPassRecord)
    if not (health or mm or lemon or gp):
        return SectionResult()
    result = SectionResult()
    for rec in (health, gp, mm, lemon):
        for gap in (rec.gaps if rec is not None else []):
            if all(g.text != gap.text for g in result.gaps):  # "no GPU" is said once, not per phase
                result.gaps.append(gap)
    facts = _facts(view, mm, lemon)
    spec = _spec(facts, gpu_target_tflops(view))
    ref = reference(facts[0].name, facts[0].tdp_w, gpu_target_tflops(view)) if facts else GpuReference("GPU", None, "")
    ran_health = bool(health and any(n.ran for n in health.nodes))
    # a search that found MAMF but no MSMF shape still ran: MAMF is reported, the Gap says why no MSMF
    ran_mm = bool(mm and any((n.gpus and any(v is not None for g in n.gpus for v in g.tflops))
                             or (n.search is not None and n.search.mamf is not None) for n in mm.nodes))
    ran_lemon = bool(lemon and lemon.nodes and any(g.tflops for n in lemon.nodes for g in n.gpus))
    ran_gp = compute_gpupass.ran(gp)
    # above FOLD_NODES nodes the per-GPU and per-node tables list only what a reader must act on (fold.py)
    fold = (ComputeFold(view) if any(rec is not None and folds(len(rec.nodes)) for rec in (health, mm, lemon, gp))
            else None)
    doc.heading(2, "Compute")
    if ran_health or ran_mm or ran_lemon or ran_gp:  # (a run of the health pass alone has no GPU facts, still its tool)
        doc.heading(3, "Introduction", toc=False)
        _introduction(view, doc, facts, spec, ran_health, ran_mm, ran_lemon, mm,
                      compute_gpupass.intro_item(view, gp) if gp and ran_gp else "", ref)
    if ran_health and health:
        _health(doc, health, result, fold)
    if gp and ran_gp:
        compute_gpupass.render(doc, view, gp, result.findings, fold.facts if fold else None)
    if ran_mm and mm:
        _benchmarks(doc, mm, spec, facts, result, view.raw_rel, fold if folds(len(mm.nodes)) else None,
                    rule("gpu.msmf").bar(ref.tflops, ref.source) if ref.tflops else None)
    if lemon and lemon.nodes:
        render_lemon(doc, lemon, fold if folds(len(lemon.nodes)) else None,
                     judge_gpus(ref, None, lemon) if ran_lemon else None)
    env = view.get("environment")
    asked = bool(getattr(env, "nodes", None)) and any(getattr(n, "gpus", None) for n in env.nodes)
    gpu_judgement = judge_gpus(ref, mm if ran_mm else None, lemon if ran_lemon else None)
    _findings(result, health if ran_health else None, mm if ran_mm else None, lemon, spec, asked, gpu_judgement)
    result.gaps += setup_gaps(view, "compute", result.gaps)
    render_gaps(doc, result.gaps)
    return result


def _introduction(view: RunView, doc: Document, facts: list[GpuFacts], spec: Spec | None, ran_health: bool,
                  ran_mm: bool, ran_lemon: bool, mm: MatmulRecord | None, gpupass_item: str = "",
                  ref: GpuReference | None = None) -> None:
    parts = []
    for i, f in enumerate(facts):
        where = "Each node has" if len(facts) == 1 else f"{', '.join(f.nodes)} {'has' if len(f.nodes) == 1 else 'have'}"
        per_gpu = []
        if f.sm_count:
            per_gpu.append(f"{f.sm_count} SMs" + (" (streaming multiprocessors)" if i == 0 else ""))
        if f.memory_gib:
            per_gpu.append(f"{f.memory_gib:.1f} GiB of HBM" + (" (high-bandwidth memory)" if i == 0 else ""))
        sentence = f"{where} {f.count}× {f.name}"
        if per_gpu:
            sentence += f": {' and '.join(per_gpu)} per GPU"
        if f.tdp_w:
            sentence += (", and a TDP (thermal design power, the board's power limit)" if i == 0 else ", and a TDP") \
                + f" of {f.tdp_w:.0f} W"
        parts.append(sentence + ".")
    if spec and spec.from_target:
        parts.append(f"The operator's target for the {spec.name} is {spec.bf16_tflops:.0f} TFLOPS dense BF16 "
                     "(bfloat16; 10¹² floating-point operations per second; `gpu_bf16_tflops` under `[targets]` in "
                     "cluster.toml), and the figures below are judged against it.")
    elif spec and spec.bf16_tflops:
        parts.append(f"The official dense BF16 (bfloat16) figure for the {spec.name} is {spec.bf16_tflops:.0f} TFLOPS "
                     f"(10¹² floating-point operations per second; [TFLOPS comparison table]({TFLOPS_TABLE_URL})).")
    elif spec:
        parts.append(f"The [TFLOPS comparison table]({TFLOPS_TABLE_URL}) and the spec database list no official "
                     f"dense BF16 (bfloat16) figure for the {spec.name}, so the TFLOPS (10¹² floating-point "
                     "operations per second) below have no spec to be compared against.")
    if ref is not None and ref.source == "published" and (ran_mm or ran_lemon):
        parts.append(f"The figures below are judged against what the {ref.model} reaches in practice: the "
                     f"[published measured maximum]({MAMF_TABLE_URL}) of {ref.tflops:g} TFLOPS, the best matmul "
                     "the runbook's author timed on one such GPU (read on " + MAMF_READ_ON + "). "
                     + _bars_sentence())
    elif ref is not None and ref.source == "operator" and (ran_mm or ran_lemon):
        parts.append(_bars_sentence())
    if parts:
        doc.para(" ".join(parts))
    items = []
    if ran_health:
        items.append(f"[`dcgmi diag -r 2`]({DIAG_URL}) — NVIDIA's own health check from DCGM (Data Center GPU Manager): deployment "
                     "and software checks, GPU memory, memory bandwidth and PCIe, on every GPU of every node.")
    if gpupass_item:
        items.append(gpupass_item)
    lemon = view.get("lemon")
    tool_rel = (mm.tool_rel if mm and mm.tool_rel else "") or getattr(lemon, "tool_rel", "")
    tool = f"[`matmul.py`]({view.raw_rel}/{tool_rel})" if tool_rel else "`matmul.py`"
    if ran_mm:
        items.append(f"{tool} — our matmul worker: times many **matmul shapes** (M×N×K) on GPU0 to find the fastest, "
                     "then measures the sustainable winner on every other GPU, each while all the others run a "
                     "matmul; reports **MAMF** (Maximum Achievable Matmul FLOPS) and **MSMF** (Maximum Sustainable "
                     "Matmul FLOPS), both vs the " + ("operator's target." if spec and spec.from_target else "official spec."))
    if ran_lemon:
        items.append("Lemon GEMM (general matrix multiply) — an inline check of ours, not a published benchmark "
                     f"(the `lemon` mode of {tool if not ran_mm else 'the same `matmul.py`'}): one fixed matmul shape "
                     "(M=N=K=16384) on every GPU, one GPU at a time, to catch a dead, slow, or throttled card.")
    doc.numbered(items)


def _bars_sentence() -> str:
    mamf, msmf, lemon = rule("gpu.mamf"), rule("gpu.msmf"), rule("gpu.lemon")
    assert msmf.fraction == lemon.fraction, "the sentence states one bar for both"
    return (f"A GPU meets it with its fastest matmul burst at {mamf.fraction:.0%} of that figure, and its sustained "
            f"and fixed-shape matmuls at {msmf.fraction:.0%} in every pass (a matmul held at the power limit runs at a "
            "lower clock than a burst); a GPU under a bar is under-performing.")


# -- hardware health -------------------------------------------------------------------------


def _health(doc: Document, health: HealthRecord, result: SectionResult, fold: ComputeFold | None = None) -> None:
    doc.heading(3, "Hardware health", note=f"`dcgmi diag -r {health.level}`")
    ran = [n for n in health.nodes if n.ran]
    labels = {n.node: node_label(n.hostname or n.node, n.index) for n in ran}
    versions = sorted({n.dcgm_version for n in ran if n.dcgm_version})
    failing = [(n, r) for n in ran for r in n.results if r.result == "Fail"]
    errors = [(n, e) for n in ran for e in n.errors]
    where = f"on {len(ran)} node{'s' if len(ran) != 1 else ''}"
    version = f" (DCGM {', '.join(versions)})" if versions else ""
    if not failing and not errors:
        doc.para(f"**Pass**: `dcgmi diag -r {health.level}` ran {where}{version}, and every plugin passed on every GPU.")
    else:
        names = "; ".join(f"`{r.plugin}` on {_failed_where(labels[n.node], r)}" for n, r in failing)
        names += ("; " if names and errors else "") + "; ".join(f"{labels[n.node]}: {e}" for n, e in errors)
        doc.para(f"**Fail**: `dcgmi diag -r {health.level}` ran {where}{version} and failed {names}.")
    plugins: list[str] = []
    for n in ran:
        for r in n.results:
            if r.plugin not in plugins:
                plugins.append(r.plugin)
    if fold is not None and folds(len(ran)):
        health_table(doc, health, fold)
    else:
        cols = [labels[n.node] for n in ran] if len(ran) > 1 else ["result"]
        rows = []
        for p in plugins:
            row = [f"`{p}`"]
            for n in ran:
                found = next((x for x in n.results if x.plugin == p), None)
                row.append(_cell(found) if found else "")
            rows.append(row)
        doc.table(["plugin", *cols], rows)
    notes = [f"{labels[n.node]} `{r.plugin}`: {m}" for n, r in failing for m in r.messages
             if not m.startswith("Info")]
    doc.bullets(notes)


def _cell(r: Any) -> str:
    if r.result != "Fail" or not r.gpus:
        return r.result
    bad = sorted(g for g, v in r.gpus.items() if v == "Fail")
    return f"Fail: {', '.join(f'gpu{g}' for g in bad)}"


def _failed_where(label: str, r: Any) -> str:
    bad = sorted(g for g, v in r.gpus.items() if v == "Fail")
    if not bad:
        return f"every GPU of {label}"
    return ", ".join(f"`{label}:gpu{g}`" for g in bad)


# -- GPU performance benchmarks ----------------------------------------------------------------


def _values(n: NodeMatmul, passno: int) -> dict[int, float | None]:
    return {g.gpu: (g.tflops[passno] if len(g.tflops) > passno else None) for g in n.gpus}


def _first(n: NodeMatmul) -> dict[int, ShapeTiming | None]:
    return {g.gpu: (g.timings[0] if g.timings else None) for g in n.gpus}


def _gpu_name(n: Any, gpu: int, multi: bool) -> str:
    return gpu_label(n.hostname, n.index, gpu) if multi else f"gpu{gpu}"


def _benchmarks(doc: Document, mm: MatmulRecord, spec: Spec | None, facts: list[GpuFacts],
                result: SectionResult, raw_rel: str = "", fold: ComputeFold | None = None,
                msmf_bar: float | None = None) -> None:
    nodes = [n for n in mm.nodes if n.search is not None]
    multi = len(mm.nodes) > 1
    single_gpu = all(n.num_gpus == 1 for n in nodes)
    note = "`matmul.py` on the only GPU" if single_gpu else "`matmul.py`, one GPU at a time while the others run a matmul"
    doc.heading(3, "GPU performance benchmarks", note=note)
    search = nodes[0].search
    assert search is not None
    tried = ", ".join(sorted({str(n.search.shapes_tried) for n in nodes if n.search}))
    loaded = "" if single_gpu else ", while every other GPU of the node ran a continuous matmul"
    text = wave_method(search, mm, loaded) if is_waves(search) else (
            "Compute is measured by timing matrix multiplication (`matmul`). How fast a `matmul` runs depends on its "
            "**matmul shape**, the M×N×K dimensions (an M×K matrix times a K×N matrix), so `matmul.py` searches for "
            f"the fastest. On GPU0 it timed {tried} matmul shapes in {mm.dtype}: every shape briefly"
            + (f" (at least {search.screen_min_iters} timed iterations)" if search.screen_min_iters else "")
            + f", the {search.num_confirmed} fastest shapes again"
            + (f" for at least {search.confirm_min_iters} timed iterations and {search.confirm_min_s * 1e3:.0f} ms"
               if search.confirm_min_iters else " for longer")
            + (f", the {search.num_hot} fastest large shapes held at full power one after another for "
               f"{search.hot_s:g} s each" if search.num_hot and search.hot_s else "")
            + (held_method(search, mm) + loaded + "." if is_held(search) else
               f", and the best of them pinned for {mm.settle_s:g} s and then timed for {mm.sustain_s:g} s, long "
               f"enough for the board to reach its power limit{loaded}.")
            + (" Each briefly timed matmul follows an overwrite of the L2 cache and a re-randomised output matrix, "
               "and is timed alone; the held shapes run back to back, timed in chunks of about a quarter second."
               if is_held(search) else " Each timed matmul follows an overwrite of the L2 cache and a re-randomised "
               "output matrix, and is timed alone.")
            + (f" In the brief and the full timings the GPU idles after every matmul for as long as it computed "
               f"({search.burst_duty:.0%} duty), so the board stays under its power limit and the clock at boost; "
               "the held and pinned shapes run back to back at the power limit." if search.burst_duty < 1 else ""))
    if not single_gpu:
        text += (" Every other GPU then measured GPU0's sustainable winner the same way while all the rest of the "
                 "node ran a continuous matmul" + (", with a settle rather than a full soak, since its siblings had "
                                                   "computed at the power limit all along." if is_held(search)
                                                   else "."))
    more = passes_sentence(mm.nodes, mm.num_gpu_passes, "the MSMF shape",
                           "" if single_gpu else ", each pass with every sibling computing")
    doc.para(text + shortened(mm) + (f" {more}" if more else ""))
    gpu = facts[0].name if facts else (nodes[0].gpu_name or "this GPU")
    spec_tf = spec.bf16_tflops if spec else None
    with_msmf = any(_slowest(n) is not None for n in nodes)
    numbers = "Two numbers" if with_msmf else "MAMF"  # without an MSMF shape the Gaps below say why
    lead = (f"{numbers} vs {spec.word} BF16 TFLOPS on {gpu} ({spec_tf:.0f} TFLOPS):" if spec and spec_tf
            else f"{numbers} on {gpu}:")
    doc.para(lead)
    mamf_parts, msmf_parts = [], []
    mamf_best: list[tuple[float, str]] = []  # (figure, its words) per node: at fleet size the fleet's best and worst
    msmf_worst: list[tuple[float, str]] = []
    for n in nodes:
        where = f" on {node_label(n.hostname, n.index)}" if multi else ""
        s = n.search
        if s and s.mamf:
            pct = f" ({_pct(round(s.mamf.mean_tflops), spec_tf)} of {_of_what(spec)})" if spec_tf else ""
            mamf_parts.append(f"{_tf(s.mamf.mean_tflops)} TFLOPS{pct} at {_shape(s.mamf)}{where}"
                              + (f", {_wmhz(s.mamf)}" if _wmhz(s.mamf) else "")
                              + (f" ({mamf_statistic(s.mamf)})" if is_waves(s) else ""))
            mamf_best.append((s.mamf.mean_tflops, mamf_parts[-1]))
        slow = _slowest(n)
        if slow is not None:
            gpu_i, t = slow
            pct = f" ({_pct(round(held_rate(t)), spec_tf)} of {_of_what(spec)})" if spec_tf else ""
            who = f" ({_gpu_name(n, gpu_i, True) if multi else f'gpu{gpu_i}'}, the slowest GPU)" if not single_gpu else ""
            msmf_parts.append(f"{_tf(held_rate(t))} TFLOPS{pct} at {_shape(t)}{where}{who}"
                              + (f", {_wmhz(t)}" if _wmhz(t) else ""))
            msmf_worst.append((held_rate(t), msmf_parts[-1]))
    if fold is not None:  # one part each: the fleet's highest MAMF and its slowest node; the figures of all below
        mamf_parts = [max(mamf_best)[1] + f", the highest of {len(mamf_best)} nodes"] if mamf_best else []
        msmf_parts = [min(msmf_worst)[1] + f", the lowest of {len(msmf_worst)} nodes"] if msmf_worst else []
    bullets = []
    if mamf_parts:
        bullets.append("**MAMF** (Maximum Achievable Matmul FLOPS) — " + "; ".join(mamf_parts) + ": the highest TFLOPS "
                       "any matmul shape reached on GPU0, a short burst at boost clock with the board far under its "
                       "power limit. A ceiling, not a rate any sustained workload holds.")
    if msmf_parts:
        node_fig = "" if single_gpu else (" The node figure is the slowest GPU, since synchronous work runs at its "
                                          "pace.")
        measured = "measured on the only GPU." if single_gpu else "measured on every GPU while all the others compute."
        bullets.append("**MSMF** (Maximum Sustainable Matmul FLOPS) — " + "; ".join(msmf_parts) + ": the best that "
                       "survives once the matmul shape is large enough to pin the board at the power limit and the "
                       f"clock settles, {measured}{node_fig} Compare a sustained workload to this number.")
    doc.bullets(bullets)
    if with_msmf:
        _msmf_table(doc, mm, nodes, spec_tf, multi, fold, msmf_bar)
    for n in nodes[:1] if fold is not None else nodes:  # at fleet size the first node's trace stands for the search
        trace_block(doc, raw_rel, n, multi, result)
    sentences = _missing_msmf(mm) if with_msmf else []
    if fold is not None and with_msmf:
        sentences += [node_msmf_text(node_msmf_units(mm, fold, _values))]
    for i, n in enumerate(nodes):
        if with_msmf:
            sentences += _node_summary(n, multi, single_gpu) if fold is None else []
            sentences += three_pass_sentences(n, True, "MSMF", _tf, "TFLOPS")
        sentences += [w + "." for w in n.warnings]
        sentences += msmf_sentences(n, single_gpu) if with_msmf and (fold is None or i == 0) else []
        sentences += steadiness_sentences(n, multi) + loaded_sentences(n)
        for t in (n.search.sustained if n.search else []):
            if t.label == "SUSPECT":
                held = "held" if t.stage == "hot" else "pinned"
                sentences.append(f"The {held} shape {_shape(t)} {t.why}, so it was labelled SUSPECT and is not an "
                                 "MSMF candidate.")
    if sentences:
        doc.para(" ".join(sentences))


def _missing_msmf(mm: MatmulRecord) -> list[str]:
    """A sentence for each GPU the pass measured no MSMF on (the table holds numbers only)."""
    out = []
    for n in mm.nodes:
        first = _first(n)
        for g in n.gpus:
            if first.get(g.gpu) is None:  # the worker's own line, quoted
                why = raw_output(g.errors[-1], "no result") if g.errors else "no result"
                out.append(f"`{gpu_label(n.hostname, n.index, g.gpu)}` has no MSMF: its measurement failed "
                           f"twice ({why}).")
    return out


def _of_what(spec: Spec | None) -> str:
    return "target" if spec and spec.from_target else "spec"


def _msmf_table(doc: Document, mm: MatmulRecord, nodes: list[NodeMatmul], spec_tf: float | None, multi: bool,
                fold: ComputeFold | None = None, bar: float | None = None) -> None:
    """The runbook's per-GPU table (`GPU | MSMF | MSMF shape | W / MHz | MSMF % spec`, exactly), then the
    timed windows' temperature and drift in a table of their own. At fleet size (``fold``) only the GPUs a
    reader must act on are rows, after the fleet's figures and the rule (compute_fold.py)."""
    doc.para("The MSMF shape is the M×N×K that won the sustained regime, and W / MHz are the board power and SM "
             "clock measured while it ran." if any(_wmhz(t) for n in nodes for t in _first(n).values()) else
             "The MSMF shape is the M×N×K that won the sustained regime.")
    rows, windows = [], []
    units: list[Unit] = []
    window_units: list[Unit] = []
    for n in mm.nodes:
        first = _first(n)
        for g in n.gpus:
            t = first.get(g.gpu)
            if t is None:  # no measurement: a sentence below the table says why (_missing_msmf)
                continue
            value = round(held_rate(t))
            name = _gpu_name(n, g.gpu, multi)
            if fold is not None:
                units.append(Unit(f"`{name}`", (float(value),), fold.msmf_group(n, g.gpu)))
                if t.held and t.temp_c is not None:
                    window_units.append(Unit(f"`{name}`", (t.temp_c, 100 * t.drift_frac), units[-1].group))
                if not fold.msmf_listed(n, g.gpu):
                    continue
            under = f" (under {bar:.0f})" if bar is not None and held_rate(t) < bar else ""  # its rule's bar
            rows.append([name, f"{value}{under}", _shape(t), _wmhz(t, " / ", ""), _pct(value, spec_tf).rstrip("%")])
            if t.held and t.temp_c is not None:  # held timings carry their window's temperature and drift
                windows.append([name, f"{t.temp_c:.0f}", f"{100 * t.drift_frac:+.2f}"])
    keep = [0, 1, 2] + ([3] if rows and all(r[3] for r in rows) else []) + ([4] if spec_tf else [])
    headers = ["GPU", "MSMF", "MSMF shape", "W / MHz", "MSMF % spec"]
    if fold is not None:
        doc.para(fold.msmf_text(units, len(rows)))
        if not rows:
            return
    doc.table([headers[i] for i in keep], [[r[i] for i in keep] for r in rows], "lrl" + "r" * (len(keep) - 3))
    if fold is not None and window_units and len(window_units) == len(units):
        doc.para(fold.windows_text(window_units))
    write_windows(doc, windows, len(rows))


def _slowest(n: NodeMatmul) -> tuple[int, ShapeTiming] | None:
    first = [(g, t) for g, t in _first(n).items() if t is not None]
    return min(first, key=lambda gt: held_rate(gt[1])) if first else None


def _node_summary(n: NodeMatmul, multi: bool, single_gpu: bool) -> list[str]:
    if single_gpu or n.num_gpus == 1:
        who = f"{node_label(n.hostname, n.index)} has one GPU" if multi else "This node has one GPU"
        return [f"{who}, so nothing computed beside it and there is no median or spread: gpu{n.gpus[0].gpu} is the only GPU."]
    vals = [round(v) for v in _values(n, 0).values() if v is not None]
    if not vals:
        return []
    where = f" of {node_label(n.hostname, n.index)}" if multi else ""
    med = statistics.median(vals)
    return [f"Node MSMF{where} (the slowest GPU): {min(vals)} TFLOPS; median {med:.0f} TFLOPS; spread "
            f"{max(vals) - min(vals)} TFLOPS ({min(vals)}–{max(vals)} TFLOPS)."]


# -- Findings --------------------------------------------------------------------------------


def _findings(result: SectionResult, health: HealthRecord | None, mm: MatmulRecord | None, lemon: LemonRecord | None,
              spec: Spec | None, asked_for_spec: bool = False, gpus: GpuJudgement | None = None) -> None:
    """``asked_for_spec``: the Environment section already asks for this GPU's vendor figures; ``gpus``: the
    figures judged by the rules table."""
    bad: dict[str, list[str]] = {}
    if health:
        for n in health.nodes:
            label = node_label(n.hostname or n.node, n.index)
            for r in n.results:
                if r.result == "Fail":
                    where = _failed_where(label, r)
                    result.findings.append(Finding("underperforming", SUBSYSTEM,
                                                   f"`dcgmi diag -r {health.level}` Fail: `{r.plugin}` on {where} "
                                                   "(the tool's message is under Hardware health)."))
    if mm:
        note_bad_gpus(bad, mm.nodes, "MSMF", _tf, lambda g: "dead in the GPU performance pass: its MSMF measurement "
                       f"failed twice ({g.errors[-1] if g.errors else 'no result'})")
    if lemon:
        note_bad_gpus(bad, lemon.nodes, "lemon GEMM", _tf1, lambda g: f"dead in the lemon GEMM pass: {g.error}")
    judged = [j.to_dict() for j in gpus.judged] if gpus else []
    if gpus:
        for j in gpus.misses():
            label, _, which = j.subject.partition(" ")
            name = {"gpu.mamf": "MAMF", "gpu.msmf": "MSMF", "gpu.lemon": "lemon GEMM"}[j.rule]
            fmt = _tf1 if j.rule == "gpu.lemon" else _tf
            bad.setdefault(label, []).append(
                f"{name} {fmt(j.value)} TFLOPS{' in ' + which if which else ''}, under its bar of {j.bar:.0f} TFLOPS "
                f"({rule(j.rule).bar(1.0, j.source):.0%} of {gpus.reference.words})")
    for label, parts in bad.items():
        result.findings.append(Finding("underperforming", SUBSYSTEM, f"`{label}` — " + "; ".join(parts) + ".",
                                       [d for d in judged if d["subject"].split(" ")[0] == label and not d["met"]]))
    if any(f.category == "underperforming" for f in result.findings):
        return
    healthy = _healthy_text(health, mm, lemon, spec, gpus)
    if healthy:
        judged_ok = bool(gpus and gpus.reference.tflops and gpus.judged)
        category = "healthy" if judged_ok or (health and not mm and not lemon) else "needs_input"
        if category == "needs_input":
            name = gpus.reference.model if gpus else (spec.name if spec else "GPU")
            healthy += (f" There is no published measured MAMF for the {name} and no operator target to judge these "
                        "against" + (" until the vendor's figures above arrive." if asked_for_spec else
                                     f": set `gpu_bf16_tflops` under `[targets]` to the matmul TFLOPS a {name} "
                                     "should reach."))
        result.findings.append(Finding(category, SUBSYSTEM, healthy, judged))


def _healthy_text(health: HealthRecord | None, mm: MatmulRecord | None, lemon: LemonRecord | None,
                  spec: Spec | None, gpus: GpuJudgement | None = None) -> str:
    parts = []
    if health:
        total = sum(len({g for r in n.results for g in r.gpus}) for n in health.nodes if n.ran)
        parts.append(f"`dcgmi diag -r {health.level}` Pass" + (f" on all {total} GPUs" if total else ""))
    spec_tf = spec.bf16_tflops if spec else None
    bars = {r: rule(r).bar(gpus.reference.tflops, gpus.reference.source)
            for r in ("gpu.mamf", "gpu.msmf", "gpu.lemon")} if gpus and gpus.reference.tflops else {}
    if mm:
        mamfs = [n.search.mamf.mean_tflops for n in mm.nodes if n.search and n.search.mamf]
        msmfs = [held_rate(s[1]) for n in mm.nodes if (s := _slowest(n))]
        if mamfs:
            best = round(max(mamfs))
            of = f" ({_pct(best, spec_tf)} of the {spec.word} {spec_tf:.0f} TFLOPS dense BF16)" if spec and spec_tf else ""
            bar = f", at or above its bar of {bars['gpu.mamf']:.0f} TFLOPS" if bars else ""
            parts.append(f"MAMF {best} TFLOPS{of}{bar}" if len(mamfs) == 1 else
                         f"MAMF up to {best} TFLOPS{of} on {len(mamfs)} nodes{bar.replace('its', 'their')}")
        if msmfs:
            low = round(min(msmfs))
            parts.append(f"{'MSMF' if len(msmfs) == 1 and mm.nodes[0].num_gpus == 1 else 'node MSMF (the slowest GPU)'} "
                         f"{low} TFLOPS" + (f" ({_pct(low, spec_tf)})" if spec_tf else "")
                         + (" on the slowest node" if len(msmfs) > 1 else ""))
    if lemon and lemon.nodes:
        vals = [g.tflops[0] for n in lemon.nodes for g in n.gpus if g.tflops and g.tflops[0] is not None]
        if len(vals) == 1:
            parts.append(f"lemon GEMM {vals[0]:.1f} TFLOPS on the one GPU, which is not dead")
        elif vals:
            parts.append(f"lemon GEMM {min(vals):.1f}–{max(vals):.1f} TFLOPS across {len(vals)} GPUs, none dead or "
                         "slower than its node's median by the three-pass rule")
    figures = " and ".join(name for name, ran in (("MSMF", bool(mm and mm.nodes)),
                                                  ("lemon GEMM", bool(lemon and lemon.nodes))) if ran)
    if bars and figures:
        parts.append(f"every GPU's {figures} at or above the bar of {bars['gpu.msmf']:.0f} TFLOPS "
                     f"({rule('gpu.msmf').bar(1.0, gpus.reference.source):.0%} of {gpus.reference.words})"
                     if gpus else "")
    return "; ".join(p for p in parts if p) + "." if parts else ""
