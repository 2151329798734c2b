"""The run's console: the live progress display on a terminal, plain lines elsewhere, a reason on
every phase that did not end ok, and the report path as the last line a run prints."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

import pytest
from rich.console import Console

from clustereval.console import RunConsole, fmt_duration, phase_reason
from clustereval.records import Gap, PhaseRecord
from clustereval.records.run import PreflightRecord
from tests.conftest import REPO, only_leftovers

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _plain(width: int = 160) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=False, color_system=None), buf


def test_durations_read_like_a_clock():
    assert [fmt_duration(s) for s in (0, 12.4, 65, 3599, 3720)] == ["0 s", "12 s", "1 min 05 s", "59 min 59 s",
                                                                     "1 h 02 min"]


def test_plain_lines_carry_phase_node_step_time_spent_and_left():
    console, buf = _plain()
    ui = RunConsole(console)
    assert not ui.live  # not a terminal: one line per update, so a log keeps every step
    with ui:
        ui.phase("storage", "start")
        ui.progress("storage", "node0", "fio 16 KiB read on /data (run 1 of 6)", 75.0)
        ui._started["storage"] -= 62  # as if a minute had passed
        ui.progress("storage", "node0", "fio 16 KiB write on /data (run 2 of 6)", 64.0)
        ui.progress("storage", "node0", "laying out files", None)
        ui.phase("storage", "ok", PhaseRecord(status="ok"))
    assert buf.getvalue().splitlines() == [
        "[storage] start",
        "[storage] node0: fio 16 KiB read on /data (run 1 of 6) (about 1 min 15 s left)",
        "[storage] node0: fio 16 KiB write on /data (run 2 of 6) (1 min 02 s in, about 1 min 04 s left)",
        "[storage] node0: laying out files (1 min 02 s in)",
        "[storage] ok (1 min 02 s)",
    ]


def test_a_phase_that_fails_or_is_skipped_says_why_on_its_line():
    console, buf = _plain(400)
    ui = RunConsole(console)
    skipped = PhaseRecord(status="skipped", gaps=[Gap(phase="health", text="`dcgmi` is not installed on node0.",
                                                      plan="install DCGM")])
    failed = PhaseRecord(status="failed", gaps=[Gap(phase="allreduce", text="The sweep on node1 timed out.", plan="p"),
                                                Gap(phase="allreduce", text="node2 lost.", plan="p")])
    gate = PreflightRecord(status="failed", passed=False, missing=["shared_paths", "ssh.port"])
    for name, rec in (("health", skipped), ("allreduce", failed), ("preflight", gate)):
        ui.phase(name, "start")
        ui.phase(name, rec.status, rec)
    lines = [ln for ln in buf.getvalue().splitlines() if not ln.endswith("] start")]
    assert lines == ["[health] skipped: `dcgmi` is not installed on node0. (0 s)",
                     "[allreduce] failed: The sweep on node1 timed out. (and 1 more in the report) (0 s)",
                     "[preflight] failed: missing: shared_paths, ssh.port (0 s)"]
    assert phase_reason(PhaseRecord(status="ok")) == ""


def test_the_live_display_shows_the_step_and_counts_the_time_left_down():
    buf = io.StringIO()
    console = Console(file=buf, width=150, force_terminal=True, color_system=None)
    ui = RunConsole(console)
    assert ui.live
    with ui:
        ui.phase("matmul", "start")
        ui.progress("matmul", "gpu-a", "searching matmul shapes on gpu0", 600.0)
        time.sleep(1.6)  # a few refreshes
        ui.note("a line that stays")
        ui.phase("matmul", "ok", PhaseRecord(status="ok"))
    text = ANSI.sub("", buf.getvalue())
    live = [ln for ln in re.split(r"[\r\n]", text) if "searching matmul shapes on gpu0" in ln]
    assert live, text
    assert all("matmul" in ln and "gpu-a" in ln for ln in live)
    lefts = [int(m.group(1)) * 60 + int(m.group(2)) for ln in live
             for m in [re.search(r"about (\d+) min (\d+) s left", ln)] if m]
    assert lefts and max(lefts) <= 600 and min(lefts) < 600  # it counted down between updates
    assert "a line that stays" in text and "[matmul] ok (" in text
    assert "[matmul] start" not in text  # the live line shows the start; no extra line for it


@pytest.mark.slow
def test_a_run_prints_the_reason_of_a_skipped_phase_and_ends_with_the_report_path(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "cluster.toml").write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\n'
                                           "install_packages = false\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "clustereval", "run", "--profile", "smoke", "--phases", "storage"],
                          cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    lines = proc.stdout.rstrip("\n").splitlines()
    assert only_leftovers(proc), proc.stdout[-3000:]  # one node, no shared path: the shared scan is a leftover
    report = sorted((tmp_path / "reports").glob("here-*.md"))
    assert len(report) == 1
    assert lines[-1] == f"report: reports/{report[0].name}"
    assert sum(ln.startswith("report: ") for ln in lines) == 1
    assert any(re.fullmatch(r"\[storage\] ok \(\d+ s\)", ln) for ln in lines), lines
    runs = [ln for ln in lines if ln.startswith("[storage] ") and "(run " in ln]
    assert runs and all("left)" in ln for ln in runs)  # fio's duration is known: every run says the time left


def test_a_commands_steps_share_one_live_line():
    buf = io.StringIO()
    console = Console(file=buf, width=150, force_terminal=True, color_system=None)
    ui = RunConsole(console)
    with ui:
        ui.progress("debug fs", "n0", "snapshot with /fsx", None)
        ui.progress("storage", "n0", "fio 16 KiB read on /fsx (run 1 of 12)", 90.0)
        assert list(ui._tasks) == ["_steps"]
        time.sleep(0.6)
    text = ANSI.sub("", buf.getvalue())
    last = [ln for ln in re.split(r"[\r\n]", text) if "fio 16 KiB read" in ln]
    assert last and "storage" in last[-1] and "about 1 min 2" in last[-1]
    assert not any("snapshot with /fsx" in ln and "fio" in ln for ln in text.splitlines())
