"""How many rounds and pairs does the pairwise hunt take to name the slow nodes, from 4 to 1024 nodes?

A pure simulation over the hunt's own planning code (``analysis.stragglers``): a pair's busbw is the
slower node's speed times a base, with Gaussian noise per sample; each pair gives five samples (the
phase's ``samples_per_pair``). Each size runs the schedule ``run_pairwise`` picks for it (every pair up
to ``PairwiseSettings.round_robin_max_nodes`` nodes, screen-and-confirm above) over many seeds with 0
to 3 planted slow nodes (10 to 30% slow), and prints per N: rounds (worst), pairs measured (median),
the budget of 2·log2 N rounds, runs that named exactly the planted nodes, and runs that named a
healthy node.

    python3 benchmarks/pairwise_localisation.py           # about a minute
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.analysis import stragglers as st  # noqa: E402
from clustereval.phases.settings import PairwiseSettings  # noqa: E402


class Fleet:
    """Simulated nodes: a pair's samples are base × the slower node's speed × (1 + noise)."""

    def __init__(self, num_nodes: int, slow: dict[int, float], noise_frac: float, seed: int) -> None:
        self.names = [f"node{i:04d}" for i in range(num_nodes)]
        self.speed = {n: 1.0 for n in self.names}
        for i, frac in slow.items():
            self.speed[self.names[i]] = 1.0 - frac
        self.noise_frac = noise_frac
        self.rng = random.Random(seed)
        self.rounds = 0
        self.pairs = 0

    def measure(self, pairs: list[st.Pair]) -> dict[st.Pair, list[float]]:
        self.rounds += 1
        self.pairs += len(pairs)
        return {(a, b): [90.0 * min(self.speed[a], self.speed[b]) * (1 + self.rng.gauss(0, self.noise_frac))
                         for _ in range(5)] for a, b in pairs}


def hunt(fleet: Fleet, settings: PairwiseSettings, seed: int) -> list[str]:
    """The schedule and the naming ``phases.pairwise.run_pairwise`` uses for this many nodes."""
    if len(fleet.names) > settings.round_robin_max_nodes:
        return st.screen_and_confirm(fleet.names, fleet.measure, settings.threshold_pct, seed=seed).stragglers
    verdict, _, _ = st.run_round_robin(fleet.names, fleet.measure, settings.threshold_pct)
    return verdict.stragglers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="seeds per size and noise level")
    args = ap.parse_args()
    settings = PairwiseSettings()
    print("| nodes | schedule | noise | runs | rounds (worst) | budget 2·log2 N | pairs (median) | exactly the "
          "planted nodes | a healthy node named |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ok = True
    for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024):
        for noise in (0.01, 0.03):
            worst, pairs, right, wrong = 0, [], 0, 0
            for seed in range(args.runs):
                rng = random.Random(seed * 7919 + n)
                num_slow = rng.randint(0, min(3, (n - 1) // 2))
                slow = {i: rng.uniform(0.10, 0.30) for i in rng.sample(range(n), num_slow)}
                fleet = Fleet(n, slow, noise, seed)
                named = hunt(fleet, settings, seed)
                planted = sorted(fleet.names[i] for i in slow)
                worst = max(worst, fleet.rounds)
                pairs.append(fleet.pairs)
                right += named == planted
                wrong += bool(set(named) - set(planted))
            budget = st.round_budget(n)
            ok &= worst <= budget and wrong == 0
            schedule = "every pair" if n <= settings.round_robin_max_nodes else "screen and confirm"
            print(f"| {n} | {schedule} | {noise * 100:g}% | {args.runs} | {worst} | {budget} | "
                  f"{statistics.median(pairs):g} | {right} | {wrong} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
