"""The compute phases on this machine: real workers on the CPU where they can run, stand-in
executables (dcgmi, nvidia-smi, a GPU that hangs) for what a CPU machine cannot produce."""

import os
import stat
import sys
from pathlib import Path

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.health import HealthPhase
from clustereval.phases.lemon import LemonPhase
from clustereval.phases.matmul import MatmulPhase
from clustereval.phases.settings import GpuSettings
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import FIXTURES, path_without

FAKE_WORKER = Path(__file__).parent / "fakes" / "fake_matmul_worker.py"


def make_ctx(tmp_path, eval_python=sys.executable):
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    (tmp_path / "scratch").mkdir(exist_ok=True)  # the node's local disk: clustereval never creates it
    config = Config(name="t", nodes=("here",), local_scratch=str(tmp_path / "scratch"))
    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[Node("here", "here")], store=store,
                     eval_python=eval_python)
    return ctx


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "fake-state"))
    return str(script(tmp_path / "fakepy", f'exec "{sys.executable}" "{FAKE_WORKER}" "$@"\n'))


@pytest.fixture
def gpu_tools(tmp_path, monkeypatch):
    """Stand-ins for nvidia-smi, dcgmi and nv-hostengine on PATH; returns their state folder."""
    state = tmp_path / "tools-state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    script(bin_dir / "nvidia-smi", f"""case "$*" in
  *query-compute-apps*) cat "{state}/apps.csv" 2>/dev/null ;;
  *query-gpu*) cat "{FIXTURES}/nvidia-smi/handwritten-query-gpu-index.csv" ;;
  *) cat "{FIXTURES}/h200x2/nvidia-smi.txt" | tail -n +2 ;;
esac
""")
    script(bin_dir / "dcgmi", f"""case "$1" in
  discovery) if [ -e "{state}/engine" ]; then echo "2 GPUs found."; else cat "{FIXTURES}/dcgmi/handwritten-diag-no-hostengine.txt"; exit 1; fi ;;
  diag) cat "{state}/diag.txt" ;;
esac
""")
    script(bin_dir / "nv-hostengine", f"""if [ "$1" = "--term" ]; then rm -f "{state}/engine"; touch "{state}/terminated"; else touch "{state}/engine"; fi
""")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


# -- hardware health -------------------------------------------------------------------------


def test_health_starts_the_host_engine_runs_diag_and_stops_it(tmp_path, gpu_tools):
    (gpu_tools / "diag.txt").write_text((FIXTURES / "dcgmi/handwritten-diag-r2-pass-dcgm4.txt").read_text())
    ctx = make_ctx(tmp_path)
    rec = HealthPhase().run(ctx)
    (nh,) = rec.nodes
    assert nh.ran and nh.passed and nh.hostengine_started and not rec.gaps
    assert [r.plugin for r in nh.results] == ["software", "memory", "pcie", "memory_bandwidth"]
    assert (gpu_tools / "terminated").exists() and not (gpu_tools / "engine").exists()  # left as found
    log = ctx.store.raw_dir / nh.log_rel
    assert log.exists() and "memory_bandwidth" in log.read_text()


def test_health_failure_is_parsed_and_a_running_engine_is_left_alone(tmp_path, gpu_tools):
    (gpu_tools / "engine").touch()
    (gpu_tools / "diag.txt").write_text((FIXTURES / "dcgmi/handwritten-diag-r2-fail-dcgm4.txt").read_text())
    rec = HealthPhase().run(make_ctx(tmp_path))
    (nh,) = rec.nodes
    assert nh.ran and not nh.passed and not nh.hostengine_started
    assert next(r for r in nh.results if r.plugin == "memory").gpus[1] == "Fail"
    assert (gpu_tools / "engine").exists() and not (gpu_tools / "terminated").exists()


def test_missing_dcgm_is_a_gap_with_the_package_for_this_os_and_driver(tmp_path, gpu_tools):
    (tmp_path / "bin" / "dcgmi").unlink()
    rec = HealthPhase().run(make_ctx(tmp_path))
    (gap,) = rec.gaps
    assert gap.kind == "health.dcgm-missing" and not gap.text  # the record holds the facts; the report words them
    gap = say(gap)
    assert "DCGM (Data Center GPU Manager, [`dcgmi`](https://docs.nvidia.com/" in gap.text and "on here" in gap.text
    assert "datacenter-gpu-manager-4-cuda13" in gap.plan  # CUDA major from the (stand-in) driver
    os_id = Path("/etc/os-release").read_text().lower()
    if "debian" in os_id or "ubuntu" in os_id:
        assert "apt-get install" in gap.plan and "cuda-keyring" in gap.plan
    # nothing failed: DCGM is not installed, so the pass did not run (the eval is incomplete, not broken)
    assert rec.status == "not-run"


def test_no_gpu_at_all_is_a_gap_and_nothing_crashes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "nvidia-smi"))  # none on this machine
    ctx = make_ctx(tmp_path)
    for phase in (HealthPhase(), MatmulPhase(), LemonPhase()):
        rec = phase.run(ctx)
        assert rec.gaps and rec.status in ("skipped", "failed")
        # a machine without the NVIDIA driver is told so in those words: nothing names nvidia-smi
        assert all("nvidia-smi" not in say(g).text and "nvidia-smi" not in say(g).plan for g in rec.gaps)
        assert any("no NVIDIA driver installed" in say(g).text for g in rec.gaps)


# -- busy GPUs -------------------------------------------------------------------------------


def test_foreign_compute_processes_stop_the_performance_passes(tmp_path, gpu_tools):
    (gpu_tools / "apps.csv").write_text((FIXTURES / "nvidia-smi/handwritten-compute-apps-busy.csv").read_text())
    settings = GpuSettings(start_timeout_s=20)
    ctx = make_ctx(tmp_path)
    mm = MatmulPhase(settings).run(ctx)
    assert any("pid 51003 (./train_llm) on gpu1" in say(g).text for g in mm.gaps)
    assert [g.kind for g in mm.gaps] == ["matmul.busy"] and not mm.gaps[0].text
    assert mm.nodes[0].error and not mm.nodes[0].search  # nothing was launched
    lemon = LemonPhase(settings).run(ctx)
    assert any("pid 51003 (./train_llm) on gpu1" in say(g).text and "lemon" in say(g).text for g in lemon.gaps)
    assert [g.kind for g in lemon.gaps] == ["lemon.busy"]
    assert not list((ctx.store.raw_dir).glob("lemon/*"))


# -- lemon GEMM: dead GPUs ----------------------------------------------------------------------


def test_lemon_error_hang_and_crash_are_dead_gpus_and_the_rest_still_runs(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_LEMON", "1:error,2:hang,3:crash")
    settings = GpuSettings(device="cpu", cpu_gpus=5, lemon_gpu_timeout_s=3, start_timeout_s=30)
    rec = LemonPhase(settings).run(make_ctx(tmp_path, fake_worker))
    (node,) = rec.nodes
    assert node.dead == [1, 2, 3]
    by = {g.gpu: g for g in node.gpus}
    assert "illegal memory access" in by[1].error
    assert by[2].error.startswith("hung: no result within 3 s")
    assert by[3].error.startswith("the worker exited")
    assert by[0].tflops == [100.0] and by[4].tflops == [100.0]  # measured before and after the dead ones
    assert len(rec.gaps) == 3 and all("gave no lemon GEMM (general matrix multiply) result" in say(g).text for g in rec.gaps)
    assert {g.kind for g in rec.gaps} == {"lemon.gpu-dead"}


def test_lemon_three_passes_for_a_slow_gpu(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "2:90,3:90/100/100")
    settings = GpuSettings(device="cpu", cpu_gpus=4, start_timeout_s=30)
    (node,) = LemonPhase(settings).run(make_ctx(tmp_path, fake_worker)).nodes
    assert node.num_passes == 3 and node.flagged == [2, 3] and node.underperforming == [2]
    assert [g.tflops for g in node.gpus] == [[100.0] * 3, [100.0] * 3, [90.0] * 3, [90.0, 100.0, 100.0]]


# -- matmul: passes, idle siblings ---------------------------------------------------------------


def test_matmul_three_pass_rule_over_real_processes(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TFLOPS", "2:90,3:90/100/100")
    settings = GpuSettings(device="cpu", cpu_gpus=4, start_timeout_s=30)
    ctx = make_ctx(tmp_path, fake_worker)
    rec = MatmulPhase(settings).run(ctx)
    (node,) = rec.nodes
    assert node.search.msmf.shape == (64, 64, 64) == node.msmf_shape
    assert node.num_passes == 3 and node.flagged == [2, 3] and node.underperforming == [2]
    assert [g.tflops for g in node.gpus] == [[100.0] * 3, [100.0] * 3, [90.0] * 3, [90.0, 100.0, 100.0]]
    assert node.medians == [95.0, 100.0, 100.0] and not rec.gaps
    assert rec.saturated_sm_mhz == (1480, 1520)
    logs = {p.name for p in (ctx.store.raw_dir / "matmul" / "here").iterdir()}
    assert "gpu0-search.log" in logs and any(n.startswith("load-gpu") for n in logs)
    assert (ctx.store.raw_dir / "tools" / "matmul.py").exists()
    for log in (ctx.store.raw_dir / "matmul" / "here").glob("load-*.log"):  # every load was stopped
        assert '"stopped"' in log.read_text()


def test_idle_sibling_once_is_measured_again(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_IDLE", "1:1")
    rec = MatmulPhase(GpuSettings(device="cpu", cpu_gpus=2, start_timeout_s=30)).run(make_ctx(tmp_path, fake_worker))
    (node,) = rec.nodes
    assert any("saw idle siblings (gpu0 stopped computing), so it was measured again" in w for w in node.warnings)
    assert node.gpus[1].idle_sibling_retries == 1 and node.gpus[1].tflops == [100.0] and not rec.gaps


def test_idle_sibling_twice_is_a_gap(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_IDLE", "1:2")
    rec = MatmulPhase(GpuSettings(device="cpu", cpu_gpus=2, start_timeout_s=30)).run(make_ctx(tmp_path, fake_worker))
    assert any("saw idle siblings twice" in say(g).text and "here(node0):gpu1" in say(g).text for g in rec.gaps)


def test_an_unread_sibling_is_said_and_a_hot_gpu_under_load_is_flagged(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_UNREAD", "2:0")
    monkeypatch.setenv("FAKE_TEMP", "1:78")
    rec = MatmulPhase(GpuSettings(device="cpu", cpu_gpus=3, start_timeout_s=30)).run(make_ctx(tmp_path, fake_worker))
    (node,) = rec.nodes
    assert any("NVML could not read the utilisation of gpu0 (gpu0: NVMLError_GpuIsLost: GPU is lost)" in w
               and "here(node0):gpu2" in w for w in node.warnings)
    assert node.hot_gpus == [1] and node.low_power_gpus == []
    assert node.all_gpu_wall_s > 0 and node.total_wall_s >= node.all_gpu_wall_s


# -- the real worker on the CPU ------------------------------------------------------------------


def test_matmul_and_lemon_phases_with_the_real_worker_on_one_cpu_gpu(tmp_path):
    settings = GpuSettings(device="cpu", cpu_gpus=1, settle_s=0.02, sustain_s=0.05, grid="M=32|64,N=32|64,K=64",
                           lemon_size=64)
    ctx = make_ctx(tmp_path)
    rec = MatmulPhase(settings).run(ctx)
    (node,) = rec.nodes
    assert not rec.gaps and node.search.shapes_tried == 4 and node.search.mamf and node.search.msmf
    # MSMF is the held window's median (the sustained regime), and the search carries its trace
    msmf = node.search.msmf
    assert msmf.held and msmf.window_s > 0 and msmf.soak_s > 0
    assert node.num_passes == 1 and node.gpus[0].tflops[0] == msmf.median_tflops
    trace = node.search.trace
    assert trace.msmf_span and trace.msmf_span.shape == msmf.shape and trace.mamf_t_s is not None
    assert [sp.name for sp in trace.spans][:2] == ["search", "hot"] and "window" in {sp.name for sp in trace.spans}
    assert node.search_wall_s > 0 and node.total_wall_s >= node.search_wall_s
    lemon = LemonPhase(settings).run(ctx)
    assert lemon.nodes[0].gpus[0].tflops[0] > 0 and not lemon.gaps


def test_an_interrupted_pass_marks_no_gpu_dead_and_runs_again_on_resume(tmp_path, fake_worker):
    settings = GpuSettings(device="cpu", cpu_gpus=2, start_timeout_s=30)
    ctx = make_ctx(tmp_path, fake_worker)
    ctx.stop.set()  # Ctrl-C before the pass got anywhere
    mm = MatmulPhase(settings).run(ctx)
    lemon = LemonPhase(settings).run(ctx)
    assert mm.status == "partial" and not mm.nodes[0].dead and "interrupted" in mm.nodes[0].error
    assert lemon.status == "partial" and not lemon.nodes[0].dead


def test_the_search_shows_shapes_timed_and_the_time_left(tmp_path):
    settings = GpuSettings(device="cpu", cpu_gpus=1, settle_s=0.02, sustain_s=0.05, progress_every_s=0.05,
                           grid="M=32|64|96|128,N=32|64|96|128,K=64|128")
    ctx = make_ctx(tmp_path)
    seen: list[tuple[str, float | None]] = []
    ctx.progress = lambda phase, node, msg, eta: seen.append((msg, eta))
    rec = MatmulPhase(settings).run(ctx)
    assert not rec.gaps and rec.nodes[0].search.msmf
    search = [(m, eta) for m, eta in seen if m.startswith("searching matmul shapes on gpu0")]
    assert search[0][1] is not None and search[0][1] > 0  # the large-shape tail is known before the first shape
    followed = [(m, eta) for m, eta in search if m.endswith(" timings done")]
    assert followed, seen  # the worker's shapes were followed while it ran
    assert all(eta is not None and eta >= 0 for _, eta in followed)
    counts = [int(m.rsplit(": ", 1)[1].split()[0]) for m, _ in followed]
    assert counts == sorted(counts) and counts[0] > 0


def test_search_time_left_counts_the_known_tail_down():
    from clustereval.analysis.matmul import SearchPlan
    from clustereval.workers.matmul_bench import HOT_SETTLE_S, HOT_WARM_S

    plan = GpuSettings(coarse_budget=10, soak_min_s=20.0, settle_s=5.0, sustain_s=10.0)
    hot_next, held_next = HOT_SETTLE_S + 1.0, 5.0 + 10.0
    held = 20.0 + 10.0 + (SearchPlan.num_sustain - 1) * held_next
    tail = plan.search_time_left_s([], 0.0)
    assert tail == HOT_WARM_S + 1.0 + (SearchPlan.num_hot - 1) * hot_next + held
    # halfway through the budget (10 + the confirmations) at 1 s a shape
    expected = 10 + SearchPlan.num_confirm
    assert plan.search_time_left_s(["screen"] * 9, 9.0) == (expected - 9) * 1.0 + tail
    # past the budget only the tail is left; then it counts down shape by shape
    assert plan.search_time_left_s(["screen"] * 40, 40.0) == tail
    assert plan.search_time_left_s(["screen"] * 40 + ["hot"] * 2, 44.0) == (SearchPlan.num_hot - 2) * hot_next + held
    done = ["screen"] * 40 + ["hot"] * 8 + ["sustained"] * SearchPlan.num_sustain
    assert plan.search_time_left_s(done, 90.0) == 0.0
