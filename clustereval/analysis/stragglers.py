"""Pairwise straggler hunt: schedules, the 5% rule, and naming the nodes behind the slow pairs.

Pure. ``round_robin`` gives the N-1 rounds of disjoint pairs that cover every pair once (a bye per
round when N is odd), so pairs run in parallel. ``judge`` flags pairs more than ``threshold_pct``
below the run mean and names stragglers by explaining the slow pairs node by node.
``screen_and_confirm`` is the large-N strategy: one round of disjoint pairs screens every node, a
second round pairs each suspect with a node already seen fast, so a few slow nodes among a thousand
are named in 2-3 rounds instead of N-1. ``measure`` callbacks take a round (a list of disjoint
pairs) and return busbw per pair (None: the pair did not complete).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]
MeasureRound = Callable[[list[Pair]], dict[Pair, float | None]]


def key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def round_robin(nodes: Sequence[str]) -> list[list[Pair]]:
    """The circle method: N-1 rounds (N even) or N rounds with one bye each (N odd)."""
    items: list[str | None] = list(nodes)
    if len(items) < 2:
        return []
    if len(items) % 2:
        items.append(None)  # the bye
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = items[i], items[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]  # rotate all but the first
    return rounds


@dataclass
class SuspectScore:
    node: str
    slow_pairs: int
    pairs: int
    mean_busbw_gb_s: float

    @property
    def share(self) -> float:
        return self.slow_pairs / self.pairs if self.pairs else 0.0


@dataclass
class Judgement:
    mean_busbw_gb_s: float
    slow: set[Pair] = field(default_factory=set)
    suspects: list[SuspectScore] = field(default_factory=list)  # highest share of slow pairs first
    stragglers: list[str] = field(default_factory=list)


def judge(busbw: dict[Pair, float | None], threshold_pct: float = 5.0) -> Judgement:
    """Flag pairs more than ``threshold_pct`` below the mean of the completed pairs; name stragglers.

    A node is named when more than half of its (remaining) pairs are slow; its pairs are then set
    aside and the rest judged again, so a node whose only slow pairs were with a named straggler is
    not named too. A pair that did not complete counts as slow for both of its nodes.
    """
    done = {k: v for k, v in busbw.items() if v is not None}
    mean = statistics.fmean(done.values()) if done else 0.0
    limit = mean * (1 - threshold_pct / 100)
    slow = {k for k, v in busbw.items() if v is None or v < limit}
    nodes = sorted({n for k in busbw for n in k})

    def scores(pairs: set[Pair]) -> list[SuspectScore]:
        out = []
        for n in nodes:
            mine = [k for k in pairs if n in k]
            vals = [busbw[k] for k in mine if busbw[k] is not None]
            out.append(SuspectScore(n, sum(1 for k in mine if k in slow), len(mine),
                                    statistics.fmean(vals) if vals else 0.0))
        return sorted(out, key=lambda s: (-s.share, s.mean_busbw_gb_s, s.node))

    result = Judgement(mean_busbw_gb_s=mean, slow=slow, suspects=scores(set(busbw)))
    remaining = set(busbw)
    while remaining & slow:
        top = scores(remaining)[0]
        if top.share <= 0.5 or top.slow_pairs == 0:
            break
        result.stragglers.append(top.node)
        remaining = {k for k in remaining if top.node not in k}
    return result


def run_round_robin(nodes: Sequence[str], measure: MeasureRound, threshold_pct: float = 5.0
                    ) -> tuple[Judgement, dict[Pair, float | None], int]:
    """Every pair once, in parallel rounds: (judgement, busbw per pair, rounds run)."""
    busbw: dict[Pair, float | None] = {}
    rounds = round_robin(nodes)
    for pairs in rounds:
        for (a, b), v in measure(pairs).items():
            busbw[key(a, b)] = v
    return judge(busbw, threshold_pct), busbw, len(rounds)


@dataclass
class ScreenResult:
    stragglers: list[str]
    rounds: int
    pairs_measured: int
    suspects_after_screen: list[str]


def screen_and_confirm(nodes: Sequence[str], measure: MeasureRound, threshold_pct: float = 5.0,
                       seed: int = 0, max_rounds: int = 8) -> ScreenResult:
    """Localise slow nodes in a few rounds of disjoint pairs (for large N).

    Round 1 pairs every node with a random partner. Both members of a pair more than
    ``threshold_pct`` below the round's median are suspects; members of the other pairs are
    trusted. Each later round pairs every remaining suspect with a different trusted node: a
    suspect whose pair is slow again is a straggler, one whose pair is fast is cleared. Suspects
    left without a trusted partner wait for the next round (trusted nodes are plentiful unless most
    nodes are slow). The round's median is the reference because a slow pair's both members are in
    it and the mean would follow a large set of slow nodes downwards.
    """
    rng = random.Random(seed)
    order = list(nodes)
    rng.shuffle(order)
    first = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    measured = 0
    res = measure(first)
    measured += len(first)
    done = [v for v in res.values() if v is not None]
    ref = statistics.median(done) if done else 0.0
    limit = ref * (1 - threshold_pct / 100)
    suspects: list[str] = []
    trusted: list[str] = []
    for (a, b), v in res.items():
        if v is None or v < limit:
            suspects += [a, b]
        else:
            trusted += [a, b]
    if len(order) % 2:
        suspects.append(order[-1])  # the bye is checked in round 2
    screened = sorted(suspects)
    stragglers: list[str] = []
    rounds = 1
    pending = list(suspects)
    while pending and rounds < max_rounds:
        rounds += 1
        partners = list(trusted)
        rng.shuffle(partners)
        this_round = list(zip(pending, partners, strict=False))
        waiting = pending[len(this_round):]
        res = measure(this_round)
        measured += len(this_round)
        for (s, _partner), v in zip(this_round, (res.get(p) for p in this_round), strict=True):
            if v is None or v < limit:
                stragglers.append(s)
            else:
                trusted.append(s)  # cleared: it can partner later suspects
        pending = waiting
    return ScreenResult(stragglers=sorted(stragglers), rounds=rounds, pairs_measured=measured,
                        suspects_after_screen=screened)


@dataclass
class PairModel:
    """A simulated cluster: a pair's busbw is the slower node's speed times a base, with noise."""

    base_gb_s: float
    speed: dict[str, float]  # 1.0 healthy, 0.85 = 15% slow
    noise_pct: float = 1.0
    seed: int = 0
    calls: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def measure(self, pairs: list[Pair]) -> dict[Pair, float | None]:
        self.calls += 1
        out: dict[Pair, float | None] = {}
        for a, b in pairs:
            jitter = 1 + self._rng.gauss(0, self.noise_pct / 100)
            out[(a, b)] = self.base_gb_s * min(self.speed[a], self.speed[b]) * jitter
        return out


def simulated_cluster(num_nodes: int, slow: dict[int, float], base_gb_s: float = 90.0,
                      noise_pct: float = 1.0, seed: int = 0) -> tuple[list[str], PairModel]:
    names = [f"node{i:04d}" for i in range(num_nodes)]
    speed = {n: 1.0 for n in names}
    for i, factor in slow.items():
        speed[names[i]] = factor
    return names, PairModel(base_gb_s=base_gb_s, speed=speed, noise_pct=noise_pct, seed=seed)
