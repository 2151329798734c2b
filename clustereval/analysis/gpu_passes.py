"""Judging GPUs against their node: names, medians, the three-pass rule, SM wave coverage."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clustereval.analysis.gpus import gpu_label  # noqa: F401 - the one GPU name form, re-exported here

BELOW_MEDIAN = 0.02  # a GPU more than 2% below its node median is flagged (the runbook's rule)
NUM_PASSES = 3  # ... and under-performing only when it is below in all three passes

# The lemon GEMM's CTA tiling: 128×256 output tiles (the runbook's SM-coverage arithmetic).
TILE_M, TILE_N = 128, 256


def node_label(hostname: str, node_index: int) -> str:
    return f"{hostname}(node{node_index})"


def median_of(values: Mapping[int, float | None]) -> float | None:
    alive = [v for v in values.values() if v is not None]
    return statistics.median(alive) if alive else None


def below_median(values: Mapping[int, float | None], threshold: float = BELOW_MEDIAN) -> dict[int, float]:
    """GPU -> fraction below the median, for the GPUs more than ``threshold`` below it."""
    med = median_of(values)
    if not med:
        return {}
    return {g: (med - v) / med for g, v in sorted(values.items())
            if v is not None and (med - v) / med > threshold}


@dataclass
class PassVerdict:
    """The three-pass rule applied to one node."""

    medians: list[float] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)  # below in the first pass
    underperforming: list[int] = field(default_factory=list)  # below in every pass
    dip_not_repeated: list[int] = field(default_factory=list)  # flagged, but not below every time
    below: dict[int, list[float]] = field(default_factory=dict)  # GPU -> fraction below, per pass
    needs_more_passes: bool = False


def three_pass(passes: Sequence[Mapping[int, float | None]], threshold: float = BELOW_MEDIAN) -> PassVerdict:
    """One pass cannot call a GPU slow: a GPU flagged in pass 1 needs two more passes, and is
    under-performing only if it is more than ``threshold`` below its node median in all three."""
    verdict = PassVerdict()
    if not passes:
        return verdict
    verdict.medians = [m for m in (median_of(p) for p in passes) if m is not None]
    first = below_median(passes[0], threshold)
    verdict.flagged = sorted(first)
    if not first:
        return verdict
    if len(passes) < NUM_PASSES:
        verdict.needs_more_passes = True
        return verdict
    for gpu in verdict.flagged:
        fracs = []
        for p in passes[:NUM_PASSES]:
            med, v = median_of(p), p.get(gpu)
            fracs.append((med - v) / med if med and v is not None else 0.0)
        verdict.below[gpu] = fracs
        if all(f > threshold for f in fracs):
            verdict.underperforming.append(gpu)
        else:
            verdict.dip_not_repeated.append(gpu)
    return verdict


@dataclass(frozen=True)
class SmCoverage:
    """How the fixed 16384³ matmul's CTAs (thread blocks) fill this GPU's SMs."""

    size: int
    num_sms: int
    num_ctas: int  # (size/128) × (size/256)
    full_waves: int  # num_ctas // SMs
    tail_ctas: int  # num_ctas % SMs
    wave_efficiency: float  # 1 − tail / num_ctas, as the runbook defines it


def sm_coverage(num_sms: int, size: int = 16384) -> SmCoverage:
    if num_sms <= 0:
        raise ValueError("SM count must be positive")
    ctas = (size // TILE_M) * (size // TILE_N)
    return SmCoverage(size=size, num_sms=num_sms, num_ctas=ctas, full_waves=ctas // num_sms,
                      tail_ctas=ctas % num_sms, wave_efficiency=1 - (ctas % num_sms) / ctas)


def spread(values: Sequence[float]) -> float:
    return max(values) - min(values) if values else 0.0
