"""The fleet statistics on fixed inputs with known answers (``analysis/fleetstats.py``, ``analysis/fleet.py``)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from clustereval.analysis.fleet import fleet_judgements, policy_from
from clustereval.analysis.fleetstats import (
    NO_REPEATS,
    ONE_FIGURE_TAIL_DF,
    TOO_NOISY,
    TOO_SMALL,
    UnitSamples,
    VerdictPolicy,
    compare_runs,
    detectable_frac,
    f_sf,
    holm,
    judge_fleet,
    one_figure_sf,
    t_quantile,
    t_sf,
)
from clustereval.analysis.stragglers import round_robin
from clustereval.config import Verdicts
from clustereval.phases.pairwise import judge_pairs
from clustereval.records.network import PairResult, PairwiseRecord
from tests import compute_records as cr


@pytest.mark.parametrize("t, df, upper", [(2.228, 10, 0.025), (4.032, 5, 0.005), (1.96, math.inf, 0.025),
                                          (6.965, 2, 0.01), (0.0, 7, 0.5)])
def test_student_t_tail_matches_the_tables(t, df, upper):
    assert t_sf(t, df) == pytest.approx(upper, abs=2e-4)
    if upper < 0.5:
        assert t_quantile(upper, df) == pytest.approx(t, abs=2e-3)


def test_f_tail_matches_the_tables():
    assert f_sf(3.49, 2, 20) == pytest.approx(0.05, abs=5e-4)
    assert f_sf(1.0, 5, 5) == pytest.approx(0.5, abs=1e-9)


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    # alpha 0.05 over 4, smallest first: 0.001 <= 0.0125, 0.01 <= 0.0167, 0.03 > 0.025 stops (0.04 too)
    assert holm([0.01, 0.04, 0.001, 0.03], 0.05) == [True, False, True, False]
    assert holm([0.01, 0.03, 0.001, 0.015], 0.05) == [True, True, True, True]
    assert holm([0.02, 0.02], 0.01) == [False, False]


def _fleet(values: dict[str, tuple[float, ...]], group: str = "") -> list[UnitSamples]:
    return [UnitSamples(k, v, group) for k, v in values.items()]


def test_a_five_percent_slow_gpu_among_eight_is_named_with_the_pooled_noise():
    units = {f"g{i}": (99.0, 100.0, 101.0) for i in range(7)} | {"g7": (94.0, 95.0, 96.0)}
    (g,) = judge_fleet(_fleet(units))
    assert g.judged and g.why_not == "" and g.median == 100.0 and g.mad == 0.0 and g.spread_frac == 0.0
    # every unit's sd is 1: CV 1/100 seven times and 1/95 once, two degrees of freedom each
    pooled = math.sqrt((7 * 2 * 0.01 ** 2 + 2 * (1 / 95) ** 2) / 16)
    assert g.noise_basis == "repeats" and g.noise_df == 16 and g.noise_frac == pytest.approx(pooled)
    (slow,) = g.slow
    assert slow.unit == "g7" and slow.shortfall_frac == pytest.approx(0.05) and slow.num_repeats == 3
    se = math.sqrt(pooled ** 2 / 3 + math.pi / 2 * pooled ** 2 / 3 / 8)
    assert slow.se_frac == pytest.approx(se) and slow.p_value == pytest.approx(t_sf(0.05 / se, 16))
    assert [u.unit for u in g.units if u.slow] == ["g7"]


def test_a_real_shortfall_below_the_practical_threshold_is_not_a_verdict():
    units = {f"g{i}": (1000.0, 1000.1, 999.9) for i in range(7)} | {"g7": (990.0, 990.1, 989.9)}
    (g,) = judge_fleet(_fleet(units))
    g7 = next(u for u in g.units if u.unit == "g7")
    assert g7.p_value < 1e-9 and g7.shortfall_frac == pytest.approx(0.01)  # real, and 1% short
    assert g.slow == []  # under the 2% that matters
    (g,) = judge_fleet(_fleet(units), VerdictPolicy(threshold_frac=0.005))
    assert [u.unit for u in g.slow] == ["g7"]


def test_three_peers_are_too_small_to_judge():
    (g,) = judge_fleet(_fleet({"a": (100.0, 101.0), "b": (100.0, 99.0), "c": (80.0, 81.0)}))
    assert not g.judged and g.why_not == TOO_SMALL and g.slow == [] and g.detectable_frac is None


def test_without_repeats_the_fleet_spread_stands_in_and_identical_figures_judge_nothing():
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 90.0, 100.2]
    (g,) = judge_fleet([UnitSamples(f"g{i}", (v,)) for i, v in enumerate(values)])
    assert g.noise_basis == "fleet spread" and g.noise_df == 7
    assert g.noise_frac == pytest.approx(1.4826 * g.mad / g.median)
    assert [u.unit for u in g.slow] == ["g6"]
    (same,) = judge_fleet([UnitSamples(f"g{i}", (100.0,)) for i in range(6)])
    assert not same.judged and same.why_not == NO_REPEATS


def test_a_noisy_group_says_so_and_a_clearly_noisier_unit_is_judged_on_its_own_noise():
    rng = random.Random(3)
    noisy = [UnitSamples(f"g{i}", tuple(100 * (1 + rng.gauss(0, 0.2)) for _ in range(3))) for i in range(8)]
    (g,) = judge_fleet(noisy)
    assert g.judged and g.why_not == TOO_NOISY and g.detectable_frac > 0.10
    units = {f"g{i}": (99.9, 100.0, 100.1) for i in range(15)} | {"wild": (60.0, 100.0, 140.0)}
    (g,) = judge_fleet(_fleet(units))
    wild = next(u for u in g.units if u.unit == "wild")
    assert wild.own_noise and wild.noise_frac == pytest.approx(0.4) and not wild.slow


def test_the_detectable_shortfall_is_the_threshold_or_the_critical_value_plus_its_scatter():
    policy = VerdictPolicy()
    se = math.sqrt(0.01 ** 2 / 3 + math.pi / 2 * 0.01 ** 2 / 3 / 64)
    crit = t_quantile(0.01 / 64, 128)
    assert detectable_frac(0.01, 3, 64, 128, policy) == pytest.approx(max(0.02, crit * se) + 1.2815516 * se)
    assert detectable_frac(0.001, 10, 64, 576, policy) == pytest.approx(0.02, abs=5e-4)  # the threshold rules


@pytest.mark.xfail(strict=True, reason=(
    "defect: a steady unit far below noisy peers gets its shortfall's standard error from the peers' "
    "pooled noise, not its own steadiness (here 0.19, not under 0.03 of the noise; p 5e-5, not under "
    "1e-6); at 62% noise with five samples the 4-node bed's node2, 98% short, went unnamed once in five "
    "loaded suite runs. The ratio's error (se × mean/median) passed this test but named healthy GPUs "
    "in up to 6.4% of simulated fleets against the stated 1% (benchmarks/fleet_stats.py, "
    "docs/performance.md), so it was reverted"))
def test_a_unit_at_a_fiftieth_of_noisy_peers_is_named():
    # the pairwise hunt on a loaded machine: the peers' samples move by half their value, the
    # rate-limited node is steady at 2% of them; its shortfall's error is 2% of the peers' noise
    rng = random.Random(7)
    units = {f"n{i}": tuple(0.3 * (1 + rng.uniform(-0.6, 0.6)) for _ in range(5)) for i in range(3)}
    units["slow"] = tuple(0.006 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(5))
    (g,) = judge_fleet(_fleet(units), VerdictPolicy(threshold_frac=0.10))
    assert g.noise_frac > 0.2 and [u.unit for u in g.slow] == ["slow"]
    slow = g.slow[0]
    assert slow.shortfall_frac > 0.97 and slow.se_frac < 0.03 * g.noise_frac and slow.p_value < 1e-6


def _healthy(rng, num_units: int, repeats: int, tail_df: float) -> list[UnitSamples]:
    """A healthy fleet: one true rate, every figure scattered by 1 to 5% (drawn a fleet) of normal noise
    or of Student's t with ``tail_df`` degrees of freedom, scaled to a MAD-implied sd of 1."""
    spread = rng.uniform(0.01, 0.05)
    if math.isinf(tail_df):
        eps = rng.standard_normal((num_units, repeats))
    else:
        eps = rng.standard_t(tail_df, (num_units, repeats)) / (1.4826 * stats.t.ppf(0.75, tail_df))
    return [UnitSamples(f"g{i}", tuple(row)) for i, row in enumerate((500.0 * (1 + spread * eps)).tolist())]


@pytest.mark.parametrize("num_units, repeats, tail_df, num_fleets", [
    (8, 1, math.inf, 3000),  # one pass, normal figures: the t with n - 1 degrees of freedom named 2.3%
    (64, 1, ONE_FIGURE_TAIL_DF, 800),  # one pass, figures as heavy-tailed as the verdict allows for
    (64, 3, math.inf, 800),  # the runbook's three passes, normal repeat noise
])
def test_healthy_fleets_have_a_unit_named_in_at_most_the_stated_share(num_units, repeats, tail_df, num_fleets):
    """Seeded healthy fleets through ``judge_fleet`` at the default 99%: the fleets with any unit named
    stay at the stated 1%, within the tolerance of a finite count of fleets (the binomial's 99.9%
    quantile at 1%: 3000 fleets may show 1.6%, 800 fleets 2.4%). benchmarks/fleet_false_positives.py
    measures the same at 8 to 8192 GPUs (docs/statistics.md)."""
    rng = np.random.default_rng(2026_12_07 + num_units + repeats)
    policy = VerdictPolicy()
    named = sum(any(g.slow for g in judge_fleet(_healthy(rng, num_units, repeats, tail_df), policy))
                for _ in range(num_fleets))
    assert named <= stats.binom.ppf(0.999, num_fleets, policy.alpha), f"{named} of {num_fleets} fleets named a unit"


def test_a_detectable_shortfall_of_a_hundred_percent_or_more_is_no_figure():
    # the 4-node smoke run: one concurrent write a node, scattered so widely that no shortfall short of
    # the whole figure would have been found (the old statistics stated 394.1%)
    (g,) = judge_fleet(_fleet({"n0": (410.0,), "n1": (980.0,), "n2": (655.0,), "n3": (1490.0,)}))
    assert g.judged and g.why_not == TOO_NOISY and g.detectable_frac is None and g.slow == []
    assert g.noise_basis == "fleet spread" and g.spread_frac > 0.3
    assert detectable_frac(g.noise_frac, 1, 4, 3, VerdictPolicy(), noise_basis="fleet spread") >= 1.0


def test_one_figure_is_judged_against_a_heavier_tail_than_repeats():
    # the same shortfall over the same standard error is far less surprising for one figure, which may
    # be a pass that hiccuped, than for a unit's mean over its repeats with the noise pooled
    one = one_figure_sf(6.0, "fleet spread", 64, 63)[0]
    assert one > t_sf(6.0, 63) * 100 and 0 < one < 0.01
    # with many units the spread is known well and the tail is the reference t's own, scaled to its MAD
    far = one_figure_sf(6.0, "fleet spread", 100_000, 99_999)[0]
    assert far == pytest.approx(t_sf(6.0 * 1.4826 * t_quantile(0.25, ONE_FIGURE_TAIL_DF), ONE_FIGURE_TAIL_DF),
                                rel=1e-2)


def test_a_thousand_healthy_gpus_name_nobody():
    rng = random.Random(29)
    units = [UnitSamples(f"g{i}", tuple(700 * (1 + rng.gauss(0, 0.02)) for _ in range(3))) for i in range(1000)]
    (g,) = judge_fleet(units)
    assert g.judged and g.slow == [] and sum(u.p_value < 0.01 for u in g.units) > 0  # uncorrected, some would be


def test_groups_are_judged_apart_and_corrected_together():
    units = _fleet({f"a{i}": (100.0, 100.5, 99.5) for i in range(4)}, "A100") + \
        _fleet({f"h{i}": (200.0, 201.0, 199.0) for i in range(4)}, "H100")
    a, h = judge_fleet(units)
    assert (a.group, a.median, h.group, h.median) == ("A100", 100.0, "H100", 200.0)
    assert a.slow == [] and h.slow == []  # the slower model is not a slow GPU


def test_compare_runs_on_both_runs_repeats():
    same = compare_runs([100.0, 101.0, 99.0], [100.5, 99.5, 100.0])
    assert not same.beyond_noise and same.basis == "repeats of both runs" and same.p_value > 0.5
    moved = compare_runs([100.0, 100.2, 99.8], [95.0, 95.2, 94.8])
    assert moved.beyond_noise and moved.change_frac == pytest.approx(-0.05) and moved.p_value < 1e-4
    single = compare_runs([100.0], [90.0, 91.0])
    assert not single.beyond_noise and single.se_frac is None and single.change_frac == pytest.approx(-0.095)


def test_gpus_are_peers_by_model_and_driver_as_configured():
    passes = [{0: 700.0, 1: 701.0, 2: 699.0, 3: 650.0}, {0: 701.0, 1: 699.0, 2: 700.0, 3: 651.0},
              {0: 699.0, 1: 700.0, 2: 701.0, 3: 649.0}]
    records = {"matmul": cr.matmul([passes, passes], hosts=("a", "b"))}
    (msmf,) = fleet_judgements(records, policy_from(Verdicts(gpu_peers=("model", "node"))))
    assert sorted(g.group for g in msmf.groups) == ["NVIDIA H200, node a(node0)", "NVIDIA H200, node b(node1)"]
    (msmf,) = fleet_judgements(records, policy_from(Verdicts(threshold_pct=3.0, gpu_peers=())))
    (one,) = msmf.groups
    assert one.num_units == 8 and msmf.policy.threshold_frac == 0.03
    assert [u.unit for u in one.slow] == ["a(node0):gpu3", "b(node1):gpu3"]


def test_a_pair_sampled_without_its_round_is_no_evidence_for_the_nodes_pairwise_figure():
    # n3's only fast pair was ungated: its figure is the fastest of its gated pairs, and a node whose
    # pairs all failed has none
    names = ["n0", "n1", "n2", "n3", "n4"]
    pairs = [PairResult(a=a, b=b, round=1, samples_gb_s=[90.0, 91.0]) for i, a in enumerate(names[:4])
             for b in names[i + 1:4]]
    for p in pairs:
        if p.a == "n3" or p.b == "n3":
            p.samples_gb_s = [60.0, 61.0]
    pairs.append(PairResult(a="n3", b="n0", round=2, samples_gb_s=[120.0, 121.0], ungated=True))
    pairs += [PairResult(a="n4", b=x, round=3, error="exit status 1") for x in names[:4]]
    for p in pairs:
        p.busbw_gb_s = sorted(p.samples_gb_s)[0] if p.samples_gb_s else None
    (kind,) = fleet_judgements({"pairwise": PairwiseRecord(pairs=pairs, samples_per_pair=2)})
    by_node = {kind.names[u.unit]: u.samples for u in kind.units}
    assert by_node["n3"] == (60.0, 61.0) and "n4" not in by_node


def test_a_node_lost_mid_hunt_has_no_pairwise_figure_of_its_own():
    # n2 completes round 1 and fails every later pair while its partners go on: it is failing
    # (phases.pairwise.judge_pairs), and a failing node is listed once, as did not complete, never as a
    # fleet unit on the samples of the pairs it completed before it stopped
    names = ["n0", "n1", "n2", "n3"]
    results = [PairResult(a=a, b=b, round=rnd, samples_gb_s=[] if "n2" in (a, b) and rnd >= 2 else [90.0, 91.0],
                          error="exit status 1" if "n2" in (a, b) and rnd >= 2 else "", gated=True)
               for rnd, pairs in enumerate(round_robin(names), 1) for a, b in pairs]
    rec = PairwiseRecord(phase="pairwise", samples_per_pair=2)
    judge_pairs(rec, results, names, set(names))
    assert [(f.node, f.from_round) for f in rec.failing] == [("n2", 2)]
    (kind,) = fleet_judgements({"pairwise": rec})
    assert sorted(kind.names.values()) == ["n0", "n1", "n3"]
    rec.failing = []  # the same pairs without the verdict: n2 is a unit on its round-1 pair
    (kind,) = fleet_judgements({"pairwise": rec})
    assert sorted(kind.names.values()) == names
