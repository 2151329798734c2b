"""Steady state before the sustained number, on synthetic clock-and-rate models: a board whose SM
clock converges, oscillates, never settles, or never reaches the power limit."""

import math
import random

import pytest

from clustereval.analysis.matmul import (
    HOT,
    SUSPECT,
    SUSTAINED,
    SearchPlan,
    Telemetry,
    _Book,
    classify_sustained,
    pin_for_msmf,
    qualifies,
)
from clustereval.analysis.steady import (
    SETTLE,
    SOAK,
    UNSTEADY,
    Hold,
    SteadyRule,
    classify_steadiness,
    reason_names,
    reasons_seen,
)
from clustereval.records.compute import ShapeTiming

LIMIT_W, BOOST_MHZ = 700.0, 1980.0
CHUNK_S = 0.25
TFLOPS_PER_MHZ = 0.48  # a 1410 MHz plateau gives about 677 TFLOPS


class Board:
    """SM clock over time once a shape is held: ``clock(t)`` in MHz, quantised to 15 MHz steps with
    a random dither between the two nearest steps (as NVML reads it); the rate follows the clock."""

    def __init__(self, clock, power_w=LIMIT_W - 8, noise=0.002, seed=1):
        self.clock, self.power_w, self.noise = clock, power_w, noise
        self.rng = random.Random(seed)

    def read(self, t):
        exact = self.clock(t)
        low = 15 * math.floor(exact / 15)
        mhz = low + (15 if self.rng.random() < (exact - low) / 15 else 0)
        # the chunk's mean clock: several NVML samples per chunk average the dither
        samples = [low + (15 if self.rng.random() < (exact - low) / 15 else 0) for _ in range(12)]
        mean = sum(samples) / len(samples)
        rate = exact * TFLOPS_PER_MHZ * (1 + self.rng.gauss(0, self.noise))
        return rate, mean, mhz


def hold(board, rule=SOAK, chunk_s=CHUNK_S, start=0.0):
    """Drive the state machine as the worker does; return (timing, the state)."""
    state = Hold(rule)
    t = start
    window = []
    clocks = []
    while not state.done:
        t += chunk_s
        rate, mean_mhz, _ = board.read(t)
        was_window = state.in_window
        state.add(t - start, rate, mean_mhz)
        if was_window:
            window.append(rate)
            clocks.append(mean_mhz)
    res = state.result()
    timing = ShapeTiming(m=13312, n=13312, k=9472, stage=SUSTAINED, mean_tflops=sum(window) / len(window),
                         median_tflops=res.median_tflops, max_tflops=max(window), iterations=len(window),
                         power_w=board.power_w, sm_mhz=sum(clocks) / len(clocks), soak_s=res.soak_s,
                         settled=res.settled, window_s=res.window_s, first_half_tflops=res.first_half_tflops,
                         second_half_tflops=res.second_half_tflops, drift_frac=res.drift_frac)
    return timing, res


TEL = Telemetry(LIMIT_W, BOOST_MHZ)


def label(timing, rule=SOAK):
    return classify_steadiness(classify_sustained(timing, TEL), rule)


def converging(start=1480.0, floor=1410.0, tau=8.0):
    return lambda t: floor + (start - floor) * math.exp(-t / tau)


def test_a_converging_clock_soaks_past_its_fall_and_reads_the_plateau():
    board = Board(converging(tau=8.0))
    t, res = hold(board)
    assert res.settled and SOAK.min_s <= res.soak_s < SOAK.max_s
    plateau = 1410.0 * TFLOPS_PER_MHZ
    assert abs(t.median_tflops - plateau) / plateau < 0.003  # read after the fall, not during it
    assert res.window_s >= SOAK.window_s - CHUNK_S and abs(t.drift_frac) < SOAK.max_drift_frac
    assert label(t).label == "" and qualifies(t)


def test_a_slow_fall_is_soaked_longer_than_the_minimum():
    fall = converging(start=1500.0, tau=25.0)
    t, res = hold(Board(fall))
    assert res.settled and res.soak_s > SOAK.min_s + 5
    at_minimum = fall(SOAK.min_s + SOAK.window_s / 2) * TFLOPS_PER_MHZ  # what a window at the minimum would read
    plateau = 1410.0 * TFLOPS_PER_MHZ
    assert plateau < t.median_tflops < at_minimum and label(t).label == ""


def test_the_old_short_pin_would_have_read_the_fall():
    """The rule matters: 1.5 s settle + 3 s timing, on the same board, reads well above the plateau."""
    board = Board(converging(start=1480.0, tau=10.0))
    short, _ = hold(board, SteadyRule(min_s=1.5, max_s=1.5, span_s=0.5, window_s=3.0))
    long, _ = hold(Board(converging(start=1480.0, tau=10.0)))
    assert short.median_tflops > long.median_tflops * 1.02


def test_a_clock_dithering_between_two_steps_still_settles():
    """Means, not medians, of a clock that flips between 1410 and 1425 MHz: a median would jump a step."""
    t, res = hold(Board(lambda t: 1417.0, noise=0.001))
    assert res.settled and res.soak_s == pytest.approx(SOAK.min_s, abs=2 * CHUNK_S)
    assert label(t).label == ""


def test_a_fast_small_oscillation_settles_and_is_steady():
    t, res = hold(Board(lambda t: 1420.0 + 12.0 * math.sin(2 * math.pi * t / 1.0)))
    assert res.settled and label(t).label == ""


@pytest.mark.parametrize("period_s", [14.0, 23.0, 40.0])
def test_a_slow_large_oscillation_is_unsteady(period_s):
    """Two 5 s means can agree for a moment on a slow swing; then the window's halves do not."""
    t, res = hold(Board(lambda t: 1450.0 + 45.0 * math.sin(2 * math.pi * t / period_s)))
    out = label(t)
    assert out.label == UNSTEADY and not qualifies(out)
    assert not res.settled or abs(t.drift_frac) > SOAK.max_drift_frac


def test_a_clock_that_never_stops_falling_is_unsteady():
    t, res = hold(Board(lambda t: 1600.0 - 2.5 * t))  # 0.8% per 5 s, on and on
    assert not res.settled and res.soak_s == pytest.approx(SOAK.max_s, abs=CHUNK_S)
    out = label(t)
    assert out.label == UNSTEADY and ("still changing" in out.why or "moved" in out.why)


def test_a_window_that_drifts_is_unsteady_even_after_a_settled_soak():
    # flat for the soak, then a step down in the middle of the window
    t, res = hold(Board(lambda t: 1440.0 if t < 25.0 else 1400.0))
    assert res.settled and t.drift_frac < -SOAK.max_drift_frac
    out = label(t)
    assert out.label == UNSTEADY and "from the first to the second half" in out.why


def test_a_board_that_never_reaches_its_power_limit_is_suspect_not_unsteady():
    t, res = hold(Board(converging(), power_w=455.0))
    out = label(t)
    assert res.settled and out.label == SUSPECT and "455 W against the 700 W limit" in out.why
    assert not qualifies(out)


def test_without_a_clock_the_rates_decide_the_soak_and_there_is_no_verdict():
    state = Hold(SteadyRule(min_s=1.0, max_s=4.0, span_s=0.5, window_s=1.0))
    t = 0.0
    while not state.done:
        t += 0.05
        state.add(t, 600.0)
    res = state.result()
    assert res.settled and res.soak_s == pytest.approx(1.0, abs=0.06) and res.median_tflops == 600.0
    timing = ShapeTiming(m=1, n=1, k=1, median_tflops=600.0, window_s=res.window_s, settled=True, drift_frac=0.05)
    assert classify_steadiness(timing, SOAK).label == ""  # no clock reading, no verdict


def test_a_settle_is_shorter_than_a_soak_on_a_board_already_at_its_limit():
    t, res = hold(Board(lambda t: 1410.0), SETTLE)
    assert res.settled and res.soak_s == pytest.approx(SETTLE.min_s, abs=2 * CHUNK_S)
    assert res.soak_s < SOAK.min_s


def test_the_hold_refuses_chunks_after_it_is_over():
    state = Hold(SteadyRule(min_s=0.0, max_s=0.1, span_s=0.05, window_s=0.1))
    for i in range(1, 100):
        if state.done:
            break
        state.add(0.05 * i, 1.0, 1400.0)
    with pytest.raises(RuntimeError):
        state.add(10.0, 1.0, 1400.0)


def test_clock_event_reasons_are_named():
    assert reason_names(0x4) == ["software power cap"]
    assert reasons_seen([0, 4, 0x20]) == ["software power cap", "software thermal slowdown"]


# -- the MSMF is chosen by what holds ---------------------------------------------------------


class Candidates:
    """Large shapes whose short hot holds and steady held rates disagree."""

    def __init__(self, hot, held, unsteady=()):
        self.hot, self.held, self.unsteady = hot, held, set(unsteady)
        self.calls = []

    def __call__(self, shape, stage):
        self.calls.append((shape, stage))
        if stage == HOT:
            v = self.hot[shape]
            return ShapeTiming(*shape, stage=HOT, mean_tflops=v, median_tflops=v, power_w=LIMIT_W - 5, sm_mhz=1470.0)
        v = self.held[shape]
        t = ShapeTiming(*shape, stage=SUSTAINED, mean_tflops=v + 1, median_tflops=v, power_w=LIMIT_W - 8,
                        sm_mhz=1410.0, soak_s=20.0, settled=True, window_s=10.0, first_half_tflops=v,
                        second_half_tflops=v * (0.98 if shape in self.unsteady else 1.0))
        t.drift_frac = (t.second_half_tflops - t.first_half_tflops) / t.first_half_tflops
        return label(t)


A, B, C, D = (13312, 13312, 8192), (13312, 13312, 8960), (13312, 13312, 9472), (12288, 12288, 12288)


def _book(model):
    book = _Book(model)
    for shape in (A, B, C, D):  # screened: large shapes, A the fastest burst
        rate = {A: 812.0, B: 811.0, C: 810.0, D: 790.0}[shape]
        book.screened[shape] = ShapeTiming(*shape, stage="screen", mean_tflops=rate, median_tflops=rate)
    return book


def test_msmf_is_the_best_held_rate_not_the_best_short_hold():
    model = Candidates(hot={A: 704.1, B: 703.4, C: 703.2, D: 690.0}, held={A: 678.6, B: 679.4, C: 679.9, D: 660.0})
    book = _book(model)
    msmf = pin_for_msmf(book, SearchPlan(num_hot=4, num_hot_extra=0, num_sustain=3), Telemetry(LIMIT_W, BOOST_MHZ))
    assert msmf.shape == C and msmf.median_tflops == 679.9
    assert [s for s, st in model.calls if st == SUSTAINED] == [A, B, C]  # the three best short holds, held


def test_an_unsteady_shape_cannot_be_msmf_even_with_the_best_held_median():
    model = Candidates(hot={A: 704.1, B: 703.4, C: 703.2, D: 690.0}, held={A: 690.0, B: 679.4, C: 679.9, D: 660.0},
                       unsteady={A})
    book = _book(model)
    msmf = pin_for_msmf(book, SearchPlan(num_hot=4, num_hot_extra=0, num_sustain=3), Telemetry(LIMIT_W, BOOST_MHZ))
    held = {t.shape: t for t in book.sustained}
    assert held[A].label == UNSTEADY and msmf.shape == C
    # a spare candidate was held so three steady shapes were compared
    assert [s for s, st in model.calls if st == SUSTAINED] == [A, B, C, D]
