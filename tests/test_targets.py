"""Every ``[targets]`` key of cluster.toml drives its verdict.

Each key is read by the real config loader, frozen into the record the run writes (the preflight
record for the GPU figure, the all-reduce record for the two bandwidths, the storage targets read
again at render time) and changes a verdict of the rendered report.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

from clustereval.config import load_config
from clustereval.phases.base import RunContext
from clustereval.phases.network import AllreducePhase
from clustereval.phases.preflight import PreflightPhase
from clustereval.phases.settings import NetworkSettings
from clustereval.records.run import PreflightRecord
from clustereval.report.lint import lint_text
from clustereval.report.render import RunView, render_report
from clustereval.store import RunState, RunStore
from clustereval.transport.factory import nodes_of
from clustereval.transport.local import LocalTransport
from tests import compute_records as cr
from tests import test_network_report as nr

TARGETS = """
[targets]
gpu_bf16_tflops = 800
nvlink_uni_gb_s = 900
internode_busbw_gb_s = 400
"""


def config_with(tmp_path, targets: str):
    (tmp_path / "scratch").mkdir(exist_ok=True)
    path = tmp_path / "cluster.toml"
    path.write_text(f'name = "t"\naccess = "local"\nlocal_scratch = "{tmp_path / "scratch"}"\n{targets}')
    return load_config(str(path))


def context(tmp_path, config) -> RunContext:
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    transport = LocalTransport()
    return RunContext(config=config, transport=transport, nodes=nodes_of(config, transport), store=store,
                      eval_python=sys.executable)


@pytest.fixture(scope="module")
def run_records(tmp_path_factory):
    """The records a real 1-node run writes with every bandwidth and GPU target set, and without."""
    out = {}
    for label, targets in (("with", TARGETS), ("without", "")):
        tmp = tmp_path_factory.mktemp(label)
        ctx = context(tmp, config_with(tmp, targets))
        pre = PreflightPhase().run(ctx)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CUDA_VISIBLE_DEVICES", "")  # the gloo path on CPU, also on a GPU machine
            ar = AllreducePhase(NetworkSettings(max_bytes=64 * 1024)).run(ctx)
        out[label] = (pre, ar)
    return out


def test_the_run_freezes_every_target_in_its_records(run_records):
    pre, ar = run_records["with"]
    assert pre.passed, pre.gaps
    assert pre.gpu_bf16_target_tflops == 800.0
    assert (ar.nvlink_target_gb_s, ar.internode_target_gb_s) == (900.0, 400.0)
    pre0, ar0 = run_records["without"]
    assert pre0.gpu_bf16_target_tflops is None
    assert (ar0.nvlink_target_gb_s, ar0.internode_target_gb_s) == (None, None)


def _compute(preflight, gpu_name="NVIDIA Hypothetical X9"):
    records = {"environment": cr.environment(name=gpu_name), "health": cr.health(),
               "matmul": cr.matmul([[{0: 745.2, 1: 741.0}]]), "lemon": cr.lemon([[{0: 735.2, 1: 741.0}]])}
    # the run's target only: this view has no network section to introduce the NCCL settings preflight read
    records["preflight"] = PreflightRecord(gpu_bf16_target_tflops=preflight.gpu_bf16_target_tflops)
    return render_report(RunView(name="t", stamp="2026-11-30-1938Z", raw_rel="raw-t-2026-11-30-1938Z",
                                 access="local", records=records))


def test_gpu_bf16_tflops_judges_an_unlisted_gpu(run_records):
    without = _compute(run_records["without"][0])
    gpus = [f for f in without.findings if f.subsystem == "GPUs"]
    assert "needs_input" in {f.category for f in gpus}
    judged = _compute(run_records["with"][0])
    gpus = [f for f in judged.findings if f.subsystem == "GPUs"]
    assert {f.category for f in gpus} == {"healthy"}, gpus
    assert "of the target 800 TFLOPS dense BF16" in gpus[0].text
    assert "The operator's target for the NVIDIA Hypothetical X9 is 800 TFLOPS dense BF16" in judged.markdown
    assert "MSMF % spec" in judged.markdown  # the runbook's column, now against the target
    assert not lint_text(judged.markdown, path="t-2026-11-30-1938Z.md")


def test_gpu_bf16_tflops_replaces_the_spec_database_figure(run_records):
    spec = _compute(run_records["without"][0], gpu_name="NVIDIA H200")
    target = _compute(run_records["with"][0], gpu_name="NVIDIA H200")
    assert "of the official" in next(f.text for f in spec.findings if f.category == "healthy")
    assert "of the target 800" in next(f.text for f in target.findings if f.category == "healthy")


def _network(ar_targets, *, intra_peak=380.0, inter_peak=None, names=("a",)):
    view = nr.view_for(list(names), intra_peaks=[intra_peak] * len(names), inter_peak=inter_peak)
    ar = view.records["allreduce"]
    view.records["allreduce"] = dataclasses.replace(ar, nvlink_target_gb_s=ar_targets.nvlink_target_gb_s,
                                                    internode_target_gb_s=ar_targets.internode_target_gb_s)
    return nr.render(view)


def test_nvlink_uni_gb_s_turns_a_healthy_intra_node_verdict_into_underperforming(run_records):
    # 380 GB/s busbw is 84% of the H200's 450 GB/s spec (healthy) and 42% of a 900 GB/s target
    _, without = _network(run_records["without"][1])
    _, with_target = _network(run_records["with"][1])
    intra = [f for f in without if f.text.startswith("intra-node:")]
    assert [f.category for f in intra] == ["healthy"]
    intra = [f for f in with_target if f.text.startswith("intra-node:")]
    assert [f.category for f in intra] == ["underperforming"] and "900" in intra[0].text


def test_internode_busbw_gb_s_judges_the_inter_node_sweep(run_records):
    _, without = _network(run_records["without"][1], inter_peak=350.0, names=("a", "b"))
    _, with_target = _network(run_records["with"][1], inter_peak=350.0, names=("a", "b"))
    inter = [f for f in without if f.text.startswith("inter-node:")]
    assert [f.category for f in inter] == ["needs_input"]
    inter = [f for f in with_target if f.text.startswith("inter-node:")]
    assert [f.category for f in inter] == ["underperforming"] and "the operator's target is 400" in inter[0].text


def test_storage_targets_judge_a_mount(tmp_path):
    from tests.test_storage_report import two_groups, view

    config = config_with(tmp_path, '[[targets.storage]]\nmount = "/code"\nbw_mib_s = { "16KiB-read" = 400 }\n')
    assert [t.mount for t in config.targets.storage] == ["/code"]
    without = render_report(view(two_groups())).findings
    with_target = render_report(view(two_groups(), list(config.targets.storage))).findings
    code = [f.category for f in without if "`/code`" in f.text]
    assert code and set(code) == {"needs_input"}
    code = [f.category for f in with_target if "`/code`" in f.text]
    assert code == ["underperforming"]  # 206.7 MiB/s against the 400 MiB/s target
