"""The GPU benchmark script, run in its CPU smoke mode: every step runs and the outputs are written."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_matmul_benchmark_smoke(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "matmul_search.py"), str(out), "--smoke"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "matmul_search.json").read_text())
    assert set(report["runs"]) == {"search", "exhaustive"}
    search = report["runs"]["search"]["summary"]
    exh = report["runs"]["exhaustive"]["summary"]
    assert exh["shapes_tried"] == 64 and exh["num_confirmed"] == 64
    assert search["mamf"] and exh["mamf"] and search["msmf"]
    gpus = report["all_gpu"]["record"]["gpus"]
    assert [g["gpu"] for g in gpus] == [0, 1] and all(g["tflops"][0] for g in gpus)
    assert [g["gpu"] for g in report["lemon"]["record"]["nodes"][0]["gpus"]] == [0, 1]
    md = (out / "matmul_search.md").read_text()
    assert "search MAMF vs exhaustive best" in md and "All-GPU MSMF pass" in md and "Lemon GEMM" in md
    assert (out / "logs" / "exhaustive.jsonl").exists()
    assert not list((out / "run").glob("*/matmul/*/stop-*"))  # scratch went with the temp folder
