"""``[verdicts] gpu_passes``: every GPU's MSMF and lemon GEMM in N passes, so the fleet-relative verdict
has the repeats its detection needs, while the runbook's three-pass rule keeps judging a flagged GPU on
its first three passes. The real worker on CPU stand-in GPUs where it can run; the stand-in worker for a
GPU that is slow in every pass, which a CPU cannot produce."""

import dataclasses
import sys

import pytest

from clustereval.analysis.fleet import fleet_judgements
from clustereval.config import Verdicts
from clustereval.phases.lemon import LemonPhase
from clustereval.phases.matmul import MatmulPhase
from clustereval.phases.settings import GpuSettings
from tests import compute_records as cr
from tests.test_compute_phases import FAKE_WORKER, make_ctx, script
from tests.test_report_matrix import full_run, passes, render


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "fake-state"))
    return str(script(tmp_path / "fakepy", f'exec "{sys.executable}" "{FAKE_WORKER}" "$@"\n'))


def with_passes(ctx, n: int):
    ctx.config = dataclasses.replace(ctx.config, verdicts=Verdicts(gpu_passes=n))
    return ctx


def kinds_by_name(records: dict) -> dict:
    return {k.kind: k for k in fleet_judgements(records)}


# -- the real worker on two CPU stand-in GPUs ---------------------------------------------------


@pytest.mark.slow
def test_four_passes_give_every_cpu_gpu_four_repeats_in_matmul_and_lemon(tmp_path):
    settings = GpuSettings(device="cpu", cpu_gpus=2, settle_s=0.02, sustain_s=0.05, soak_min_s=0.05, soak_max_s=0.2,
                           grid="M=32|64,N=32|64,K=64", lemon_size=64)
    ctx = with_passes(make_ctx(tmp_path), 4)
    seen: list[tuple[str, str, float | None]] = []
    ctx.progress = lambda phase, node, msg, eta: seen.append((phase, msg, eta))
    mm = MatmulPhase(settings).run(ctx)
    lemon = LemonPhase(settings).run(ctx)
    assert not mm.gaps and not lemon.gaps
    assert mm.num_gpu_passes == lemon.num_gpu_passes == 4
    (node,) = mm.nodes
    assert node.num_passes == 4 and len(node.medians) == 4 and node.extra_passes_wall_s > 0
    for g in node.gpus:  # gpu0's first pass is its search's MSMF window; every other pass is pinned
        assert len(g.tflops) == len(g.timings) == 4 and all(v is not None and v > 0 for v in g.tflops)
        assert all(t is not None and t.shape == node.msmf_shape for t in g.timings[1:])
    (lnode,) = lemon.nodes
    assert lnode.num_passes == 4 and [len(g.tflops) for g in lnode.gpus] == [4, 4]
    assert all(v is not None and v > 0 for g in lnode.gpus for v in g.tflops)
    # the fleet statistics see every pass of every GPU as its repeats
    kinds = kinds_by_name({"matmul": mm, "lemon": lemon})
    for kind in ("msmf", "lemon"):
        k = kinds[kind]
        assert [len(u.samples) for u in k.units] == [4, 4]
        (group,) = k.groups
        assert group.typical_repeats == 4 and [u.num_repeats for u in group.units] == [4, 4]
        assert group.noise_basis == "repeats" and group.noise_df == 2 * 3
    # the time left counts every pinned measurement still to come: 1 in the first pass, then 3 × 2
    first = [eta for phase, msg, eta in seen if phase == "matmul" and msg == "searching matmul shapes on gpu0"][0]
    each = settings.settle_s + settings.sustain_s
    assert first == pytest.approx(settings.search_time_left_s([], 0.0) + 7 * each)
    pinned = [(msg, eta) for phase, msg, eta in seen if phase == "matmul" and ", pass " in msg]
    # the pinned shape is the search's winner: on a busy CPU any shape of the grid may win
    assert node.msmf_shape is not None and node.msmf_shape[0] in (32, 64) and node.msmf_shape[1:] in ((32, 64), (64, 64))
    shape = "×".join(str(d) for d in node.msmf_shape)
    assert pinned[0] == (f"gpu1 at {shape}, pass 1 of 4", pytest.approx(7 * each))
    assert [m for m, _ in pinned] == [f"gpu1 at {shape}, pass 1 of 4"] + [
        f"gpu{g} at {shape}, pass {p} of 4" for p in (2, 3, 4) for g in (0, 1)]
    # lemon: unknown until the first pass ended, then the passes left at the first pass's pace
    etas = [eta for phase, msg, eta in seen if phase == "lemon"]
    assert etas[0] is None and all(e is not None and e > 0 for e in etas[1:]) and len(etas) == 4
    assert etas[1] == pytest.approx(3 * etas[3]) and etas[2] == pytest.approx(2 * etas[3])


# -- the rule on the first three passes (a slow GPU from the stand-in worker) ---------------------


def test_five_passes_judge_the_slow_gpu_on_its_first_three_and_keep_all_five(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "0:100/101/99/100/102,2:90,3:90/100/100")
    settings = GpuSettings(device="cpu", cpu_gpus=4, start_timeout_s=30)
    rec = MatmulPhase(settings).run(with_passes(make_ctx(tmp_path, fake_worker), 5))
    (node,) = rec.nodes
    assert rec.num_gpu_passes == 5 and node.num_passes == 5 and not rec.gaps
    assert node.flagged == [2, 3] and node.underperforming == [2]
    assert [g.tflops for g in node.gpus] == [[100.0, 101.0, 99.0, 100.0, 102.0], [100.0] * 5, [90.0] * 5,
                                             [90.0, 100.0, 100.0, 100.0, 100.0]]
    units = {u.unit: u.samples for u in kinds_by_name({"matmul": rec})["msmf"].units}
    assert units["here(node0):gpu0"] == (100.0, 101.0, 99.0, 100.0, 102.0) and len(units) == 4


def test_two_passes_still_run_the_third_the_rule_needs(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "2:90,3:90/100/100")
    settings = GpuSettings(device="cpu", cpu_gpus=4, start_timeout_s=30)
    ctx = with_passes(make_ctx(tmp_path, fake_worker), 2)
    mm = MatmulPhase(settings).run(ctx)
    (node,) = mm.nodes
    assert node.num_passes == 3 and node.flagged == [2, 3] and node.underperforming == [2]
    assert [len(g.tflops) for g in node.gpus] == [3, 3, 3, 3]


def test_two_passes_without_a_flagged_gpu_stop_at_two(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "1:99/100")
    settings = GpuSettings(device="cpu", cpu_gpus=3, start_timeout_s=30)
    ctx = with_passes(make_ctx(tmp_path, fake_worker), 2)
    (node,) = MatmulPhase(settings).run(ctx).nodes
    (lnode,) = LemonPhase(settings).run(ctx).nodes
    assert node.num_passes == 2 and not node.flagged and [len(g.tflops) for g in node.gpus] == [2, 2, 2]
    assert lnode.num_passes == 2 and not lnode.flagged and [len(g.tflops) for g in lnode.gpus] == [2, 2, 2]


def test_lemon_five_passes_with_a_slow_gpu(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "2:90,3:90/100/100")
    settings = GpuSettings(device="cpu", cpu_gpus=4, start_timeout_s=30)
    rec = LemonPhase(settings).run(with_passes(make_ctx(tmp_path, fake_worker), 5))
    (node,) = rec.nodes
    assert rec.num_gpu_passes == 5 and node.num_passes == 5 and node.underperforming == [2]
    assert [g.tflops for g in node.gpus] == [[100.0] * 5, [100.0] * 5, [90.0] * 5, [90.0] + [100.0] * 4]


def test_the_default_is_one_pass(tmp_path, fake_worker):
    ctx = make_ctx(tmp_path, fake_worker)
    assert ctx.config.verdicts.gpu_passes == 1
    settings = GpuSettings(device="cpu", cpu_gpus=3, start_timeout_s=30)
    mm, lemon = MatmulPhase(settings).run(ctx), LemonPhase(settings).run(ctx)
    assert mm.num_gpu_passes == lemon.num_gpu_passes == 1
    assert mm.nodes[0].num_passes == lemon.nodes[0].num_passes == 1
    assert [len(g.tflops) for g in mm.nodes[0].gpus] == [1, 1, 1] and mm.nodes[0].extra_passes_wall_s == 0.0


# -- what the repeats buy, and the report's words --------------------------------------------------


def noisy_passes(num_gpus: int, num_passes: int, slow: dict[int, float] | None = None, seed: int = 0):
    """Passes with 1% repeat noise (a fixed pseudo-random sequence), ``slow`` GPUs that much below."""
    import random

    rnd = random.Random(seed)
    slow = slow or {}
    return [{g: round(740.0 * (1 - slow.get(g, 0.0)) * (1 + rnd.gauss(0, 0.01)), 2) for g in range(num_gpus)}
            for _ in range(num_passes)]


def test_the_detectable_shortfall_follows_the_repeats():
    hosts = tuple(f"gpu-{i:03d}" for i in range(8))
    found = {}
    for n in (1, 3, 7):
        mm = cr.matmul([noisy_passes(8, n, seed=i) for i in range(8)], hosts=hosts, num_gpu_passes=n)
        (group,) = kinds_by_name({"matmul": mm})["msmf"].groups
        assert group.typical_repeats == n and group.num_units == 64
        found[n] = group.detectable_frac
    # one pass: no repeats, the fleet's spread stands in; more passes: a smaller shortfall is found
    assert found[7] < found[3] < found[1]
    assert found[7] < 0.03  # seven passes at 1% noise: a 3% slow GPU is within reach


def test_a_three_percent_slow_gpu_in_seven_passes_is_named_and_the_report_is_lint_clean(tmp_path):
    from tests.conftest import run_cli
    from tests.reportcheck import problems

    hosts = [f"gpu-{i:03d}" for i in range(8)]
    mm_passes = [noisy_passes(8, 7, {5: 0.03} if i == 2 else None, seed=i) for i in range(8)]
    records = full_run(8, 8, mm_passes=mm_passes, lemon_passes=[noisy_passes(8, 7, seed=10 + i) for i in range(8)],
                       gpu_passes=7)
    assert records["matmul"].num_gpu_passes == 7
    slow = [u.unit for u in kinds_by_name(records)["msmf"].slow]
    assert slow == [f"{hosts[2]}(node2):gpu5"]
    md = render(records)
    assert ("The operator's `gpu_passes = 7` under `[verdicts]` in cluster.toml asks for 7 passes of every GPU: "
            "every GPU ran the MSMF shape in 7 passes, each pass with every sibling computing.") in md
    assert "every GPU ran this matmul in 7 passes." in md
    assert f"`{hosts[2]}(node2):gpu5` — MSMF " in md and ", the mean of 7 passes (" in md
    path = tmp_path / "h200-2026-11-30-1938Z.md"
    path.write_text(md)
    res = run_cli("lint", str(path), timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
    assert problems(md, records) == []


def test_one_pass_says_nothing_new():
    md = render(full_run(1, 8))
    assert "gpu_passes" not in md
    assert "a flagged card gets two more passes and counts as under-performing only if it is below in all three" in md


def test_two_passes_and_a_flagged_node_say_or_more():
    two = passes(8, num_passes=2)
    three = passes(8, slow={5: 0.04}, num_passes=3)
    md = render(full_run(2, 8, mm_passes=[three, two], lemon_passes=[two, two], gpu_passes=2))
    assert ("every GPU ran the MSMF shape in 2 passes or more (three on a node whose first pass flagged a GPU), "
            "each pass with every sibling computing.") in md
    assert "every GPU ran this matmul in 2 passes." in md


@pytest.mark.parametrize("num_passes", [2, 3, 6, 20])
def test_the_passes_words_lint_clean_for_every_count_with_a_dead_gpu_and_a_short_node(num_passes):
    from clustereval.report.lint import lint_text
    from tests.reportcheck import problems

    full = [noisy_passes(8, num_passes, seed=i) for i in range(3)]
    short = full[2][:1]  # a node whose later passes did not run (the phase stopped there)
    dead = [{**p, 3: None} for p in full[1]]
    records = full_run(3, 8, mm_passes=[full[0], dead, short], lemon_passes=[full[0], full[1], short],
                       dead=((1, 3),), gpu_passes=num_passes)
    md = render(records)
    assert [f"[{p.rule}] line {p.line}: {p.message}" for p in lint_text(md)] == []
    assert problems(md, records) == []
    # 8 GPUs of the short node ran one pass; the dead GPU has no figure and is said as dead
    assert f"15 of the 23 GPUs ran the MSMF shape in all {num_passes} passes" in md
    assert f"16 of the 24 GPUs ran this matmul in all {num_passes} passes" in md


def test_summary_json_carries_the_passes_and_every_pass_as_a_sample():
    from clustereval.analysis.summary import build_summary
    from clustereval.store import RunState

    records = full_run(1, 8, mm_passes=[noisy_passes(8, 5)], lemon_passes=[noisy_passes(8, 5, seed=1)],
                       gpu_passes=5)
    s = build_summary(RunState(name="h200", stamp="2026-11-30-1938Z"), records, [], [])
    assert s["verdict_policy"]["gpu_passes"] == 5
    figs = {f["id"]: f for f in s["figures"]}
    assert len(figs["msmf/node0/gpu3"]["samples"]) == 5 and len(figs["lemon/node0/gpu0"]["samples"]) == 5
    assert build_summary(RunState(name="h200", stamp="s"), full_run(1, 8), [], [])["verdict_policy"]["gpu_passes"] == 1


def test_a_dead_gpu_is_not_measured_again_past_the_rules_three_passes(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_PINNED_DEAD", "2:1")
    settings = GpuSettings(device="cpu", cpu_gpus=3, start_timeout_s=30)
    rec = MatmulPhase(settings).run(with_passes(make_ctx(tmp_path, fake_worker), 5))
    (node,) = rec.nodes
    assert node.dead == [2] and node.num_passes == 5
    by = {g.gpu: g for g in node.gpus}
    assert by[2].tflops == [None, None, None]  # passes 1 to 3 as the rule runs them, then left alone
    assert len(by[0].tflops) == len(by[1].tflops) == 5
    assert (tmp_path / "fake-state" / "pinned-2").read_text() == "6"  # two tries in each of three passes
    assert {g.kind for g in rec.gaps} == {"matmul.gpu-failed-twice"}
