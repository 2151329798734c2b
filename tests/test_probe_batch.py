"""Several commands in one round trip (``probes.batch``), run for real by ``sh`` on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from clustereval.probes.batch import NO_FOLDER_RC, BatchCommand, build_argv, new_token, parse

COMMANDS = [
    BatchCommand("no-newline", ("printf", "%s", "last line without a newline"), 10),
    BatchCommand("both", (sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"), 10),
    BatchCommand("missing", ("clustereval-no-such-command",), 10),
    BatchCommand("slow", ("sleep", "30"), 1),
    BatchCommand("empty", ("true",), 10),
    BatchCommand("lookalike", ("printf", "%s\n", "@@ce-batch-0 0 1", "@@ce-batch-0 stderr"), 10),
]


def run(argv: list[str], tmpdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "TMPDIR": str(tmpdir)})


def test_each_command_keeps_its_own_exit_status_stdout_and_stderr(tmp_path):
    token = new_token()
    proc = run(build_argv(COMMANDS, token), tmp_path)
    assert proc.returncode == 0
    got = parse(COMMANDS, proc.stdout, token)
    assert list(got) == [c.name for c in COMMANDS]
    assert (got["no-newline"].rc, got["no-newline"].stdout) == (0, "last line without a newline")
    assert (got["both"].rc, got["both"].stdout, got["both"].stderr) == (3, "out\n", "err\n")
    assert got["missing"].rc == 127 and got["missing"].stdout == ""
    assert got["slow"].rc == 124  # its own timeout, not the batch's
    assert (got["empty"].rc, got["empty"].stdout, got["empty"].stderr) == (0, "", "")
    assert got["lookalike"].stdout == "@@ce-batch-0 0 1\n@@ce-batch-0 stderr\n"
    assert list(tmp_path.iterdir()) == []  # its folder is removed again


def test_a_batch_cut_short_keeps_what_came_back(tmp_path):
    token = new_token()
    out = run(build_argv(COMMANDS[:2], token), tmp_path).stdout
    cut = out[: out.index(f"{token} 1 ")]
    assert list(parse(COMMANDS[:2], cut, token)) == ["no-newline"]
    assert parse(COMMANDS, "", token) == {}


def test_a_stopped_batch_removes_its_folder(tmp_path):
    proc = subprocess.Popen(build_argv([BatchCommand("slow", ("sleep", "30"), 60)], new_token()),
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    for _ in range(200):
        if list(tmp_path.iterdir()):
            break
        time.sleep(0.05)
    assert list(tmp_path.iterdir())
    proc.terminate()  # what the transport's remote `timeout` sends
    assert proc.wait(timeout=30) == 143
    assert list(tmp_path.iterdir()) == []


def test_no_folder_means_nothing_ran(tmp_path):
    (tmp_path / "file").write_text("")
    proc = run(build_argv(COMMANDS[:1], new_token()), tmp_path / "file")
    assert proc.returncode == NO_FOLDER_RC
