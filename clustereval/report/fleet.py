"""Fleet-relative Findings: each unit against its peers, with the confidence behind the verdict. Pure.

Beside the spec and target verdicts, never instead of them: a unit the fleet statistics name slow
gets its own Underperforming bullet, labelled fleet-relative, with its figures, its peers' median,
the shortfall and the confidence; a subsystem's Healthy (or Needs operator input) bullet gains one
sentence per kind of figure saying the smallest shortfall this run could have found, or that the
fleet was too small or too noisy to judge (never a shortfall of 100% or more, which is no figure).
The statistics are ``analysis.fleet`` / ``fleetstats``.
"""

from __future__ import annotations

from typing import Any

from clustereval.analysis.fleet import FleetKind
from clustereval.analysis.fleetstats import (
    DETECTION_PROBABILITY,
    REPEATS,
    TOO_NOISY,
    TOO_SMALL,
    GroupJudgement,
    UnitVerdict,
)
from clustereval.records import Finding
from clustereval.report.units import plural

PASS_WORDS = {1: "in one pass", 2: "in two passes", 3: "in three passes"}


UNIT_WORDS = {"GB/s": "GBps"}
LONGEST_CHAIN = 5  # more samples than this (a GPU's copies, timed one by one) are said as their mean and range  # the report's prose writes busbw in GBps, as the runbook does


def _num(value: float, unit: str) -> str:
    word = UNIT_WORDS.get(unit, unit)
    if unit == "TFLOPS":
        return f"{value:.1f} {word}"
    return f"{value:.3f} {word}" if value < 10 else f"{value:.1f} {word}"


def _pct(frac: float) -> str:
    return f"{frac * 100:.1f}%"


def _confidence(k: FleetKind) -> str:
    return f"{k.policy.confidence * 100:g}%"


def _figures(k: FleetKind, samples: tuple[float, ...]) -> str:
    chain = " / ".join(_num(v, k.unit) for v in samples)
    if k.kind in ("msmf", "lemon") and len(samples) <= LONGEST_CHAIN:
        return f"{k.what} {chain} {PASS_WORDS.get(len(samples), f'in {len(samples)} passes')}"
    what = "passes" if k.kind in ("msmf", "lemon") else "samples"
    if len(samples) == 1:
        return f"{k.what} {chain}"
    if len(samples) > LONGEST_CHAIN:
        mean = sum(samples) / len(samples)
        return (f"{k.what} {_num(mean, k.unit)}, the mean of {len(samples)} {what} "
                f"({_num(min(samples), k.unit)} to {_num(max(samples), k.unit)})")
    return f"{k.what} {chain} over {plural(len(samples), 'sample')}"


def slow_text(k: FleetKind, g: GroupJudgement, u: UnitVerdict) -> str:
    samples = next(s.samples for s in k.units if s.unit == u.unit)
    peers = f" ({g.group})" if g.group else ""
    judged = sum(len(x.units) for x in k.groups if x.judged)
    return (f"fleet-relative: `{u.unit}` — {_figures(k, samples)}, {_pct(u.shortfall_frac)} below the median "
            f"of the {plural(g.num_units, k.noun)} of its kind{peers}, {_num(g.median, k.unit)}; slower than its peers at "
            f"{_confidence(k)} confidence, corrected for the {plural(judged, k.noun)} judged (the practical "
            f"threshold is {_pct(k.policy.threshold_frac)}).")


def group_sentence(k: FleetKind, g: GroupJudgement) -> str:
    """What this run could have seen in one peer group, in one sentence."""
    peers = f" ({g.group})" if g.group else ""
    whose = f"the {plural(g.num_units, k.noun)}{peers}"
    if g.why_not == TOO_SMALL:
        return (f"Fleet-relative {k.what}: {whose} are too few to judge against each other "
                f"(that takes at least {plural(k.policy.min_units, k.noun)}).")
    if not g.judged:
        return f"Fleet-relative {k.what}: {whose} have no repeats or spread to judge by."
    # one figure a unit: its peers' spread is all the run knows of how much one figure moves, and the
    # verdict allows for heavy tails in it (fleetstats.ONE_FIGURE_TAIL_DF), so the sentence says so
    noise = (f"repeat noise {_pct(g.noise_frac)}" if g.noise_basis == REPEATS
             else f"one figure each, a spread of {_pct(g.noise_frac)} between them")
    if g.detectable_frac is None:
        # no shortfall short of 100% would have been found: the fleet was too noisy to judge, and nothing more
        return f"Fleet-relative {k.what}: {whose} are too noisy to judge against each other ({noise})."
    # "a GPU whose MSMF fell 1.6% short": never "GPU 1.6%", which reads as a GPU's index
    found = (f"a {k.noun} whose {k.what} fell {_pct(g.detectable_frac)} short of its peers would have been "
             f"found at {_confidence(k)} confidence in {DETECTION_PROBABILITY:.0%} of runs")
    if g.why_not == TOO_NOISY:
        return (f"Fleet-relative {k.what}: {whose} are too noisy to call healthy against each other ({noise}): only "
                f"{found}.")
    return f"Fleet-relative {k.what}: {whose}, median {_num(g.median, k.unit)}, {noise}; {found}."


def fleet_findings(kinds: list[FleetKind], findings: list[Finding]) -> list[Finding]:
    """``findings`` with the fleet-relative bullets and sentences added (a new list)."""
    out = list(findings)
    for k in kinds:
        for g in k.groups:
            for u in g.slow:
                out.append(Finding("underperforming", k.subsystem, slow_text(k, g, u)))
        # a group of one GPU has nobody to be compared with: nothing to say
        sentences = " ".join(group_sentence(k, g) for g in k.groups if len(g.units) > 1 and not g.slow)
        if not sentences:
            continue
        host = next((i for i, f in enumerate(out) if f.subsystem == k.subsystem
                     and f.category in ("healthy", "needs_input")), None)
        if host is not None:
            f = out[host]
            text = f.text.rstrip()
            out[host] = Finding(f.category, f.subsystem, f"{text}{'' if text.endswith('.') else '.'} {sentences}")
        elif not any(f.subsystem == k.subsystem and f.category == "underperforming" for f in out):
            out.append(Finding("healthy", k.subsystem, sentences))
    return out


def with_fleet_findings(view: Any, findings: list[Finding]) -> list[Finding]:
    """The report's findings with the fleet-relative ones, judged under the view's policy."""
    return fleet_findings(view.fleet_kinds, findings)
