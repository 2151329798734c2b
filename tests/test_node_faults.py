"""Nodes lost mid-run on the 4-node SSH bed: each lost node's Gap, every other node's results kept.

`clustereval run` runs as a user runs it; the fault is real (the node's sshd killed by pid while
the phase runs), then the node comes back and `--resume` runs again only what was not ok. One run
loses one node in the environment phase and another in the storage phase (``two_nodes_lost``): the
first is gone before the second phase starts, so each test reads its own node's story in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clustereval.records import Gap, from_dict
from clustereval.report.gaps import say
from tests.conftest import REPO, only_leftovers, run_cli

pytestmark = pytest.mark.slow

# the phases the two lost-node tests read (health, matmul and lemon ran here once, read by no test)
PHASES = "packages,evalpython,environment,storage"
LOST_IN_ENVIRONMENT, LOST_IN_STORAGE = 1, 2  # the nodes of ``two_nodes_lost``
ENVIRONMENT_START = "[environment] start"
LAST_SCAN_RUN = "(run 12 of 12)"  # the last fio run of the scan on node0, before the concurrent write


def start_run(cluster, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cluster.config_path), *args],
                            cwd=cluster.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_until(proc: subprocess.Popen, actions: dict, timeout_s: float = 600) -> tuple[str, dict[str, float], int]:
    """Read the run's output; at the first line holding each marker of ``actions`` call its action.
    Returns the whole output, the moment of each action taken (by marker), and the exit status."""
    lines: list[str] = []
    acted_at: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        for marker, action in actions.items():
            if marker not in acted_at and marker in line:
                action()
                acted_at[marker] = time.monotonic()
    rc = proc.wait(timeout=timeout_s)
    return "".join(lines), acted_at, rc


def outside_trash(*roots: Path) -> list[str]:
    left = []
    for root in roots:
        for path in root.rglob("*") if root.exists() else []:
            rel = path.relative_to(root).parts
            if path.is_file() and "trash" not in rel and any(p.startswith("cluster-eval-") for p in rel):
                left.append(str(path))
    return left


def _records(raw: Path) -> dict[str, dict]:
    return {p.name.removesuffix(".record.json"): json.loads(p.read_text()) for p in raw.glob("*.record.json")}


def _raw_dir(out: str) -> Path:
    return Path(re.search(r"run folder: (\S+)", out).group(1))


@dataclass
class LostNodesRun:
    """What ``two_nodes_lost`` saw, read after the bed is gone: the run with its two lost nodes, then
    the resume once both answer again, then ``clustereval cleanup``. Each ``*_run`` field is taken
    right after the run, before the resume rewrote the run folder in place."""

    names: list[str]  # the nodes' names, node0 first
    out: str  # the run's output, stdout and stderr
    acted_at: dict[str, float]  # the moment each node was lost, by the marker its loss waited for
    ended: float  # the moment the run exited
    rc: int
    state_run: dict  # state.json
    records_run: dict[str, dict]  # every <phase>.record.json
    report_run: str  # the report's text
    lint_run: subprocess.CompletedProcess
    closeout: str  # closeout.md
    raw: Path
    left_run: dict[str, list[str]]  # files outside the trash, by node name, and "shared"
    resume: subprocess.CompletedProcess | None = None
    state_resumed: dict = field(default_factory=dict)
    records_resumed: dict[str, dict] = field(default_factory=dict)
    report_resumed: str = ""
    lint_resumed: subprocess.CompletedProcess | None = None
    cleanup: subprocess.CompletedProcess | None = None
    left_cleaned: dict[str, list[str]] = field(default_factory=dict)


def _left(cluster) -> dict[str, list[str]]:
    left = {n.name: outside_trash(cluster.node_scratch_dir(n.index)) for n in cluster.nodes}
    return {**left, "shared": outside_trash(cluster.shared_dir)}


@pytest.fixture(scope="module")
def two_nodes_lost():
    """One smoke run of ``PHASES`` on the 4-node SSH bed that loses two nodes for real (sshd killed
    by pid while the phase runs): node1 when the environment phase starts, node2 during the storage
    scan's last fio run, just before the concurrent write reaches it. Then both answer again and
    ``--resume`` runs what was not ok, then ``clustereval cleanup``. The faults do not meet: node1 is
    gone before the storage phase starts and is left out of it, node2's loss comes after every phase
    before storage ended. Read by the lost-during-environment and the lost-during-storage tests."""
    from tests.testbed import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster.create(4)
    try:
        proc = start_run(cluster, "--profile", "smoke", "--phases", PHASES)
        out, acted_at, rc = run_until(proc, {ENVIRONMENT_START: lambda: cluster.kill_sshd(LOST_IN_ENVIRONMENT),
                                             LAST_SCAN_RUN: lambda: cluster.kill_sshd(LOST_IN_STORAGE)})
        ended = time.monotonic()
        found = re.search(r"run folder: (\S+)", out), re.search(r"report: (\S+)", out)
        names = [n.name for n in cluster.nodes]
        if not all(found):  # nothing to read: the tests say why from the output
            yield LostNodesRun(names, out, acted_at, ended, rc, {}, {}, "", None, "", Path(), {})
            return
        raw, report = Path(found[0].group(1)), Path(found[1].group(1))
        run = LostNodesRun(names, out, acted_at, ended, rc, json.loads((raw / "state.json").read_text()),
                           _records(raw), report.read_text(), run_cli("lint", str(report)),
                           (raw / "closeout.md").read_text(), raw, _left(cluster))
        for i in (LOST_IN_ENVIRONMENT, LOST_IN_STORAGE):
            cluster.start_sshd(i)
        run.resume = run_cli("run", "--resume", str(raw), cwd=cluster.workdir, timeout=600)
        run.state_resumed = json.loads((raw / "state.json").read_text())
        run.records_resumed = _records(raw)
        run.report_resumed = report.read_text()
        run.lint_resumed = run_cli("lint", str(report))
        run.cleanup = run_cli("cleanup", str(raw), "--config", str(cluster.config_path))
        run.left_cleaned = _left(cluster)
        yield run
    finally:
        cluster.close()


@pytest.mark.timeout(1500)  # the shared run may start here: a run and its resume on a loaded machine
def test_node2_lost_during_storage_keeps_every_other_result(two_nodes_lost):
    run = two_nodes_lost
    out, names = run.out, run.names
    node1, node2 = names[LOST_IN_ENVIRONMENT], names[LOST_IN_STORAGE]
    killed_at = run.acted_at.get(LAST_SCAN_RUN, 0.0)
    assert killed_at, out[-3000:]
    assert run.rc == 1, out[-4000:]
    assert run.ended - killed_at < 60, f"{run.ended - killed_at:.0f} s from the kill to the exit"
    state = run.state_run
    assert state["outcomes"]["storage"]["status"] == "partial"
    # node1, lost in the environment phase, counts in storage too (left out of it)
    assert state["outcomes"]["storage"]["failed_nodes"] == [node1, node2]
    for phase in ("packages", "evalpython"):
        assert state["outcomes"][phase]["status"] == "ok", (phase, state["outcomes"][phase])
    # the environment phase ended before node2 was lost: node2 is not among its failures
    assert state["outcomes"]["environment"]["failed_nodes"] == [node1], state["outcomes"]["environment"]
    recs = run.records_run
    assert [n["node"] for n in recs["environment"]["nodes"]] == names
    assert all(n["hostname"] for n in recs["environment"]["nodes"] if n["node"] != node1)
    assert [n["node"] for n in recs["packages"]["nodes"]] == names
    writes = {w["node"]: w for w in recs["storage"]["concurrent"]["nodes"]}
    assert writes[node2]["error"] and all(writes[n]["bytes_written"] > 0 for n in names if n not in (node1, node2))
    assert recs["storage"]["local"]["cells"] and not any(c["error"] for c in recs["storage"]["local"]["cells"])
    gaps = run.report_run[run.report_run.index("### Gaps"):]
    # the command is linked to its tool's page (its Gap may be the report's first mention of it)
    assert re.search(rf"`{re.escape(node2)}\(node2\)` stopped answering in the concurrent write while "
                     r"\[`dd`\]\(https://man7\.org/[^)]*\) ran", gaps), gaps[:3000]
    assert run.lint_run.returncode == 0
    healthy = [n for n in names if n not in (node1, node2)]
    assert [f for key in [*healthy, "shared"] for f in run.left_run[key]] == []
    assert node2 in run.closeout and f"clustereval cleanup {run.raw}" in run.closeout
    assert run.left_run[node2]  # node2's scratch is really still there

    # both nodes answer again: --resume runs the gate and the phases not ok only (the environment on
    # node1 alone, see the other test), and the storage Gap goes
    res = run.resume
    assert only_leftovers(res), (res.stdout + res.stderr)[-4000:]
    assert "[storage] start" in res.stderr
    assert "[packages] start" not in res.stderr and "[evalpython] start" not in res.stderr
    assert run.state_resumed["outcomes"]["storage"]["status"] == "ok"
    assert "stopped answering" not in run.report_resumed
    assert run.lint_resumed.returncode == 0
    assert run.cleanup.returncode == 0
    assert [f for files in run.left_cleaned.values() for f in files] == []


@pytest.mark.timeout(1500)
def test_node1_lost_during_environment_is_left_out_of_later_phases(two_nodes_lost):
    run = two_nodes_lost
    out, names = run.out, run.names
    node1, node2 = names[LOST_IN_ENVIRONMENT], names[LOST_IN_STORAGE]
    assert ENVIRONMENT_START in out
    assert run.acted_at.get(ENVIRONMENT_START) and run.rc == 1, out[-4000:]
    state = run.state_run
    assert state["outcomes"]["environment"]["status"] == "partial"
    assert state["outcomes"]["environment"]["failed_nodes"] == [node1]
    recs = run.records_run
    env = {n["node"]: n for n in recs["environment"]["nodes"]}
    assert all(env[n]["hostname"] == n for n in names if n != node1)
    assert env[node1]["errors"] and not env[node1]["hostname"]
    writes = {w["node"]: w for w in recs["storage"]["concurrent"]["nodes"]}
    # node2, lost in the storage phase, wrote nothing either (see the other test)
    assert all(writes[n]["bytes_written"] > 0 for n in names if n not in (node1, node2))
    gaps = [say(from_dict(Gap, g)).text for g in recs["storage"]["gaps"] if g["node"] == node1]
    assert gaps and "stopped answering earlier in the run" in gaps[0]
    assert f"{node1}(node1)" in run.report_run
    assert run.lint_run.returncode == 0
    assert [f for key in (names[0], names[3], "shared") for f in run.left_run[key]] == []

    # node1 answers again: the inventory runs on node1 alone, the others' entries stand
    res = run.resume
    assert only_leftovers(res), (res.stdout + res.stderr)[-4000:]
    inventoried = re.findall(r"^\[environment\] (\S+): host, ", res.stderr, re.MULTILINE)
    assert inventoried == [node1], inventoried
    env = {n["node"]: n for n in run.records_resumed["environment"]["nodes"]}
    assert [env[n]["hostname"] for n in names] == names
    state = run.state_resumed
    assert state["outcomes"]["environment"]["status"] == "ok" and state["outcomes"]["storage"]["status"] == "ok"
    assert "stopped answering" not in run.report_resumed
    assert run.lint_resumed.returncode == 0


def test_a_run_stopped_by_preflight_reports_every_reason(netns_cluster):
    cluster = netns_cluster(4)
    cluster.kill_sshd(1)
    cluster.kill_sshd(3)
    t0 = time.monotonic()
    res = run_cli("run", "--config", str(cluster.config_path), "--profile", "smoke", cwd=cluster.workdir, timeout=300)
    elapsed = time.monotonic() - t0
    assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
    assert elapsed < 60, elapsed  # refused at connect: seconds, python start-up and rendering included
    report = Path(re.search(r"report: (\S+)", res.stdout).group(1))
    text = report.read_text()
    gaps = text[text.index("### Gaps"):]
    for i in (1, 3):
        node = cluster.nodes[i]
        assert f"{node.name} ({node.address}:{cluster.ssh_port}): refused the connection." in gaps, gaps
    assert "## Preflight" in text and "The preflight gate did not pass" in text
    assert run_cli("lint", str(report)).returncode == 0
    state = json.loads((report.parent / f"raw-{report.stem}" / "state.json").read_text())
    assert state["outcomes"]["preflight"]["status"] == "failed" and list(state["outcomes"]) == ["preflight"]


def test_a_wrong_ssh_port_is_named_as_such_in_the_report(netns_cluster):
    cluster = netns_cluster(4)
    wrong = cluster.ssh_port + 7
    path = cluster.write_config(cluster.workdir / "wrong-port.toml", ssh_port=wrong)
    res = run_cli("run", "--config", str(path), cwd=cluster.workdir, timeout=300)
    assert res.returncode == 1
    report = Path(re.search(r"report: (\S+)", res.stdout).group(1))
    assert f"Every node refused SSH on port {wrong}: the port is probably wrong." in report.read_text()
    assert run_cli("lint", str(report)).returncode == 0
