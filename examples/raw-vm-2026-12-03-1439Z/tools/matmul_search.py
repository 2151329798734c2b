"""The MAMF / MSMF shape search as pure code: give it a way to time a shape, it returns both figures.

MAMF (Maximum Achievable Matmul FLOPS) is the highest mean TFLOPS any matmul shape reaches: the
winners are short bursts at boost clock with the board far under its power limit. MSMF (Maximum
Sustainable Matmul FLOPS) is the best a shape holds once it is big enough to pin the board at its
power limit and the clock settles below boost.

The search runs in stages, each measurement honest for what it decides:

1. screen: every shape of a coarse sub-grid gets a short timing (a few warm-up and timed
   iterations); on a small grid the coarse grid is the whole grid;
2. refine: around the leading shapes, the unvisited neighbours at half the coarse stride, then a
   quarter, ... down to one grid step; at one step it keeps climbing until the leaders stop
   changing (the early stop);
3. confirm: the leaders get the full burst timing (many iterations, a longer window); MAMF is the
   best of these;
4. sustain: the fastest large shapes are held at full power one after another for about a second
   each (the board stays at its power limit from one to the next); the best few of them are then
   held in turn until the SM clock settles (the first soaks, the next ones settle on a board that
   is already hot) and timed for a window, and MSMF is the best *held* rate. A shape that never
   reaches the power limit is labelled SUSPECT, one whose rate still drifted UNSTEADY
   (``clustereval.analysis.steady``); neither can be MSMF.

The screen and confirm timings are bursts: the GPU idles after every matmul for as long as it
computed, so the board stays under its power limit and the clock at boost (the MAMF regime); the
sustained timings run back to back at the power limit (the MSMF regime).

This module is imported by the worker on the node, so it uses the standard library only.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from clustereval.records.compute import SearchSummary, ShapeTiming

Shape = tuple[int, int, int]  # (M, N, K): an M×K matrix times a K×N matrix

SCREEN, BURST, HOT, SUSTAINED = "screen", "burst", "hot", "sustained"
SUSPECT = "SUSPECT"
UNSTEADY = "UNSTEADY"  # the steadiness module's label, repeated here so this module needs no other


def fmt_shape(shape: Shape, sep: str = "×") -> str:
    return sep.join(str(v) for v in shape)


def parse_shape(text: str) -> Shape:
    """``8192x8192x16384`` (or with ×) -> (8192, 8192, 16384)."""
    parts = text.replace("×", "x").lower().split("x")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"{text!r} is not a matmul shape; write it as MxNxK, e.g. 8192x8192x16384")
    m, n, k = (int(p) for p in parts)
    return (m, n, k)


def flops(shape: Shape) -> int:
    m, n, k = shape
    return 2 * m * n * k


# -- the search space ------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """A lattice of shapes: every combination of the values on each axis."""

    ms: tuple[int, ...]
    ns: tuple[int, ...]
    ks: tuple[int, ...]
    name: str = ""

    def __post_init__(self) -> None:
        for axis in (self.ms, self.ns, self.ks):
            if not axis or any(v <= 0 for v in axis) or list(axis) != sorted(set(axis)):
                raise ValueError("each grid axis needs increasing positive values")

    @property
    def axes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return (self.ms, self.ns, self.ks)

    @property
    def size(self) -> int:
        return len(self.ms) * len(self.ns) * len(self.ks)

    def shapes(self) -> list[Shape]:
        return [(m, n, k) for m in self.ms for n in self.ns for k in self.ks]

    def shape_at(self, idx: tuple[int, int, int]) -> Shape:
        return (self.ms[idx[0]], self.ns[idx[1]], self.ks[idx[2]])

    def index_of(self, shape: Shape) -> tuple[int, int, int]:
        return (self.ms.index(shape[0]), self.ns.index(shape[1]), self.ks.index(shape[2]))

    def max_elems(self) -> tuple[int, int, int]:
        """Largest M×K, K×N and M×N over the grid (the worker allocates these once)."""
        return (max(self.ms) * max(self.ks), max(self.ks) * max(self.ns), max(self.ms) * max(self.ns))

    def describe(self) -> str:
        return f"{self.name or 'grid'}: M {_axis_text(self.ms)}, N {_axis_text(self.ns)}, K {_axis_text(self.ks)}"


def _axis_text(values: tuple[int, ...]) -> str:
    if len(values) > 2:
        steps = {b - a for a, b in itertools.pairwise(values)}
        if len(steps) == 1:
            return f"{values[0]}…{values[-1]} step {steps.pop()}"
    return "{" + ", ".join(str(v) for v in values) + "}"


def _span(start: int, stop: int, step: int) -> tuple[int, ...]:
    return tuple(range(start, stop + 1, step))


# Named search spaces. "anchors" is the 256-shape grid of the published brute-force reference;
# "default" is the production space (coarse-then-refine finds its leaders); "tiny" is for CPU runs.
GRIDS: dict[str, Grid] = {
    "anchors": Grid(_span(1024, 16384, 1024), _span(4096, 16384, 4096), _span(4096, 16384, 4096), "anchors"),
    "default": Grid(_span(1024, 20480, 256), _span(1024, 20480, 256), _span(1024, 20480, 256), "default"),
    "tiny": Grid((32, 64, 96, 128), (32, 64, 96, 128), (32, 64, 96, 128), "tiny"),
}


def parse_grid(text: str) -> Grid:
    """A named grid, or ``M=start:stop:step,N=a|b|c,K=start:stop:step`` (``|`` lists values)."""
    if text in GRIDS:
        return GRIDS[text]
    axes: dict[str, tuple[int, ...]] = {}
    for part in text.split(","):
        key, _, spec = part.partition("=")
        key = key.strip().upper()
        if key not in ("M", "N", "K") or not spec:
            raise ValueError(f"grid {text!r}: expected a name ({', '.join(GRIDS)}) or M=..,N=..,K=..")
        if ":" in spec:
            start, stop, step = (int(v) for v in spec.split(":"))
            axes[key] = _span(start, stop, step)
        else:
            axes[key] = tuple(sorted({int(v) for v in spec.split("|")}))
    missing = [a for a in "MNK" if a not in axes]
    if missing:
        raise ValueError(f"grid {text!r} lacks axis {', '.join(missing)}")
    return Grid(axes["M"], axes["N"], axes["K"], "custom")


# -- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchPlan:
    """How hard each stage looks. Defaults are the production search."""

    coarse_budget: int = 256  # most shapes in the coarse grid; a grid this small is screened whole
    num_leaders: int = 4  # shapes refined around
    max_climb_rounds: int = 8  # rounds at one grid step before giving up on convergence
    num_confirm: int = 8  # leaders re-timed with the full burst measurement
    confirm_within: float = 0.03  # ... among those within this fraction of the best screened shape
    num_hot: int = 6  # large shapes held at full power one after another, for the MSMF
    num_hot_extra: int = 4  # more, while none of them reaches the power limit
    num_sustain: int = 3  # the best of those held to steady state and timed: MSMF is the best held rate
    sustain_min_kernel_ms: float = 2.0  # "large": one matmul lasts at least this long
    min_power_frac: float = 0.95  # a pinned shape below this fraction of the power limit is SUSPECT


MeasureFn = Callable[[Shape, str], ShapeTiming]


@dataclass
class Telemetry:
    """The board's limits, from NVML (None on CPU or without NVML)."""

    power_limit_w: float | None = None
    boost_mhz: float | None = None


# -- pure helpers ----------------------------------------------------------------------------


def summarize_times(shape: Shape, seconds: Sequence[float]) -> tuple[float, float, float]:
    """(mean, median, max) TFLOPS from per-iteration seconds: 2·M·N·K / time."""
    work = flops(shape) / 1e12
    mean_t = statistics.fmean(seconds)
    return (work / mean_t, work / statistics.median(seconds), work / min(seconds))


def classify_sustained(t: ShapeTiming, tel: Telemetry, min_power_frac: float = 0.95) -> ShapeTiming:
    """Label a pinned measurement SUSPECT when it never reached the power limit or stayed at boost
    (an UNSTEADY label, set where the hold was timed, stays)."""
    if t.label == UNSTEADY:
        return t
    t.label, t.why = "", ""
    if tel.power_limit_w is None or t.power_w is None:
        t.why = "no power telemetry"
        return t
    if t.power_w < min_power_frac * tel.power_limit_w:
        t.label = SUSPECT
        t.why = (f"held {t.power_w:.0f} W against the {tel.power_limit_w:.0f} W limit "
                 f"(below {min_power_frac:.0%} of it)")
    elif tel.boost_mhz and t.sm_mhz is not None and t.sm_mhz >= tel.boost_mhz:
        t.label = SUSPECT
        t.why = f"SM (streaming multiprocessor) clock stayed at the {tel.boost_mhz:.0f} MHz boost clock"
    return t


def qualifies(t: ShapeTiming) -> bool:
    return t.label not in (SUSPECT, UNSTEADY)


def held_rate(t: ShapeTiming) -> float:
    """What a measurement says a sustained workload gets: a held window's median, else the mean."""
    return t.median_tflops if t.held else t.mean_tflops


def idle_siblings(util_samples: dict[int, Sequence[float]], min_util_pct: float = 50.0,
                  max_idle_frac: float = 0.1) -> list[int]:
    """Siblings whose GPU utilisation fell below ``min_util_pct`` in more than ``max_idle_frac`` of
    the samples (and in at least two): their continuous matmul stopped during the window."""
    idle = []
    for gpu, samples in sorted(util_samples.items()):
        low = sum(1 for u in samples if u < min_util_pct)
        if samples and low >= 2 and low > max_idle_frac * len(samples):
            idle.append(gpu)
    return idle


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    data = sorted(values)
    if not data:
        raise ValueError("percentile of nothing")
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def coarse_strides(grid: Grid, budget: int) -> tuple[int, int, int]:
    """Per-axis strides (powers of two) so the coarse grid holds at most ``budget`` shapes;
    the axis with the most coarse points is thinned first."""
    strides = [1, 1, 1]

    def count(axis: int) -> int:
        return len(_coarse_indices(len(grid.axes[axis]), strides[axis]))

    while math.prod(count(a) for a in range(3)) > budget:
        axis = max(range(3), key=lambda a: (count(a), -a))
        if count(axis) <= 2:
            break
        strides[axis] *= 2
    return (strides[0], strides[1], strides[2])


def _coarse_indices(n: int, stride: int) -> list[int]:
    idx = list(range(0, n, stride))
    if idx[-1] != n - 1:
        idx.append(n - 1)  # the largest value is always screened
    return idx


def _neighbours(idx: tuple[int, int, int], steps: tuple[int, int, int], dims: tuple[int, int, int]
                ) -> list[tuple[int, int, int]]:
    out = []
    for d in itertools.product(*[(-s, 0, s) if s else (0,) for s in steps]):
        if d == (0, 0, 0):
            continue
        cand = tuple(i + di for i, di in zip(idx, d, strict=True))
        if all(0 <= c < n for c, n in zip(cand, dims, strict=True)):
            out.append(cand)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


# -- the search ------------------------------------------------------------------------------


@dataclass
class _Book:
    """Every measurement so far, by shape and stage."""

    measure: MeasureFn
    screened: dict[Shape, ShapeTiming] = field(default_factory=dict)
    confirmed: dict[Shape, ShapeTiming] = field(default_factory=dict)
    hot: list[ShapeTiming] = field(default_factory=list)
    sustained: list[ShapeTiming] = field(default_factory=list)

    def run(self, shapes: Iterable[Shape], stage: str) -> list[ShapeTiming]:
        # Shapes in order of work, so the board's power state changes gradually from one to the next:
        # the screen runs big to small and ends on small shapes, so the confirm stage (small to big,
        # mostly the small fast shapes) starts from a board that is not at its power limit.
        done = []
        descending = stage == SCREEN
        for shape in sorted(set(shapes), key=lambda s: (flops(s), s), reverse=descending):
            t = self.measure(shape, stage)
            done.append(t)
            if stage == SCREEN:
                self.screened[shape] = t
            elif stage == BURST:
                self.confirmed[shape] = t
        return done

    def leaders(self, count: int) -> list[Shape]:
        ranked = sorted(self.screened.values(), key=lambda t: (-t.mean_tflops, t.shape))
        return [t.shape for t in ranked[:count]]

    def tried(self) -> int:
        return len(set(self.screened) | set(self.confirmed) | {t.shape for t in self.hot + self.sustained})


def search(grid: Grid, measure: MeasureFn, plan: SearchPlan | None = None,
           telemetry: Telemetry | None = None, clock: Callable[[], float] | None = None) -> SearchSummary:
    """Coarse screen, refine around the leaders, confirm, then pin the large leaders for the MSMF."""
    plan = plan or SearchPlan()
    tel = telemetry or Telemetry()
    tick = clock or _zero_clock
    t0 = tick()
    book = _Book(measure)
    dims = (len(grid.ms), len(grid.ns), len(grid.ks))
    strides = coarse_strides(grid, plan.coarse_budget)
    coarse = itertools.product(*[_coarse_indices(n, s) for n, s in zip(dims, strides, strict=True)])
    book.run([grid.shape_at(i) for i in coarse], SCREEN)  # type: ignore[arg-type]

    steps = strides
    rounds_at_one = 0
    stop_reason = "the coarse grid was the whole grid" if strides == (1, 1, 1) else ""
    while strides != (1, 1, 1):
        steps = tuple(max(1, s // 2) if s > 1 else 1 for s in steps)  # type: ignore[assignment]
        leaders = book.leaders(plan.num_leaders)
        fresh = {grid.shape_at(n) for lead in leaders for n in _neighbours(grid.index_of(lead), steps, dims)}
        fresh -= set(book.screened)
        if fresh:
            book.run(fresh, SCREEN)
        if steps == (1, 1, 1):
            rounds_at_one += 1
            if book.leaders(plan.num_leaders) == leaders or not fresh:
                stop_reason = "the leaders held against every neighbour (early stop)"
                break
            if rounds_at_one >= plan.max_climb_rounds:
                stop_reason = f"stopped climbing after {rounds_at_one} rounds"
                break

    return _finish(book, plan, tel, tick, t0, mode="search", grid=grid, stop_reason=stop_reason)


def exhaustive(grid: Grid, measure: MeasureFn, plan: SearchPlan | None = None,
               telemetry: Telemetry | None = None, clock: Callable[[], float] | None = None) -> SearchSummary:
    """The reference: every shape of the grid with the full burst timing, then the same MSMF stage."""
    plan = plan or SearchPlan()
    tick = clock or _zero_clock
    t0 = tick()
    book = _Book(measure)
    book.run(grid.shapes(), BURST)
    book.screened = dict(book.confirmed)  # the sustain stage ranks on these
    return _finish(book, plan, telemetry or Telemetry(), tick, t0, mode="exhaustive", grid=grid,
                   stop_reason="every shape of the grid", confirm=False)


def _finish(book: _Book, plan: SearchPlan, tel: Telemetry, tick: Callable[[], float], t0: float, *,
            mode: str, grid: Grid, stop_reason: str, confirm: bool = True) -> SearchSummary:
    if confirm:
        ranked = sorted(book.screened.values(), key=lambda t: (-t.mean_tflops, t.shape))
        best = ranked[0].mean_tflops if ranked else 0.0
        chosen = [t.shape for t in ranked[:plan.num_confirm]
                  if t.mean_tflops >= best * (1 - plan.confirm_within)]
        book.run(chosen, BURST)
    mamf = max(book.confirmed.values(), key=lambda t: (t.mean_tflops, t.shape), default=None)
    t_burst = tick()

    msmf = pin_for_msmf(book, plan, tel)
    t_end = tick()
    return SearchSummary(mode=mode, grid=grid.describe(), shapes_tried=book.tried(),
                         num_screened=len(book.screened) if confirm else 0,
                         num_confirmed=len(book.confirmed), num_hot=len(book.hot),
                         num_sustained=len(book.sustained), mamf=mamf, msmf=msmf,
                         sustained=list(book.hot) + list(book.sustained),
                         burst_s=round(t_burst - t0, 3), sustain_s=round(t_end - t_burst, 3),
                         total_s=round(t_end - t0, 3), stop_reason=stop_reason)


def sustain_candidates(timings: Iterable[ShapeTiming], plan: SearchPlan, min_flops: int = 0) -> list[Shape]:
    """Large shapes by measured TFLOPS, best first. "Large": one matmul lasts at least
    ``sustain_min_kernel_ms`` (if none does, the largest third of the shapes by work) and does more
    than ``min_flops`` of work."""
    pool = [t for t in timings if t.mean_tflops > 0 and t.flops > min_flops]
    big = [t for t in pool if t.kernel_ms >= plan.sustain_min_kernel_ms]
    if not big:
        by_work = sorted(pool, key=lambda t: -t.flops)
        big = by_work[:max(1, len(by_work) // 3)]
    return [t.shape for t in sorted(big, key=lambda t: (-t.mean_tflops, t.shape))]


def pin_for_msmf(book: _Book, plan: SearchPlan, tel: Telemetry) -> ShapeTiming | None:
    """The sustained stage. First the fastest large shapes are held at full power one after another
    (``HOT``: the board stays at its power limit from one to the next, so each needs only a short
    settle); while every one so far never reached the power limit, the next does at least twice the
    work of the biggest so far. Then the best ``num_sustain`` of them are held to steady state and
    timed (one spare should one fail), and the best held rate is MSMF."""
    best = {**book.screened, **book.confirmed}  # the confirm timing ranks a shape where there is one
    tried: set[Shape] = set()
    while len(book.hot) < plan.num_hot + plan.num_hot_extra:
        good = [t for t in book.hot if qualifies(t)]
        if good and len(book.hot) >= plan.num_hot:
            break
        todo = _next_candidates(best.values(), plan, tried, book.hot, good)
        if not todo:
            break
        tried.add(todo[0])
        book.hot.append(classify_sustained(book.measure(todo[0], HOT), tel, plan.min_power_frac))
    ranked = sorted((t for t in book.hot if qualifies(t)), key=lambda t: (-t.mean_tflops, t.shape))
    for t in ranked[:plan.num_sustain + 1]:  # one spare, should one fail its hold
        if sum(1 for x in book.sustained if qualifies(x)) >= plan.num_sustain:
            break
        book.sustained.append(classify_sustained(book.measure(t.shape, SUSTAINED), tel, plan.min_power_frac))
    good = [t for t in book.sustained if qualifies(t)]
    if not good:
        return None
    return max(good, key=lambda t: (held_rate(t), t.shape))


def _next_candidates(timings: Iterable[ShapeTiming], plan: SearchPlan, pinned: set[Shape],
                     sustained: list[ShapeTiming], good: list[ShapeTiming]) -> list[Shape]:
    timings = list(timings)
    if good or not sustained:
        return [s for s in sustain_candidates(timings, plan) if s not in pinned]
    biggest = max(t.flops for t in sustained)
    for floor in (2 * biggest - 1, biggest):
        todo = [s for s in sustain_candidates(timings, plan, floor) if s not in pinned]
        if todo:
            return todo
    return []


def _zero_clock() -> float:
    return 0.0
