"""Pairwise straggler hunt: schedules, the noise-aware rule, and naming the nodes behind the slow pairs.

Pure. ``round_robin`` gives the N-1 rounds of disjoint pairs that cover every pair once (a bye per
round when N is odd), so pairs run in parallel. ``judge`` takes several busbw samples per pair and
names a node only when all its pairs are slower than any sample the healthy pairs produced, less
``threshold_pct``: the healthy pairs' own spread sets the bar, so a noisy fabric (or a loaded
machine) raises it and a quiet one lowers it.
``screen_and_confirm`` is the large-N strategy: one round of disjoint pairs screens every node, a
second round pairs each suspect with a node already seen fast, so a few slow nodes among a thousand
are named in 2-3 rounds instead of N-1, never more than ``round_budget(N)`` = 2·log2 N. ``measure`` callbacks take a round (a list of disjoint
pairs) and return busbw per pair (None: the pair did not complete; ``Sampled``: samples that say
whether they were taken together with the round).

Two kinds of evidence are never a verdict on speed:

- **A pair that did not complete** (its job failed: no sample) is neither slow nor fast. A node is
  named slow on samples only. A node that completed no pair while a partner of one of its failed
  pairs completed another is a failing node (``FailedNode``, ``carries``): the failure is its own,
  it is listed with the launcher's error, never as a straggler. When neither node of a failed pair
  completed any pair, both are listed as failing and the hunt does not say which of them it was.
  A node that completed pairs and then failed every later one (lost, or its Python broken, mid-hunt)
  is failing from the round of its first failed pair after its last completed one, when every
  partner of those failed pairs completed a pair in that round or a later one: they ran pair jobs
  once it had stopped, so the failure is its own (``FailedNode.from_round``, ``completed_pairs``). A
  failed pair between two nodes that each completed a later pair fails neither; a node with a
  partner that completed nothing from that round on is not listed (which of the two stopped is not
  known): its pairs are said pair by pair.
- **An ungated pair** (``Sampled.gated`` False: in a round of several pairs, its samples did not all
  pass the round's gate with every pair, so they may have overlapped other pairs' traffic or been
  taken without it) is listed with its figures but is neither a healthy reference nor evidence of a
  slow pair: ``judge`` leaves it out of the bar and of every node's evidence, and in the round robin
  judges only when at least half the pairs were completed and gated; in the screen's confirm rounds it neither
  confirms nor clears its suspect (which waits for another round), and an ungated reference pair
  does not set the round's bar. The screen's first round only sorts nodes into suspects and trusted
  partners (nobody is named on it): its bar comes from the gated pairs when any was gated.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass(frozen=True)
class Sampled:
    """A pair's busbw samples and whether every one of them was taken together with its round."""

    samples_gb_s: tuple[float, ...]
    gated: bool = True  # False: a round of several pairs whose gate this pair did not pass with every pair


Samples = Sampled | Sequence[float] | float | None  # one value is one sample; None / []: failed; a plain value is gated
MeasureRound = Callable[[list[Pair]], Mapping[Pair, Samples]]


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
    pairs: int  # compared pairs: completed and gated (a failed or ungated pair is neither slow nor fast)
    mean_busbw_gb_s: float  # over its compared pairs' medians; 0.0 when none was compared
    failed_pairs: int = 0

    @property
    def share(self) -> float:
        return self.slow_pairs / self.pairs if self.pairs else 0.0


@dataclass
class FailedNode:
    """A node that completed no pair, or none from a round on: failing, not slow (a node is named slow
    on samples only)."""

    node: str
    failed_pairs: list[Pair]  # its pairs that did not complete (from ``from_round`` on when it completed some)
    carries: bool  # a partner of a failed pair completed another pair, so the failure is this node's;
    # False: no partner completed a pair either, so which node of the pair failed is not known
    completed_pairs: int = 0  # the pairs it completed before it stopped (0: it completed none)
    from_round: int = 0  # the round of the first failed pair it completed none from (0: rounds not known)


@dataclass
class Judgement:
    mean_busbw_gb_s: float  # over the completed pairs' medians (0.0 when none completed: nothing is judged)
    slow: set[Pair] = field(default_factory=set)
    suspects: list[SuspectScore] = field(default_factory=list)  # highest share of slow pairs first
    stragglers: list[str] = field(default_factory=list)
    failed: set[Pair] = field(default_factory=set)  # pairs that returned no sample
    ungated: set[Pair] = field(default_factory=set)  # completed pairs not sampled together with their round
    failing: list[FailedNode] = field(default_factory=list)  # nodes that completed no pair, or none from a round on
    num_pairs: int = 0
    num_completed: int = 0
    judged: bool = False  # False: too few pairs completed (and were gated) to name anyone
    why_not_judged: str = ""
    healthy_pairs: int = 0  # the pairs the threshold was taken from (none of the named nodes in them)
    healthy_samples: int = 0
    healthy_median_gb_s: float = 0.0
    healthy_floor_gb_s: float = 0.0  # the slowest sample of any healthy pair
    limit_gb_s: float = 0.0  # a pair whose fastest sample is below this is slow: the floor less threshold_pct
    medians: dict[Pair, float] = field(default_factory=dict)  # each completed pair's median sample


def _samples(value: Samples) -> list[float]:
    if value is None:
        return []
    if isinstance(value, Sampled):
        return list(value.samples_gb_s)
    if isinstance(value, (int, float)):
        return [float(value)]
    return [float(v) for v in value]


def _gated(value: Samples) -> bool:
    return value.gated if isinstance(value, Sampled) else True


def _median(value: Samples) -> float | None:
    got = _samples(value)
    return statistics.median(got) if got else None


def _fastest(value: Samples) -> float | None:
    got = _samples(value)
    return max(got) if got else None


def judge(results: Mapping[Pair, Samples], threshold_pct: float = 5.0, *, half_gated: bool = True,
          rounds: Mapping[Pair, int] | None = None) -> Judgement:
    """Name the nodes whose pairs are slower than the healthy pairs' own spread explains.

    ``results``: every pair's busbw samples (a single value is one sample; None or [] means the
    pair failed; ``Sampled`` with ``gated`` False: taken without the round's gate). Each pair is
    summarised by its median sample. A set S of the lowest-scoring
    nodes (score: the mean of a node's compared pair medians) is named when every sample of every compared
    pair of each member with a node outside S, its fastest included, is more than ``threshold_pct``
    below the slowest sample of any compared pair between nodes outside S (the healthy pairs): the two ranges
    do not even touch, so neither pair's own noise can explain the gap. The largest such S of fewer than half the nodes
    wins (two stragglers are named together even though each slows the other's reference).

    A compared pair completed and was gated. A failed pair counts for nobody: it is neither slow nor
    fast, and its nodes are judged by ``failing_nodes`` instead. An ungated pair keeps its median but
    is neither a reference nor evidence (the module's docstring). No node is named when fewer than
    half the pairs completed (the failures are then a launcher problem, not a fabric verdict) or,
    with ``half_gated``, fewer than half were compared, and no mean is taken over zero values. The
    screen's pairs are judged without ``half_gated``: its names come from its gated confirm pairs,
    and one pair that never came to round 1's gate leaves every other pair of that round ungated.
    ``rounds``: the round each pair ran in, which ``failing_nodes`` needs to find a node that stopped
    mid-hunt (without it only the nodes that completed no pair are failing).
    """
    samples = {key(*k): _samples(v) for k, v in results.items()}
    done = {k: s for k, s in samples.items() if s}
    ungated = {key(*k) for k, v in results.items() if not _gated(v)} & set(done)
    compared = {k: s for k, s in done.items() if k not in ungated}
    med = {k: statistics.median(s) for k, s in done.items()}
    cmp_med = {k: m for k, m in med.items() if k in compared}
    nodes = sorted({n for k in samples for n in k})
    out = Judgement(mean_busbw_gb_s=statistics.fmean(med.values()) if med else 0.0,
                    failed={k for k, s in samples.items() if not s}, num_pairs=len(samples),
                    num_completed=len(done), medians=med, ungated=ungated,
                    failing=failing_nodes(samples, rounds))
    if not med:
        out.why_not_judged = f"none of the {len(samples)} pairs completed"
    elif len(done) * 2 < len(samples):
        out.why_not_judged = f"only {len(done)} of {len(samples)} pairs completed"
    elif half_gated and len(compared) * 2 < len(samples):
        out.why_not_judged = (f"only {len(compared)} of {len(samples)} pairs took their samples together with "
                              "the rest of their round")
    else:
        out.judged = True
    score = {n: statistics.fmean(v) if (v := [m for k, m in cmp_med.items() if n in k]) else 0.0 for n in nodes}
    named: list[str] = []
    if out.judged:
        # only a node with a compared pair can be named: one without (failing, or ungated throughout) would
        # lead every group by its empty score and keep the slow nodes from being named
        order = sorted((n for n in nodes if any(n in k for k in cmp_med)), key=lambda n: (score[n], n))
        for size in range(1, (len(nodes) - 1) // 2 + 1):
            group = order[:size]
            if _all_slow(group, set(nodes) - set(group), compared, cmp_med, threshold_pct):
                named = group
    healthy = set(nodes) - set(named)
    ref = {k: s for k, s in compared.items() if k[0] in healthy and k[1] in healthy}
    pooled = [x for s in ref.values() for x in s]
    if pooled:
        out.healthy_pairs, out.healthy_samples = len(ref), len(pooled)
        out.healthy_median_gb_s = statistics.median(pooled)
        out.healthy_floor_gb_s = min(pooled)
        out.limit_gb_s = out.healthy_floor_gb_s * (1 - threshold_pct / 100)
    if out.judged:
        for k in cmp_med:
            others = [x for p, s in ref.items() if p != k for x in s]
            if others and max(done[k]) < min(others) * (1 - threshold_pct / 100):
                out.slow.add(k)
    out.stragglers = sorted(named, key=lambda n: (score[n], n))
    suspects = []
    for n in nodes:
        mine = [k for k in cmp_med if n in k]
        suspects.append(SuspectScore(n, sum(1 for k in mine if k in out.slow), len(mine), score[n],
                                     failed_pairs=sum(1 for k in out.failed if n in k)))
    out.suspects = sorted(suspects, key=lambda s: (-s.share, s.mean_busbw_gb_s, s.node))
    return out


def failing_nodes(results: Mapping[Pair, Samples], rounds: Mapping[Pair, int] | None = None) -> list[FailedNode]:
    """The failing nodes of a hunt, by name: each with its failed pairs and whether it carries the failure.

    A node that completed no pair although one of its pairs was run is failing: it carries the
    failure when a partner of a failed pair completed another pair (that partner can run a pair
    job), else it shares it with partners that completed nothing either. With ``rounds`` (each
    pair's round), a node that completed pairs is failing from round R when every pair it ran after
    its last completed one failed, R being the first of those, and every partner of those pairs
    completed a pair in round R or later: the partners ran pair jobs once it had stopped, so it
    carries the failure. Otherwise a node that completed a pair is not listed: its failed pairs are
    said pair by pair."""
    samples = {key(*k): _samples(v) for k, v in results.items()}
    at = {key(*k): r for k, r in (rounds or {}).items()}
    completed = {n for k, s in samples.items() if s for n in k}
    out = []
    for n in sorted({n for k in samples for n in k}):
        mine = [k for k in samples if n in k]
        if n not in completed:
            failed = sorted(mine)
            partners = {_other(k, n) for k in failed}
            out.append(FailedNode(node=n, failed_pairs=failed, carries=bool(partners & completed),
                                  from_round=min((at[k] for k in failed if k in at), default=0)))
            continue
        if any(k not in at for k in mine):
            continue  # without every pair's round, when it stopped is not known
        last = max(at[k] for k in mine if samples[k])
        later = sorted((k for k in mine if at[k] > last), key=lambda k: (at[k], k))
        if not later:
            continue
        start = at[later[0]]
        partners = {_other(k, n) for k in later}
        if all(any(s and p in k and at.get(k, 0) >= start for k, s in samples.items()) for p in partners):
            out.append(FailedNode(node=n, failed_pairs=later, carries=True,
                                  completed_pairs=sum(1 for k in mine if samples[k]), from_round=start))
    return out


def _other(pair: Pair, node: str) -> str:
    return pair[1] if pair[0] == node else pair[0]


def _all_slow(group: list[str], healthy: set[str], done: dict[Pair, list[float]], med: dict[Pair, float],
              threshold_pct: float) -> bool:
    """Whether every member of ``group`` has every sample of its completed pairs with ``healthy`` nodes
    below the healthy pairs' slowest sample less ``threshold_pct`` (and at least half of those pairs
    completed)."""
    ref = [x for k, s in done.items() if k[0] in healthy and k[1] in healthy for x in s]
    if not ref:
        return False
    limit = min(ref) * (1 - threshold_pct / 100)
    for n in group:
        mine = [k for k in med if n in k and (k[1] if k[0] == n else k[0]) in healthy]
        if not mine or len(mine) * 2 < len(healthy) or any(max(done[k]) >= limit for k in mine):
            return False
    return True


def run_round_robin(nodes: Sequence[str], measure: MeasureRound, threshold_pct: float = 5.0
                    ) -> tuple[Judgement, dict[Pair, Samples], int]:
    """Every pair once, in parallel rounds: (judgement, busbw samples per pair, rounds run)."""
    busbw: dict[Pair, Samples] = {}
    at: dict[Pair, int] = {}
    rounds = round_robin(nodes)
    for i, pairs in enumerate(rounds, 1):
        for (a, b), v in measure(pairs).items():
            busbw[key(a, b)] = v
            at[key(a, b)] = i
    return judge(busbw, threshold_pct, rounds=at), busbw, len(rounds)


CONFIRMATIONS = 2  # a suspect is named after this many slow pairs with different trusted partners


def round_budget(num_nodes: int) -> int:
    """The most rounds a hunt over ``num_nodes`` nodes may take: 2·log2 N (at least 2, a screen and a
    confirmation), so localisation stays O(log N) however many nodes there are."""
    return max(2, math.floor(2 * math.log2(max(2, num_nodes))))


@dataclass
class ScreenResult:
    stragglers: list[str]
    rounds: int
    pairs_measured: int
    suspects_after_screen: list[str]  # the nodes round 1 left to check: slow pairs', failed pairs', the bye
    unresolved: list[str] = field(default_factory=list)  # suspects still waiting for a trusted partner at the budget
    # failing (``failing_nodes``, carrying the failure): completed no pair and failed one with a trusted
    # partner, or stopped completing pairs while its partners went on
    failing: list[str] = field(default_factory=list)


def screen_and_confirm(nodes: Sequence[str], measure: MeasureRound, threshold_pct: float = 5.0,
                       seed: int = 0, max_rounds: int | None = None) -> ScreenResult:
    """Localise slow nodes in a few rounds of disjoint pairs (for large N).

    Round 1 pairs every node with a random partner. Both members of a pair whose samples are all
    more than ``threshold_pct`` below the round's upper quartile of pair medians (its fastest pair
    below 8 pairs; taken over the gated pairs when any was gated) are suspects: the pair's own noise
    cannot explain the gap, as in ``judge``; members of the other completed pairs are trusted. Both
    members of a pair that did not complete are checked again like suspects, with no slow pair
    counted against them. Each later round pairs every remaining suspect with a trusted
    node and, when two trusted nodes are left over, measures them together as the round's own
    reference: the round's bar is that pair's median less ``threshold_pct`` (the pairs of a round run
    at the same time, so a load that slows the whole round lowers the bar with it; without a spare
    gated reference the screen's bar stands). A suspect whose gated pair is slow with ``CONFIRMATIONS``
    trusted partners in turn is a straggler, one whose gated pair is fast is cleared (a healthy node is named only
    if two pairs with healthy partners both fall below the bar by chance). A suspect whose pair with a
    trusted partner fails is failing (``failing``, never a straggler) when it has completed no pair:
    its partner has, so the failure is the suspect's. One that has completed a pair is not tried
    again and its partner is checked again in the next round, like a suspect with nothing counted
    against it: when the partner completes that pair, the suspect stopped while its partner went on
    and is failing from the round its pair failed (``failing_nodes``' rule over every pair the screen
    ran); when the budget leaves no round for that, or the partner fails too, the suspect is
    unresolved (tried again in the second case). Both nodes of a reference pair that fails are
    checked again in the next round too. One whose pair was ungated waits for another partner (no evidence of speed). Suspects
    left without a trusted partner wait for the next round (trusted nodes are plentiful unless most
    nodes are slow). The round's upper quartile is the reference because a slow pair's both members
    are in it: the mean, and with a third of the nodes slow even the median, would follow the slow
    pairs downwards. At most ``max_rounds`` rounds
    (default ``round_budget(N)``); a suspect still waiting then is listed as unresolved, never named.
    """
    max_rounds = max_rounds or round_budget(len(nodes))
    rng = random.Random(seed)
    order = list(nodes)
    rng.shuffle(order)
    first = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    measured = 0
    got = measure(first)
    measured += len(first)
    ran: dict[Pair, Samples] = {key(*p): v for p, v in got.items()}  # every pair the screen ran, and its round
    at: dict[Pair, int] = dict.fromkeys(ran, 1)
    completed = {n for p, v in got.items() if _samples(v) for n in p}
    gated = [v for v in got.values() if _samples(v) and _gated(v)]
    done = sorted(m for v in (gated or list(got.values())) if (m := _median(v)) is not None)
    # the upper quartile: with 30% of the nodes slow, half the pairs hold one and the median is a slow pair;
    # with fewer than 8 pairs the fastest, since three slow nodes among eight leave one healthy pair of four
    ref = (done[(3 * (len(done) - 1)) // 4] if len(done) >= 8 else done[-1]) if done else 0.0
    limit = ref * (1 - threshold_pct / 100)
    suspects: list[str] = []
    trusted: list[str] = []
    for (a, b), samples in got.items():
        v = _fastest(samples)
        if v is None or v < limit:
            suspects += [a, b]  # a failed pair's nodes are checked again, with nothing counted against them
        else:
            trusted += [a, b]
    if len(order) % 2:
        suspects.append(order[-1])  # the bye is checked in round 2
    screened = sorted(suspects)
    stragglers: list[str] = []
    rounds = 1
    pending = list(suspects)
    slow_with: dict[str, int] = {}  # suspect -> trusted partners it was slow with so far
    stopped: list[str] = []  # completed a pair, then failed one with a trusted partner: not tried again
    checking: dict[str, str] = {}  # a trusted partner checked again -> the stopped suspect its pair failed with
    while pending and rounds < max_rounds:
        rounds += 1
        partners = list(trusted)
        rng.shuffle(partners)
        this_round = list(zip(pending, partners, strict=False))
        waiting = pending[len(this_round):]
        spare = partners[len(this_round):]
        reference = [(spare[0], spare[1])] if len(spare) >= 2 else []
        got = measure(this_round + reference)
        measured += len(this_round) + len(reference)
        completed |= {n for p, v in got.items() if _samples(v) for n in p}
        ran.update({key(*p): v for p, v in got.items()})
        at.update(dict.fromkeys((key(*p) for p in got), rounds))
        ref_value = got.get(reference[0]) if reference else None
        if reference and _fastest(ref_value) is None:
            for n in reference[0]:  # a trusted pair that failed: both are checked again, as a failed screen pair's
                trusted.remove(n)
                waiting.append(n)
        ref_median = _median(ref_value) if _gated(ref_value) else None
        bar = ref_median * (1 - threshold_pct / 100) if ref_median is not None else limit
        for pair in this_round:
            s, value = pair[0], got.get(pair)
            v = _fastest(value)
            if v is None:
                if s in completed:
                    # it stopped, or its partner did: the partner is checked again in the next round
                    stopped.append(s)
                    trusted.remove(pair[1])
                    waiting.append(pair[1])
                    checking[pair[1]] = s
                # else its trusted partner runs pair jobs: the failure is this node's (failing_nodes)
                if s in checking and checking[s] in stopped:
                    # a partner checked again failed as well: the failure it shared with the stopped
                    # suspect may be its own, so that suspect is tried again
                    stopped.remove(checking[s])
                    waiting.append(checking.pop(s))
                continue
            if not _gated(value):
                waiting.append(s)  # sampled without the round: no evidence either way
                continue
            if v >= bar:
                trusted.append(s)  # cleared: it can partner later suspects
                continue
            slow_with[s] = slow_with.get(s, 0) + 1
            if slow_with[s] >= CONFIRMATIONS:
                stragglers.append(s)
            else:
                waiting.append(s)  # once more, with another trusted partner
        pending = waiting
    failing = sorted(f.node for f in failing_nodes(ran, at) if f.carries)
    unresolved = sorted(set(pending) - set(failing) | (set(stopped) - set(failing)))
    return ScreenResult(stragglers=sorted(stragglers), rounds=rounds, pairs_measured=measured,
                        suspects_after_screen=screened, unresolved=unresolved, failing=failing)


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
