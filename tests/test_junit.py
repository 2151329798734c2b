"""JUnit XML of the verdicts: valid against the Ant/Jenkins JUnit schema, one failing case per
underperforming subsystem with the report's own sentence, Gaps and missing targets as skipped cases."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import xmlschema

from clustereval.analysis.stragglers import round_robin
from clustereval.analysis.summary import SUMMARY_FILE
from clustereval.config import StorageTarget
from clustereval.phases.pairwise import judge_pairs
from clustereval.records import Gap
from clustereval.records.network import PairResult, PairwiseRecord
from clustereval.report.lint import lint_text
from tests.diffruns import healthy_records, write_run

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "fixtures" / "junit" / "junit.xsd")


def _junit(tmp_path: Path, records: dict) -> tuple[ET.Element, dict, str]:
    path = tmp_path / "junit.xml"
    raw = write_run(tmp_path / "reports", records, junit=path)
    text = path.read_text()
    SCHEMA.validate(str(path))  # raises with the offending element when the file breaks the schema
    return ET.fromstring(text), json.loads((raw / SUMMARY_FILE).read_text()), \
        (raw.parent / f"{raw.name[4:]}.md").read_text()


def _cases(root: ET.Element, suite: str) -> dict[str, ET.Element]:
    s = next(x for x in root.findall("testsuite") if x.get("name") == suite)
    return {c.get("name"): c for c in s.findall("testcase")}


def test_healthy_run_passes_and_needs_input_is_skipped(tmp_path):
    root, summary, _ = _junit(tmp_path, healthy_records())
    cases = _cases(root, "clustereval.verdicts")
    assert set(cases) == {v["subsystem"] for v in summary["verdicts"]}
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert cases["GPUs"].find("failure") is None and cases["GPUs"].find("skipped") is None
    skipped = cases["local disk"].find("skipped")
    assert skipped is not None and skipped.get("message").startswith("Needs operator input: ")
    # fabric, local disk, shared FS; and in the fleet suite the 2-node groups, too small to judge
    fleet = _cases(root, "clustereval.fleet")
    assert {n for n, c in fleet.items() if c.find("skipped") is not None} == {
        "pairwise", "busbw-intra", "concurrent-write (writing to `/data`)"}
    assert all(c.find("failure") is None for c in fleet.values()) and len(fleet) == 5
    assert "detectable_frac: 0.0" in fleet["msmf (NVIDIA H200, driver 580.95.05)"].find("system-out").text
    assert int(root.get("tests")) == len(cases) + len(fleet) and int(root.get("skipped")) == 3 + 3


def test_one_failing_case_per_underperforming_subsystem(tmp_path):
    records = healthy_records(slow_gpu=(1, 0), halve_write_node=0)
    records["storage"].targets = [StorageTarget("/tmp", bw_mib_s={"1MiB-write": 980.0, "1GiB-write": 2000.0},
                                                source="the provider's sheet")]
    root, summary, report = _junit(tmp_path, records)
    failed = {name: c.find("failure") for name, c in _cases(root, "clustereval.verdicts").items()
              if c.find("failure") is not None}
    under = {v["subsystem"] for v in summary["verdicts"] if v["category"] == "underperforming"}
    assert set(failed) == under == {"GPUs", "local disk"}
    assert root.get("failures") == "3"  # the two subsystems, and the GPUs' fleet-relative case
    gpu = failed["GPUs"]
    assert gpu.get("type") == "Underperforming"
    assert gpu.get("message").startswith("`gpu-b(node1):gpu0` — MSMF ")
    texts = [v["text"] for v in summary["verdicts"] if v["subsystem"] == "GPUs"]
    assert gpu.get("message") == " ".join(texts) and all(t in report for t in texts)  # the report's own sentences
    assert any(t.startswith("fleet-relative: `gpu-b(node1):gpu0`") for t in texts)
    fleet = {name: c for name, c in _cases(root, "clustereval.fleet").items()}
    (slow_name,) = [n for n, c in fleet.items() if c.find("failure") is not None]
    assert slow_name.startswith("msmf (NVIDIA H200")
    message = fleet[slow_name].find("failure").get("message")
    assert message.startswith("gpu-b(node1):gpu0 ") and "below the median of 8 peers" in message and "p = " in message
    assert fleet["pairwise"].find("skipped").get("message") == "not judged: too small"
    assert "1 MiB write" in failed["local disk"].get("message") and failed["local disk"].get("message") in report
    target = next(v["target"] for v in summary["verdicts"] if v["subsystem"] == "local disk")
    assert target["bw_mib_s"] == {"1MiB-write": 980.0, "1GiB-write": 2000.0} and target["mount"] == "/tmp"


def test_each_gap_is_a_skipped_case_with_its_plan(tmp_path):
    records = healthy_records()
    records["health"].gaps = [Gap("health", "DCGM is not installed on gpu-b(node1).", "install datacenter-gpu-manager-4")]
    records["storage"].gaps = [Gap("storage", "The concurrent write could not reach `/scratch`.", "mount it")]
    root, _, _ = _junit(tmp_path, records)
    gaps = _cases(root, "clustereval.gaps")
    assert len(gaps) == 2
    msgs = sorted(c.find("skipped").get("message") for c in gaps.values())
    assert msgs == ["DCGM is not installed on gpu-b(node1). Plan: install datacenter-gpu-manager-4",
                    "The concurrent write could not reach `/scratch`. Plan: mount it"]
    assert all(name.startswith(("health gap", "storage gap")) for name in gaps)


def test_schema_rejects_a_suite_without_its_counters():
    broken = ('<testsuites><testsuite name="x" timestamp="2026-11-30T19:38:00" hostname="h" id="0" package="p" '
              'time="0"><properties/><testcase name="a" classname="c" time="0"/><system-out/><system-err/>'
              '</testsuite></testsuites>')
    assert not SCHEMA.is_valid(broken)  # tests / failures / errors are required: the schema checks something


def test_a_node_that_completed_no_pair_is_a_failing_case_and_a_figure_that_did_not_complete(tmp_path):
    records = healthy_records()
    old = records["pairwise"]
    a, b = old.pairs[0].a, old.pairs[0].b
    pw = PairwiseRecord(phase="pairwise", payload_bytes=old.payload_bytes, backend=old.backend,
                        ranks_per_node=old.ranks_per_node, num_rounds=1, samples_per_pair=3)
    judge_pairs(pw, [PairResult(a=a, b=b, round=1, error="exit status 127: python3: cannot open shared object file")],
                [a, b], set())
    records["pairwise"] = pw
    root, summary, report = _junit(tmp_path, records)
    failed = _cases(root, "clustereval.verdicts")["torchrun"].find("failure")
    assert failed is not None and failed.get("type") == "Underperforming"
    assert "did not complete a pair of the pairwise hunt" in failed.get("message")
    assert "it is failing, not a straggler" in failed.get("message") and "python3: cannot open" in failed.get("message")
    nodes = [f for f in summary["figures"] if f["kind"] == "pairwise-node"]
    assert [(f["state"], f["value"], f["provenance"]["carries"]) for f in nodes] == [("did not complete", None, False)] * 2
    assert "Nodes that did not complete a pair (failing, not slow" in report
    assert lint_text(report) == []
    assert {p["outcome"] for p in summary["phases"] if p["phase"] == "pairwise"} == {"failed"}


def test_a_node_lost_mid_hunt_is_a_failing_case_and_its_figure_did_not_complete(tmp_path):
    # four nodes: the third completes its round-1 pair, then every pair with it fails while its partners
    # go on completing theirs: failing from round 2, in the report, summary.json and JUnit alike
    records = healthy_records(hosts=("gpu-a", "gpu-b", "gpu-c", "gpu-d"))
    names = [n.name for n in records["preflight"].nodes]
    lost = names[2]
    pw = PairwiseRecord(phase="pairwise", payload_bytes=2**30, backend="nccl", ranks_per_node=8, num_rounds=3,
                        samples_per_pair=3)
    results = [PairResult(a=a, b=b, round=rnd, samples_gb_s=[] if lost in (a, b) and rnd >= 2 else [90.0, 90.4, 89.8],
                          error="exit status 127: python3: cannot open shared object file"
                          if lost in (a, b) and rnd >= 2 else "", gated=True)
               for rnd, pairs in enumerate(round_robin(names), 1) for a, b in pairs]
    judge_pairs(pw, results, names, set(names))
    records["pairwise"] = pw
    root, summary, report = _junit(tmp_path, records)
    failed = _cases(root, "clustereval.verdicts")["torchrun"].find("failure")
    assert failed is not None and failed.get("type") == "Underperforming"
    assert "did not complete a pair of the pairwise hunt from round 2 on, having completed 1 pair before" in \
        failed.get("message")
    assert "it is failing, not a straggler" in failed.get("message") and "python3: cannot open" in failed.get("message")
    nodes = [f for f in summary["figures"] if f["kind"] == "pairwise-node"]
    assert len({f["id"] for f in nodes}) == len(nodes) == 4  # the lost node once, as did not complete
    mine = [f for f in nodes if f["state"] == "did not complete"]
    assert [(f["value"], f["provenance"]["completed_pairs"], f["provenance"]["from_round"], f["provenance"]["carries"])
            for f in mine] == [(None, 1, 2, True)]
    assert "or none from a round on (failing" in report and "from round 2 on, having completed 1 pair before" in report
    assert lint_text(report) == []
    assert {p["outcome"] for p in summary["phases"] if p["phase"] == "pairwise"} == {"partial"}
