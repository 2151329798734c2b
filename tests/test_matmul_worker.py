"""The matmul worker, run for real on the CPU (tiny shapes, perf_counter timing, no NVML)."""

import json
import os
import subprocess
import sys
import time

from tests.conftest import REPO

GRID = "M=32:128:32,N=32:128:32,K=32:128:32"


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")


def run_worker(*args, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "clustereval.workers.matmul", *args], env=_env(),
                          capture_output=True, text=True, timeout=timeout)
    events = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, events


def _result(events):
    return next(e for e in events if e["event"] == "result")


def test_search_on_cpu_coarse_then_refine():
    rc, events = run_worker("search", "--device", "cpu", "--grid", GRID, "--coarse-budget", "8",
                            "--settle-s", "0.02", "--sustain-s", "0.05")
    assert rc == 0, events
    hello = events[0]
    assert hello["event"] == "hello" and hello["device"] == "cpu" and hello["executable"] == sys.executable
    s = _result(events)["summary"]
    shapes = [e for e in events if e["event"] == "shape"]
    stages = {e["stage"] for e in shapes}
    assert stages == {"screen", "burst", "hot", "sustained"}
    assert all(e["mean_tflops"] > 0 and e["iterations"] >= 1 for e in shapes)
    # a coarse grid plus refinement (CPU timing noise may move the leaders until the grid is covered)
    assert s["num_screened"] >= 8 and s["stop_reason"] != "the coarse grid was the whole grid"
    assert s["mamf"]["stage"] == "burst" and s["mamf"]["mean_tflops"] == max(
        e["mean_tflops"] for e in shapes if e["stage"] == "burst")
    assert s["msmf"]["stage"] == "sustained" and s["msmf"]["why"] == "no power telemetry"
    assert s["shapes_tried"] == len({(e["m"], e["n"], e["k"]) for e in shapes})


def test_exhaustive_then_pinned():
    rc, events = run_worker("exhaustive", "--device", "cpu", "--grid", "M=32|64,N=64,K=32|64", "--hot", "2",
                            "--settle-s", "0.02", "--sustain-s", "0.05")
    assert rc == 0
    s = _result(events)["summary"]
    burst = sorted((e["m"], e["n"], e["k"]) for e in events if e["event"] == "shape" and e["stage"] == "burst")
    assert burst == [(32, 64, 32), (32, 64, 64), (64, 64, 32), (64, 64, 64)]
    assert s["mode"] == "exhaustive" and s["num_confirmed"] == 4 and s["num_screened"] == 0
    rc, events = run_worker("pinned", "--device", "cpu", "--shape", "64x64x64", "--settle-s", "0.02",
                            "--sustain-s", "0.1")
    t = _result(events)["timing"]
    assert rc == 0 and (t["m"], t["n"], t["k"]) == (64, 64, 64) and t["stage"] == "sustained"
    assert t["kernel_s"] > 0 and t["wall_s"] >= t["kernel_s"]


def test_pinned_holds_until_steady_then_times_a_window_and_carries_its_trace():
    rc, events = run_worker("pinned", "--device", "cpu", "--shape", "64x64x64", "--settle-s", "0.05",
                            "--soak-max-s", "0.15", "--span-s", "0.02", "--sustain-s", "0.1")
    assert rc == 0, events
    result = _result(events)
    t, trace = result["timing"], result["trace"]
    assert t["window_s"] >= 0.1 and t["soak_s"] >= 0.05 and t["iterations"] > 0
    assert t["median_tflops"] > 0 and t["first_half_tflops"] > 0 and t["second_half_tflops"] > 0
    assert [sp["name"] for sp in trace["spans"]] == ["soak", "window"] and trace["msmf_span"]["name"] == "window"
    stages = {p["stage"] for p in trace["points"]}
    assert {"soak", "window"} <= stages
    window = [p for p in trace["points"] if p["stage"] == "window"]
    assert len(window) >= 2 and all(trace["msmf_span"]["t0_s"] <= p["t_s"] <= trace["msmf_span"]["t1_s"] for p in window)
    rc, events = run_worker("pinned", "--device", "cpu", "--shape", "64x64x64", "--sustain-s", "0")
    assert rc == 1 and "timed window" in events[-1]["error"]


def test_load_runs_until_its_stop_file(tmp_path):
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-m", "clustereval.workers.matmul", "load", "--device", "cpu",
                             "--shape", "64x64x64", "--stop-file", str(stop)], env=_env(),
                            stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert json.loads(lines[1])["event"] == "running"
        time.sleep(0.3)
        assert proc.poll() is None
        stop.touch()
        rest = proc.communicate(timeout=30)[0]
    finally:
        proc.kill()
    last = json.loads(rest.strip().splitlines()[-1])
    assert proc.returncode == 0 and last["event"] == "stopped" and last["reason"] == "stop file"
    assert last["iterations"] > 0


def test_lemon_on_two_stand_in_gpus_and_a_bad_dtype():
    rc, events = run_worker("lemon", "--device", "cpu", "--gpus", "0,1", "--size", "64")
    assert rc == 0
    assert [e["gpu"] for e in events if e["event"] == "begin"] == [0, 1]
    lemons = [e for e in events if e["event"] == "lemon"]
    assert [e["gpu"] for e in lemons] == [0, 1] and all(e["timing"]["mean_tflops"] > 0 for e in lemons)
    assert all((e["timing"]["m"], e["timing"]["stage"]) == (64, "lemon") for e in lemons)
    # a failure on a GPU is reported for that GPU and the next one still runs
    rc, events = run_worker("lemon", "--device", "cpu", "--gpus", "0,1", "--size", "64", "--dtype", "nonsense")
    assert rc == 0 and [e["gpu"] for e in events if e["event"] == "error"] == [0, 1]


def test_unusable_arguments_are_one_error_line():
    rc, events = run_worker("pinned", "--device", "cpu", "--shape", "64x64")
    assert rc == 1 and events[-1]["event"] == "error" and "MxNxK" in events[-1]["error"]
