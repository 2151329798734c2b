"""The gate the jobs of one pairwise round pass before each sample (workers.roundgate), for real:
two all-reduce jobs under torchrun on this machine (gloo on CPU), the second started late, meet at
one gate that the first one serves; a job whose round-mate never comes samples alone after the
gate's timeout and says so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustereval.probes.torchrun import parse_worker_events

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(gate_port: int, pairs: int, index: int, timeout_s: float) -> subprocess.Popen:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{_free_port()}", "--max_restarts", "0",
            "--role", f"job{index}", "-m", "clustereval.workers.allreduce", "--backend", "gloo", "--min-bytes", str(1 << 20),
            "--max-bytes", str(1 << 20), "--modes", "back-to-back", "--samples", str(SAMPLES),
            "--warmup", "1", "--iters", "2", "--min-time-s", "0.05",
            "--gate", f"127.0.0.1:{gate_port}", "--gate-pairs", str(pairs),
            "--gate-server", "job0" if index == 0 else "",
            "--gate-key", "test-r1", "--gate-timeout-s", str(timeout_s)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)


def _rows(proc: subprocess.Popen, timeout_s: float) -> tuple[list[dict], list[dict]]:
    out, _ = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, out[-3000:]
    events = parse_worker_events(out)
    return [e for e in events if e.get("event") == "row"], [e for e in events if e.get("event") == "gate-unavailable"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_jobs_of_a_round_take_every_sample_together_though_one_starts_late():
    port = _free_port()
    first = _job(port, pairs=2, index=0, timeout_s=240)
    time.sleep(3)
    late_launch = time.time()
    second = _job(port, pairs=2, index=1, timeout_s=240)
    rows = [_rows(first, 500)[0], _rows(second, 500)[0]]
    assert [len(r) for r in rows] == [SAMPLES, SAMPLES]
    assert all(r["gated"] for job in rows for r in job)
    # the first job waited for the late one: its first sample began after the late job was launched
    assert rows[0][0]["started_unix_s"] >= late_launch
    # sample i of either job began only after both had finished sample i - 1 (clocks: one machine,
    # rounded to the millisecond)
    for i in range(1, SAMPLES):
        assert min(job[i]["started_unix_s"] for job in rows) >= max(job[i - 1]["ended_unix_s"] for job in rows) - 0.002


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_job_whose_round_mate_never_comes_samples_alone_after_the_timeout_and_says_so():
    proc = _job(_free_port(), pairs=2, index=0, timeout_s=5)
    rows, unavailable = _rows(proc, 500)
    assert len(rows) == SAMPLES and not any(r["gated"] for r in rows)
    assert unavailable and "gate 1 of the round was not passed together" in unavailable[0]["error"]
