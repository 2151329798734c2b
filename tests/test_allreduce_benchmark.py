"""The GPU benchmark script's --smoke mode: the same launch, worker and table on CPU with gloo."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]


def test_benchmark_smoke_writes_table_json_png_and_log(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "allreduce_sweep.py"), "--smoke", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "| 32 KiB |" in proc.stdout and "| 256 KiB |" in proc.stdout and "sweep wall time" in proc.stdout
    data = json.loads((out / "sweep.json").read_text())
    assert data["backend"] == "gloo" and data["nproc"] == 2
    assert sorted(int(k) for k in data["rows"]["back-to-back"]) == [32768, 65536, 131072, 262144]
    assert all(r["check_ok"] for r in data["rows"]["blocking"].values())
    assert (out / "table.md").read_text().startswith("| payload |")
    assert (out / "busbw.png").read_bytes()[:4] == b"\x89PNG"
    assert "[" in (out / "allreduce-nccl-info.log").read_text()
    assert not (out / "scratch").exists()


def test_pairwise_command_needs_two_nodes(tmp_path):
    proc = run_cli("pairwise", cwd=tmp_path)
    assert proc.returncode == 2
    assert "needs at least 2 nodes" in proc.stderr
