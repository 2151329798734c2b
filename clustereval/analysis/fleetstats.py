"""Fleet-relative verdicts with the confidence behind them. Pure.

Every per-unit figure a run measures several times (a GPU's MSMF or lemon passes, a node's pairwise
samples, a node's write) is judged against the unit's peers of the same kind:

- the **fleet centre** is the median of the units' means, its **spread** their MAD;
- the **repeat noise** (per repeat, as a fraction of the unit's mean) is pooled over the units'
  own repeats; a unit clearly noisier than the pool (an F test at the stated confidence, corrected
  for the number of units) is judged on its own noise and its own few degrees of freedom; with no
  repeats at all the fleet's spread stands in for it (an upper bound);
- a unit is **slow** only when both hold: its shortfall against the centre is at least the
  practical threshold, and a one-sided Student t test of "no shortfall" is rejected at the stated
  confidence after Holm's step-down correction over every unit judged together (so a 1000-GPU
  fleet does not flag ten healthy GPUs by chance: the chance of naming any healthy unit is at most
  1 - confidence);
- the **detectable shortfall** is the smallest shortfall a typical unit of this run would have
  been found with, at that confidence, in ``DETECTION_PROBABILITY`` of runs.

``judge_fleet(units, policy)`` takes ``UnitSamples`` (a label, a peer group, the repeats) and
returns one ``GroupJudgement`` per peer group. ``compare_runs`` judges a change between two runs
against both runs' repeat noise. The methods are written out in docs/statistics.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

DETECTION_PROBABILITY = 0.9  # "would have been found": in this share of runs, at the stated confidence
MAD_TO_SD = 1.4826  # the MAD of normal data times this is its standard deviation
MEDIAN_EFFICIENCY = math.pi / 2  # variance of a sample median over that of the mean, normal data

TOO_SMALL = "too small"
TOO_NOISY = "too noisy"
NO_REPEATS = "no repeats"


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
    detectable_frac: float | None = None  # smallest shortfall found at the confidence (see module doc)
    judged: bool = False
    why_not: str = ""  # TOO_SMALL | TOO_NOISY | NO_REPEATS, with judged False or (too noisy) True
    units: list[UnitVerdict] = field(default_factory=list)

    @property
    def slow(self) -> list[UnitVerdict]:
        return sorted((u for u in self.units if u.slow), key=lambda u: -u.shortfall_frac)

    @property
    def too_noisy(self) -> bool:
        return self.why_not == TOO_NOISY


# --- Student t, without scipy -------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (the normal when df is infinite)."""
    if math.isinf(df):
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F > f) for the F distribution with (``df1``, ``df2``) degrees of freedom."""
    if f <= 0:
        return 1.0
    return _betai(df2 / 2.0, df1 / 2.0, df2 / (df2 + df1 * f))


def t_quantile(p_upper: float, df: float) -> float:
    """The t with P(T > t) = ``p_upper`` (0 < p_upper < 0.5), by bisection on ``t_sf``."""
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > p_upper:
        hi *= 2.0
        if hi > 1e7:
            return hi
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > p_upper:
            lo = mid
        else:
            hi = mid
    return hi


def z_quantile(p: float) -> float:
    """The standard normal quantile (P(Z < z) = p)."""
    return statistics.NormalDist().inv_cdf(p)


# --- the fleet ------------------------------------------------------------------------------------

def _mean_sd(xs: Sequence[float]) -> tuple[float, float | None]:
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with the family-wise error held at ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def detectable_frac(noise_frac: float, repeats: int, num_units: int, df: float, policy: VerdictPolicy,
                    num_tests: int | None = None) -> float:
    """The smallest shortfall a unit with ``repeats`` repeats at ``noise_frac`` per repeat is named
    with, in ``DETECTION_PROBABILITY`` of runs: the flag needs the estimate past both the practical
    threshold and the corrected critical value, and the estimate scatters by its standard error."""
    se = _se(noise_frac, max(1, repeats), noise_frac / math.sqrt(max(1, repeats)), num_units)
    tests = num_tests or num_units
    crit = t_quantile(policy.alpha / tests, df if df > 0 else math.inf)
    return max(policy.threshold_frac, crit * se) + z_quantile(DETECTION_PROBABILITY) * se


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


def _group(name: str, members: list[UnitSamples], policy: VerdictPolicy, num_tests: int) -> GroupJudgement:
    g = GroupJudgement(group=name, num_units=len(members), confidence=policy.confidence,
                       threshold_frac=policy.threshold_frac)
    stats = [(m, *_mean_sd(m.samples)) for m in members]
    means = [mean for _, mean, _ in stats]
    g.median = statistics.median(means)
    g.mad = statistics.median(abs(x - g.median) for x in means)
    g.spread_frac = MAD_TO_SD * g.mad / g.median if g.median else 0.0
    g.typical_repeats = int(statistics.median(len(m.samples) for m in members))
    if g.median <= 0:
        g.why_not = TOO_SMALL
        return g
    num_df = sum(len(m.samples) - 1 for m, _, sd in stats if sd is not None)
    if num_df:
        pooled = sum((len(m.samples) - 1) * (sd / mean) ** 2 for m, mean, sd in stats if sd is not None and mean)
        g.noise_frac, g.noise_basis, g.noise_df = math.sqrt(pooled / num_df), "repeats", num_df
    else:
        g.noise_frac, g.noise_basis, g.noise_df = g.spread_frac, "fleet spread", len(members) - 1
    unit_sd = g.noise_frac / math.sqrt(max(1, g.typical_repeats))
    for m, mean, sd in stats:
        own = sd / mean if sd is not None and mean else None
        # a unit is judged on its own noise only when it is clearly noisier than its peers (an F test at
        # the stated confidence, corrected for the units tested): otherwise its two or so degrees of
        # freedom would hide any shortfall, and at 1% a real slow unit in a hundred would lose its verdict
        noisy = (own is not None and g.noise_basis == "repeats" and own > g.noise_frac
                 and f_sf((own / g.noise_frac) ** 2, len(m.samples) - 1, g.noise_df) < policy.alpha / len(members))
        noise, df = (own, len(m.samples) - 1) if noisy and own is not None else (g.noise_frac, g.noise_df)
        se = _se(noise, len(m.samples), unit_sd, len(members))
        short = (g.median - mean) / g.median
        if short <= 0:
            p = 1.0  # at or above the centre: no shortfall to test
        else:
            p = t_sf(short / se, df if df > 0 else math.inf) if se > 0 else 0.0
        g.units.append(UnitVerdict(unit=m.unit, group=name, num_repeats=len(m.samples), mean=mean,
                                   noise_frac=own, shortfall_frac=short, se_frac=se, p_value=p,
                                   own_noise=noisy))
    if len(members) < policy.min_units:
        g.why_not = TOO_SMALL
        return g
    if g.noise_df < 1 or g.noise_frac <= 0:  # identical figures say nothing about how much one moves
        g.why_not = NO_REPEATS
        return g
    g.detectable_frac = detectable_frac(g.noise_frac, g.typical_repeats, len(members), g.noise_df, policy,
                                        num_tests=num_tests)
    g.judged = True
    if g.detectable_frac > policy.max_detectable_frac:
        g.why_not = TOO_NOISY
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
