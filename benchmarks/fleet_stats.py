"""Do the fleet verdicts keep their promises? A simulation over synthetic fleets.

Each fleet is ``N`` GPUs of one model, every GPU measured ``repeats`` times with Gaussian repeat
noise (a fraction of its true rate); planted slow GPUs run a stated fraction slower. The fleets go
through ``analysis.fleetstats.judge_fleet`` with the default policy (99% confidence, 2% practical
threshold) exactly as the report calls it. Printed, as markdown tables:

1. the false-positive rate: the share of healthy fleets (no slow GPU) in which any GPU was named,
   over 1000 fleets per size, the repeat noise of each fleet drawn from 1 to 5%;
2. the detection rate of planted slow GPUs (1 to 3 of them, 1 to 10% slow) and whether any healthy
   GPU was named beside them;
3. the detectable shortfall the tool reports against the one simulated: the shortfall at which
   planted GPUs are found in 90% of fleets, found by bisection.

    python3 benchmarks/fleet_stats.py            # 22 minutes on a loaded 2-core machine
    python3 benchmarks/fleet_stats.py --quick    # fewer fleets, for a smoke run
    python3 benchmarks/fleet_stats.py --repeats-needed   # only: how many repeats find a 3% slow GPU in 99%
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.analysis.fleetstats import DETECTION_PROBABILITY, UnitSamples, VerdictPolicy, judge_fleet  # noqa: E402

POLICY = VerdictPolicy()


def fleet(rng: np.random.Generator, num_gpus: int, repeats: int, noise_frac: float,
          slow: dict[int, float]) -> list[UnitSamples]:
    rate = np.ones(num_gpus)
    for i, frac in slow.items():
        rate[i] = 1.0 - frac
    x = 500.0 * rate[:, None] * (1.0 + rng.normal(0.0, noise_frac, (num_gpus, repeats)))
    return [UnitSamples(f"gpu{i}", tuple(row)) for i, row in enumerate(x.tolist())]


def named(units: list[UnitSamples]) -> tuple[set[str], float | None]:
    (g,) = judge_fleet(units, POLICY)
    return {u.unit for u in g.slow}, g.detectable_frac


def false_positives(rng: np.random.Generator, sizes: list[int], num_fleets: int, repeats: int) -> list[str]:
    rows = ["| GPUs | repeats | fleets | repeat noise | fleets with a GPU named | rate | stated level |",
            "| ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    print("\n".join(rows), flush=True)
    for n in sizes:
        hits = 0
        for _ in range(num_fleets):
            got, _ = named(fleet(rng, n, repeats, rng.uniform(0.01, 0.05), {}))
            hits += bool(got)
        rows.append(f"| {n} | {repeats} | {num_fleets} | 1–5% | {hits} | {hits / num_fleets:.3f} | "
                    f"{POLICY.alpha:.2f} |")
        print(rows[-1], flush=True)
    return rows


def detection(rng: np.random.Generator, cases: list[tuple[int, int, float, int, float]], num_fleets: int) -> list[str]:
    rows = ["| GPUs | repeats | repeat noise | slow GPUs | slower by | found | healthy GPUs named (fleets) |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    print("\n".join(rows), flush=True)
    for n, repeats, noise, num_slow, frac in cases:
        found = wrong = 0
        for _ in range(num_fleets):
            slow = {int(i): frac for i in rng.choice(n, num_slow, replace=False)} if num_slow else {}
            got, _ = named(fleet(rng, n, repeats, noise, slow))
            want = {f"gpu{i}" for i in slow}
            found += len(got & want)
            wrong += bool(got - want)
        total = num_fleets * num_slow
        rows.append(f"| {n} | {repeats} | {noise * 100:g}% | {num_slow} | {frac * 100:g}% | "
                    f"{found / total:.3f} | {wrong} of {num_fleets} |")
        print(rows[-1], flush=True)
    return rows


def found_rate(rng: np.random.Generator, n: int, repeats: int, noise: float, frac: float, num_fleets: int) -> float:
    found = 0
    for _ in range(num_fleets):
        got, _ = named(fleet(rng, n, repeats, noise, {0: frac}))
        found += "gpu0" in got
    return found / num_fleets


def detectable(rng: np.random.Generator, cases: list[tuple[int, int, float]], num_fleets: int) -> list[str]:
    rows = [f"| GPUs | repeats | repeat noise | reported detectable shortfall | simulated ({DETECTION_PROBABILITY:.0%} found) "
            "| reported / simulated |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    print("\n".join(rows), flush=True)
    for n, repeats, noise in cases:
        reported = statistics.median(named(fleet(rng, n, repeats, noise, {}))[1] or 0.0 for _ in range(20))
        lo, hi = 0.0, 0.6
        for _ in range(9):
            mid = (lo + hi) / 2
            if found_rate(rng, n, repeats, noise, mid, num_fleets) >= DETECTION_PROBABILITY:
                hi = mid
            else:
                lo = mid
        sim = (lo + hi) / 2
        rows.append(f"| {n} | {repeats} | {noise * 100:g}% | {reported * 100:.2f}% | {sim * 100:.2f}% | "
                    f"{reported / sim:.2f} |")
        print(rows[-1], flush=True)
    return rows


def repeats_needed(rng: np.random.Generator, sizes: list[int], counts: list[int], num_fleets: int) -> list[str]:
    """The detection rate of one GPU 3% slower than its peers at 1% repeat noise, per fleet size and
    repeat count (the repeat noise pooled over the fleet, as the tool judges), and the fewest repeats
    that find it in at least 99% of fleets."""
    rows = ["| GPUs | " + " | ".join(f"{r} repeats" for r in counts) + " | fewest repeats found in ≥ 99% |",
            "| ---: | " + " | ".join("---:" for _ in counts) + " | ---: |"]
    print("\n".join(rows), flush=True)
    for n in sizes:
        rates = [found_rate(rng, n, r, 0.01, 0.03, num_fleets) for r in counts]
        enough = next((r for r, rate in zip(counts, rates, strict=True) if rate >= 0.99), None)
        rows.append(f"| {n} | " + " | ".join(f"{rate:.3f}" for rate in rates) + f" | {enough or 'more'} |")
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer fleets (a smoke run)")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--repeats-needed", action="store_true",
                    help="only the detection of a 3%% slow GPU at 1%% noise for 3 to 8 repeats")
    ap.add_argument("--sizes", default="8,64,512,8192", help="with --repeats-needed: the fleet sizes, in GPUs")
    ap.add_argument("--repeats", default="3,4,5,6,7,8", help="with --repeats-needed: the repeat counts")
    ap.add_argument("--fleets", type=int, default=0, help="with --repeats-needed: fleets a cell (default 400)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    if args.repeats_needed:
        repeats_needed(rng, [int(x) for x in args.sizes.split(",")], [int(x) for x in args.repeats.split(",")],
                       args.fleets or (100 if args.quick else 400))
        print(f"\n{time.monotonic() - t0:.0f} s")
        return 0
    k = 10 if args.quick else 1
    print(f"policy: {POLICY.confidence:.0%} confidence, {POLICY.threshold_frac:.0%} practical threshold\n")
    false_positives(rng, [8, 64, 512, 8192], 1000 // k, 3)
    print()
    det_cases = [(n, r, 0.01, 1, 0.03) for n in (8, 64, 512, 8192) for r in (3, 5, 10)]
    det_cases += [(64, 3, noise, num_slow, frac) for noise in (0.01, 0.03, 0.05) for num_slow in (1, 3)
                  for frac in (0.01, 0.05, 0.10)]
    detection(rng, det_cases, max(20, 200 // k))
    print()
    detectable(rng, [(n, r, noise) for n in (8, 64, 512) for r in (3, 5) for noise in (0.01, 0.05)],
               max(40, 300 // k))
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
