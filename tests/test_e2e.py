"""End to end: `clustereval run` as a user runs it on this machine.

The runs use the smoke profile (the whole pipeline in about a minute); the report must lint
clean, say what could not run with a plan, and leave no scratch behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, only_leftovers, run_cli

pytestmark = pytest.mark.slow


def _report(cwd: Path) -> Path:
    (report,) = sorted((cwd / "reports").glob("*.md"))
    return report


def _leftover_files(*roots: Path) -> list[str]:
    """Files under the scratch roots that are not in a trash folder."""
    left = []
    for root in roots:
        for path in root.rglob("*") if root.exists() else []:
            if path.is_file() and "trash" not in path.relative_to(root).parts and "cluster-eval-" in str(path):
                left.append(str(path))
    return left


@pytest.mark.timeout(3000)  # the session's README run may start here: a torch wheel into a new venv, then the pipeline
def test_readme_run_command_on_this_machine(readme_first_command):
    readme_run = readme_first_command
    res = readme_run.result
    assert only_leftovers(res), (res.stdout[-4000:], res.stderr[-3000:])
    report = _report(readme_run.work)
    assert run_cli("lint", str(report)).returncode == 0
    text = report.read_text()
    assert "### Gaps" in text and "## Storage" in text and "Intra-node connectivity" in text
    assert "Inter-node" not in text  # one node: no inter-node heading or TOC line
    closeout = (report.parent / f"raw-{report.stem}" / "closeout.md").read_text()
    assert "Proposed plan of action" in closeout
    assert _leftover_files(readme_run.scratch) == []


@pytest.mark.timeout(1500)
def test_ctrl_c_then_resume_completes_the_report(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    # this machine's own interpreter: the README run builds the venv; this one is about Ctrl-C
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                   f'install_packages = false\neval_python = "{sys.executable}"\n')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # the interrupted phase and the last one, which the resume must reach (the phases between them
    # are read by no assertion here; the 4-node test below resumes across one that must not run again)
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cfg), "--profile", "smoke",
                             "--phases", "connectivity,storage"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # interrupt once the connectivity phase has started
        lines.append(line)
        if line.startswith("[connectivity] start"):
            proc.send_signal(signal.SIGINT)
            break
    out = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 130, out[-3000:]
    assert "resume with `clustereval run --resume" in out
    run_dir = str(tmp_path / re.search(r"run folder: (\S+)", out).group(1))
    assert _leftover_files(scratch) == []  # Ctrl-C still cleared the scratch
    res = run_cli("run", "--resume", run_dir, cwd=tmp_path, timeout=1400)
    assert only_leftovers(res), (res.stdout + res.stderr)[-3000:]
    state = (Path(run_dir) / "state.json").read_text()
    assert '"storage"' in state.split('"phases_finished"')[1]
    report = _report(tmp_path)
    assert run_cli("lint", str(report)).returncode == 0
    assert "## Storage" in report.read_text()


def _scratch_roots(cluster) -> list[Path]:
    return [cluster.node_scratch_dir(i) for i in range(len(cluster.nodes))] + [cluster.shared_dir]


@pytest.mark.timeout(1800)  # the session's 4-node smoke run may start here
def test_smoke_run_across_four_nodes_over_ssh(four_node_smoke):
    cluster, res = four_node_smoke.cluster, four_node_smoke.result
    assert only_leftovers(res), four_node_smoke.output[-4000:]
    report = _report(cluster.workdir)
    assert run_cli("lint", str(report)).returncode == 0
    text = report.read_text()
    for heading in ("Inter-node connectivity", "### Inter-node all-reduce benchmark", "### Pairwise all-reduce benchmark",
                    "### Concurrent write shared fs benchmark"):
        assert heading in text, heading
    for node in cluster.nodes:
        assert f"{node.name}(node{node.index})" in text
    state = (report.parent / f"raw-{report.stem}" / "state.json").read_text()
    assert '"failed"' not in state and '"partial"' not in state
    assert _leftover_files(*_scratch_roots(cluster)) == []


def test_the_four_node_runs_gaps_are_facts_that_clustereval_report_words_again(four_node_smoke, tmp_path):
    """The run stored its Gaps as kinds and facts, not sentences; `clustereval report` on a copy of
    its run folder words them again into the very report the run wrote."""
    import shutil

    report = _report(four_node_smoke.cluster.workdir)
    raw = report.parent / f"raw-{report.stem}"
    stored = [g for path in sorted(raw.glob("*.record.json")) for g in json.loads(path.read_text()).get("gaps", [])]
    assert stored and all(g["kind"] and not g["text"] and not g["plan"] for g in stored), stored
    copy = tmp_path / "reports"
    shutil.copytree(raw, copy / raw.name)  # the records alone, without the report
    res = run_cli("report", str(copy / raw.name), cwd=tmp_path, timeout=300)
    assert only_leftovers(res) and res.returncode == four_node_smoke.result.returncode, \
        (res.stdout + res.stderr)[-3000:]
    assert (copy / report.name).read_text() == report.read_text()


@pytest.mark.timeout(1500)
def test_ctrl_c_during_the_four_node_all_reduce_then_resume(netns_cluster):
    # one gloo rank per node: the interrupted job is the inter-node one either way, and the session's
    # uninterrupted 4-node run covers two ranks per node
    cluster = netns_cluster(4, cpu_ranks_per_node=1)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # the phases around the interrupted job: one before it that must not run again, the job's own
    # phase and one after it that must (pairwise adds launches, not a case)
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cluster.config_path),
                             "--profile", "smoke", "--phases", "environment,connectivity,allreduce,storage"],
                            cwd=cluster.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[allreduce] start"):
            proc.send_signal(signal.SIGINT)
            break
    out = "".join(lines) + proc.communicate(timeout=600)[0]
    assert proc.returncode == 130, out[-3000:]
    run_dir = Path(re.search(r"run folder: (\S+)", out).group(1))
    report = _report(cluster.workdir)
    assert "interrupted" in report.read_text()
    assert _leftover_files(*_scratch_roots(cluster)) == []
    before = json.loads((run_dir / "state.json").read_text())["outcomes"]
    assert before["connectivity"]["status"] == "ok" and "storage" not in before
    res = run_cli("run", "--resume", str(run_dir), cwd=cluster.workdir, timeout=1000)
    assert only_leftovers(res), (res.stdout + res.stderr)[-4000:]
    ran = re.findall(r"^\[(\w+)\] start", res.stderr, re.MULTILINE)
    assert ran[0] == "preflight" and "connectivity" not in ran and "environment" not in ran
    assert "allreduce" in ran and "storage" in ran
    after = json.loads((run_dir / "state.json").read_text())["outcomes"]
    assert all(o["status"] in ("ok", "skipped") for o in after.values()), after
    assert run_cli("lint", str(report)).returncode == 0
    again = run_cli("run", "--resume", str(run_dir), cwd=cluster.workdir, timeout=300)
    assert again.returncode == 0 and "nothing to resume" in again.stdout
    assert "[preflight] start" not in again.stderr
    other = run_cli("run", "--resume", str(run_dir), "--profile", "quick", cwd=cluster.workdir, timeout=300)
    assert other.returncode == 2 and "--profile quick cannot apply" in other.stderr


@pytest.mark.timeout(3000)  # the session's README run may start here: a torch wheel into a new venv, then the pipeline
def test_readme_first_command_in_a_fresh_venv_without_torch(readme_first_command):
    """The report of a new user's first run names no path of the interpreter, its venv or the
    package's source, and says where the eval Python came from."""
    from clustereval.records.run import EvalPythonRecord
    from clustereval.runner import load_records
    from clustereval.store import RunStore
    from tests.reportcheck import problems

    readme_run = readme_first_command
    res, venv, src = readme_run.result, readme_run.venv, readme_run.src
    assert only_leftovers(res), (res.stdout[-4000:], res.stderr[-3000:])
    report = _report(readme_run.work)
    lint = readme_run.clustereval("lint", str(report), timeout=300)
    assert lint.returncode == 0, lint.stdout[-3000:]
    text = report.read_text()
    # the scan path is a report field; the interpreter, its venv and the package's source are not
    for path in (str(venv), str(src), sys.executable, "site-packages", "/venv"):
        assert path not in text, path
    records = load_records(RunStore.open(report.parent / f"raw-{report.stem}"))
    assert problems(text, records) == []
    ev = records["evalpython"]
    assert isinstance(ev, EvalPythonRecord) and ev.torch and ev.status == "ok"
    assert ev.source in ("pytorch-index", "default-index") and str(venv) not in ev.interpreter
    torch_row = next(ln for ln in text.splitlines() if ln.startswith("| torch |"))
    assert ev.torch in torch_row and "newest release" in torch_row
    if not ev.verified_newest:  # said once, in the Gaps of the section it affects
        assert text.count("which is not the newest release") == 1
    assert "cannot import torch" not in text and "**torchrun**" not in text
    assert _leftover_files(readme_run.scratch) == []
