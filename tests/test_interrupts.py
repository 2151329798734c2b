"""Ctrl-C at run level: once (finish the step, then stop) and twice (stop now). Either way the run
exits 130, writes a partial report that passes its own lint, leaves no fio behind and clears its
scratch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.storagehelpers import files_outside_trash
from tests.test_storage_phase import write_config


def _processes_under(path: Path) -> list[tuple[str, str]]:
    """(name, command line) of the processes still running whose arguments name ``path``: this
    test's fio and the run itself, never another test's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if str(path) in cmdline and int(entry.name) != os.getpid():
            found.append((name, cmdline.strip()))
    return found


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_fio_exits_130_with_a_lint_clean_partial_report_and_nothing_left(tmp_path, presses):
    (tmp_path / "local").mkdir()
    (tmp_path / "shared").mkdir()
    config = write_config(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", config, "--phases", "storage",
                             "--profile", "quick"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    users = tmp_path / "local" / "evaluser"
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if any(name == "fio" for name, _ in _processes_under(tmp_path / "local")):
            break
    else:
        proc.kill()
        pytest.fail("fio never started: " + proc.communicate()[1][-2000:])
    proc.send_signal(signal.SIGINT)
    err_lines = []
    assert proc.stderr is not None
    pressed = 1
    if presses == 2:  # the second press once the run said what the first did ("Ctrl-C again to stop now")
        for line in proc.stderr:
            err_lines.append(line)
            if line.startswith("interrupt: stopping after the current step"):
                proc.send_signal(signal.SIGINT)
                pressed += 1
                break
    out, err = proc.communicate(timeout=300)
    err = "".join(err_lines) + err
    assert pressed == presses and proc.returncode == 130, (out + err)[-3000:]
    assert "interrupted: resume with" in out
    reports = sorted((tmp_path / "reports").glob("*.md"))
    assert len(reports) == 1
    assert "interrupted" in reports[0].read_text()
    lint = run_cli("lint", str(reports[0]))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert _processes_under(tmp_path) == []
    assert files_outside_trash(tmp_path / "local", tmp_path / "shared") == []
    assert users.exists()
