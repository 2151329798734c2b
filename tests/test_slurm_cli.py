"""`clustereval preflight` and `clustereval run` with access = "slurm" on the local Slurm cluster.

Each test ends with the queue empty: the allocation clustereval asked for is always given back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.runner import phase_names
from tests.conftest import REPO, only_leftovers, run_cli


def _leftover_scratch(cluster) -> list[Path]:  # noqa: ANN001 - a SlurmCluster
    """Run folders still in place on any node's local disk or the shared dir (trash is where
    cleared ones belong)."""
    roots = [cluster.local_dir(n) for n in cluster.node_names] + [cluster.netns.shared_dir]
    return [p for root in roots for p in root.rglob("cluster-eval-*") if "trash" not in p.parts]


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error[")]


def _quick_phases() -> str:
    wanted = ("environment", "packages", "evalpython")
    return ",".join(["preflight"] + [p for p in phase_names() if p in wanted])


def test_preflight_and_quick_run_release_the_allocation(slurm_cluster):
    config = slurm_cluster.write_config()
    pre = run_cli("preflight", "--config", str(config), timeout=180)
    assert pre.returncode == 0, pre.stdout + pre.stderr
    for name in slurm_cluster.node_names:
        assert name in pre.stdout + pre.stderr
    assert slurm_cluster.jobs_after_settling() == []
    # `clustereval preflight` runs every check, those across nodes included: srun, TCP and gloo on every node
    pre_raw = sorted((slurm_cluster.netns.workdir / "reports").glob("raw-*-preflight-*"))
    assert len(pre_raw) == 1, pre_raw
    pre_record = json.loads((pre_raw[0] / "preflight.record.json").read_text())
    pre_kinds = {(p["kind"], p["node"]): p["ok"] for p in pre_record["probes"]}
    for name in slurm_cluster.node_names:
        assert pre_kinds[("srun", name)] and pre_kinds[("tcp", name)] and pre_kinds[("gloo", name)]
    assert pre_record["rendezvous"].startswith(slurm_cluster.netns.nodes[0].address + ":")

    run = run_cli("run", "--config", str(config), "--profile", "quick", "--phases", _quick_phases(), timeout=300)
    assert only_leftovers(run), run.stdout[-3000:] + run.stderr[-3000:]
    reports = sorted((slurm_cluster.netns.workdir / "reports").glob("*.md"))
    assert len(reports) == 1
    text = reports[0].read_text()
    assert "- Access: Slurm (`srun` into the allocation)" in text
    record = json.loads((reports[0].parent / f"raw-{reports[0].stem}" / "preflight.record.json").read_text())
    kinds = {(p["kind"], p["node"]): p["ok"] for p in record["probes"]}
    assert kinds[("slurm", "all nodes")]
    # the run's phases start no job across nodes, so its preflight leaves the checks across nodes out
    for name in slurm_cluster.node_names:
        assert kinds[("srun", name)] and ("tcp", name) not in kinds and ("gloo", name) not in kinds
    assert record["across_nodes_not_run"]["phases"] == ["packages", "evalpython", "environment"]
    assert slurm_cluster.jobs_after_settling() == []
    assert _leftover_scratch(slurm_cluster) == []
    lint = pytest.importorskip("clustereval.report.lint", reason="clustereval lint is not on this branch yet")
    assert lint.lint_file(reports[0]) == []


def test_a_partition_that_does_not_exist_is_one_line(slurm_cluster):
    config = slurm_cluster.write_config(slurm={"partition": "nosuchpart"})
    proc = run_cli("run", "--config", str(config), "--profile", "quick", timeout=120)
    assert proc.returncode == 2
    assert _error_lines(proc) == ["error[slurm-invalid-partition]: [slurm] partition 'nosuchpart' does not exist "
                                  "on this cluster"]
    assert "partitions here: debug" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert slurm_cluster.jobs_after_settling() == []


def test_a_node_set_down_is_named(slurm_cluster):
    down = slurm_cluster.node_names[1]
    slurm_cluster.set_node_state(down, "down", "test")
    config = slurm_cluster.write_config()
    proc = run_cli("preflight", "--config", str(config), timeout=120)
    assert proc.returncode == 1
    assert _error_lines(proc) == [f"error[slurm-node-down]: {down}: is down (reason: test), so partition debug "
                                  "cannot give [slurm] nodes = 3"]
    assert slurm_cluster.jobs_after_settling() == []


def test_time_limit_mid_run_is_one_line_and_scratch_is_still_cleared(slurm_cluster, tmp_path):
    # ten minutes, cut to zero once storage started: a one-minute allocation ran out during preflight
    # on a loaded machine
    config = slurm_cluster.write_config(slurm={"nodes": 2, "time_limit": "10"})
    env = dict(__import__("os").environ)
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(config), "--profile",
                             "quick", "--phases", "storage"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = ""
        while "[storage] start" not in seen:  # preflight passed; storage makes its scratch first
            line = proc.stderr.readline()
            assert line, seen + proc.communicate()[0]
            seen += line
        jobs = slurm_cluster.jobs()
        assert len(jobs) == 1
        # the ten-minute limit cut to zero under the running phase: its next step is refused
        slurm_cluster.client(["scontrol", "update", f"jobid={jobs[0]}", "timelimit=-10"])
        out, err = proc.communicate(timeout=240)
        err = seen + err
    finally:
        if proc.poll() is None:
            proc.kill()
    reports = sorted((slurm_cluster.netns.workdir / "reports").glob("*.md"))
    assert len(reports) == 1, out + err
    text = reports[0].read_text()
    assert f"Slurm job {jobs[0]} reached its time limit" in text
    assert _leftover_scratch(slurm_cluster) == [], out + err
    assert slurm_cluster.jobs_after_settling() == []
