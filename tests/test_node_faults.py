"""One node lost mid-run on the 4-node SSH bed: that node's Gap, every other node's results kept.

`clustereval run` runs as a user runs it; the fault is real (the node's sshd killed by pid while
the phase runs), then the node comes back and `--resume` runs again only what was not ok.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustereval.records import Gap, from_dict
from clustereval.report.gaps import say
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.slow

# the phases the lost-during-storage test reads (health, matmul and lemon ran here once, read by no test)
PHASES = "packages,evalpython,environment,storage"


def start_run(cluster, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cluster.config_path), *args],
                            cwd=cluster.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_until(proc: subprocess.Popen, marker: str, action, timeout_s: float = 600) -> tuple[str, float, int]:
    """Read the run's output; at the first line holding ``marker`` call ``action``. Returns the
    whole output, the moment of the action, and the exit status."""
    lines: list[str] = []
    acted_at = 0.0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if not acted_at and marker in line:
            action()
            acted_at = time.monotonic()
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


@pytest.mark.timeout(1200)  # two runs with preflight's gloo check on a loaded machine
def test_node2_lost_during_storage_keeps_every_other_result(netns_cluster):
    cluster = netns_cluster(4)
    proc = start_run(cluster, "--profile", "smoke", "--phases", PHASES)
    # the last fio run of the scan on node0: node2 goes before the concurrent write reaches it
    out, killed_at, rc = run_until(proc, "(run 12 of 12)", lambda: cluster.kill_sshd(2))
    ended = time.monotonic()
    assert killed_at, out[-3000:]
    assert rc == 1, out[-4000:]
    assert ended - killed_at < 60, f"{ended - killed_at:.0f} s from the kill to the exit"
    raw = _raw_dir(out)
    node2 = cluster.nodes[2].name
    state = json.loads((raw / "state.json").read_text())
    assert state["outcomes"]["storage"]["status"] == "partial"
    assert state["outcomes"]["storage"]["failed_nodes"] == [node2]
    for phase in ("packages", "evalpython", "environment"):
        assert state["outcomes"][phase]["status"] == "ok", (phase, state["outcomes"][phase])
    recs = _records(raw)
    names = [n.name for n in cluster.nodes]
    assert [n["node"] for n in recs["environment"]["nodes"]] == names
    assert all(n["hostname"] for n in recs["environment"]["nodes"])
    assert [n["node"] for n in recs["packages"]["nodes"]] == names
    writes = {w["node"]: w for w in recs["storage"]["concurrent"]["nodes"]}
    assert writes[node2]["error"] and all(writes[n]["bytes_written"] > 0 for n in names if n != node2)
    assert recs["storage"]["local"]["cells"] and not any(c["error"] for c in recs["storage"]["local"]["cells"])
    report = Path(re.search(r"report: (\S+)", out).group(1))
    text = report.read_text()
    gaps = text[text.index("### Gaps"):]
    # the command is linked to its tool's page (its Gap may be the report's first mention of it)
    assert re.search(rf"`{re.escape(node2)}\(node2\)` stopped answering in the concurrent write while "
                     r"\[`dd`\]\(https://man7\.org/[^)]*\) ran", gaps), gaps[:3000]
    assert run_cli("lint", str(report)).returncode == 0
    healthy = [cluster.node_scratch_dir(i) for i in (0, 1, 3)]
    assert outside_trash(*healthy, cluster.shared_dir) == []
    closeout = (raw / "closeout.md").read_text()
    assert node2 in closeout and f"clustereval cleanup {raw}" in closeout
    assert outside_trash(cluster.node_scratch_dir(2))  # node2's scratch is really still there

    # the node answers again: --resume runs the gate and the storage phase only, and its Gap goes
    cluster.start_sshd(2)
    res = run_cli("run", "--resume", str(raw), cwd=cluster.workdir, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "[storage] start" in res.stderr and "[environment] start" not in res.stderr
    state = json.loads((raw / "state.json").read_text())
    assert state["outcomes"]["storage"]["status"] == "ok"
    text = report.read_text()
    assert "stopped answering" not in text
    assert run_cli("lint", str(report)).returncode == 0
    assert run_cli("cleanup", str(raw), "--config", str(cluster.config_path)).returncode == 0
    assert outside_trash(*(cluster.node_scratch_dir(i) for i in range(4)), cluster.shared_dir) == []


@pytest.mark.timeout(1200)
def test_node2_lost_during_environment_is_left_out_of_later_phases(netns_cluster):
    cluster = netns_cluster(4)
    proc = start_run(cluster, "--profile", "smoke", "--phases", "environment,storage")
    out, killed_at, rc = run_until(proc, "[environment] start", lambda: cluster.kill_sshd(2))
    assert "[environment] start" in out
    assert killed_at and rc == 1, out[-4000:]
    raw = _raw_dir(out)
    node2 = cluster.nodes[2].name
    state = json.loads((raw / "state.json").read_text())
    assert state["outcomes"]["environment"]["status"] == "partial"
    assert state["outcomes"]["environment"]["failed_nodes"] == [node2]
    recs = _records(raw)
    env = {n["node"]: n for n in recs["environment"]["nodes"]}
    assert all(env[n.name]["hostname"] == n.name for n in cluster.nodes if n.index != 2)
    assert env[node2]["errors"] and not env[node2]["hostname"]
    writes = {w["node"]: w for w in recs["storage"]["concurrent"]["nodes"]}
    assert all(writes[n.name]["bytes_written"] > 0 for n in cluster.nodes if n.index != 2)
    gaps = [say(from_dict(Gap, g)).text for g in recs["storage"]["gaps"] if g["node"] == node2]
    assert gaps and "stopped answering earlier in the run" in gaps[0]
    report = Path(re.search(r"report: (\S+)", out).group(1))
    assert f"{node2}(node2)" in report.read_text()
    assert run_cli("lint", str(report)).returncode == 0
    assert outside_trash(*(cluster.node_scratch_dir(i) for i in (0, 1, 3)), cluster.shared_dir) == []

    # node2 answers again: the inventory runs on node2 alone, the others' entries stand
    cluster.start_sshd(2)
    res = run_cli("run", "--resume", str(raw), cwd=cluster.workdir, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    inventoried = re.findall(r"^\[environment\] (\S+): host, ", res.stderr, re.MULTILINE)
    assert inventoried == [node2], inventoried
    env = {n["node"]: n for n in _records(raw)["environment"]["nodes"]}
    assert [env[n.name]["hostname"] for n in cluster.nodes] == [n.name for n in cluster.nodes]
    state = json.loads((raw / "state.json").read_text())
    assert state["outcomes"]["environment"]["status"] == "ok" and state["outcomes"]["storage"]["status"] == "ok"
    assert "stopped answering" not in report.read_text()
    assert run_cli("lint", str(report)).returncode == 0


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
