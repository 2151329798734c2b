"""A node's command that exits before reading the script written to its stdin (ssh refused on a wrong
port, under load) must not kill clustereval: SIGPIPE stays ignored in the CLI process, and the write's
EPIPE is the command's own failure."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

PROBE = """
import signal, sys
sys.argv = ["clustereval", "--version"]
from clustereval import cli
try:
    cli.main()
except SystemExit:
    pass
from clustereval.transport.base import run_subprocess
res = run_subprocess("here", ["true"], 30, stdin="x" * (4 << 20))  # exits without reading 4 MiB
print(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, res.rc, flush=True)
"""


def test_a_command_that_never_reads_its_stdin_does_not_kill_the_cli():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().splitlines()[-1] == "True 0"


def test_a_closed_stdout_ends_the_cli_quietly():
    proc = subprocess.run(f"{sys.executable} -m clustereval --help | head -c 1", shell=True, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "error" not in proc.stderr
