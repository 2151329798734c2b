"""The GPUs' figures judged by the rules table: MAMF (GPU0's search on each node), every GPU's MSMF
and lemon GEMM in every pass, against the operator's ``gpu_bf16_tflops`` or the runbook author's
published measured MAMF for the model (``analysis/rules.py``). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.analysis.gpus import gpu_label
from clustereval.analysis.rules import Judged, judge, published_mamf
from clustereval.analysis.specs import lookup_gpu
from clustereval.records.compute import LemonRecord, MatmulRecord


@dataclass
class GpuReference:
    """What the GPUs' TFLOPS are judged against; ``tflops`` None: nothing (Needs operator input)."""

    model: str  # the spec database's name ("H200 SXM"), else the name nvidia-smi printed
    tflops: float | None
    source: str  # "operator" | "published" | ""

    @property
    def words(self) -> str:
        if self.source == "operator":
            return f"the operator's target of {self.tflops:g} TFLOPS"
        return f"the published measured MAMF of {self.tflops:g} TFLOPS for the {self.model}"


@dataclass
class GpuJudgement:
    reference: GpuReference
    judged: list[Judged] = field(default_factory=list)

    def misses(self) -> list[Judged]:
        return [j for j in self.judged if not j.met]


def reference(gpu_name: str, power_limit_w: float | None, operator_tflops: float | None) -> GpuReference:
    spec = lookup_gpu(gpu_name, power_limit_w=power_limit_w) if gpu_name else None
    model = spec.key if spec else gpu_name
    if operator_tflops:
        return GpuReference(model, operator_tflops, "operator")
    mamf = published_mamf(spec.key) if spec else None
    return GpuReference(model, mamf, "published" if mamf else "")


def _subject(label: str, passno: int, num_passes: int) -> str:
    return f"{label} pass {passno + 1}" if num_passes > 1 else label


def judge_gpus(ref: GpuReference, mm: MatmulRecord | None, lemon: LemonRecord | None) -> GpuJudgement:
    out = GpuJudgement(ref)
    if not ref.tflops:
        return out
    for n in mm.nodes if mm else []:
        s = n.search
        if s is not None and s.mamf is not None:
            out.judged.append(judge("gpu.mamf", gpu_label(n.hostname, n.index, 0), s.mamf.mean_tflops,
                                    ref.tflops, ref.source))
        for g in n.gpus:
            for i, value in enumerate(g.tflops):
                if value is not None:
                    out.judged.append(judge("gpu.msmf", _subject(gpu_label(n.hostname, n.index, g.gpu), i,
                                                                 len(g.tflops)), value, ref.tflops, ref.source))
    for ln in lemon.nodes if lemon else []:
        for lg in ln.gpus:
            for i, value in enumerate(lg.tflops):
                if value is not None:
                    out.judged.append(judge("gpu.lemon", _subject(gpu_label(ln.hostname, ln.index, lg.gpu), i,
                                                                  len(lg.tflops)), value, ref.tflops, ref.source))
    return out
