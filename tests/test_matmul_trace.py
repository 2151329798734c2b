"""The matmul trace: a captured H200 search (tests/fixtures/matmul/h200-msmf-search.json) parsed and
checked, the record round trip, the plot drawn into a lint-clean report (and redrawn by a re-render),
the sibling sampler, and the loaded hot / low-power flags."""

import json
import statistics
from pathlib import Path

import pytest

from clustereval.analysis.gpu_passes import three_pass
from clustereval.analysis.gpus import loaded_outliers
from clustereval.analysis.matmul import held_rate
from clustereval.analysis.steady import UNSTEADY, reasons_seen
from clustereval.records import from_dict, to_dict
from clustereval.records.compute import GpuMsmf, MatmulRecord, NodeMatmul, SearchSummary, ShapeTiming
from clustereval.report.render import RunView, render_report
from clustereval.workers.nvml import Sampler
from tests import compute_records as cr
from tests.test_compute_report import lint, section

FIXTURE = Path(__file__).parent / "fixtures" / "matmul" / "h200-msmf-search.json"
RAW = "raw-t-2026-12-01-1046Z"


def captured() -> SearchSummary:
    return from_dict(SearchSummary, json.loads(FIXTURE.read_text()))


def test_the_captured_h200_trace_parses_and_shows_the_burst_the_fall_and_the_plateau():
    s = captured()
    t = s.trace
    assert s.mamf.stage == "burst" and s.msmf.stage == "sustained" and s.msmf.held and s.msmf.label == ""
    assert [sp.name for sp in t.spans][:2] == ["search", "hot"]
    assert [sp.name for sp in t.spans[2:]] == ["soak", "window"] * s.num_sustained
    assert all(a.t1_s <= b.t0_s + 0.05 for a, b in zip(t.spans, t.spans[1:], strict=False))
    assert t.msmf_span.shape == s.msmf.shape and t.msmf_span in t.spans
    # the burst: MAMF at boost, far under the power limit; the plateau: at the limit, clock well below boost
    assert s.mamf.sm_mhz >= 1950 and s.mamf.power_w < 0.85 * 700
    assert s.msmf.power_w > 0.97 * 700 and s.msmf.sm_mhz < 1500 and s.msmf.settled
    # the MSMF the window's own points give: their median is the reported figure
    window = [p.tflops for p in t.points if p.stage == "window" and t.msmf_span.t0_s <= p.t_s <= t.msmf_span.t1_s]
    assert len(window) >= 30 and statistics.median(window) == pytest.approx(s.msmf.median_tflops, rel=2e-3)
    # held below the short hot holds of the same shape: what the old stage overstated
    hot = {x.shape: x for x in s.sustained if x.stage == "hot"}
    assert held_rate(s.msmf) < 0.98 * hot[s.msmf.shape].mean_tflops
    assert t.reasons_available and reasons_seen([p.reasons for p in t.points if p.stage == "window"]) == [
        "software power cap"]
    telemetry = [p for p in t.points if p.stage == "telemetry"]
    assert len(telemetry) > 100 and all(p.power_w and p.sm_mhz and p.temp_c for p in telemetry)
    assert s.soak_stage_s > 0 and s.window_stage_s >= s.num_sustained * s.held_window_s * 0.99


def test_the_trace_record_round_trips():
    s = captured()
    again = from_dict(SearchSummary, json.loads(json.dumps(to_dict(s))))
    assert again == s and again.trace.points[10] == s.trace.points[10]
    assert isinstance(again.trace.msmf_span.shape, tuple)


def matmul_record(search: SearchSummary, gpus=(0,), extra=None) -> MatmulRecord:
    msmf = search.msmf
    passes = [{g: held_rate(msmf) if g == 0 else (extra or {}).get(g, held_rate(msmf)) for g in gpus}]
    rec_gpus = []
    for g in gpus:
        t = msmf if g == 0 else ShapeTiming(*msmf.shape, stage="sustained", mean_tflops=passes[0][g],
                                             median_tflops=passes[0][g], power_w=msmf.power_w, sm_mhz=msmf.sm_mhz,
                                             temp_c=msmf.temp_c, window_s=10.0, soak_s=5.0, settled=True)
        rec_gpus.append(GpuMsmf(gpu=g, tflops=[passes[0][g]], timings=[t]))
    verdict = three_pass(passes)
    node = NodeMatmul(node="10.0.0.1", index=0, hostname="gpu-a", gpu_name="NVIDIA H200", num_gpus=len(gpus),
                      sm_count=132, memory_gib=140.4, power_limit_w=700.0, boost_mhz=1980.0, search=search,
                      msmf_shape=msmf.shape, gpus=rec_gpus, num_passes=1, medians=verdict.medians)
    return MatmulRecord(tool_rel="tools/matmul.py", soak_min_s=20.0, soak_max_s=60.0, settle_s=5.0, sustain_s=10.0,
                        nodes=[node])


def render(records):
    return render_report(RunView(name="t", stamp="2026-12-01-1046Z", raw_rel=RAW, access="local", records=records))


def test_the_plot_is_drawn_into_a_lint_clean_report(tmp_path):
    s = captured()
    out = render({"environment": cr.environment(num_gpus=1), "matmul": matmul_record(s)})
    md = out.markdown
    perf = section(md, "GPU performance benchmarks")
    rel = "plots/matmul-10.0.0.1-gpu0.png"
    assert f"]({RAW}/{rel})" in perf and out.files[rel].startswith(b"\x89PNG")
    assert ("and of those the 3 best shapes then held back to back, one after another, until the GPU clock settled: the first "
            "for at least 20 s and at most 60 s") in perf
    assert "then each was timed for 10 s. MSMF is the best of those timed windows' medians" in perf
    assert f"MSMF in the window from {s.trace.msmf_span.t0_s:.0f} s to {s.trace.msmf_span.t1_s:.0f} s" in perf
    assert f"MAMF was read {s.trace.mamf_t_s:.0f} s in, in a burst of 13312×13312×7936 at 1980 MHz" in perf
    assert "NVML gave software power cap as the clock-event reason in the timed windows." in perf
    assert f"**MSMF** (Maximum Sustainable Matmul FLOPS) — {held_rate(s.msmf):.0f} TFLOPS" in perf
    assert "shorter than the standard" not in perf
    # the runbook's columns exactly; the window's temperature and drift in a table of their own
    assert "| GPU | MSMF | MSMF shape | W / MHz | MSMF % spec |" in perf
    assert "| gpu0 | 680 | 13312×13312×9472 | 692 / 1405 | 68.8 |" in perf
    assert "| GPU | temperature (°C) | window drift (%) |" in perf and "| gpu0 | 60 | +0.02 |" in perf
    assert "Over each GPU's timed window, the highest GPU temperature, and the window drift" in perf
    lint(md, tmp_path)
    (tmp_path / RAW / "plots").mkdir(parents=True)
    (tmp_path / RAW / rel).write_bytes(out.files[rel])


def test_a_quick_window_is_said_and_an_unsteady_shape_is_named(tmp_path):
    s = captured()
    held = [t for t in s.sustained if t.held and t != s.msmf]
    held[0].label, held[0].why = UNSTEADY, "its rate moved -1.2% from the first to the second half of its 10 s window (beyond ±0.5%)"
    rec = matmul_record(s)
    rec.sustain_s = 5.0
    md = render({"environment": cr.environment(num_gpus=1), "matmul": rec}).markdown
    perf = section(md, "GPU performance benchmarks")
    assert "This run's profile timed each held shape for 5 s, shorter than the standard profile's 10 s." in perf
    assert (f"The held shape {held[0].m}×{held[0].n}×{held[0].k}: its rate moved -1.2% from the first to the second "
            "half of its 10 s window (beyond ±0.5%), so it was labelled UNSTEADY") in perf
    lint(md, tmp_path)


def test_a_hot_and_a_low_power_gpu_under_load_are_flagged(tmp_path):
    s = captured()
    rec = matmul_record(s, gpus=(0, 1, 2, 3))
    node = rec.nodes[0]
    node.gpus[2].timings[0].temp_c = s.msmf.temp_c + 17
    node.gpus[3].timings[0].power_w = 600.0
    temps = {g.gpu: g.timings[0].temp_c for g in node.gpus}
    powers = {g.gpu: g.timings[0].power_w for g in node.gpus}
    node.hot_gpus, node.low_power_gpus = loaded_outliers(temps, powers)
    assert (node.hot_gpus, node.low_power_gpus) == ([2], [3])
    md = render({"environment": cr.environment(num_gpus=4), "matmul": rec}).markdown
    perf = section(md, "GPU performance benchmarks")
    assert (f"`gpu-a(node0):gpu2` ran at {s.msmf.temp_c + 17:.0f} °C while every GPU computed, 17 °C above the "
            f"coolest GPU of the node ({s.msmf.temp_c:.0f} °C; flagged at 15 °C)") in perf
    assert "`gpu-a(node0):gpu3` drew 600 W while every GPU computed, below 90% of the top GPU's 692 W" in perf
    lint(md, tmp_path)


def test_loaded_outliers_need_two_readings_and_the_thresholds():
    assert loaded_outliers({0: 60.0}, {0: 500.0}) == ([], [])
    assert loaded_outliers({0: 60.0, 1: 74.9, 2: None}, {0: 700.0, 1: 630.0, 2: 629.9}) == ([], [2])
    assert loaded_outliers({0: 60.0, 1: 75.0}, {0: None, 1: None}) == ([1], [])


def test_a_re_render_redraws_the_plot_from_the_saved_record(tmp_path):
    from clustereval.runner import render as runner_render
    from clustereval.store import RunState, RunStore

    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp=store.run_id))
    store.save_record("environment", cr.environment(num_gpus=1))
    store.save_record("matmul", matmul_record(captured()))
    for phase in ("environment", "matmul"):
        store.mark_finished(phase)
    png = store.raw_dir / "plots" / "matmul-10.0.0.1-gpu0.png"
    first = runner_render(store, "local")
    assert png.read_bytes() == first.files["plots/matmul-10.0.0.1-gpu0.png"]
    png.unlink()
    runner_render(store, "local")
    assert png.read_bytes().startswith(b"\x89PNG")


# -- the sibling sampler reads real samples ----------------------------------------------------


class FlakyNvml:
    """NVML as the sampler sees it, with one sibling whose utilisation read always fails (a fault no
    CPU machine can produce for real)."""

    ok = True

    def __init__(self, broken=(), idle=()):
        self.broken, self.idle = set(broken), set(idle)

    def power_w(self, h):
        return 695.0

    def sm_mhz(self, h):
        return 1410.0

    def temp_c(self, h):
        return 61.0

    def clock_reasons(self, h):
        return 0x4

    def util_pct(self, h):
        if h in self.broken:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return 0.0 if h in self.idle else 100.0


def _sampled(nvml, siblings, n=10):
    s = Sampler(nvml, "gpu0", {g: g for g in siblings})
    for _ in range(n):
        s.sample_once()
    return s.window(0.0, float("inf"))


def test_a_sibling_nvml_cannot_read_is_unread_not_sampled():
    w = _sampled(FlakyNvml(broken={2}), [1, 2, 3])
    assert w["siblings_unread"] == [2] and w["siblings_sampled"] is False
    assert "gpu2: RuntimeError: NVML_ERROR_GPU_IS_LOST" in w["sibling_error"] and w["idle_siblings"] == []
    assert w["temp_c"] == 61.0 and w["clock_reasons"] == ["software power cap"]


def test_siblings_read_every_time_are_sampled_and_an_idle_one_is_seen():
    w = _sampled(FlakyNvml(idle={3}), [1, 3])
    assert w["siblings_sampled"] is True and w["siblings_unread"] == [] and w["idle_siblings"] == [3]
    assert _sampled(FlakyNvml(), [])["siblings_sampled"] is False  # no siblings: nothing was sampled
