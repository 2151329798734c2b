"""Steady state before the sustained number: when a held matmul shape has soaked long enough, what
its timed window says, and whether the rate was still drifting.

A held shape runs back to back in chunks of about a quarter second; each chunk gives one rate and
(with NVML) the mean SM clock over it. The soak ends when the SM clock stops changing: its mean
over the last ``span_s`` is within ``tol_frac`` of its mean over the ``span_s`` before, after at
least ``min_s`` and at most ``max_s``. The mean, not the median, because the clock moves in 15 MHz
steps (about 1%): a median of a clock dithering between two steps jumps a whole step and would
never settle. Without a clock reading the chunk rates' medians are compared instead. Then the
timed window runs for ``window_s``: its median rate is the figure, and the medians of its two
halves give the drift. A window whose rate drifted by more than ``max_drift_frac``, or whose soak
hit ``max_s`` with the clock still moving, is UNSTEADY and cannot be MSMF.

Pure code, imported by the worker on the node: the standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from clustereval.records.compute import ShapeTiming

UNSTEADY = "UNSTEADY"
STANDARD_WINDOW_S = 10.0  # the standard profile's timed window; a shorter one is said in the report


@dataclass(frozen=True)
class SteadyRule:
    """When a held shape is steady enough to time, and how long it is timed."""

    min_s: float = 20.0  # soak at least this long
    max_s: float = 60.0  # ... and at most this long
    span_s: float = 5.0  # the clock's mean over the last span_s vs the span_s before it
    tol_frac: float = 0.005  # ... agree within this fraction: the clock stopped changing
    window_s: float = STANDARD_WINDOW_S  # the timed window after the soak
    max_drift_frac: float = 0.005  # first-half vs second-half median rate beyond this: UNSTEADY


# The first held shape on a board that ran bursts until now: the full soak.
SOAK = SteadyRule()
# A shape switched in on a board already at its power limit (the next candidate, or a GPU whose
# siblings have been computing all along): a settle, the same test over shorter spans.
SETTLE = SteadyRule(min_s=5.0, max_s=60.0, span_s=2.5)



@dataclass
class HoldResult:
    soak_s: float
    settled: bool
    window_t0_s: float
    window_t1_s: float
    median_tflops: float
    first_half_tflops: float
    second_half_tflops: float
    drift_frac: float
    num_chunks: int

    @property
    def window_s(self) -> float:
        return self.window_t1_s - self.window_t0_s


@dataclass
class Hold:
    """The soak-then-window state machine of one held shape. Feed it every chunk with ``add``
    (seconds since the hold began at the chunk's end, its TFLOPS, its mean SM clock or None) until
    ``done``; ``in_window`` says whether the chunk just added belongs to the timed window."""

    rule: SteadyRule
    _soak: list[tuple[float, float, float | None]] = field(default_factory=list)
    _window: list[tuple[float, float]] = field(default_factory=list)
    _window_t0: float | None = None
    _settled: bool = False
    done: bool = False

    @property
    def in_window(self) -> bool:
        return self._window_t0 is not None

    def add(self, t_s: float, tflops: float, sm_mhz: float | None = None) -> None:
        if self.done:
            raise RuntimeError("the hold is over")
        if self._window_t0 is None:
            self._soak.append((t_s, tflops, sm_mhz))
            if t_s >= self.rule.min_s and self._steady(t_s):
                self._settled = True
                self._window_t0 = t_s
            elif t_s >= self.rule.max_s:
                self._window_t0 = t_s
            if self._window_t0 is not None and self.rule.window_s <= 0:
                self.done = True
            return
        self._window.append((t_s, tflops))
        if t_s - self._window_t0 >= self.rule.window_s:
            self.done = True

    def _steady(self, now: float) -> bool:
        span = self.rule.span_s
        recent = [p for p in self._soak if now - span < p[0] <= now]
        before = [p for p in self._soak if now - 2 * span < p[0] <= now - span]
        if len(recent) < 2 or len(before) < 2:
            return False
        use_clock = all(p[2] is not None for p in recent + before)
        if use_clock:
            a = statistics.fmean(p[2] for p in before)  # type: ignore[misc]
            b = statistics.fmean(p[2] for p in recent)  # type: ignore[misc]
        else:
            a = statistics.median(p[1] for p in before)
            b = statistics.median(p[1] for p in recent)
        return a > 0 and abs(b - a) / a <= self.rule.tol_frac

    def result(self) -> HoldResult:
        if self._window_t0 is None or not self._window:
            raise RuntimeError("the hold has no timed window yet")
        rates = [r for _, r in self._window]
        half = len(rates) // 2
        first = statistics.median(rates[:half]) if half else rates[0]
        second = statistics.median(rates[half:])
        return HoldResult(soak_s=round(self._window_t0, 3), settled=self._settled,
                          window_t0_s=self._window_t0, window_t1_s=self._window[-1][0],
                          median_tflops=statistics.median(rates), first_half_tflops=first,
                          second_half_tflops=second, drift_frac=(second - first) / first if first else 0.0,
                          num_chunks=len(rates))


def classify_steadiness(t: ShapeTiming, rule: SteadyRule) -> ShapeTiming:
    """Label a held measurement UNSTEADY when its rate was still drifting. A SUSPECT label (never
    at the power limit) stays; without a clock reading (a CPU stand-in) there is no verdict."""
    if t.label or not t.held:
        return t
    if t.sm_mhz is None:
        return t
    if abs(t.drift_frac) > rule.max_drift_frac:
        t.label = UNSTEADY
        t.why = (f"its rate moved {100 * t.drift_frac:+.1f}% from the first to the second half of its "
                 f"{t.window_s:.0f} s window (beyond ±{100 * rule.max_drift_frac:.1f}%)")
    elif not t.settled:
        t.label = UNSTEADY
        t.why = (f"its clock was still changing after the {t.soak_s:.0f} s soak limit "
                 f"(more than {100 * rule.tol_frac:.1f}% between {rule.span_s:g} s spans)")
    return t


# NVML clock-event ("throttle") reason bits, as nvml.h numbers them.
CLOCK_REASONS = {
    0x1: "gpu idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x100: "display clock setting",
}


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_REASONS.items() if mask & bit]


def reasons_seen(masks: Sequence[int]) -> list[str]:
    """The reasons set in any of the masks, in nvml.h order."""
    combined = 0
    for m in masks:
        combined |= m
    return reason_names(combined)
