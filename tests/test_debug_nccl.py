"""The uneven-NCCL workflow: ranking and topology facts on hand-built pair results, and the
workflow over SSH on the namespace cluster (snapshot, evidence bundles, the printed ranking)."""

from __future__ import annotations

import json
import re
import tarfile

import pytest

from clustereval.analysis.nccl_debug import (
    failing_from_pairs,
    grouping_fact,
    rank_suspects,
    report_lines,
    subnet_groups,
)
from clustereval.config import Config
from clustereval.debug.nccl import debug_nccl, pairs_from
from clustereval.probes.slurm_topology import expand_hostlist, parse_node_features, parse_topology
from clustereval.records import from_dict
from clustereval.records.debug import NcclDebugRecord
from clustereval.records.network import FailingNode, PairResult
from clustereval.records.snapshot import Signal
from clustereval.report.gaps import say
from clustereval.transport.local import LocalTransport
from tests.conftest import run_cli


def _pairs(values: dict[tuple[str, str], float | None], threshold: float = 5.0) -> list[PairResult]:
    data = {"pairs": [{"a": a, "b": b, "busbw_gb_s": v} for (a, b), v in values.items()], "threshold_pct": threshold}
    pairs, _, _ = pairs_from(data)
    return pairs


FOUR = {("n0", "n1"): 90.0, ("n0", "n2"): 40.0, ("n0", "n3"): 91.0,
        ("n1", "n2"): 41.0, ("n1", "n3"): 89.0, ("n2", "n3"): 39.0}


def test_slow_flags_follow_the_5_percent_rule():
    pairs, mean, threshold = pairs_from({"pairs": [{"a": a, "b": b, "busbw_gb_s": v} for (a, b), v in FOUR.items()]})
    assert threshold == 5.0 and round(mean, 3) == 65.0
    assert {(p.a, p.b) for p in pairs if p.slow} == {("n0", "n2"), ("n1", "n2"), ("n2", "n3")}
    pairs, _, _ = pairs_from({"pairs": [{"a": "x", "b": "y", "busbw_gb_s": None}, {"a": "x", "b": "z", "busbw_gb_s": 5}]})
    assert [p.slow for p in pairs] == [False, False]  # a pair that did not complete is failed, not slow


def test_pairs_keep_round_and_samples_and_an_old_debug_record_still_loads():
    pairs, _, _ = pairs_from({"pairs": [{"a": "x", "b": "y", "round": 2, "busbw_gb_s": 9.0, "samples_gb_s": [8.5, 9.0],
                                         "slow": False}]})
    assert (pairs[0].round, pairs[0].samples_gb_s) == (2, [8.5, 9.0])
    # a debug record written when its pairs had only a, b, busbw, slow and error
    old = {"phase": "debug-nccl", "pairs": [{"a": "x", "b": "y", "busbw_gb_s": 1.5, "slow": True, "error": ""}],
           "suspects": [{"node": "x", "rank": 1, "slow_pairs": [{"a": "x", "b": "y", "busbw_gb_s": 1.5, "slow": True}]}]}
    rec = from_dict(NcclDebugRecord, old)
    assert rec.pairs == [PairResult(a="x", b="y", busbw_gb_s=1.5, slow=True)]
    assert rec.suspects[0].slow_pairs == rec.pairs


def test_a_hunts_gaps_keep_their_kind_and_facts_and_an_old_records_words(tmp_path):
    saved = tmp_path / "pairwise.record.json"
    saved.write_text(json.dumps({"phase": "pairwise", "pairs": [{"a": "x", "b": "y", "busbw_gb_s": None}], "gaps": [
        {"phase": "pairwise", "text": "", "plan": "", "node": "", "kind": "pairwise.pair-failed",
         "facts": {"a": "x", "b": "y", "error": "no result"}},
        {"phase": "pairwise", "text": "The pair x + z did not complete (boom).", "plan": "re-run"},
        {"phase": "pairwise", "text": "", "plan": ""}]}))  # neither words nor a kind: nothing to say
    config = Config(name="t", access="local", reports_dir=str(tmp_path / "reports"))
    rec, _ = debug_nccl(config, pairs_file=saved, transport=LocalTransport(), nodes=[])
    assert [g.kind for g in rec.gaps] == ["pairwise.pair-failed", ""]
    assert rec.gaps[0].facts == {"a": "x", "b": "y", "error": "no result"} and not rec.gaps[0].text
    assert say(rec.gaps[0]).text == "The pair x + y did not complete (`no result`)."  # the error line, quoted
    assert say(rec.gaps[0]).plan == ("read the pair's launch log in the raw folder, fix the cause and run "
                                     "`clustereval pairwise` again")
    assert (say(rec.gaps[1]).text, say(rec.gaps[1]).plan) == ("The pair x + z did not complete (boom).", "re-run")


def test_ranking_straggler_first_then_independent_then_concerns_only():
    values = dict(FOUR)
    values[("n0", "n1")] = 55.0  # a second, independent slow pair between n0 and n1
    values[("n1", "n3")] = 95.0  # n1's other pairs are faster than n0's: n0 ranks first
    pairs = _pairs(values)
    hot = Signal(node="n3", key="gpu.temperature", level="CONCERN", text="temperature 91 °C", subject="gpu0",
                 threshold=">= 88 °C", pointer="hardware")
    ranked = rank_suspects(pairs, ["n2"], {"n3": [hot], "n5": [hot, hot]})
    assert [(s.rank, s.node, s.straggler) for s in ranked] == [(1, "n2", True), (2, "n0", False),
                                                              (3, "n1", False), (4, "n3", False), (5, "n5", False)]
    assert ranked[0].why == "named by the pairwise hunt: 3 of 3 pairs slow"
    assert "1 of them without a named straggler" in ranked[1].why
    assert "every one of them with a named straggler" in ranked[3].why and ranked[3].concerns == [hot]
    assert ranked[4].why == "no slow pair; 2 CONCERN lines in its snapshot"


def test_ranking_without_hunt_stragglers_uses_slow_pair_counts():
    ranked = rank_suspects(_pairs(FOUR), [], {})
    assert ranked[0].node == "n2" and len(ranked[0].slow_pairs) == 3
    assert rank_suspects(_pairs({("a", "b"): 10.0, ("a", "c"): 10.1}), [], {}) == []


# a hunt of four nodes in three rounds: n0 completed no pair, n2 is slow with every node it met
LOST = [{"a": "n0", "b": "n1", "round": 1, "busbw_gb_s": None, "error": "exit status 127: python3: cannot open"},
        {"a": "n2", "b": "n3", "round": 1, "busbw_gb_s": 40.0, "samples_gb_s": [40.0, 40.2]},
        {"a": "n0", "b": "n2", "round": 2, "busbw_gb_s": None, "error": "exit status 127: python3: cannot open"},
        {"a": "n1", "b": "n3", "round": 2, "busbw_gb_s": 90.0, "samples_gb_s": [90.0, 90.2]},
        {"a": "n0", "b": "n3", "round": 3, "busbw_gb_s": None, "error": "exit status 127: python3: cannot open"},
        {"a": "n1", "b": "n2", "round": 3, "busbw_gb_s": 41.0, "samples_gb_s": [41.0, 41.1]}]


def test_a_failing_node_ranks_first_as_failing_never_by_a_zero_figure():
    pairs, _, _ = pairs_from({"pairs": LOST, "limit_gb_s": 80.0})
    for p in pairs:
        p.slow = p.busbw_gb_s is not None and p.busbw_gb_s < 80.0
    failing = [FailingNode(node="n0", error="exit status 127: python3: cannot open", partners=["n1", "n2", "n3"])]
    ranked = rank_suspects(pairs, ["n2"], {}, failing)
    assert [(s.rank, s.node, s.failing, s.straggler) for s in ranked] == [
        (1, "n0", True, False), (2, "n2", False, True), (3, "n3", False, False), (4, "n1", False, False)]
    assert ranked[0].why == ("failing, not slow: it did not complete a pair (exit status 127: python3: cannot open; "
                             "a partner completed another pair)")
    assert ranked[0].error == "exit status 127: python3: cannot open" and len(ranked[0].failed_pairs) == 3
    # the ranking before: n0 had no slow pair and no CONCERN line, so it was left out
    assert [s.node for s in rank_suspects(pairs, ["n2"], {})] == ["n2", "n3", "n1"]


def test_a_node_lost_mid_hunt_ranks_first_with_the_round_it_stopped_in():
    # n3 completes round 1, then fails with n1 (round 2) and n2 (round 3); n1 completes a pair in round 3
    # and n2 one in round 2: both partners ran pairs once n3 had stopped
    rows = [{"a": "n0", "b": "n3", "round": 1, "busbw_gb_s": 90.0}, {"a": "n1", "b": "n2", "round": 1, "busbw_gb_s": 90.1},
            {"a": "n0", "b": "n2", "round": 2, "busbw_gb_s": 89.9}, {"a": "n1", "b": "n3", "round": 2, "busbw_gb_s": None,
                                                                       "error": "ssh: connect to host n3: No route"},
            {"a": "n0", "b": "n1", "round": 3, "busbw_gb_s": 90.2}, {"a": "n2", "b": "n3", "round": 3, "busbw_gb_s": None,
                                                                       "error": "ssh: connect to host n3: No route"}]
    pairs, _, _ = pairs_from({"pairs": rows})
    failing = failing_from_pairs(pairs)
    assert [(f.node, f.completed_pairs, f.from_round, f.partners, f.error) for f in failing] == [
        ("n3", 1, 2, ["n1", "n2"], "ssh: connect to host n3: No route")]
    ranked = rank_suspects(pairs, [], {}, failing)
    assert [(s.node, s.failing) for s in ranked] == [("n3", True)]
    assert ranked[0].why.startswith("failing, not slow: it did not complete a pair from round 2 on, having completed "
                                    "1 pair before (ssh: connect to host n3: No route; every partner completed")
    # named a straggler on the pairs it completed as well: listed once, first, as failing and named
    both = rank_suspects(pairs, ["n3"], {}, failing)
    assert [(s.node, s.failing, s.straggler) for s in both] == [("n3", True, True)]
    assert both[0].why.startswith("failing: it did not complete") and both[0].why.endswith(
        "; named a straggler on the pairs it completed")


def test_the_workflow_lists_the_records_failing_nodes_and_finds_an_older_records_again(tmp_path):
    config = Config(name="t", access="local", reports_dir=str(tmp_path / "reports"))
    saved = tmp_path / "pairwise.record.json"
    record = {"phase": "pairwise", "backend": "gloo", "ranks_per_node": 1, "threshold_pct": 5.0, "pairs": LOST,
              "stragglers": ["n2"], "limit_gb_s": 80.0, "healthy_floor_gb_s": 84.2,
              "failing": [{"node": "n0", "error": "exit status 127: python3: cannot open",
                           "partners": ["n1", "n2", "n3"], "carries": True}]}
    for data in (record, {k: v for k, v in record.items() if k != "failing"}):  # an older record: no list
        saved.write_text(json.dumps(data))
        rec, _ = debug_nccl(config, pairs_file=saved, transport=LocalTransport(), nodes=[])
        assert [(f.node, f.carries) for f in rec.failing] == [("n0", True)]
        assert [(s.rank, s.node, s.failing) for s in rec.suspects][:2] == [(1, "n0", True), (2, "n2", False)]
        text = "\n".join(report_lines(rec))
        assert "  1. n0: failing, not slow: it did not complete a pair (exit status 127" in text
        assert "       pair n0 + n1: did not complete [exit status 127: python3: cannot open]" in text
        assert "  2. n2: named by the pairwise hunt" in text


def test_switch_grouping_explains_cross_switch_slowness():
    values = {("n0", "n1"): 90.0, ("n2", "n3"): 91.0, ("n0", "n2"): 50.0, ("n0", "n3"): 51.0,
              ("n1", "n2"): 49.0, ("n1", "n3"): 50.5}
    fact = grouping_fact("scontrol show topology", {"n0": "s0", "n1": "s0", "n2": "s1", "n3": "s1"},
                         _pairs(values), label="switch")
    assert fact is not None and fact.explains
    assert fact.text.startswith("nodes by switch: s0: n0, n1; s1: n2, n3; all 4 slow pairs cross switches and "
                                "every pair within one switch is fast")
    same = grouping_fact("subnet", {"n0": "10.0.0.0/24", "n1": "10.0.0.0/24", "n2": "10.0.0.0/24", "n3": "10.0.0.0/24"},
                         _pairs(FOUR), label="subnet")
    assert same is not None and not same.explains and "every measured node shares one subnet" in same.text
    assert subnet_groups({"a": ["10.1.2.3/16"], "b": ["bogus", "192.168.0.9/24"]}) == \
        {"a": "10.1.0.0/16", "b": "192.168.0.0/24"}


def test_slurm_topology_and_features():
    assert expand_hostlist("gpu[01-03,7],login,rack[1-2]-n[0-1]") == [
        "gpu01", "gpu02", "gpu03", "gpu7", "login", "rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1"]
    topo = ("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=tux[0-1]\n"
            "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=tux[2-3]\n"
            "SwitchName=s2 Level=1 LinkSpeed=1 Switches=s[0-1] Nodes=tux[0-3]\n")
    assert parse_topology(topo) == {"tux0": "s0", "tux1": "s0", "tux2": "s1", "tux3": "s1"}
    blocks = "BlockName=b1 BlockIndex=0 Nodes=gpu[1-2] BlockSize=2\nBlockName=b2 BlockIndex=1 Nodes=gpu[3-4] BlockSize=2\n"
    assert parse_topology(blocks) == {"gpu1": "b1", "gpu2": "b1", "gpu3": "b2", "gpu4": "b2"}
    nodes = ("NodeName=tux0 Arch=x86_64 CoresPerSocket=32 ActiveFeatures=h100,rack3 AvailableFeatures=h100,rack3\n"
             "NodeName=tux1 Arch=x86_64 ActiveFeatures=(null) AvailableFeatures=(null)\n")
    assert parse_node_features(nodes) == {"tux0": "h100,rack3"}


def _config(cluster, tmp_path) -> Config:
    return Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes), ssh=cluster.ssh_settings(),
                  shared_paths=(str(cluster.shared_dir),), eval_python="python3", reports_dir=str(tmp_path / "reports"))


def test_workflow_from_saved_pairs_on_the_namespace_cluster(cluster3, tmp_path):
    n0, n1, n2 = (n.name for n in cluster3.nodes)
    saved = tmp_path / "pairwise.record.json"
    saved.write_text(json.dumps({"phase": "pairwise", "backend": "gloo", "ranks_per_node": 1, "threshold_pct": 5.0,
                                 "pairs": [{"a": n0, "b": n1, "busbw_gb_s": 1.20}, {"a": n0, "b": n2, "busbw_gb_s": 0.31},
                                           {"a": n1, "b": n2, "busbw_gb_s": 0.30}],
                                 "stragglers": [n2]}))
    rec, store = debug_nccl(_config(cluster3, tmp_path), pairs_file=saved, transport=cluster3.transport(),
                            nodes=cluster3.cluster_nodes(), sample_s=0.3)
    assert [s.node for s in rec.suspects][0] == n2 and rec.suspects[0].straggler
    # the named nodes (n2 and its slow partners n0, n1) were snapshotted on the nodes themselves
    assert {s.node for s in rec.snapshot.nodes} == {n0, n1, n2}
    assert all(s.hostname == s.node for s in rec.snapshot.nodes)
    lines = report_lines(rec)
    text = "\n".join(lines)
    assert f"  1. {n2}: named by the pairwise hunt: 2 of 2 pairs slow" in text
    assert f"pair {n0} + {n2}: 0.31 GB/s (-48.6% vs the mean)" in text
    assert "[address subnet] every measured node shares one subnet" in text
    # an SSH cluster: no Slurm topology is asked for, so no scontrol error is printed
    assert "[slurm]" not in text and "scontrol" not in text
    # an evidence bundle per suspect, with the pair results and the snapshot's raw outputs
    archive = rec.suspects[0].evidence
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {f"{n2}/pairs.json", f"{n2}/snapshot.txt", f"{n2}/dmesg-xid.txt", f"{n2}/README.txt"} <= names
    assert (store.raw_dir / "debug-nccl.record.json").exists() and (store.raw_dir / "debug-nccl.txt").exists()


def test_cli_needs_two_nodes_or_saved_pairs(tmp_path):
    proc = run_cli("debug", "nccl", cwd=tmp_path, env={"HOME": str(tmp_path)}, timeout=60)
    assert proc.returncode == 2 and "needs at least 2 nodes" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_workflow_names_the_rate_limited_node_first(four_node_pairwise):
    """The real pairwise hunt (gloo across the namespaces) with node 2's link rate-limited by tc."""
    command = four_node_pairwise.commands["debug"]
    slow, proc = four_node_pairwise.slow, command.result
    assert proc.returncode == 1, proc.stderr[-3000:]  # a straggler named fails the check
    lines = proc.stdout.splitlines()
    ranked = [ln for ln in lines if re.match(r"^\s+\d+\. ", ln)]
    assert ranked[0].strip().startswith(f"1. {slow}: named by the pairwise hunt: 3 of 3 pairs slow"), proc.stdout
    assert any(ln.strip().startswith("pair ") and slow in ln and "% vs the limit)" in ln for ln in lines)
    assert "5% under the slowest sample of the healthy pairs" in proc.stdout and "below the mean" not in proc.stdout
    assert "evidence: " in proc.stdout and f"{slow}.tar.gz" in proc.stdout
    assert "[address subnet] every measured node shares one subnet" in proc.stdout
