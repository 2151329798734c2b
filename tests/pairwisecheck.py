"""What a pairwise record must show about its rounds: the pairs of one round ran at the same time and
took every sample together, read from the job and sample times each pair's record holds."""

from __future__ import annotations

from collections import defaultdict

from clustereval.records.network import PairwiseRecord

CLOCK_S = 0.002  # the sample times are rounded to the millisecond


def rounds_sampled_together(rec: PairwiseRecord) -> list[str]:
    """Every way a round of two or more completed pairs was not measured together ([] when none)."""
    by_round = defaultdict(list)
    for p in rec.pairs:
        if p.busbw_gb_s is not None:
            by_round[p.round].append(p)
    problems = []
    for rnd, pairs in sorted(by_round.items()):
        if len(pairs) < 2:
            continue
        names = [f"{p.a}-{p.b}" for p in pairs]
        if not all(p.gated for p in pairs):
            problems.append(f"round {rnd}: not every pair passed the round's gates: {names}")
        if max(p.started_s for p in pairs) >= min(p.ended_s for p in pairs):
            problems.append(f"round {rnd}: a pair's job ended before another's started: "
                            f"{[(n, p.started_s, p.ended_s) for n, p in zip(names, pairs, strict=True)]}")
        counts = {len(p.sample_starts_unix_s) for p in pairs}
        if counts != {rec.samples_per_pair}:
            problems.append(f"round {rnd}: sample windows per pair {sorted(counts)}, not {rec.samples_per_pair}")
            continue
        for i in range(1, rec.samples_per_pair):
            began = min(p.sample_starts_unix_s[i] for p in pairs)
            done = max(p.sample_ends_unix_s[i - 1] for p in pairs)
            if began < done - CLOCK_S:
                problems.append(f"round {rnd}: sample {i} began at {began:.3f} before every pair had finished "
                                f"sample {i - 1} ({done:.3f})")
    return problems
