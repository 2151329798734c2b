"""SIGTERM (a closed terminal, a scheduler's stop) ends a run as a stop-now interrupt: the partial
report is written and lint-clean, the scratch is cleared, and the exit status is 143."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli


@pytest.mark.timeout(900)
def test_sigterm_mid_run_writes_the_partial_report_and_exits_143(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                   f'install_packages = false\neval_python = "{sys.executable}"\n')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(cfg), "--profile", "smoke"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # stop it once the connectivity phase has started
        lines.append(line)
        if line.startswith("[connectivity] start"):
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.communicate(timeout=600)[0]
    assert proc.returncode == 143, out[-3000:]
    assert "resume with `clustereval run --resume" in out and "stopping after the current step" in out
    run_dir = Path(tmp_path / re.search(r"run folder: (\S+)", out).group(1))
    state = (run_dir / "state.json").read_text()
    assert '"interrupted": true' in state
    (report,) = run_dir.parent.glob("here-*.md")
    assert run_cli("lint", str(report)).returncode == 0
    left = [p for p in scratch.rglob("*") if p.is_file() and "trash" not in p.relative_to(scratch).parts]
    assert left == []


def test_sigterm_outside_a_run_exits_143(tmp_path):
    # `snapshot` samples iowait for 30 s: SIGTERM during it stops the command at once
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "snapshot", "--sample-seconds", "30"], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err
