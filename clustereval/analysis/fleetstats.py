"""Fleet-relative verdicts with the confidence behind them. Pure.

Every per-unit figure a run measures (a GPU's MSMF or lemon passes, a node's pairwise samples, a
node's write) is judged against the unit's peers of the same kind:

- the **fleet centre** is the median of the units' means, its **spread** their MAD;
- the **repeat noise** (per repeat, as a fraction of the unit's mean) is pooled over the units'
  own repeats; a unit clearly noisier than the pool (an F test at the stated confidence, corrected
  for the number of units) is judged on its own noise and its own few degrees of freedom; with no
  repeats at all the fleet's spread stands in for it (an upper bound);
- a unit with repeats is **slow** only when both hold: its shortfall against the centre is at
  least the practical threshold, and a one-sided Student t test of "no shortfall" is rejected at the
  stated confidence after Holm's step-down correction over every unit judged together (so a
  1000-GPU fleet does not flag ten healthy GPUs by chance: the chance of naming any healthy unit is
  at most 1 - confidence);
- a unit with **one figure** is judged the same way, except that its figure is taken to scatter
  as widely as Student's t with ``ONE_FIGURE_TAIL_DF`` degrees of freedom (scaled to the noise), not
  as a normal: one figure cannot tell a pass that hiccuped from a slow unit, so the verdict must hold
  for fleets whose figures have heavier tails than a normal's, and the p-value also carries the
  uncertainty of the spread it is measured in (``one_figure_sf``);
- the **detectable shortfall** is the smallest shortfall a typical unit of this run would have
  been found with, at that confidence, in ``DETECTION_PROBABILITY`` of runs; None where that is a
  shortfall of 100% or more, which is no figure: the group was too noisy to judge.

The distributions are scipy's (``scipy.special``'s t, F and normal tails and quantiles, the
functions ``scipy.stats`` calls); Holm's step-down is written here, since scipy has no family-wise
procedure (its ``false_discovery_control`` bounds the false discovery rate, a weaker promise than
"no healthy unit named in 99% of runs").

``judge_fleet(units, policy)`` takes ``UnitSamples`` (a label, a peer group, the repeats) and
returns one ``GroupJudgement`` per peer group. ``compare_runs`` judges a change between two runs
against both runs' repeat noise. The methods are written out in docs/statistics.md, and
``benchmarks/fleet_false_positives.py`` measures the false-positive rate on simulated fleets.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

# numpy and scipy are imported where they are used: every CLI start imports this module (app.py reads the
# policy), and scipy.stats alone costs about 1.4 s of CPU, paid by each of the test suite's thousand CLI
# processes; the tails come from scipy.special (stdtr, fdtrc, ndtr: what scipy.stats' t, F and normal call)
if TYPE_CHECKING:
    import numpy as np

DETECTION_PROBABILITY = 0.9  # "would have been found": in this share of runs, at the stated confidence
MAD_TO_SD = 1.4826  # the MAD of normal data times this is its standard deviation
MEDIAN_EFFICIENCY = math.pi / 2  # variance of a sample median over that of the mean, normal data
# A unit judged on one figure: that figure may scatter as widely as Student's t with this many degrees of
# freedom (heavier tails than any t with more; the normal is the limit). 3 is the fewest with a finite
# variance the pooled repeat noise can stand for; benchmarks/fleet_false_positives.py measures fleets
# from normal to t with 3 degrees of freedom
ONE_FIGURE_TAIL_DF = 3
_HERMITE_NODES = 16  # Gauss-Hermite nodes over the spread's own uncertainty (one_figure_sf; 16 agree with 96 to 9 digits)

TOO_SMALL = "too small"
TOO_NOISY = "too noisy"
NO_REPEATS = "no repeats"

FLEET_SPREAD = "fleet spread"
REPEATS = "repeats"


@dataclass(frozen=True)
class VerdictPolicy:
    """How sure a fleet verdict must be, and how large a shortfall matters (``[verdicts]``)."""

    confidence: float = 0.99
    """The chance that no healthy unit of the whole fleet is named slow."""
    threshold_frac: float = 0.02
    """A unit is slow only when it is at least this far below its peers' median (a fraction)."""
    min_units: int = 4
    """Fewer peers than this: the group is too small to judge."""
    max_detectable_frac: float = 0.10
    """A group whose detectable shortfall is above this is too noisy to call healthy."""
    group_by: tuple[str, ...] = ("model", "driver")
    """What makes GPUs peers: ``model``, ``driver`` (both: same model and driver), or nothing."""

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence


@dataclass(frozen=True)
class UnitSamples:
    """One unit's repeats of one figure (higher is better), and the peer group it belongs to."""

    unit: str
    samples: tuple[float, ...]
    group: str = ""


@dataclass
class UnitVerdict:
    unit: str
    group: str
    num_repeats: int
    mean: float
    noise_frac: float | None  # the unit's own repeat noise (sd / mean); None with one repeat
    shortfall_frac: float  # (fleet median - mean) / fleet median; negative: faster than the median
    se_frac: float  # the standard error of that shortfall
    p_value: float  # one-sided: the chance of a shortfall this large with no real one (1.0 at or above the centre)
    slow: bool = False
    own_noise: bool = False  # judged on its own noise (it was noisier than the pool)


@dataclass
class GroupJudgement:
    """One peer group's statistics and verdicts."""

    group: str
    num_units: int
    confidence: float
    threshold_frac: float
    median: float = 0.0  # the fleet centre: median of the units' means
    mad: float = 0.0  # median absolute deviation of the units' means
    spread_frac: float = 0.0  # 1.4826 * MAD / median
    noise_frac: float = 0.0  # per-repeat noise used for the group (fraction of the mean)
    noise_basis: str = ""  # "repeats" | "fleet spread"
    noise_df: int = 0  # degrees of freedom behind noise_frac
    typical_repeats: int = 0
    # smallest shortfall found at the confidence (see module doc); None when not judged, or when that
    # shortfall is 100% or more (too noisy to judge at all)
    detectable_frac: float | None = None
    judged: bool = False
    why_not: str = ""  # TOO_SMALL | TOO_NOISY | NO_REPEATS, with judged False or (too noisy) True
    units: list[UnitVerdict] = field(default_factory=list)

    @property
    def slow(self) -> list[UnitVerdict]:
        return sorted((u for u in self.units if u.slow), key=lambda u: -u.shortfall_frac)

    @property
    def too_noisy(self) -> bool:
        return self.why_not == TOO_NOISY


# --- the distributions (scipy) ----------------------------------------------------------------------

def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (the normal when df is infinite)."""
    from scipy import special

    # the upper tail as the lower one at -t: 1 - cdf(t) would round to 0 far out
    return float(special.ndtr(-t) if math.isinf(df) else special.stdtr(df, -t))


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F > f) for the F distribution with (``df1``, ``df2``) degrees of freedom."""
    from scipy import special

    return float(special.fdtrc(df1, df2, f)) if f > 0 else 1.0


def t_quantile(p_upper: float, df: float) -> float:
    """The t with P(T > t) = ``p_upper`` (by symmetry, minus the lower ``p_upper`` quantile)."""
    from scipy import special

    return float(-special.ndtri(p_upper) if math.isinf(df) else -special.stdtrit(df, p_upper))


def z_quantile(p: float) -> float:
    """The standard normal quantile (P(Z < z) = p)."""
    from scipy import special

    return float(special.ndtri(p))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with the family-wise error held at ``alpha``.

    The k-th smallest p-value (from 0) is compared with alpha / (m - k); the first that exceeds its
    level stops the procedure, and it and every larger one are kept."""
    import numpy as np

    p = np.asarray(p_values, dtype=float)
    m = p.size
    if not m:
        return []
    order = np.argsort(p, kind="stable")
    over = p[order] > alpha / (m - np.arange(m))
    stop = int(np.argmax(over)) if over.any() else m
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:stop]] = True
    return rejected.tolist()


# --- one figure a unit --------------------------------------------------------------------------------

def _tail_unit(basis: str) -> float:
    """The reference t's own measure of spread, in the units the noise is measured in: its MAD-implied
    standard deviation for the fleet's spread (1.4826 MAD), its standard deviation for pooled repeats."""
    nu = ONE_FIGURE_TAIL_DF
    if basis == FLEET_SPREAD:
        return MAD_TO_SD * t_quantile(0.25, nu)
    return math.sqrt(nu / (nu - 2))


def _spread_log_var(basis: str, num_units: int, df: int) -> float:
    """The variance of log(estimated noise / true noise).

    The fleet's spread is a MAD: asymptotically its log scatters by 1 / (16 n f(q)^2 q^2) for the
    reference t's upper quartile q and density f there; a MAD of n values has n - 1.5 values' worth of
    information about it, and one fewer for an odd n, whose median is a unit at deviation 0 (fitted on
    simulated t fleets of 4 to 128 units with the tested unit at the extreme, always on the wide side).
    Pooled repeats are a standard deviation with ``df`` degrees of freedom: 1 / (2 df)."""
    if basis == FLEET_SPREAD:
        from scipy import special

        nu = ONE_FIGURE_TAIL_DF
        q = t_quantile(0.25, nu)
        # Student's t density at q, normalised by scipy's beta function
        density = (1 + q * q / nu) ** (-(nu + 1) / 2) / (math.sqrt(nu) * float(special.beta(0.5, nu / 2)))
        effective = (num_units - 1 if num_units % 2 else num_units) - 1.5
        return 1.0 / (16.0 * density ** 2 * q ** 2 * max(effective, 0.5))
    return 1.0 / (2.0 * max(df, 1))


def one_figure_sf(d: np.ndarray | float, basis: str, num_units: int, df: int) -> np.ndarray:
    """P(D >= d) for a healthy unit judged on one figure, D its shortfall over its standard error.

    The figure scatters as Student's t with ``ONE_FIGURE_TAIL_DF`` degrees of freedom scaled to the true
    noise, and D divides by the estimated noise, whose log is taken as normal with the variance of
    ``_spread_log_var``: the tail is averaged over that scatter by Gauss-Hermite quadrature."""
    import numpy as np
    from scipy import special

    nodes, weights = _hermite()
    scale = np.exp(math.sqrt(_spread_log_var(basis, num_units, df)) * nodes) * _tail_unit(basis)
    d = np.atleast_1d(np.asarray(d, dtype=float))
    out: np.ndarray = special.stdtr(ONE_FIGURE_TAIL_DF, -np.outer(d, scale)) @ weights  # stdtr(-x): the t's upper tail
    return out


@cache
def _hermite() -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights for an expectation over a standard normal."""
    from scipy import special

    nodes, weights = special.roots_hermitenorm(_HERMITE_NODES)
    return nodes, weights / math.sqrt(2.0 * math.pi)


def _one_figure_critical(p: float, basis: str, num_units: int, df: int) -> float:
    """The D at which ``one_figure_sf`` falls to ``p``."""
    from scipy import optimize

    hi = 10.0
    while one_figure_sf(hi, basis, num_units, df)[0] > p:
        hi *= 4.0
    return float(optimize.brentq(lambda d: float(one_figure_sf(d, basis, num_units, df)[0]) - p, 0.0, hi,
                                 xtol=1e-6, rtol=1e-10))


# --- the fleet ------------------------------------------------------------------------------------

def _mean_sd(xs: Sequence[float]) -> tuple[float, float | None]:
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))


def detectable_frac(noise_frac: float, repeats: int, num_units: int, df: float, policy: VerdictPolicy,
                    num_tests: int | None = None, noise_basis: str = REPEATS) -> float:
    """The smallest shortfall a unit with ``repeats`` repeats at ``noise_frac`` per repeat is named
    with, in ``DETECTION_PROBABILITY`` of runs: the flag needs the estimate past both the practical
    threshold and the corrected critical value, and the estimate scatters by its standard error. For a
    unit of one figure the estimate scatters by the reference t, and the bar it must clear moves with
    the spread it is measured in (``_one_figure_detectable``). It may be 100% or more: no shortfall would be."""
    se = _se(noise_frac, max(1, repeats), noise_frac / math.sqrt(max(1, repeats)), num_units)
    tests = num_tests or num_units
    if repeats <= 1:
        crit = _one_figure_critical(policy.alpha / tests, noise_basis, num_units, int(df))
        return _one_figure_detectable(crit, se, policy.threshold_frac, noise_basis, num_units, int(df))
    crit = t_quantile(policy.alpha / tests, df if df > 0 else math.inf)
    return max(policy.threshold_frac, crit * se) + z_quantile(DETECTION_PROBABILITY) * se


def _one_figure_detectable(crit: float, se: float, threshold: float, basis: str, num_units: int, df: int) -> float:
    """The true shortfall x at which a unit of one figure is named in ``DETECTION_PROBABILITY`` of runs.

    Its measured shortfall is x plus se times the reference t (scaled to the noise); it is named when
    that clears max(threshold, crit × the estimated se), and the estimate is se times the spread's own
    scatter (log-normal, ``_spread_log_var``): the chance is averaged over that scatter as in
    ``one_figure_sf``. With few units the spread's scatter, not the figure's, sets most of it."""
    import numpy as np
    from scipy import optimize, special

    nodes, weights = _hermite()
    bars = np.maximum(threshold, crit * se * np.exp(math.sqrt(_spread_log_var(basis, num_units, df)) * nodes))
    unit = _tail_unit(basis)

    def found(x: float) -> float:
        # P(x + se * eps >= bar) = P(t > (bar - x) / se * unit), the reference t's upper tail
        return float(special.stdtr(ONE_FIGURE_TAIL_DF, -(bars - x) / se * unit) @ weights) - DETECTION_PROBABILITY

    hi = float(bars.max()) + 10.0 * se
    while found(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(found, 0.0, hi, xtol=1e-9, rtol=1e-10))


def _se(noise_frac: float, repeats: int, unit_mean_sd_frac: float, num_units: int) -> float:
    """The shortfall's standard error: the unit's mean plus the fleet median it is measured from."""
    var_unit = noise_frac ** 2 / repeats
    var_median = MEDIAN_EFFICIENCY * unit_mean_sd_frac ** 2 / max(1, num_units)
    return math.sqrt(var_unit + var_median)


def judge_fleet(units: Sequence[UnitSamples], policy: VerdictPolicy | None = None) -> list[GroupJudgement]:
    """Judge every unit against the peers of its group; Holm's correction runs over all the units
    passed together, so call it once per kind of figure for the whole fleet."""
    policy = policy or VerdictPolicy()
    groups: dict[str, list[UnitSamples]] = {}
    for u in units:
        clean = tuple(float(x) for x in u.samples if x is not None and math.isfinite(float(x)))
        if clean:
            groups.setdefault(u.group, []).append(UnitSamples(u.unit, clean, u.group))
    judged_units = sum(len(g) for g in groups.values() if len(g) >= policy.min_units)
    out: list[GroupJudgement] = []
    tests: list[UnitVerdict] = []
    for name, members in groups.items():
        g = _group(name, members, policy, judged_units)
        out.append(g)
        if g.judged:
            tests += g.units
    rejected = holm([v.p_value for v in tests], policy.alpha)
    for verdict, rej in zip(tests, rejected, strict=True):
        verdict.slow = rej and verdict.shortfall_frac >= policy.threshold_frac
    return out


def _p_values(g: GroupJudgement, shortfall: np.ndarray, se: np.ndarray, repeats: np.ndarray,
              df: np.ndarray) -> np.ndarray:
    """One-sided p-values of "no shortfall": Student t on a unit's repeats, the one-figure tail for a
    unit of one figure; 1 at or above the centre, 0 below it with no error at all."""
    import numpy as np
    from scipy import special

    p = np.ones(shortfall.size)
    below = shortfall > 0
    exact = below & (se <= 0)
    p[exact] = 0.0
    test = below & (se > 0)
    d = np.divide(shortfall, se, out=np.zeros_like(shortfall), where=se > 0)
    one = test & (repeats == 1)
    if one.any():
        p[one] = one_figure_sf(d[one], g.noise_basis, g.num_units, g.noise_df)
    many = test & (repeats > 1)
    if many.any():
        p[many] = np.where(df[many] > 0, special.stdtr(np.maximum(df[many], 1), -d[many]), special.ndtr(-d[many]))
    return p


def _group(name: str, members: list[UnitSamples], policy: VerdictPolicy, num_tests: int) -> GroupJudgement:
    import numpy as np
    from scipy import special

    g = GroupJudgement(group=name, num_units=len(members), confidence=policy.confidence,
                       threshold_frac=policy.threshold_frac)
    stats_ = [(m, *_mean_sd(m.samples)) for m in members]
    means = [mean for _, mean, _ in stats_]
    g.median = statistics.median(means)
    g.mad = statistics.median(abs(x - g.median) for x in means)
    g.spread_frac = MAD_TO_SD * g.mad / g.median if g.median else 0.0
    g.typical_repeats = int(statistics.median(len(m.samples) for m in members))
    if g.median <= 0:
        g.why_not = TOO_SMALL
        return g
    num_df = sum(len(m.samples) - 1 for m, _, sd in stats_ if sd is not None)
    if num_df:
        pooled = sum((len(m.samples) - 1) * (sd / mean) ** 2 for m, mean, sd in stats_ if sd is not None and mean)
        g.noise_frac, g.noise_basis, g.noise_df = math.sqrt(pooled / num_df), REPEATS, num_df
    else:
        g.noise_frac, g.noise_basis, g.noise_df = g.spread_frac, FLEET_SPREAD, len(members) - 1
    unit_sd = g.noise_frac / math.sqrt(max(1, g.typical_repeats))
    repeats = np.array([len(m.samples) for m in members])
    own = np.array([sd / mean if sd is not None and mean else np.nan for _, mean, sd in stats_])
    # a unit is judged on its own noise only when it is clearly noisier than its peers (an F test at
    # the stated confidence, corrected for the units tested): otherwise its two or so degrees of
    # freedom would hide any shortfall, and at 1% a real slow unit in a hundred would lose its verdict
    noisy = np.zeros(len(members), dtype=bool)
    if g.noise_basis == REPEATS and g.noise_frac > 0:
        candidates = np.isfinite(own) & (own > g.noise_frac)
        if candidates.any():
            ratio = (own[candidates] / g.noise_frac) ** 2
            noisy[candidates] = special.fdtrc(repeats[candidates] - 1, g.noise_df, ratio) < policy.alpha / len(members)
    noise = np.where(noisy, own, g.noise_frac)
    df = np.where(noisy, repeats - 1, g.noise_df)
    se = np.sqrt(noise ** 2 / repeats + MEDIAN_EFFICIENCY * unit_sd ** 2 / len(members))
    shortfall = (g.median - np.array(means)) / g.median
    p = _p_values(g, shortfall, se, repeats, df)
    for i, (m, mean, _) in enumerate(stats_):
        g.units.append(UnitVerdict(unit=m.unit, group=name, num_repeats=int(repeats[i]), mean=mean,
                                   noise_frac=None if math.isnan(own[i]) else float(own[i]),
                                   shortfall_frac=float(shortfall[i]), se_frac=float(se[i]), p_value=float(p[i]),
                                   own_noise=bool(noisy[i])))
    if len(members) < policy.min_units:
        g.why_not = TOO_SMALL
        return g
    if g.noise_df < 1 or g.noise_frac <= 0:  # identical figures say nothing about how much one moves
        g.why_not = NO_REPEATS
        return g
    g.judged = True
    found = detectable_frac(g.noise_frac, g.typical_repeats, len(members), g.noise_df, policy,
                            num_tests=num_tests, noise_basis=g.noise_basis)
    if found > policy.max_detectable_frac:
        g.why_not = TOO_NOISY
    # a shortfall of 100% is a figure of zero: "found only at 100% or more" is no figure, the group
    # was too noisy to judge
    g.detectable_frac = found if math.isfinite(found) and found < 1.0 else None
    return g


# --- two runs ---------------------------------------------------------------------------------------

@dataclass
class RunChange:
    """A figure of two runs: the change and whether the runs' own repeats show it is real."""

    change_frac: float  # (new - old) / old, of the repeats' means
    se_frac: float | None  # its standard error from both runs' repeats; None: a run has one value
    p_value: float | None  # two-sided
    beyond_noise: bool
    basis: str  # "repeats of both runs" | "one value in a run: no repeat noise to judge by"


def compare_runs(old: Sequence[float], new: Sequence[float], confidence: float = 0.99) -> RunChange:
    """Welch's t on the two runs' repeats: a change is beyond noise when the hypothesis of no change
    is rejected at ``confidence``. With one value in either run there is no repeat noise, so the
    change is stated and not judged."""
    mo, so = _mean_sd(list(old))
    mn, sn = _mean_sd(list(new))
    change = (mn - mo) / mo if mo else 0.0
    if so is None or sn is None or not mo:
        return RunChange(change, None, None, False, "one value in a run: no repeat noise to judge by")
    vo, vn = (so / mo) ** 2 / len(old), (sn / mo) ** 2 / len(new)
    se = math.sqrt(vo + vn)
    if se == 0:
        return RunChange(change, 0.0, 0.0 if change else 1.0, change != 0, "repeats of both runs")
    df = (vo + vn) ** 2 / ((vo ** 2 / (len(old) - 1) if vo else 0) + (vn ** 2 / (len(new) - 1) if vn else 0))
    p = min(1.0, 2 * t_sf(abs(change) / se, df))
    return RunChange(change, se, p, p < 1 - confidence, "repeats of both runs")
