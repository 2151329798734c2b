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


@pytest.mark.slow
def test_msmf_benchmark_smoke(tmp_path):
    """The steady-state benchmark: the phase, then each held shape held by its own loop, all written."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "matmul_msmf.py"), str(out), "--smoke"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "matmul_msmf.json").read_text())
    node = report["record"]["nodes"][0]
    assert node["search"]["msmf"]["window_s"] > 0 and report["phase_wall_s"] >= node["search_wall_s"] > 0
    held = report["held"]
    assert held and held[0]["is_msmf"] and held[0]["held"]["median_last_half_tflops"] > 0
    assert sum(h["is_msmf"] for h in held) == 1  # the MSMF shape is held once
    assert json.loads((out / "msmf-search.json").read_text())["trace"]["msmf_span"]["name"] == "window"
    md = (out / "matmul_msmf.md").read_text()
    assert "| the whole matmul phase |" in md and "2 s held (median of the last 1 s)" in md
    assert (out / "run.tar.gz").stat().st_size > 0


@pytest.mark.slow
def test_vs_finder_benchmark_smoke(tmp_path):
    """The comparison with the finder, our side on a CPU stand-in: the phase, the alternated holds, the checks."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "matmul_vs_finder.py"), str(out), "--smoke"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "vs_finder.json").read_text())
    search = report["record"]["nodes"][0]["search"]
    assert search["mode"] == "waves" and report["phase_wall_s"] > 0
    assert [h["who"] for h in report["held"]] == ["ours", "ours"]  # no finder on CPU: our shape, twice
    assert all(h["layout"] == search["msmf"]["layout"] for h in report["held"])
    md = (out / "vs_finder.md").read_text()
    assert "| confirm |" in md and "| our MSMF vs its own" in md
    assert json.loads((out / "search.json").read_text())["stages"] and (out / "search.log").stat().st_size > 0
