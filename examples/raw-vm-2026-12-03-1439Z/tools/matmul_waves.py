"""The whole-wave search: MAMF and MSMF from matmul shapes built for the GPU's SM count, as pure code.

A matmul's output is computed in tiles, one tile per SM at a time; the tiles run in waves of one
per SM, and a last wave that is only partly full costs a whole wave. A **whole-wave family** is an
(M, N) whose tile count is an exact multiple of the SM count (tile ``TILE`` = 128×256 outputs, the
tile the finder of the runbook's author counts in too): 1536×2816 is one wave of 132 SMs,
8192×8448 sixteen. K never enters the wave count; it sets how much work each tile does.

Two searches for two figures, each timed in the regime its figure describes:

- **MAMF** (a burst at boost clock, the board under its power limit; every matmul is followed by
  as long an idle): *screen* the squarest whole-wave families of 1…16 waves and a few larger wave
  counts at two values of K; *refine* the leading families on K, on orientation (N×M) and on the
  neighbouring wave counts; *confirm* the fastest shapes with the full burst timing in both operand
  layouts (``nn``: B is K×N in memory; ``tn``: B is N×K, read transposed, as the finder lays it out).
  MAMF is the best confirm mean; its fastest iteration is the peak.
- **MSMF** (held back to back at the power limit): a *ladder* of held rungs, no flush between the
  matmuls. Round one holds the squarest family of each wave count (2…16 waves) at the largest K,
  three candidates between rungs of a *reference* shape (the fattest family, held again and again);
  round two holds the two best again in both operand layouts and at a larger K (the best one also
  at the larger K in layout ``tn``, and turned, N×M), two between reference rungs. Each rung's rate is divided by the reference's rate interpolated to the same
  moment, so a board that heats or cools by a few percent during the ladder cannot pick the winner;
  a shape's score is the mean of its ratios. The board is at its power limit from the first rung,
  so the ladder is the soak. The winner is then held for a *final* settle and timed window: MSMF is
  that window's median (``clustereval.analysis.steady``); should it fail (SUSPECT or UNSTEADY), the
  next shape is held.

Imported by the worker on the node: the standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clustereval.analysis.matmul import (
    BURST,
    HOT,
    SCREEN,
    Shape,
    Telemetry,
    classify_sustained,
    fmt_shape,
    held_rate,
    qualifies,
)
from clustereval.records.compute import SearchStage, SearchSummary, ShapeTiming

TILE = (128, 256)  # output rows × columns of one tile
LAYOUTS = ("nn", "tn")
Variant = tuple[Shape, str]  # a shape and its B operand layout

# (shape, timing stage, layout) -> a burst timing; (shape, layout, rung seconds) -> a held rung;
# (shape, layout) -> a held settle-then-window timing
MeasureFn = Callable[[Shape, str, str], ShapeTiming]
RungFn = Callable[[Shape, str, float], ShapeTiming]
HoldFn = Callable[[Shape, str], ShapeTiming]


@dataclass(frozen=True)
class Family:
    """One whole-wave (M, N): ``waves`` full waves of tiles on the GPU's SMs."""

    waves: int
    m: int
    n: int


@dataclass(frozen=True)
class WaveSpace:
    """Where the families lie and which K each stage tries. The defaults are a GPU's; ``STAND_IN`` is
    the same search scaled down to a CPU's tiny shapes."""

    tile: tuple[int, int] = TILE
    min_dim: int = 1024
    max_dim: int = 20480
    mamf_waves: tuple[int, ...] = (*range(1, 17), 20, 24, 32, 40)
    per_wave: int = 2  # squarest (M, N) layouts screened per wave count
    screen_ks: tuple[int, ...] = (8192, 20480)
    refine_ks: tuple[int, ...] = tuple(range(4096, 20481, 2048))
    k_step: int = 1024  # the last K refinement: one step either side of the best
    msmf_waves: tuple[int, ...] = tuple(range(2, 17))
    msmf_k: int = 20480  # round one of the ladder
    msmf_big_k: int = 28672  # round two also tries the two best at this K


GPU_SPACE = WaveSpace()
STAND_IN = WaveSpace(tile=(8, 16), min_dim=16, max_dim=128, mamf_waves=(1, 2, 3, 4), screen_ks=(64, 128),
                     refine_ks=(32, 64, 96, 128), k_step=16, msmf_waves=(2, 3, 4), msmf_k=128, msmf_big_k=192)
STAND_IN_SMS = 4  # a CPU stand-in GPU's "SM count"


@dataclass(frozen=True)
class WavePlan:
    """How hard each stage looks."""

    num_leaders: int = 5  # families refined
    num_confirm: int = 5  # shapes confirmed, each in both layouts
    num_ladder: int = 8  # round-one candidates (the reference included)
    per_ref_round1: int = 3  # candidates between two reference rungs
    per_ref_round2: int = 2
    rung_s: float = 0.8  # one round-one rung (settle included)
    rung2_s: float = 1.0  # one round-two rung
    num_finalists: int = 2  # round-two shapes
    min_power_frac: float = 0.95  # a rung below this fraction of the power limit is SUSPECT
    expected_bursts: int = 150  # about how many burst timings screen, refine and confirm take (progress only)


def ladder_rungs(plan: WavePlan) -> tuple[int, int]:
    """How many rungs round one and (at most) round two of the ladder hold, reference rungs included."""
    def count(cands: int, per_ref: int) -> int:
        return cands + math.ceil(cands / max(1, per_ref))
    return (1 + count(plan.num_ladder - 1, plan.per_ref_round1), count(3 * plan.num_finalists + 2, plan.per_ref_round2))


def tile_count(m: int, n: int, tile: tuple[int, int] = TILE) -> int:
    return math.ceil(m / tile[0]) * math.ceil(n / tile[1])


def is_whole_wave(m: int, n: int, sms: int, tile: tuple[int, int] = TILE) -> bool:
    return sms > 0 and tile_count(m, n, tile) % sms == 0


def wave_layouts(sms: int, waves: int, space: WaveSpace = GPU_SPACE) -> list[Family]:
    """Every whole-wave (M, N) of ``waves`` waves within the space's bounds, squarest first
    (a tie between an (M, N) and its transpose: the wider first)."""
    tm, tn = space.tile
    blocks = waves * sms
    out = []
    for p in range(1, blocks + 1):
        if blocks % p:
            continue
        m, n = tm * p, tn * (blocks // p)
        if space.min_dim <= m <= space.max_dim and space.min_dim <= n <= space.max_dim:
            out.append(Family(waves, m, n))
    return sorted(out, key=lambda f: (round(abs(math.log(f.m / f.n)), 9), f.m))


def families(sms: int, space: WaveSpace = GPU_SPACE, waves: Sequence[int] | None = None,
             per_wave: int | None = None) -> list[Family]:
    """The squarest ``per_wave`` whole-wave layouts of each wave count."""
    out: list[Family] = []
    for w in waves if waves is not None else space.mamf_waves:
        out += wave_layouts(sms, w, space)[:per_wave if per_wave is not None else space.per_wave]
    return out


def neighbour_wave(sms: int, fam: Family, space: WaveSpace) -> list[Family]:
    """The layouts of one wave fewer and one more whose aspect is closest to ``fam``'s."""
    out = []
    for w in (fam.waves - 1, fam.waves + 1):
        if w < 1:
            continue
        layouts = wave_layouts(sms, w, space)
        if layouts:
            out.append(min(layouts, key=lambda f: (abs(math.log(f.m / f.n) - math.log(fam.m / fam.n)), f.m)))
    return out


# -- the held ladder -------------------------------------------------------------------------


@dataclass
class Ladder:
    """Held rungs in order, each with the moment it was timed; the reference variant's rungs are the
    yardstick the others are divided by."""

    reference: Variant
    rungs: list[tuple[float, Variant, ShapeTiming]] = field(default_factory=list)

    def add(self, t_s: float, variant: Variant, timing: ShapeTiming) -> None:
        self.rungs.append((t_s, variant, timing))

    def reference_at(self, t_s: float) -> float | None:
        """The reference's rate at ``t_s``: linear between the reference rungs either side, the
        nearest one where there is a side only."""
        refs = [(t, held_rate(x)) for t, v, x in self.rungs if v == self.reference and qualifies(x)]
        before = [p for p in refs if p[0] <= t_s]
        after = [p for p in refs if p[0] > t_s]
        if before and after:
            (t0, r0), (t1, r1) = before[-1], after[0]
            return r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
        if before or after:
            return (before[-1] if before else after[0])[1]
        return None

    def score(self) -> dict[Variant, float]:
        """Each qualifying variant's mean ratio to the reference (the reference: 1)."""
        ratios: dict[Variant, list[float]] = {}
        for t, v, x in self.rungs:
            if not qualifies(x):
                continue
            if v == self.reference:
                x.ref_ratio = 1.0
                ratios.setdefault(v, []).append(1.0)
                continue
            ref = self.reference_at(t)
            if ref:
                x.ref_ratio = round(held_rate(x) / ref, 5)
                ratios.setdefault(v, []).append(held_rate(x) / ref)
        return {v: statistics.fmean(r) for v, r in ratios.items()}

    def ranked(self) -> list[tuple[Variant, float]]:
        return sorted(self.score().items(), key=lambda kv: (-kv[1], kv[0]))


def run_ladder(ladder: Ladder, candidates: Sequence[Variant], per_ref: int, rung_s: float, rung: RungFn,
               clock: Callable[[], float], tel: Telemetry, min_power_frac: float) -> None:
    """Reference, ``per_ref`` candidates, reference, ... ending on the reference (a ladder that already
    ends on a reference rung goes on from it)."""
    def hold(v: Variant) -> None:
        t0 = clock()
        timing = classify_sustained(rung(v[0], v[1], rung_s), tel, min_power_frac)
        timing.layout = v[1]
        ladder.add((t0 + clock()) / 2, v, timing)

    todo = [v for v in candidates if v != ladder.reference]
    if not ladder.rungs or ladder.rungs[-1][1] != ladder.reference:
        hold(ladder.reference)
    for i in range(0, len(todo), max(1, per_ref)):
        for v in todo[i:i + per_ref]:
            hold(v)
        hold(ladder.reference)


# -- the search ------------------------------------------------------------------------------


@dataclass
class _Stages:
    clock: Callable[[], float]
    stages: list[SearchStage] = field(default_factory=list)

    def begin(self, name: str) -> SearchStage:
        st = SearchStage(name=name, seconds=-self.clock())
        self.stages.append(st)
        return st

    @staticmethod
    def note(st: SearchStage, shape: Shape, layout: str) -> None:
        st.num_timings += 1
        st.shapes.append(f"{fmt_shape(shape, 'x')}/{layout}")

    def end(self, st: SearchStage) -> None:
        st.seconds = round(st.seconds + self.clock(), 3)


def wave_search(sms: int, measure: MeasureFn, rung: RungFn, hold: HoldFn, space: WaveSpace = GPU_SPACE,
                plan: WavePlan | None = None, telemetry: Telemetry | None = None,
                clock: Callable[[], float] | None = None, msmf: bool = True) -> SearchSummary:
    """Screen, refine and confirm for MAMF; the held ladder and the final hold for MSMF."""
    if sms <= 0:
        raise ValueError("the whole-wave search needs the GPU's SM count")
    plan = plan or WavePlan()
    tel = telemetry or Telemetry()
    tick = clock or (lambda: 0.0)
    book = _Stages(tick)
    t_start = tick()
    timed: dict[Variant, ShapeTiming] = {}

    def screen(st: SearchStage, shapes: Sequence[Shape], layout: str = "nn") -> None:
        """The brief burst timing of every shape not timed yet."""
        for shape in shapes:
            if (shape, layout) in timed:
                continue
            t = measure(shape, SCREEN, layout)
            t.layout = layout
            book.note(st, shape, layout)
            timed[(shape, layout)] = t

    def screen_best(pool: dict[Variant, ShapeTiming]) -> list[ShapeTiming]:
        return sorted(pool.values(), key=lambda t: (-t.mean_tflops, t.shape, t.layout))

    # MAMF: screen
    fams = families(sms, space)
    st = book.begin("screen")
    screen(st, [(f.m, f.n, k) for f in fams for k in space.screen_ks])
    book.end(st)

    # refine on K, orientation and wave count around the leading families
    st = book.begin("refine")
    by_mn: dict[tuple[int, int], ShapeTiming] = {}
    for t in screen_best(timed):
        by_mn.setdefault((t.m, t.n), t)
    leaders = list(by_mn.values())[:plan.num_leaders]
    fam_of = {(f.m, f.n): f for f in fams}
    shapes: list[Shape] = []
    for lead in leaders:
        shapes += [(lead.m, lead.n, k) for k in space.refine_ks]
        shapes.append((lead.n, lead.m, lead.k))
        fam = fam_of.get((lead.m, lead.n))
        if fam is not None:
            shapes += [(f.m, f.n, lead.k) for f in neighbour_wave(sms, fam, space)]
    screen(st, shapes)
    top = screen_best(timed)[:3]
    screen(st, [(t.m, t.n, k) for t in top for k in (t.k - space.k_step, t.k + space.k_step) if k > 0])
    book.end(st)

    # confirm: the fastest shapes, each in both layouts, with the full burst timing
    st = book.begin("confirm")
    chosen = [t.shape for t in screen_best(timed)[:plan.num_confirm]]
    confirmed: list[ShapeTiming] = []
    for layout in LAYOUTS:
        for shape in chosen:
            t = measure(shape, BURST, layout)
            t.layout = layout
            book.note(st, shape, layout)
            confirmed.append(t)
    book.end(st)
    mamf = max(confirmed, key=lambda t: (t.mean_tflops, t.shape, t.layout), default=None)
    t_burst = tick()

    summary = SearchSummary(mode="waves", grid=describe(sms, space), sm_count=sms, tile=space.tile, mamf=mamf,
                            num_screened=sum(s.num_timings for s in book.stages if s.name != "confirm"),
                            num_confirmed=len(confirmed), stop_reason="every stage of the whole-wave plan ran")
    if msmf:
        _msmf(summary, sms, timed, rung, hold, space, plan, tel, book)
    t_end = tick()
    summary.stages = book.stages
    tried = {(t.shape, t.layout) for t in confirmed} | set(timed) | {(t.shape, t.layout) for t in summary.sustained}
    summary.shapes_tried = len({s for s, _ in tried})
    summary.burst_s = round(t_burst - t_start, 3)
    summary.sustain_s = round(t_end - t_burst, 3)
    summary.total_s = round(t_end - t_start, 3)
    return summary


def _msmf(summary: SearchSummary, sms: int, timed: dict[Variant, ShapeTiming], rung: RungFn, hold: HoldFn,
          space: WaveSpace, plan: WavePlan, tel: Telemetry, book: _Stages) -> None:
    """Round one and two of the held ladder, then the final hold of the winner (a spare on failure)."""
    pool = []
    for w in space.msmf_waves:
        layouts = wave_layouts(sms, w, space)
        if layouts:
            f = layouts[0]
            pool.append((f.m, f.n, space.msmf_k))
    if not pool:
        return
    reference: Variant = (max(pool, key=lambda s: (s[0] * s[1], s)), "nn")  # the fattest family
    rate = {s: t.mean_tflops for (s, lay), t in timed.items() if lay == "nn"}
    ranked = sorted(pool, key=lambda s: (-rate.get(s, 0.0), s))  # the burst screen only orders the ladder
    cands = [(s, "nn") for s in ranked if (s, "nn") != reference][:plan.num_ladder - 1]
    ladder = Ladder(reference)
    st = book.begin("ladder")
    run_ladder(ladder, cands, plan.per_ref_round1, plan.rung_s, rung, book.clock, tel, plan.min_power_frac)
    finalists = [v for v, _ in ladder.ranked()][:plan.num_finalists]
    round2: list[Variant] = []
    for i, (shape, _) in enumerate(finalists):
        big = (shape[0], shape[1], space.msmf_big_k)
        # the best one also at the larger K in layout tn, and turned (N×M)
        more = [(big, "tn"), ((shape[1], shape[0], shape[2]), "nn")] if i == 0 else []
        for v in ((shape, "nn"), (shape, "tn"), (big, "nn"), *more):
            if v not in round2 and v != reference:
                round2.append(v)
    run_ladder(ladder, round2, plan.per_ref_round2, plan.rung2_s, rung, book.clock, tel, plan.min_power_frac)
    for _, v, _x in ladder.rungs:
        book.note(st, v[0], v[1])
    book.end(st)
    summary.reference, summary.reference_layout = reference
    rungs = [x for _, _, x in ladder.rungs]
    st = book.begin("final")
    finals: list[ShapeTiming] = []
    scores = ladder.ranked()
    for (shape, layout), score in scores[:2]:  # one spare, should the first fail its hold
        t = hold(shape, layout)
        t.layout = layout
        t.ref_ratio = round(score, 5)
        book.note(st, shape, layout)
        finals.append(t)
        if qualifies(t):
            summary.msmf, summary.msmf_ratio = t, round(score, 5)
            break
    book.end(st)
    summary.sustained = rungs + finals
    summary.num_hot, summary.num_sustained = len(rungs), len(finals)


def describe(sms: int, space: WaveSpace) -> str:
    waves = space.mamf_waves
    return (f"whole-wave families of {waves[0]}…{waves[-1]} waves of {sms} SMs in {space.tile[0]}×{space.tile[1]} "
            f"tiles, M and N {space.min_dim}…{space.max_dim}")


__all__ = ["BURST", "HOT", "LAYOUTS", "SCREEN", "STAND_IN", "STAND_IN_SMS", "TILE", "Family", "Ladder", "WavePlan",
           "WaveSpace", "describe", "families", "max_elems", "is_whole_wave", "ladder_rungs", "neighbour_wave", "run_ladder", "tile_count",
           "wave_layouts", "wave_search"]


def max_elems(space: WaveSpace) -> tuple[int, int, int]:
    """Largest M×K, K×N and M×N any stage of the search may time (the worker allocates these once)."""
    k = max(*space.screen_ks, *space.refine_ks, space.msmf_k, space.msmf_big_k) + space.k_step
    return (space.max_dim * k, k * space.max_dim, space.max_dim * space.max_dim)
