"""The report at fleet size: one rule for every per-node and per-unit list. Pure.

Above ``FOLD_NODES`` nodes a list of nodes names the first ``FOLD_NODES`` and counts the rest, and a
table with one row per GPU, node or pair keeps its columns but lists only the rows a reader must
act on (a unit that failed, has no figure, missed its target, was flagged by the pass's own rule or
named by the fleet-relative verdict). Beside it: one sentence per peer group with the fleet's
count, median, minimum and maximum (and the unit that holds each), and one sentence saying how
many rows were left out and which files of the run folder hold every row. At ``FOLD_NODES`` nodes
or fewer every row is written, as before.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clustereval.report.units import plural

# Above this many nodes the report names the fleet's common value by its count and lists only the
# nodes or units that differ from it (the outliers), so a 1024-node report stays a page a person reads.
FOLD_NODES = 8


def folds(num_nodes: int) -> bool:
    """Whether lists and tables over ``num_nodes`` nodes are folded."""
    return num_nodes > FOLD_NODES


def folded_names(names: Sequence[str]) -> str:
    """Every name; past ``FOLD_NODES``, the first ``FOLD_NODES`` and how many more nodes."""
    if len(names) <= FOLD_NODES:
        return ", ".join(names)
    return ", ".join(names[:FOLD_NODES]) + f" and {plural(len(names) - FOLD_NODES, 'more node')}"


@dataclass(frozen=True)
class Measure:
    """A numeric column of a folded table: its name in prose, its unit in prose, and the table's format."""

    name: str  # "MSMF", "HBM copy"
    unit: str  # "TFLOPS", "GB/s", "GBps", "MiB/s"
    fmt: Callable[[float], str]


@dataclass
class Unit:
    """One unit of a folded table's figures: how prose names it, its peer group, one value per measure."""

    label: str  # as prose names it: "`gpu-003(node3):gpu7`"
    values: tuple[float | None, ...]
    group: str = ""  # the peer group in words; "" when every unit is a peer of every other


@dataclass
class FleetFacts:
    """What the fleet-relative verdict said, per kind of figure: who it named slow, and each unit's peer group."""

    slow: dict[str, set[str]] = field(default_factory=dict)  # kind -> unit labels named slow
    group: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> unit label -> peer group

    def named(self, kind: str, label: str) -> bool:
        return label in self.slow.get(kind, set())

    def group_of(self, kind: str, label: str) -> str:
        return self.group.get(kind, {}).get(label, "")


def fleet_facts(view: Any) -> FleetFacts:
    """The fleet-relative verdicts under the view's policy, as the Findings judge them (the view's own)."""
    out = FleetFacts()
    for k in view.fleet_kinds:
        out.slow[k.kind] = {u.unit for u in k.slow}
        out.group[k.kind] = {u.unit: u.group for u in k.units}
    return out


def _extremes(units: list[Unit], i: int) -> tuple[int, float, tuple[float, Unit], tuple[float, Unit]] | None:
    """(count, median, (minimum, its unit), (maximum, its unit)) of measure ``i``; ties go to the first unit
    in table order."""
    have = [(v, u) for u in units if (v := u.values[i]) is not None]
    if not have:
        return None
    lo = min(have, key=lambda vu: vu[0])
    hi = max(have, key=lambda vu: vu[0])
    return len(have), statistics.median(v for v, _ in have), lo, hi


def summary_sentences(units: list[Unit], measures: Sequence[Measure], noun: str) -> list[str]:
    """One sentence per peer group: its unit count, and per measure the median, the minimum and the
    maximum in the table's format with the unit that holds each (``… min 701 TFLOPS on `a(node3):gpu2` …``)."""
    groups: dict[str, list[Unit]] = {}
    for u in units:
        groups.setdefault(u.group, []).append(u)
    out = []
    for group, members in groups.items():
        parts = []
        for i, m in enumerate(measures):
            ext = _extremes(members, i)
            if ext is None:
                continue
            count, med, (lo, lo_unit), (hi, hi_unit) = ext
            over = "" if count == len(members) else f" over the {plural(count, noun)} with a figure"
            low, high = m.fmt(lo), m.fmt(hi)
            if low == high:  # every unit alike: one figure, not a median, a min and a max that repeat it
                parts.append(f"{m.name} {low} {m.unit}" + (f"{over}" if over else f" on every {noun}"))
                continue
            parts.append(f"{m.name} median {m.fmt(med)} {m.unit}{over}, min {low} {m.unit} on {lo_unit.label}, "
                         f"max {high} {m.unit} on {hi_unit.label}")
        if parts:
            whose = f"The {plural(len(members), noun)}" + (f" ({group})" if group else "")
            out.append(f"{whose}: " + "; ".join(parts) + ".")
    return out


def left_out_sentence(num_listed: int, num_total: int, noun: str, criteria: str, where: str,
                      lists: str = "this table lists only") -> str:
    """How many of a folded table's rows (one per ``noun``) it lists and leaves out, by which rule, and
    where every row is."""
    many = plural(2, noun).split(" ", 1)[1]
    lead = f"Above {plural(FOLD_NODES, 'node')} {lists} the {many} a reader must act on ({criteria})"
    if num_listed == 0:
        return (f"{lead}; all {plural(num_total, noun)} are within those bounds, so their rows are left out here. "
                f"Every row is in {where}.")
    return (f"{lead}: {num_listed} of {plural(num_total, noun)}, leaving out the other "
            f"{plural(num_total - num_listed, noun)}. Every row is in {where}.")


def run_files(raw_rel: str, record: str, in_summary: bool = True) -> str:
    """Where every row of a folded table is: the phase's record in the run folder, and (``in_summary``) its
    figures in ``summary.json`` as well."""
    text = f"the run folder's [`{record}.record.json`]({raw_rel}/{record}.record.json)"
    return text + (f", the figures also in [`summary.json`]({raw_rel}/summary.json)" if in_summary else "")
