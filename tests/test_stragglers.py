"""Pairwise schedules and straggler naming, including the 1024-node simulation."""

import itertools

import pytest

from clustereval.analysis.stragglers import (
    judge,
    key,
    round_robin,
    run_round_robin,
    screen_and_confirm,
    simulated_cluster,
)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_round_robin_covers_every_pair_once_in_disjoint_rounds(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = round_robin(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = []
    for pairs in rounds:
        members = [x for p in pairs for x in p]
        assert len(members) == len(set(members)), "a node twice in one round"
        assert len(pairs) == n // 2  # odd n: one bye per round
        seen += [key(*p) for p in pairs]
    assert sorted(seen) == sorted(key(a, b) for a, b in itertools.combinations(nodes, 2))


def test_single_node_has_no_rounds():
    assert round_robin(["only"]) == []


def test_one_slow_node_is_named_and_its_partners_are_not():
    names, model = simulated_cluster(8, {3: 0.8}, seed=4)
    verdict, busbw, rounds = run_round_robin(names, model.measure)
    assert rounds == 7 and model.calls == 7
    assert verdict.stragglers == ["node0003"]
    assert verdict.suspects[0].node == "node0003" and verdict.suspects[0].share == 1.0
    assert all(key(a, b) in verdict.slow for a, b in busbw if "node0003" in (a, b))


def test_two_slow_nodes_are_both_named_without_blaming_healthy_ones():
    names, model = simulated_cluster(10, {1: 0.8, 6: 0.82}, seed=2)
    verdict, _, _ = run_round_robin(names, model.measure)
    assert sorted(verdict.stragglers) == ["node0001", "node0006"]


def test_a_slow_link_flags_a_pair_but_names_no_node():
    busbw = {key(a, b): 100.0 for a, b in itertools.combinations("abcdef", 2)}
    busbw[key("b", "e")] = 70.0
    verdict = judge(busbw)
    assert verdict.slow == {key("b", "e")}
    assert verdict.stragglers == []


def test_a_pair_that_did_not_complete_counts_against_both_nodes():
    busbw = {key(a, b): 100.0 for a, b in itertools.combinations("abcd", 2)}
    for other in "bcd":
        busbw[key("a", other)] = None
    verdict = judge(busbw)
    assert verdict.stragglers == ["a"]
    assert verdict.mean_busbw_gb_s == 100.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_1024_nodes_planted_stragglers_found_in_a_few_rounds(seed):
    planted = {7: 0.80, 100: 0.85, 511: 0.9, 512: 0.88, 900: 0.7, 1023: 0.86}
    names, model = simulated_cluster(1024, planted, noise_pct=1.0, seed=seed)
    result = screen_and_confirm(names, model.measure, seed=seed)
    assert result.stragglers == sorted(names[i] for i in planted)
    assert result.rounds <= 3 and model.calls == result.rounds
    assert result.rounds < 1023 // 100  # versus 1023 rounds of the full round robin
    assert result.pairs_measured < 600  # versus 523_776 pairs


def test_1024_nodes_with_two_planted_stragglers_paired_together():
    # both slow nodes may land in one screening pair; each still gets its own confirmation
    names, model = simulated_cluster(1024, {10: 0.8, 11: 0.8}, seed=5)
    result = screen_and_confirm(names, model.measure, seed=5)
    assert result.stragglers == ["node0010", "node0011"]


def test_1024_healthy_nodes_name_nobody():
    names, model = simulated_cluster(1024, {}, noise_pct=1.0, seed=9)
    result = screen_and_confirm(names, model.measure, seed=9)
    assert result.stragglers == []
