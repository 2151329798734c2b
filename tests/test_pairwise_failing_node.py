"""A node that cannot run a pair job is failing, not slow, on the 4-node SSH bed: node2's Python does
not start (its interpreter exits 127 there, as a broken library path would make it), so every pair
with node2 fails while the other pair of each round completes alone after the round's gate gave up
waiting. The record names node2 failing with the launcher's error, nobody slow, a Gap for each
ungated round, and the phase ends partial; `clustereval pairwise` (run in-process, the gate's wait
shortened) exits 1 and prints node2 as failing; the report of the record lints clean; `debug nccl` on
the saved record ranks node2 first, as failing."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from clustereval.analysis.nccl_debug import report_lines
from clustereval.app import pairwise_only
from clustereval.config import load_config
from clustereval.debug.nccl import debug_nccl
from clustereval.phases import pairwise
from clustereval.records.network import PairwiseRecord
from clustereval.report.lint import lint_text
from clustereval.report.render import RunView, render_report
from clustereval.store import RunStore
from tests.test_network_rendezvous_modes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pairwise-failing-node")]

BROKEN_EXIT = "python3: error while loading shared libraries: libpython3.so: cannot open shared object file"


@pytest.mark.timeout(900)
def test_a_node_whose_python_is_broken_is_failing_not_a_straggler(tmp_path, netns_cluster, monkeypatch):
    cluster = netns_cluster(4)
    broken = cluster.nodes[2].name
    python = tmp_path / "python"  # the eval Python every node runs; on node2 it does not start
    python.write_text(f'#!/bin/sh\n[ "$(hostname)" = "{broken}" ] && {{ echo "{BROKEN_EXIT}" >&2; exit 127; }}\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    path = cluster.write_config(tmp_path / "cluster.toml", rdzv_port=free_port(), cpu_ranks_per_node=1,
                                reports_dir=str(tmp_path / "reports"), eval_python=str(python))
    # the round's healthy pair waits this long at its gate for the pair that never comes (120 s in a run)
    monkeypatch.setattr(pairwise, "GATE_TIMEOUT_S", 5)
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    rc = pairwise_only(load_config(path), payload_bytes=2**20, reports_dir=tmp_path / "reports", console=console,
                       out=console)
    said = buf.getvalue()
    assert rc == 1, said[-3000:]
    raw = Path(re.search(r"run folder: (\S+)", said).group(1))
    rec = RunStore.open(raw).load_record("pairwise", PairwiseRecord)
    assert rec is not None, said[-3000:]
    assert f"did not complete a pair (failing, not slow): {broken}" in said and "stragglers: none named" in said
    table = [(p.round, p.a, p.b, p.busbw_gb_s, p.ungated, p.error[-80:]) for p in rec.pairs]
    assert rec.num_rounds == 3 and len(rec.pairs) == 6, table
    assert [p for p in rec.pairs if broken in (p.a, p.b) and p.busbw_gb_s is not None] == [], table
    assert all(p.busbw_gb_s is not None for p in rec.pairs if broken not in (p.a, p.b)), table
    assert rec.stragglers == [] and not any(p.slow for p in rec.pairs), table
    assert [(f.node, f.carries) for f in rec.failing] == [(broken, True)], rec.failing
    assert rec.failing[0].error, rec.failing
    assert rec.status == "partial", rec.wall_seconds
    kinds = [g.kind for g in rec.gaps]
    assert kinds.count("pairwise.pair-failed") == 3, kinds
    # each round's healthy pair sampled without its round-mate: said, and left out of the verdict
    ungated = [g for g in rec.gaps if g.kind == "pairwise.round-ungated"]
    assert [g.facts["round"] for g in ungated] == [1, 2, 3], kinds
    assert all(len(g.facts["missing"]) == 1 and broken in g.facts["missing"][0] for g in ungated)
    assert all(p.ungated for p in rec.pairs if p.busbw_gb_s is not None), table
    md = render_report(RunView(name="failing", stamp="2026-12-03-2000Z", raw_rel="raw-failing-2026-12-03-2000Z",
                               access="ssh", records={"pairwise": rec}, profile="quick")).markdown
    assert f"`{broken}` (" in md and "failing, not slow" in md
    assert lint_text(md) == []
    # `clustereval debug nccl` on the saved record ranks node2 first, as failing, with the launcher's error
    dbg, _ = debug_nccl(load_config(path), pairs_file=raw / "pairwise.record.json", reports_dir=tmp_path / "reports",
                        sample_s=0.3)
    assert [(s.rank, s.node, s.failing) for s in dbg.suspects][:1] == [(1, broken, True)], dbg.suspects
    assert broken not in [s.node for s in dbg.suspects[1:]] and dbg.suspects[0].error == rec.failing[0].error
    ranked = "\n".join(report_lines(dbg))
    assert f"  1. {broken}: failing, not slow: it did not complete a pair (" in ranked, ranked
