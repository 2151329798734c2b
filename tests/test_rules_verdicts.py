"""Every row of the rules table (analysis/rules.py), both sides of its bar, through `clustereval report`:
a figure of a real run planted just under and just over its bar, re-rendered, then the report's Findings
heading and bullet, summary.json's judged figure, JUnit's case and the exit status checked.

The runs are real: the landed example (1x H200, quick profile) and the 2x H200 run in tests/fixtures/runs.
So that a figure alone decides the exit status, the base of each case is that run with nothing left
open, as an operator who accepted its Gaps would have it (the health pass left out with `skip`, the Gaps
of the records and the shared-FS Gap accepted by naming a shared path that was scanned): see ``_settled``.
The rows the GPU memory and links pass judges on GPU pairs and all-GPU copies need two GPUs: the
example's one real GPU is copied as the second (its own figures), with the pair cells planted.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from clustereval.analysis.rules import RULES, rule
from clustereval.cli import cli
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "raw-vm-2026-12-03-1439Z"
TWO_GPUS = REPO / "tests" / "fixtures" / "runs" / "raw-vm-2026-11-30-2034Z"
H200_MAMF = 794.5  # the published measured MAMF the H200 SXM is judged against (data/published_mamf.toml)
GEN5_X16 = 63.0  # GB/s, one direction
NVLINK4 = 450.0  # GB/s unidirectional per GPU, the spec database's H200 SXM

Records = dict[str, Any]


def _load(raw: Path) -> Records:
    return {p.name.removesuffix(".record.json"): json.loads(p.read_text()) for p in raw.glob("*.record.json")}


def _save(raw: Path, recs: Records) -> None:
    for phase, rec in recs.items():
        (raw / f"{phase}.record.json").write_text(json.dumps(rec, indent=1))


def _settled(raw: Path) -> None:
    """The run as an operator who accepted what it left open would have it: health in `skip` (no record,
    not planned), no Gap in any record, and the storage record naming the shared path it had (so the
    report owes no shared-FS Gap)."""
    recs = _load(raw)
    recs.pop("health", None)
    (raw / "health.record.json").unlink(missing_ok=True)
    for rec in recs.values():
        rec["gaps"] = []
    recs["storage"]["shared_paths"] = ["/tmp"]
    _save(raw, recs)
    state = json.loads((raw / "state.json").read_text())
    state["phases_planned"] = [p for p in state["phases_planned"] if p != "health"]
    state.get("outcomes", {}).pop("health", None)
    (raw / "state.json").write_text(json.dumps(state))


def _second_gpu(recs: Records) -> None:
    """The example's one GPU copied as gpu1 in the memory and links pass, the pair cells and the all-GPU
    copies at the real GPU's own figures (nothing under a bar until a case plants it)."""
    node = recs["gpupass"]["nodes"][0]
    g0 = node["gpus"][0]
    g1 = json.loads(json.dumps(g0))
    g1["gpu"], g1["uuid"] = 1, g0["uuid"] + "-1"
    node["gpus"].append(g1)
    for g in node["gpus"]:
        g["pcie_all"] = {k: v for k, v in g["pcie_solo"].items() if not k.endswith("samples_gb_s")}
        g["vote"] = json.loads(json.dumps(g0["vote"]))
    cell = {"peer": True, "write_gb_s": 380.0, "read_gb_s": 380.0, "bidir_gb_s": 760.0}
    node["p2p"] = [{"src": 0, "dst": 1, **cell}, {"src": 1, "dst": 0, **cell}]


def _gpu_figure(field: str) -> Callable[[Records, float], None]:
    def plant(recs: Records, value: float) -> None:
        if field == "mamf":
            recs["matmul"]["nodes"][0]["search"]["mamf"]["mean_tflops"] = value
        elif field == "msmf":
            g = recs["matmul"]["nodes"][0]["gpus"][0]
            g["tflops"][0] = value
            for key in ("mean_tflops", "median_tflops"):
                g["timings"][0][key] = value
        else:
            recs["lemon"]["nodes"][0]["gpus"][0]["tflops"][0] = value
    return plant


def _gpupass_gpu(path: tuple[str, ...]) -> Callable[[Records, float], None]:
    def plant(recs: Records, value: float) -> None:
        target = recs["gpupass"]["nodes"][0]["gpus"][0]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return plant


def _p2p(key: str) -> Callable[[Records, float], None]:
    def plant(recs: Records, value: float) -> None:
        recs["gpupass"]["nodes"][0]["p2p"][0][key] = value
    return plant


def _intra_peak(recs: Records, value: float) -> None:
    rows = recs["allreduce"]["intra"][0]["rows"]
    for r in rows:
        r["busbw_gb_s"] = min(r["busbw_gb_s"], value)
    rows[-1]["busbw_gb_s"] = value


# rule -> (the run, whether it needs the second GPU, the planting, the bar, the Findings label, the bullet's words)
CASES: dict[str, tuple[Path, bool, Callable[[Records, float], None], float, str, str]] = {
    "gpu.mamf": (EXAMPLE, False, _gpu_figure("mamf"), 0.90 * H200_MAMF, "GPUs", "`vm(node0):gpu0` — MAMF"),
    "gpu.msmf": (EXAMPLE, False, _gpu_figure("msmf"), 0.80 * H200_MAMF, "GPUs", "`vm(node0):gpu0` — MSMF"),
    "gpu.lemon": (EXAMPLE, False, _gpu_figure("lemon"), 0.80 * H200_MAMF, "GPUs", "`vm(node0):gpu0` — lemon GEMM"),
    "gpupass.hbm-copy": (EXAMPLE, False, _gpupass_gpu(("copy_gb_s",)), 0.80 * 4800 / 2, "GPU memory and links",
                         "`vm(node0):gpu0` — HBM copy"),
    "gpupass.pcie": (EXAMPLE, False, _gpupass_gpu(("pcie_solo", "h2d_gb_s")), 0.75 * GEN5_X16, "GPU memory and links",
                     "`vm(node0):gpu0` — PCIe H2D"),
    "gpupass.pcie-bidir": (EXAMPLE, False, _gpupass_gpu(("pcie_solo", "bidir_d2h_gb_s")), 0.65 * GEN5_X16,
                           "GPU memory and links", "`vm(node0):gpu0` — PCIe both ways D2H"),
    "gpupass.pcie-all": (EXAMPLE, True, _gpupass_gpu(("pcie_all", "h2d_gb_s")), 0.75 * 55.33, "GPU memory and links",
                         "`vm(node0):gpu0` — PCIe with every GPU of its node copying at once H2D"),
    "gpupass.p2p-write": (EXAMPLE, True, _p2p("write_gb_s"), 0.75 * NVLINK4, "GPU memory and links",
                          "`vm(node0):gpu0` — copy to `vm(node0):gpu1`"),
    "gpupass.p2p-read": (EXAMPLE, True, _p2p("read_gb_s"), 0.75 * NVLINK4, "GPU memory and links",
                         "`vm(node0):gpu0` — read from `vm(node0):gpu1`"),
    "gpupass.p2p-bidir": (EXAMPLE, True, _p2p("bidir_gb_s"), 0.75 * 2 * NVLINK4, "GPU memory and links",
                          "`vm(node0):gpu0` — both directions with `vm(node0):gpu1`"),
    "network.intra-allreduce": (TWO_GPUS, False, _intra_peak, 0.70 * NVLINK4, "fabric",
                                "intra-node: peak all-reduce busbw"),
}
# judged by the rules table, planted through the records the operator's targets are frozen in; those two
# rows need a target no landed run carries and are covered with them in tests/test_targets.py
NEEDS_OPERATOR_TARGET = {"network.inter-allreduce", "storage.fio"}
# rows whose figure is a table cell: a cell under its bar is marked "(under <bar>)" there
MARKED_IN_TABLE = {"gpu.msmf", "gpupass.hbm-copy", "gpupass.pcie", "gpupass.pcie-bidir", "gpupass.pcie-all"}


def test_every_row_of_the_rules_table_has_a_case():
    assert {r.id for r in RULES} == set(CASES) | NEEDS_OPERATOR_TARGET


def test_each_case_is_labelled_as_its_rule_says():
    for rule_id, (_, _, _, _, label, _) in CASES.items():
        assert label == rule(rule_id).subsystem


def _report(tmp_path: Path, run: Path, two_gpus: bool, plant: Callable[[Records, float], None] | None,
            value: float = 0.0) -> tuple[int, str, str, dict[str, Any], ET.Element]:
    raw = tmp_path / run.name
    shutil.copytree(run, raw)
    _settled(raw)
    recs = _load(raw)
    if two_gpus:
        _second_gpu(recs)
    if plant is not None:
        plant(recs, value)
    _save(raw, recs)
    junit = tmp_path / "verdicts.xml"
    result = CliRunner().invoke(cli, ["report", str(raw), "--junit", str(junit)])
    (md_path,) = [p for p in tmp_path.glob("*.md")]
    summary = json.loads((raw / "summary.json").read_text())
    return result.exit_code, result.output, md_path.read_text(), summary, ET.parse(junit).getroot()


def _findings(md: str, heading: str) -> str:
    part = md.split("\n## Findings\n", 1)[1]
    if f"\n### {heading}\n" not in part:
        return ""
    return part.split(f"\n### {heading}\n", 1)[1].split("\n### ", 1)[0]


def _judged(summary: dict[str, Any], rule_id: str) -> list[dict[str, Any]]:
    return [j for v in summary["verdicts"] for j in v.get("judged", []) if j["rule"] == rule_id]


def test_the_settled_example_exits_0_with_nothing_underperforming(tmp_path):
    code, output, md, summary, junit = _report(tmp_path, EXAMPLE, False, None)
    assert code == 0, output
    assert "### Underperforming subsystems" not in md
    assert all(v["category"] != "underperforming" for v in summary["verdicts"])
    assert all(j["met"] for v in summary["verdicts"] for j in v.get("judged", []))
    assert junit.get("failures") == "0"


def test_the_landed_example_names_the_health_pass_that_did_not_run_and_exits_1(tmp_path):
    raw = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, raw)
    result = CliRunner().invoke(cli, ["report", str(raw)])
    assert result.exit_code == 1, result.output
    (md,) = [p.read_text() for p in tmp_path.glob("*.md")]
    under = _findings(md, "Underperforming subsystems")
    assert "- **GPUs** — not judged in full: GPU health by NVIDIA's `dcgmi diag` on vm(node0)" in under
    assert "underperforming: GPUs — what did not run (the report's Gaps)" in result.output


@pytest.mark.parametrize("rule_id", sorted(CASES))
@pytest.mark.parametrize("side", ["under", "over"])
def test_a_figure_on_each_side_of_its_bar(tmp_path, rule_id, side):
    run, two_gpus, plant, bar, label, words = CASES[rule_id]
    value = round(bar * (0.99 if side == "under" else 1.01), 2)
    code, output, md, summary, junit = _report(tmp_path, run, two_gpus, plant, value)
    judged = _judged(summary, rule_id)
    assert judged, f"{rule_id}: no figure judged by it in summary.json"
    under = _findings(md, "Underperforming subsystems")
    cases = {c.get("name"): c for c in junit.iter("testcase") if c.get("classname") == "clustereval.verdicts"}
    if side == "under":
        assert code == 1, output
        missed = [j for j in judged if not j["met"]]
        assert missed and missed[0]["value"] == pytest.approx(value)
        assert missed[0]["bar"] == pytest.approx(bar, rel=2e-3)
        assert f"- **{label}** — " in under and words in under, under
        assert f"underperforming: {label}" in output
        verdict = next(v for v in summary["verdicts"] if any(j in missed for j in v.get("judged", [])))
        assert verdict["category"] == "underperforming" and verdict["subsystem"] == label
        failure = cases[label].find("failure")
        assert failure is not None and failure.get("type") == "Underperforming"
        assert f"MISSED {rule_id}" in (cases[label].find("system-out").text or "")
        if rule_id in MARKED_IN_TABLE:
            assert f" (under {bar:.{0 if rule_id == 'gpu.msmf' else 1}f})" in md
    else:
        assert code == 0, output
        assert all(j["met"] for j in judged)
        assert "### Underperforming subsystems" not in md and " (under " not in md
        assert label in cases and cases[label].find("failure") is None
        assert f"met {rule_id}" in (cases[label].find("system-out").text or "")
