"""The per-GPU, per-node and per-pair tables of Compute, Network and Storage at fleet size: above
``FOLD_NODES`` nodes each lists only the units a reader must act on, after the fleet's median, minimum and
maximum per peer group, and says how many rows it left out and where every row is. Records of 9, 64 and
1024 nodes of 8 GPUs with 0, 1 and 3 outliers planted in every table (tests/fleetruns.py): the outliers and
only they are listed, the summary figures are the records', and the report lints clean. At 8 nodes every
row is written."""

from __future__ import annotations

import re
import statistics

import pytest

from clustereval.report.fold import FOLD_NODES, folded_names, folds
from clustereval.report.lint import lint_text
from clustereval.report.render import render_report
from clustereval.report.units import fmt_bw
from tests.fleetruns import RAW, Plant, fleet_records, fleet_view, node_name

NUM_GPUS = 8
SIZES = (9, 64, 1024)
COUNTS = (0, 1, 3)


def spots(num_nodes: int, count: int, offset: int) -> list[int]:
    """``count`` nodes spread over the fleet, a table's own ``offset`` apart from the other tables'."""
    return sorted({(p + offset) % num_nodes for p in (1, num_nodes // 2, num_nodes - 2)[:count]})


def plant(num_nodes: int, count: int) -> Plant:
    gpu = lambda i: (i * 3) % NUM_GPUS  # noqa: E731
    return Plant(msmf=tuple((i, gpu(i)) for i in spots(num_nodes, count, 0)),
                 lemon=tuple((i, gpu(i + 1)) for i in spots(num_nodes, count, 1)),
                 pcie=tuple((i, gpu(i + 2)) for i in spots(num_nodes, count, 2)),
                 health=tuple((i, gpu(i + 3)) for i in spots(num_nodes, count, 3)),
                 stragglers=tuple(spots(num_nodes, count, 4)), intra=tuple(spots(num_nodes, count, 5)),
                 writes=tuple(spots(num_nodes, count, 6)))


_RENDERED: dict[tuple[int, int], tuple[str, Plant, dict]] = {}


def rendered(num_nodes: int, count: int) -> tuple[str, Plant, dict]:
    key = (num_nodes, count)
    if key not in _RENDERED:
        p = plant(num_nodes, count)
        view = fleet_view(num_nodes, NUM_GPUS, p)
        _RENDERED[key] = (render_report(view).markdown, p, view.records)
    return _RENDERED[key]


def host(i: int) -> str:
    return f"gpu-{i:03d}(node{i})"


def section(md: str, title: str) -> str:
    start = md.index(f"\n### {title}\n")
    end = md.find("\n### ", start + 5)
    nxt = md.find("\n## ", start + 5)
    ends = [e for e in (end, nxt) if e > 0]
    return md[start:min(ends) if ends else None]


def first_cells(text: str, header: str) -> list[str]:
    """The first cell of every row of the table whose header row starts with ``header``."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(f"| {header}"))
    out = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        out.append(ln.split("|")[1].strip())
    return out


def has_table(text: str, header: str) -> bool:
    return any(ln.startswith(f"| {header}") for ln in text.splitlines())


def summary(values: list[tuple[str, float]], fmt) -> tuple[str, str, str, str, str]:
    """(median, min, the unit holding it, max, the unit holding it), ties to the first in table order."""
    lo = min(values, key=lambda v: v[1])
    hi = max(values, key=lambda v: v[1])
    return fmt(statistics.median(v for _, v in values)), fmt(lo[1]), lo[0], fmt(hi[1]), hi[0]


def says_summary(text: str, name: str, unit: str, values: list[tuple[str, float]], fmt, noun: str = "GPU") -> None:
    med, lo, lo_at, hi, hi_at = summary(values, fmt)
    if lo == hi:  # every unit alike: said as one figure
        assert f"{name} {lo} {unit} on every {noun}" in text
        return
    assert f"{name} median {med} {unit}, min {lo} {unit} on {lo_at}, max {hi} {unit} on {hi_at}" in text


CASES = [(n, k) for n in SIZES for k in COUNTS]


@pytest.mark.parametrize("num_nodes,count", CASES)
def test_the_report_lints_clean_and_says_the_fold_rule_once_per_table(num_nodes, count):
    md, _, _ = rendered(num_nodes, count)
    assert lint_text(md) == []
    # hardware health, GPU memory and links (GPUs, GPU pairs), MSMF, lemon, intra-node, pairwise, concurrent write
    assert md.count(f"Above {FOLD_NODES} nodes ") == 8
    assert md.count(f"[`summary.json`]({RAW}/summary.json)") == 7  # every table but the health one, whose
    assert md.count(f"[`health.record.json`]({RAW}/health.record.json)") == 1  # results summary.json does not hold


@pytest.mark.parametrize("num_nodes,count", CASES)
def test_compute_lists_the_planted_gpus_and_nodes_and_only_them(num_nodes, count):
    md, p, recs = rendered(num_nodes, count)
    msmf = section(md, "GPU performance benchmarks")
    want = [f"{host(i)}:gpu{g}" for i, g in p.msmf]
    assert (first_cells(msmf, "GPU | MSMF |") if want else []) == want
    assert has_table(msmf, "GPU | MSMF |") == bool(want)
    assert f"{count} of {num_nodes * NUM_GPUS} GPUs" in msmf if count else f"all {num_nodes * NUM_GPUS} GPUs" in msmf
    values = [(f"`{host(n.index)}:gpu{g.gpu}`", float(round(g.tflops[0]))) for n in recs["matmul"].nodes
              for g in n.gpus]
    says_summary(msmf, "MSMF", "TFLOPS", values, lambda v: f"{v:.0f}")
    nodes = [(f"`{host(n.index)}`", float(min(round(g.tflops[0]) for g in n.gpus))) for n in recs["matmul"].nodes]
    says_summary(msmf, "node MSMF (the node's slowest GPU)", "TFLOPS", nodes, lambda v: f"{v:.0f}")
    assert msmf.count("(the slowest GPU)") == 0 and msmf.count("the slowest GPU)") == 1  # one MSMF part, the fleet's lowest

    lemon = section(md, "Find underperforming GPUs")
    want = [host(i) for i, _ in p.lemon]
    assert (first_cells(lemon, "node | gpu0") if want else []) == want
    values = [(f"`{host(n.index)}:gpu{g.gpu}`", g.tflops[0]) for n in recs["lemon"].nodes for g in n.gpus]
    says_summary(lemon, "lemon GEMM", "TFLOPS", values, lambda v: f"{v:.1f}")

    health = section(md, "Hardware health")
    rows = first_cells(health, "node | `software`")
    others = num_nodes - count
    assert rows == ([f"the other {others} nodes"] if count else [f"all {num_nodes} nodes"]) + [host(i) for i, _ in p.health]
    for i, g in p.health:
        assert f"| {host(i)} | Pass | Fail: gpu{g} | Pass | Pass |" in health

    links = section(md, "GPU memory and links")
    want = [f"`{host(i)}:gpu{g}`" for i, g in p.pcie]
    assert (first_cells(links, "GPU | HBM copy") if want else []) == want
    h2d = [(f"`{host(n.index)}:gpu{g.gpu}`", g.pcie_solo.h2d_gb_s) for n in recs["gpupass"].nodes for g in n.gpus]
    says_summary(links, "H2D", "GB/s", h2d, lambda v: f"{v:.1f}")
    assert "HBM read 2300.0 GB/s on every GPU" in links
    assert "GPU pairs of" not in links and f"all {num_nodes} nodes are within those bounds" in links


@pytest.mark.parametrize("num_nodes,count", CASES)
def test_network_and_storage_list_the_planted_nodes_and_pairs_and_only_them(num_nodes, count):
    md, p, recs = rendered(num_nodes, count)
    intra = section(md, "Intra-node all-reduce benchmark")
    want = [host(i) for i in p.intra]
    assert (first_cells(intra, "node | peak busbw") if want else []) == want
    peaks = [(f"`{host(i)}`", max(r.busbw_gb_s for r in s.rows)) for i, s in enumerate(recs["allreduce"].intra)]
    says_summary(intra, "peak busbw", "GBps", peaks, lambda v: f"{v:_.2f}")

    pairwise = section(md, "Pairwise all-reduce benchmark")
    stragglers = {node_name(i) for i in p.stragglers}
    pairs = [x for x in recs["pairwise"].pairs if {x.a, x.b} & stragglers]
    names = {node_name(i): host(i) for i in range(num_nodes)}
    rows = first_cells(pairwise, "node | node") if pairs else []
    assert rows == [names[x.a] for x in pairs]
    assert len(rows) == sum(x.slow for x in recs["pairwise"].pairs)
    done = [(f"{names[x.a]} + {names[x.b]}", x.busbw_gb_s) for x in recs["pairwise"].pairs]
    says_summary(pairwise, "busbw", "GBps", done, lambda v: f"{v:_.2f}")

    write = section(md, "Concurrent write shared fs benchmark")
    assert first_cells(write, "node | time") == [f"`{host(i)}`" for i in p.writes] + ["aggregate"]
    rates = [(f"`{host(i)}`", w.mib_s) for i, w in enumerate(recs["storage"].concurrent.nodes)]
    says_summary(write, "write rate", "MiB/s", rates, lambda v: fmt_bw(v, grouped=True))


def test_at_eight_nodes_every_row_is_written():
    view = fleet_view(8, NUM_GPUS, plant(8, 1))
    md = render_report(view).markdown
    assert lint_text(md) == []
    assert not folds(8) and "Above 8 nodes" not in md
    assert len(first_cells(section(md, "GPU performance benchmarks"), "GPU | MSMF |")) == 8 * NUM_GPUS
    assert len(first_cells(section(md, "Find underperforming GPUs"), "node | gpu0")) == 8
    assert has_table(section(md, "Hardware health"), "plugin | gpu-000(node0) |")
    assert md.count("GPU pairs of ") == 8
    pairs = fleet_records(8, NUM_GPUS, plant(8, 1))["pairwise"].pairs
    assert len(first_cells(section(md, "Pairwise all-reduce benchmark"), "node | node")) == len(pairs)
    assert len(first_cells(section(md, "Concurrent write shared fs benchmark"), "node | time")) == 8 + 1


def test_a_list_of_names_folds_past_the_rule():
    names = [f"n{i}" for i in range(12)]
    assert folded_names(names[:FOLD_NODES]) == ", ".join(names[:FOLD_NODES])
    assert folded_names(names) == ", ".join(names[:FOLD_NODES]) + " and 4 more nodes"
    assert re.fullmatch(r"(n\d+, ){7}n7 and 1 more node", folded_names(names[:9]))


def test_a_unit_that_failed_is_listed_with_its_failure():
    view = fleet_view(16, NUM_GPUS, Plant())
    cw = view.records["storage"].concurrent
    cw.nodes[5].error, cw.nodes[5].mib_s = "dd: error writing '/data/cw-5': Input/output error", 0.0
    node = view.records["lemon"].nodes[7]
    node.gpus[2].error, node.gpus[2].tflops, node.dead = "CUDA error: an illegal memory access", [None], [2]
    md = render_report(view).markdown
    assert lint_text(md) == []
    write = section(md, "Concurrent write shared fs benchmark")
    assert first_cells(write, "node | time") == [f"`{host(5)}`", "aggregate"]
    assert f"| `{host(5)}` | failed | failed |" in write
    assert "The 15 nodes (writing to `/data`)" in write  # the summary is over the writes that finished
    lemon = section(md, "Find underperforming GPUs")
    assert first_cells(lemon, "node | gpu0") == [host(7)]
    assert f"| {host(7)} | " in lemon and "| dead |" in lemon
    assert "The 128 GPUs (NVIDIA H200, driver 580.159.04): lemon GEMM median 735.0 TFLOPS over the 127 GPUs with a figure" in lemon
