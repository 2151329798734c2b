"""The whole-wave search: its families, the held ladder's reference correction, and the search as a whole
against synthetic GPUs (a burst model for MAMF, a held model whose board heats or cools for MSMF)."""

import math
import random

import pytest

from clustereval.analysis.matmul import Telemetry
from clustereval.analysis.waves import (
    GPU_SPACE,
    TILE,
    Ladder,
    WavePlan,
    families,
    is_whole_wave,
    ladder_rungs,
    neighbour_wave,
    run_ladder,
    tile_count,
    wave_layouts,
    wave_search,
)
from clustereval.records.compute import ShapeTiming


@pytest.mark.parametrize("sms", [132, 108, 80])
def test_every_family_fills_whole_waves_of_tiles(sms):
    fams = families(sms)
    assert fams
    for f in fams:
        assert is_whole_wave(f.m, f.n, sms) and tile_count(f.m, f.n) == f.waves * sms
        assert f.m % TILE[0] == 0 and f.n % TILE[1] == 0
        assert GPU_SPACE.min_dim <= min(f.m, f.n) and max(f.m, f.n) <= GPU_SPACE.max_dim
    # every wave count of 1…16 has its squarest layouts, squarest first
    for w in range(1, 17):
        layouts = [f for f in fams if f.waves == w]
        assert len(layouts) == GPU_SPACE.per_wave
        assert abs(math.log(layouts[0].m / layouts[0].n)) <= abs(math.log(layouts[1].m / layouts[1].n)) + 1e-9
    # a shape off the wave count is not whole-wave: 3072×3072 is 73% of two waves of 132 SMs
    if sms == 132:
        assert not is_whole_wave(3072, 3072, 132) and tile_count(3072, 3072) == 288
        assert (8192, 8448) == (wave_layouts(132, 16)[0].m, wave_layouts(132, 16)[0].n)  # sixteen waves
        assert {(1536, 2816), (2816, 1536)} <= {(f.m, f.n) for f in wave_layouts(132, 1)}  # one wave, both ways
        assert (3072, 2816) in {(f.m, f.n) for f in wave_layouts(132, 2)}


def test_neighbouring_wave_counts_keep_the_aspect():
    fam = wave_layouts(132, 8)[0]
    near = neighbour_wave(132, fam, GPU_SPACE)
    assert sorted(f.waves for f in near) == [7, 9]
    for f in near:
        assert abs(math.log(f.m / f.n) - math.log(fam.m / fam.n)) < 0.7


# -- the held ladder against a board that heats or cools ------------------------------------------


class Board:
    """A held rung's rate: the shape's true held rate times the board's drift at that moment, plus a
    little noise; each rung advances a fake clock by its length."""

    def __init__(self, rates, drift_per_s, noise=0.0005, seed=7):
        self.rates, self.drift_per_s, self.now = rates, drift_per_s, 0.0
        self.rand = random.Random(seed)

    def clock(self):
        return self.now

    def rung(self, shape, layout, seconds):
        mid = self.now + seconds / 2
        self.now += seconds
        rate = self.rates[(shape, layout)] * (1 + self.drift_per_s * mid) * (1 + self.rand.gauss(0, self.noise_frac))
        return ShapeTiming(*shape, stage="hot", mean_tflops=rate, median_tflops=rate, window_s=seconds * 0.65,
                           power_w=699.0, sm_mhz=1500.0)

    noise_frac = 0.0005


REF = ((8192, 8448, 20480), "nn")


def _ladder(drift_per_s, cands, rates):
    board = Board(rates, drift_per_s)
    ladder = Ladder(REF)
    run_ladder(ladder, cands, 3, 1.0, board.rung, board.clock, Telemetry(700.0, 1980.0), 0.95)
    raw = max(((x.median_tflops, v) for _, v, x in ladder.rungs))[1]
    return ladder, raw


@pytest.mark.parametrize("drift", ["heats", "cools"])
def test_the_reference_correction_picks_the_truly_better_shape_on_a_drifting_board(drift):
    # over the 13-rung ladder the board's rate moves 2%: down when it heats, up when it cools
    per_s = (-0.02 if drift == "heats" else 0.02) / 13
    good, close = ((4096, 4224, 20480), "nn"), ((5632, 4608, 20480), "nn")
    fillers = [((1024 * i, 2816, 20480), "nn") for i in range(2, 9)]
    rates = {REF: 700.0, good: 707.0, close: 704.0, **{f: 690.0 - i for i, f in enumerate(fillers)}}
    # heating favours what is held early, cooling what is held late: the better shape is put where the
    # drift works against it
    cands = [close, *fillers, good] if drift == "heats" else [good, *fillers, close]
    ladder, raw = _ladder(per_s, cands, rates)
    assert raw == close  # the plain rates pick the wrong shape: the test's drift is big enough to matter
    ranked = ladder.ranked()
    assert ranked[0][0] == good and ranked[1][0] == close
    assert ranked[0][1] == pytest.approx(707.0 / 700.0, rel=0.002)
    assert dict(ranked)[REF] == 1.0
    # every candidate sat between two reference rungs
    order = [v for _, v, _ in ladder.rungs]
    assert order[0] == REF and order[-1] == REF and order.count(REF) == 1 + math.ceil(len(cands) / 3)


def test_a_rung_that_never_reached_the_power_limit_is_not_ranked():
    rates = {REF: 700.0, ((2048, 2816, 20480), "nn"): 720.0}
    board = Board(rates, 0.0)

    def rung(shape, layout, seconds):
        t = board.rung(shape, layout, seconds)
        if shape != REF[0]:
            t.power_w = 500.0  # a burst's power: it ran under the limit
        return t

    ladder = Ladder(REF)
    run_ladder(ladder, [((2048, 2816, 20480), "nn")], 3, 1.0, rung, board.clock, Telemetry(700.0, 1980.0), 0.95)
    assert [v for v, _ in ladder.ranked()] == [REF]
    assert [x.label for _, v, x in ladder.rungs if v != REF] == ["SUSPECT"]


# -- the whole search against a synthetic GPU ---------------------------------------------------


def burst_rate(shape, layout):
    """A burst model: whole-wave families fast, a peak at two waves and K = 14336 in layout tn."""
    m, n, k = shape
    waves = tile_count(m, n) / 132
    fill = waves / math.ceil(waves)
    rate = 820.0 * fill - 40.0 * abs(math.log(k / 14336)) - 0.3 * abs(waves - 2)
    return rate + (1.5 if layout == "tn" else 0.0)


def held_model(shape, layout):
    """A held model: at the power limit large K pays, and the sixteen-wave family leads."""
    m, n, k = shape
    waves = tile_count(m, n) / 132
    rate = 690.0 + 6.0 * math.log(k / 8192) - 0.4 * abs(waves - 16)
    return rate + (1.0 if layout == "tn" else 0.0)


class SyntheticGpu:
    def __init__(self, drift_per_s):
        self.now, self.drift_per_s = 0.0, drift_per_s
        self.holds = 0
        self.rand = random.Random(3)

    def clock(self):
        return self.now

    def measure(self, shape, stage, layout):
        self.now += 0.05
        rate = burst_rate(shape, layout) * (1 + self.rand.gauss(0, 0.0005))
        return ShapeTiming(*shape, stage=stage, mean_tflops=rate, median_tflops=rate, max_tflops=rate * 1.004,
                           iterations=30, power_w=450.0, sm_mhz=1980.0)

    def _held(self, shape, layout, seconds):
        mid = self.now + seconds / 2
        self.now += seconds
        return held_model(shape, layout) * (1 + self.drift_per_s * mid)

    def rung(self, shape, layout, seconds):
        rate = self._held(shape, layout, seconds)
        return ShapeTiming(*shape, stage="hot", mean_tflops=rate, median_tflops=rate, window_s=0.65 * seconds,
                           power_w=698.0, sm_mhz=1480.0)

    def hold(self, shape, layout):
        self.holds += 1
        rate = self._held(shape, layout, 10.0)
        return ShapeTiming(*shape, stage="sustained", mean_tflops=rate, median_tflops=rate, window_s=5.0, soak_s=5.0,
                           settled=True, power_w=697.0, sm_mhz=1470.0, temp_c=61.0)


@pytest.mark.parametrize("drift_per_s", [-0.0008, 0.0, 0.0008])
def test_the_search_finds_the_planted_mamf_and_msmf(drift_per_s):
    gpu = SyntheticGpu(drift_per_s)
    s = wave_search(132, gpu.measure, gpu.rung, gpu.hold, telemetry=Telemetry(700.0, 1980.0), clock=gpu.clock)
    assert s.mode == "waves" and s.sm_count == 132 and s.tile == TILE
    # MAMF: the two-wave family at the K and layout the model peaks at, found by the refinement on K
    assert (s.mamf.m, s.mamf.n) in {(f.m, f.n) for f in wave_layouts(132, 2)}
    assert s.mamf.k == 14336 and s.mamf.layout == "tn" and s.mamf.stage == "burst"
    # MSMF: the sixteen-wave family at round two's larger K, in layout tn, held once at the end
    assert s.msmf.shape == (8192, 8448, GPU_SPACE.msmf_big_k) and s.msmf.layout == "tn" and gpu.holds == 1
    assert s.reference == (8192, 8448, 20480) and s.msmf_ratio > 1.0
    # the stages and what each timed
    names = [st.name for st in s.stages]
    assert names == ["screen", "refine", "confirm", "ladder", "final"]
    by = {st.name: st for st in s.stages}
    assert by["screen"].num_timings == len(families(132)) * len(GPU_SPACE.screen_ks)
    assert by["confirm"].num_timings == 2 * WavePlan().num_confirm
    round1, round2 = ladder_rungs(WavePlan())
    assert round1 < by["ladder"].num_timings <= round1 + round2 and s.num_hot == by["ladder"].num_timings
    assert all(len(st.shapes) == st.num_timings and st.seconds > 0 for st in s.stages)
    assert s.total_s == pytest.approx(sum(st.seconds for st in s.stages), abs=0.01)
    assert s.shapes_tried == len({tuple(int(v) for v in x.split("/")[0].split("x")) for st in s.stages
                                  for x in st.shapes})


def test_a_failed_final_hold_falls_to_the_next_shape():
    gpu = SyntheticGpu(0.0)
    first = []

    def hold(shape, layout):
        t = gpu.hold(shape, layout)
        if not first:
            first.append(t.shape)
            t.label, t.why = "UNSTEADY", "its rate moved"
        return t

    s = wave_search(132, gpu.measure, gpu.rung, hold, telemetry=Telemetry(700.0, 1980.0), clock=gpu.clock)
    assert s.msmf is not None and (s.msmf.shape, s.msmf.layout) != (first[0], "tn") and s.num_sustained == 2
    assert s.sustained[-2].label == "UNSTEADY"


def test_the_search_needs_the_sm_count():
    gpu = SyntheticGpu(0.0)
    with pytest.raises(ValueError, match="SM count"):
        wave_search(0, gpu.measure, gpu.rung, gpu.hold)


# -- the real worker and the phase on a CPU stand-in --------------------------------------------


def test_the_worker_runs_the_whole_wave_search_without_a_grid():
    from tests.test_matmul_worker import _result, run_worker

    rc, events = run_worker("search", "--device", "cpu", "--settle-s", "0.02", "--sustain-s", "0.05")
    assert rc == 0, events
    s = _result(events)["summary"]
    shapes = [e for e in events if e["event"] == "shape"]
    assert s["mode"] == "waves" and [st["name"] for st in s["stages"]] == ["screen", "refine", "confirm", "ladder",
                                                                             "final"]
    assert sum(st["num_timings"] for st in s["stages"]) == len(shapes)
    assert {e["layout"] for e in shapes if e["stage"] == "burst"} == {"nn", "tn"}
    assert s["mamf"]["stage"] == "burst" and s["mamf"]["mean_tflops"] == max(
        e["mean_tflops"] for e in shapes if e["stage"] == "burst")
    rungs = [e for e in s["sustained"] if e["stage"] == "hot"]  # ranked: each carries its ratio
    assert len(rungs) == len([e for e in shapes if e["stage"] == "hot"]) and all(e["window_s"] > 0 for e in rungs)
    assert rungs[0]["ref_ratio"] == 1.0 and all(e["ref_ratio"] > 0 for e in rungs)
    assert s["msmf"]["stage"] == "sustained" and s["msmf"]["window_s"] > 0
    assert s["msmf_ratio"] > 0 and s["reference"] and s["trace"]["msmf_span"]["name"] == "window"
    # the all-GPU pass holds the chosen shape in the chosen layout
    shape = "x".join(str(s["msmf"][a]) for a in "mnk")
    rc, events = run_worker("pinned", "--device", "cpu", "--shape", shape, "--layout", "tn", "--settle-s", "0.02",
                            "--sustain-s", "0.05")
    assert rc == 0 and _result(events)["timing"]["layout"] == "tn"


@pytest.mark.slow
def test_the_phase_forwards_the_layout_and_its_report_lints(tmp_path):
    from clustereval.phases.matmul import MatmulPhase
    from clustereval.phases.settings import GpuSettings
    from tests.test_compute_phases import make_ctx
    from tests.test_compute_report import lint, render

    ctx = make_ctx(tmp_path)
    rec = MatmulPhase(GpuSettings(device="cpu", cpu_gpus=2, settle_s=0.02, sustain_s=0.05)).run(ctx)
    (node,) = rec.nodes
    assert not rec.gaps and node.search.mode == "waves" and node.msmf_shape == node.search.msmf.shape
    assert node.msmf_layout == node.search.msmf.layout and node.gpus[1].timings[0].layout == node.msmf_layout
    assert all(t.layout == node.msmf_layout for g in node.gpus for t in g.timings if t is not None)
    md = render({"matmul": rec}).markdown
    text = md[md.index("### GPU performance"):]
    assert "whole-wave family" in text and f"layout `{node.search.mamf.layout}`" in text
    assert "The stages took screen" in text and "On the ladder" in text
    lint(md, tmp_path)


def test_the_wave_search_time_left_counts_down():
    from clustereval.phases.settings import GpuSettings

    settings = GpuSettings(settle_s=5.0, sustain_s=5.0)
    plan = WavePlan()
    round1, round2 = ladder_rungs(plan)
    tail = round1 * plan.rung_s + round2 * plan.rung2_s + 10.0
    assert settings.wave_search_time_left_s([], 0.0) == pytest.approx(plan.expected_bursts * 0.05 + tail)
    assert settings.wave_search_time_left_s(["screen"] * 50, 5.0) == pytest.approx((plan.expected_bursts - 50) * 0.1
                                                                                   + tail)
    assert settings.wave_search_time_left_s(["screen"] * 150 + ["hot"] * round1, 20.0) == pytest.approx(
        round2 * plan.rung2_s + 10.0)
    assert settings.wave_search_time_left_s(["screen"] * 150 + ["hot"] * 20 + ["sustained"], 40.0) == 0.0


# -- what the lent H200 measured (tests/fixtures/matmul/) -----------------------------------------

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "matmul"


def captured_waves():
    import json

    from clustereval.records import from_dict
    from clustereval.records.compute import SearchSummary

    return from_dict(SearchSummary, json.loads((FIXTURES / "h200-wave-search.json").read_text()))


def test_the_captured_h200_wave_search_holds_what_the_record_promises():
    s = captured_waves()
    assert s.mode == "waves" and s.sm_count == 132 and s.tile == TILE
    assert [st.name for st in s.stages] == ["screen", "refine", "confirm", "ladder", "final"]
    assert sum(st.seconds for st in s.stages) == pytest.approx(s.total_s, abs=0.5)
    # MAMF: a burst at boost, the mean of its confirm with its peak beside it
    assert s.mamf.stage == "burst" and s.mamf.sm_mhz >= 1950 and s.mamf.max_tflops >= s.mamf.mean_tflops
    assert s.mamf.layout in ("nn", "tn") and s.mamf.iterations >= 30
    # MSMF: the ladder's winner, held at the power limit with a settled clock and a steady window
    m = s.msmf
    assert m.stage == "sustained" and m.held and m.label == "" and m.power_w > 0.97 * 700 and m.sm_mhz < 1500
    assert abs(m.drift_frac) <= s.max_drift_frac and m.temp_c is not None
    rungs = [t for t in s.sustained if t.stage == "hot"]
    ref = [t for t in rungs if t.shape == s.reference and t.layout == s.reference_layout]
    assert len(ref) >= 5 and all(t.ref_ratio == 1.0 for t in ref)
    # the reference's own rungs drift with the board: what the ratios correct for
    assert max(t.median_tflops for t in ref) > min(t.median_tflops for t in ref)
    winner = [t.ref_ratio for t in rungs if (t.shape, t.layout) == (m.shape, m.layout)]
    assert winner and s.msmf_ratio == pytest.approx(sum(winner) / len(winner), abs=1e-4)
    # the first rungs after the bursts drew 660–690 W: one under 95% of the limit is SUSPECT and not ranked
    low = [t for t in rungs if t.power_w < 0.95 * 700]
    assert low and all(t.label == "SUSPECT" and t.ref_ratio == 0.0 for t in low)
    assert all(t.label == "" and t.ref_ratio > 0 for t in rungs if t.power_w >= 0.95 * 700)


def test_the_captured_search_renders_a_lint_clean_report(tmp_path):
    from tests.test_compute_report import lint, section
    from tests.test_matmul_trace import matmul_record, render

    s = captured_waves()
    rec = matmul_record(s, gpus=(0, 1))
    rec.nodes[0].msmf_layout = s.msmf.layout
    md = render({"matmul": rec}).markdown
    text = section(md, "GPU performance benchmarks")
    assert "132 streaming multiprocessors (SMs)" in text and "whole-wave family" in text
    assert f"the mean of {s.mamf.iterations} timed iterations, its fastest iteration {s.mamf.max_tflops:.0f} TFLOPS, " \
           f"layout `{s.mamf.layout}`" in text
    assert f"reference shape, {'×'.join(map(str, s.reference))}" in text
    assert f"Its held window on GPU0: median {s.msmf.median_tflops:.1f} TFLOPS" in text
    assert f"{s.msmf.power_w:.0f} W / {s.msmf.sm_mhz:.0f} MHz / {s.msmf.temp_c:.0f} °C" in text
    assert "The stages took screen" in text and "every other GPU measured the same shape in the same layout" in text
    lint(md, tmp_path)


def test_the_finders_closing_lines_are_read():
    from benchmarks.matmul_vs_finder import parse_finder

    r = parse_finder((FIXTURES / "finder-v4-auto-h200.txt").read_text())
    assert r.version == "4" and r.shapes_tried == 825 and r.elapsed_s == 61.0
    assert r.mamf.tflops == 819.9 and r.mamf.shape == (3072, 2816, 20480) and r.mamf.power_w == 157.0
    assert r.mamf.sm_mhz == 1980.0
    assert r.msmf.tflops == 702.5 and r.msmf.shape == (8192, 8448, 20480) and r.msmf.sm_mhz == 1446.0
