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

from tests.conftest import REPO, run_cli

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


@pytest.mark.timeout(1500)  # the eval Python is a venv built from pip's configured index here
def test_readme_run_command_on_this_machine(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                   'install_packages = false\n')
    res = run_cli("run", "--config", str(cfg), "--profile", "smoke", cwd=tmp_path, timeout=1400)
    assert res.returncode == 0, res.stderr[-3000:]
    report = _report(tmp_path)
    assert run_cli("lint", str(report)).returncode == 0
    text = report.read_text()
    assert "### Gaps" in text and "## Storage" in text and "Intra-node connectivity" in text
    assert "Inter-node" not in text  # one node: no inter-node heading or TOC line
    closeout = (report.parent / f"raw-{report.stem}" / "closeout.md").read_text()
    assert "Proposed plan of action" in closeout
    assert _leftover_files(scratch) == []


@pytest.mark.timeout(1500)
def test_ctrl_c_then_resume_completes_the_report(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    # this machine's own interpreter: the README test above builds the venv; this one is about Ctrl-C
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                   f'install_packages = false\neval_python = "{sys.executable}"\n')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cfg), "--profile", "smoke"],
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
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    state = (Path(run_dir) / "state.json").read_text()
    assert '"storage"' in state.split('"phases_finished"')[1]
    report = _report(tmp_path)
    assert run_cli("lint", str(report)).returncode == 0
    assert "## Storage" in report.read_text()


def _scratch_roots(cluster) -> list[Path]:
    return [cluster.node_scratch_dir(i) for i in range(len(cluster.nodes))] + [cluster.shared_dir]


@pytest.mark.timeout(1200)
def test_smoke_run_across_four_nodes_over_ssh(netns_cluster):
    cluster = netns_cluster(4)
    res = run_cli("run", "--config", str(cluster.config_path), "--profile", "smoke", cwd=cluster.workdir,
                  timeout=1100)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
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


@pytest.mark.timeout(1500)
def test_ctrl_c_during_the_four_node_all_reduce_then_resume(netns_cluster):
    cluster = netns_cluster(4)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cluster.config_path),
                             "--profile", "smoke"], cwd=cluster.workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
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
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
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


def _copy_checkout(dest: Path) -> Path:
    """The package's source as a user downloads it (no .git, no reports, no caches)."""
    import shutil

    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".git", "reports", "__pycache__", "*.egg-info",
                                                              ".pytest_cache", ".ruff_cache", "build"))
    return dest


@pytest.mark.timeout(3000)  # a torch wheel into a new venv, then the whole pipeline, on a loaded machine
def test_readme_first_command_in_a_fresh_venv_without_torch(tmp_path):
    """A new user's first run: a venv with no torch, the package installed as the README says, the
    README's first command. The PyTorch wheel index is not reachable here, pip's configured index is:
    the eval Python is built from it, and the report says so."""
    from clustereval.records.run import EvalPythonRecord
    from clustereval.runner import load_records
    from clustereval.store import RunStore
    from tests.reportcheck import problems

    src = _copy_checkout(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python3"
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True, timeout=60).returncode != 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "."], cwd=src, env=env, capture_output=True,
                             text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / "work"
    scratch = tmp_path / "scratch"
    scratch.mkdir(parents=True)
    work.mkdir()
    # the README's command with no other input than where this test's scratch goes
    (work / "cluster.toml").write_text(f'local_scratch = "{scratch}"\n')
    res = subprocess.run([str(venv / "bin" / "clustereval"), "run", "--profile", "smoke"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=2400)
    assert res.returncode == 0, (res.stdout[-4000:], res.stderr[-3000:])
    report = _report(work)
    lint = subprocess.run([str(venv / "bin" / "clustereval"), "lint", str(report)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
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
    assert _leftover_files(scratch) == []
