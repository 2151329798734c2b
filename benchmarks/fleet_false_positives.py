"""How often does the fleet-relative verdict name a GPU in a healthy fleet? A simulation.

A healthy fleet is ``N`` GPUs of one model whose true rates are all the same; every figure the run
records is that rate times (1 + spread × ε), ε drawn independently for every GPU and pass from one of
these shapes, each scaled so its MAD-implied standard deviation (1.4826 × MAD) is 1, which is what
the tool measures as a spread:

- ``normal``;
- ``t10``, ``t5``, ``t3``: Student's t with 10, 5 and 3 degrees of freedom, heavier-tailed: a pass
  that hiccuped now and then (``t3`` is the heaviest the one-figure verdict allows for,
  ``fleetstats.ONE_FIGURE_TAIL_DF``).

Each fleet's spread is drawn uniformly from 1 to 5%, so the 2% practical threshold never decides
alone and the statistical test is what is measured. The fleets go through
``analysis.fleetstats.judge_fleet`` with the default policy (99% confidence, 2% threshold) exactly
as the report calls it. A fleet counts as a false positive when any GPU is named. Printed, as
markdown tables, with a 95% Clopper-Pearson interval on every rate:

1. one pass (one figure a GPU, the default ``gpu_passes = 1``) for each shape;
2. the runbook's default path: GPUs in nodes of 8, one pass, and a node whose first pass put a GPU
   more than 2% below its node median measured twice more (all its GPUs), as ``phases/matmul`` does;
3. ``gpu_passes`` = 3, 5, 7 and 10 (every GPU that many passes; repeat noise normal) and, to show
   what the repeat noise's shape does, 3 and 7 passes with ``t5`` and ``t3`` repeat noise;
4. no simulation: the detectable shortfall the report states for one figure a GPU, against the one a
   reference with normal tails would state (what allowing for heavy tails costs).

    python3 benchmarks/fleet_false_positives.py              # about 25 minutes on a loaded 2-core machine
    python3 benchmarks/fleet_false_positives.py --quick      # a tenth of the fleets, for a smoke run
    python3 benchmarks/fleet_false_positives.py --only one-pass --sizes 8,64
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.analysis.fleetstats import UnitSamples, VerdictPolicy, judge_fleet  # noqa: E402

POLICY = VerdictPolicy()
TAILS: dict[str, float] = {"normal": np.inf, "t10": 10.0, "t5": 5.0, "t3": 3.0}
GPUS_PER_NODE = 8
RUNBOOK_FLAG_FRAC = 0.02  # a GPU this far below its node median in the first pass: two more passes on the node
SPREAD_RANGE = (0.01, 0.05)


def draws(rng: np.random.Generator, tail: str, shape: tuple[int, ...]) -> np.ndarray:
    """ε of the named shape, scaled to a MAD-implied standard deviation of 1."""
    nu = TAILS[tail]
    if np.isinf(nu):
        return rng.standard_normal(shape)
    return rng.standard_t(nu, shape) / (1.4826 * stats.t.ppf(0.75, nu))


def named(units: list[UnitSamples]) -> bool:
    return any(g.slow for g in judge_fleet(units, POLICY))


def one_pass_fleet(rng: np.random.Generator, num_gpus: int, tail: str) -> list[UnitSamples]:
    spread = rng.uniform(*SPREAD_RANGE)
    x = 500.0 * (1.0 + spread * draws(rng, tail, (num_gpus,)))
    return [UnitSamples(f"gpu{i}", (v,)) for i, v in enumerate(x.tolist())]


def repeats_fleet(num_repeats: int) -> Callable[[np.random.Generator, int, str], list[UnitSamples]]:
    def make(rng: np.random.Generator, num_gpus: int, tail: str) -> list[UnitSamples]:
        noise = rng.uniform(*SPREAD_RANGE)
        x = 500.0 * (1.0 + noise * draws(rng, tail, (num_gpus, num_repeats)))
        return [UnitSamples(f"gpu{i}", tuple(row)) for i, row in enumerate(x.tolist())]
    return make


def runbook_fleet(rng: np.random.Generator, num_gpus: int, tail: str) -> list[UnitSamples]:
    """One pass; a node whose first pass put a GPU >2% below its node median gets passes 2 and 3."""
    noise = rng.uniform(*SPREAD_RANGE)
    num_nodes = num_gpus // GPUS_PER_NODE
    first = 500.0 * (1.0 + noise * draws(rng, tail, (num_nodes, GPUS_PER_NODE)))
    medians = np.median(first, axis=1, keepdims=True)
    flagged = (first < medians * (1.0 - RUNBOOK_FLAG_FRAC)).any(axis=1)
    more = 500.0 * (1.0 + noise * draws(rng, tail, (num_nodes, GPUS_PER_NODE, 2)))
    units = []
    for n in range(num_nodes):
        for g in range(GPUS_PER_NODE):
            samples = (first[n, g], *more[n, g]) if flagged[n] else (first[n, g],)
            units.append(UnitSamples(f"node{n}:gpu{g}", tuple(float(v) for v in samples)))
    return units


def interval(hits: int, fleets: int) -> str:
    ci = stats.binomtest(hits, fleets).proportion_ci(confidence_level=0.95, method="exact")
    return f"{ci.low:.3f}–{ci.high:.3f}"


def table(title: str, rows: list[tuple[str, str, str, Callable[[np.random.Generator, int, str], list[UnitSamples]]]],
          sizes: list[int], fleets_for: Callable[[int], int], rng: np.random.Generator) -> list[str]:
    """``rows``: (label, tail, passes column, fleet maker) per row group, one line per fleet size."""
    out = [f"{title}\n", "| figures scatter as | passes | GPUs | fleets | fleets with a GPU named | rate | 95% interval "
           "| stated level |", "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    print("\n".join(out), flush=True)
    for label, tail, passes, make in rows:
        for n in sizes:
            fleets = fleets_for(n)
            t0 = time.monotonic()
            hits = sum(named(make(rng, n, tail)) for _ in range(fleets))
            out.append(f"| {label} | {passes} | {n} | {fleets} | {hits} | {hits / fleets:.3f} | "
                       f"{interval(hits, fleets)} | {POLICY.alpha:.2f} |")
            print(out[-1] + f"  <!-- {time.monotonic() - t0:.0f} s -->", flush=True)
    return out


def detectable_table(sizes: list[int]) -> list[str]:
    """The detectable shortfall the report states for one figure a GPU, against the one a reference with
    normal tails would state (no simulation: ``fleetstats.detectable_frac`` itself)."""
    from clustereval.analysis import fleetstats

    spreads = (0.002, 0.005, 0.01, 0.02)
    out = ["The detectable shortfall stated for one figure a GPU (default policy), with the one-figure reference "
           f"(Student's t, {fleetstats.ONE_FIGURE_TAIL_DF} degrees of freedom) / with normal tails:\n",
           "| GPUs | " + " | ".join(f"spread {x:.1%}" for x in spreads) + " |",
           "| ---: | " + " | ".join("---:" for _ in spreads) + " |"]

    def stated(n: int, spread: float) -> str:
        x = fleetstats.detectable_frac(spread, 1, n, n - 1, POLICY, noise_basis=fleetstats.FLEET_SPREAD)
        return f"{x:.1%}" if x < 1 else "≥ 100%"

    for n in sizes:
        cells = []
        for spread in spreads:
            heavy = stated(n, spread)
            tail, fleetstats.ONE_FIGURE_TAIL_DF = fleetstats.ONE_FIGURE_TAIL_DF, 10**7  # as good as normal
            try:
                normal = stated(n, spread)
            finally:
                fleetstats.ONE_FIGURE_TAIL_DF = tail
            cells.append(f"{heavy} / {normal}")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    print("\n".join(out), flush=True)
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
            f"scipy {scipy.__version__}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the fleets (a smoke run)")
    ap.add_argument("--seed", type=int, default=2026_12_07)
    ap.add_argument("--sizes", default="8,64,512,8192", help="fleet sizes, in GPUs (multiples of 8)")
    ap.add_argument("--only", choices=("one-pass", "runbook", "repeats", "detectable"), help="one table only")
    ap.add_argument("--tails", default=",".join(TAILS), help="with --only one-pass: the shapes, of " + ", ".join(TAILS))
    ap.add_argument("--fleets", type=int, default=0, help="fleets a cell below 8192 GPUs (default 2000; 8192: a fifth)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    sizes = [int(x) for x in args.sizes.split(",")]
    base = args.fleets or (200 if args.quick else 2000)

    def fleets_for(n: int) -> int:
        return max(20, base // 5) if n >= 8192 else base

    def repeat_fleets(n: int) -> int:
        return max(20, fleets_for(n) // 2)

    print(f"policy: {POLICY.confidence:.0%} confidence, {POLICY.threshold_frac:.0%} practical threshold; "
          f"spread or repeat noise drawn from {SPREAD_RANGE[0]:.0%} to {SPREAD_RANGE[1]:.0%} a fleet; seed {args.seed}")
    print(f"machine: {machine()}\n", flush=True)
    t0 = time.monotonic()
    if args.only in (None, "one-pass"):
        tails = [t for t in args.tails.split(",") if t in TAILS]
        table("One pass (one figure a GPU):", [(tail, tail, "1", one_pass_fleet) for tail in tails], sizes,
              fleets_for, rng)
        print()
    if args.only in (None, "runbook"):
        table("The runbook's default path (nodes of 8 GPUs; a node with a GPU >2% below its median in the first "
              "pass measured three times):",
              [(tail, tail, "1, or 3 on a flagged node", runbook_fleet) for tail in ("normal", "t3")],
              [n for n in sizes if n % GPUS_PER_NODE == 0], repeat_fleets, rng)
        print()
    if args.only in (None, "repeats"):
        rows = [("normal", "normal", str(r), repeats_fleet(r)) for r in (3, 5, 7, 10)]
        rows += [(tail, tail, str(r), repeats_fleet(r)) for tail in ("t5", "t3") for r in (3, 7)]
        table("Every GPU in several passes (`gpu_passes`), the repeat noise pooled:", rows, sizes, repeat_fleets, rng)
        print()
    if args.only in (None, "detectable"):
        detectable_table(sizes)
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
