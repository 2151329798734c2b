"""The MAMF / MSMF search on synthetic timing models: it must find what was planted."""

import math
import random

import pytest

from clustereval.analysis.matmul import (
    BURST,
    GRIDS,
    HOT,
    SCREEN,
    SUSPECT,
    SUSTAINED,
    Grid,
    SearchPlan,
    Telemetry,
    classify_sustained,
    coarse_strides,
    exhaustive,
    flops,
    idle_siblings,
    parse_grid,
    parse_shape,
    search,
)
from clustereval.records.compute import ShapeTiming

LIMIT_W, BOOST_MHZ = 700.0, 1980.0


class Model:
    """A TFLOPS landscape with one planted best: a broad hill around ``peak`` plus a deterministic
    ripple (wave quantisation stand-in), and a board that reaches its power limit only on big shapes."""

    def __init__(self, peak, top=800.0, ripple=0.01, noise=0.0, big_flops=2e12, seed=0):
        self.peak, self.top, self.ripple, self.noise, self.big_flops = peak, top, ripple, noise, big_flops
        self.calls: list[tuple[tuple[int, int, int], str]] = []
        self.rng = random.Random(seed)

    def true_tflops(self, shape):
        dist = sum(abs(math.log2(v / p)) for v, p in zip(shape, self.peak, strict=True))
        hill = self.top * (1 - 0.08 * dist)
        ripple = 1 - self.ripple * (0.5 + 0.5 * math.sin(shape[0] * 0.37 + shape[1] * 0.11 + shape[2] * 0.07))
        return hill * (ripple if shape != self.peak else 1.0)

    def __call__(self, shape, stage):
        self.calls.append((shape, stage))
        value = self.true_tflops(shape) * (1 + self.rng.gauss(0, self.noise))
        big = flops(shape) >= self.big_flops
        power = LIMIT_W - 5 if (stage in (HOT, SUSTAINED) and big) else 450.0
        clock = 1500.0 if power > 600 else BOOST_MHZ
        return ShapeTiming(m=shape[0], n=shape[1], k=shape[2], stage=stage, mean_tflops=value,
                           median_tflops=value, max_tflops=value * 1.01, iterations=10,
                           power_w=power, sm_mhz=clock)


def test_search_finds_the_planted_best_off_the_coarse_grid():
    grid = GRIDS["default"]  # 80 values per axis: 512,000 shapes
    peak = (5376, 12544, 9984)  # not on the coarse lattice
    assert grid.index_of(peak)
    model = Model(peak)
    out = search(grid, model, SearchPlan(), Telemetry(LIMIT_W, BOOST_MHZ))
    assert out.mamf is not None and out.mamf.shape == peak
    assert out.shapes_tried < 2000  # a search, not a sweep
    assert out.num_confirmed >= 1 and "early stop" in out.stop_reason


def test_search_with_measurement_noise_lands_within_half_a_percent():
    grid = GRIDS["anchors"]
    peak = (1024, 4096, 16384)
    model = Model(peak, noise=0.002, seed=3)
    out = search(grid, model, SearchPlan(), Telemetry(LIMIT_W, BOOST_MHZ))
    best = max(model.true_tflops(s) for s in grid.shapes())
    assert model.true_tflops(out.mamf.shape) >= best * 0.995


def test_small_grid_is_screened_whole_then_confirmed():
    grid = GRIDS["anchors"]
    model = Model((3072, 8192, 12288))
    out = search(grid, model, SearchPlan(), Telemetry(LIMIT_W, BOOST_MHZ))
    screened = {s for s, st in model.calls if st == SCREEN}
    assert len(screened) == grid.size == 256
    confirmed = [s for s, st in model.calls if st == BURST]
    assert out.mamf.shape == (3072, 8192, 12288) and out.mamf.shape in confirmed
    assert out.num_confirmed <= SearchPlan().num_confirm


def test_exhaustive_times_every_shape_with_the_full_measurement():
    grid = parse_grid("M=1024:4096:1024,N=4096|8192,K=4096|8192")
    model = Model((2048, 8192, 4096))
    out = exhaustive(grid, model, SearchPlan(num_hot=2), Telemetry(LIMIT_W, BOOST_MHZ))
    assert sorted(s for s, st in model.calls if st == BURST) == sorted(grid.shapes())
    assert not [s for s, st in model.calls if st == SCREEN]
    assert out.mamf.shape == (2048, 8192, 4096) and out.shapes_tried == grid.size


def test_msmf_skips_a_fast_shape_that_never_reached_the_power_limit():
    grid = GRIDS["anchors"]
    # The fastest shapes are big enough to be candidates by run time but the power model keeps
    # everything under 4e12 FLOP below the limit: those must be SUSPECT, not MSMF.
    model = Model((8192, 8192, 8192), big_flops=4e12)
    plan = SearchPlan(sustain_min_kernel_ms=1.0, num_hot=2, num_hot_extra=6)
    out = search(grid, model, plan, Telemetry(LIMIT_W, BOOST_MHZ))
    suspects = [t for t in out.sustained if t.label == SUSPECT]
    assert suspects and all(t.flops < 4e12 for t in suspects)
    assert all("700 W limit" in t.why for t in suspects)
    assert out.msmf is not None and out.msmf.label == "" and out.msmf.flops >= 4e12
    assert out.msmf.power_w >= 0.95 * LIMIT_W and out.msmf.stage == SUSTAINED
    # the best of the hot shapes that reached the limit got the full pin, and it is the MSMF
    hot_ok = [t for t in out.sustained if t.stage == HOT and t.label != SUSPECT]
    assert out.msmf.shape == max(hot_ok, key=lambda t: t.mean_tflops).shape
    assert out.num_sustained == 1 and out.num_hot == len([t for t in out.sustained if t.stage == HOT])


def test_no_msmf_when_nothing_reaches_the_power_limit():
    model = Model((8192, 8192, 8192), big_flops=1e30)
    out = search(GRIDS["anchors"], model, SearchPlan(num_hot=1, num_hot_extra=2), Telemetry(LIMIT_W, BOOST_MHZ))
    assert out.msmf is None and len(out.sustained) == 3 and all(t.label == SUSPECT for t in out.sustained)
    assert out.num_sustained == 0  # no hot shape qualified, so none was pinned


def test_classify_sustained():
    tel = Telemetry(LIMIT_W, BOOST_MHZ)
    at_limit = ShapeTiming(1, 1, 1, power_w=690.0, sm_mhz=1530.0)
    assert classify_sustained(at_limit, tel).label == ""
    low = ShapeTiming(1, 1, 1, power_w=612.0, sm_mhz=1980.0)
    assert classify_sustained(low, tel).label == SUSPECT and "612 W" in low.why
    boost = ShapeTiming(1, 1, 1, power_w=699.0, sm_mhz=1980.0)
    assert classify_sustained(boost, tel).label == SUSPECT and "boost" in boost.why
    blind = ShapeTiming(1, 1, 1)
    assert classify_sustained(blind, Telemetry()).label == "" and blind.why == "no power telemetry"


def test_idle_sibling_detection():
    busy = [100.0] * 40
    stopped = [100.0] * 30 + [0.0] * 10
    one_glitch = [100.0] * 39 + [0.0]
    assert idle_siblings({1: busy, 2: stopped, 3: one_glitch}) == [2]
    assert idle_siblings({}) == []


def test_coarse_strides_respect_the_budget():
    assert coarse_strides(GRIDS["anchors"], 256) == (1, 1, 1)
    s = coarse_strides(GRIDS["anchors"], 64)
    assert s[0] > 1 and s[1:] == (1, 1)
    s = coarse_strides(GRIDS["default"], 256)
    counts = [len(range(0, 80, x)) + (1 if (79 % x) else 0) for x in s]
    assert math.prod(counts) <= 256


def test_grid_and_shape_parsing():
    g = parse_grid("M=1024:3072:1024,N=4096,K=4096|8192")
    assert g.ms == (1024, 2048, 3072) and g.ns == (4096,) and g.ks == (4096, 8192) and g.size == 6
    assert GRIDS["anchors"].size == 256
    assert parse_shape("8192x4096x16384") == (8192, 4096, 16384) == parse_shape("8192×4096×16384")
    with pytest.raises(ValueError):
        parse_shape("8192x4096")
    with pytest.raises(ValueError):
        parse_grid("M=1:2:1")
    with pytest.raises(ValueError):
        Grid((2, 1), (1,), (1,))
