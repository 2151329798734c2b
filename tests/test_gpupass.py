"""The GPU memory and links pass: the real worker on CPU stand-ins (tiny sizes), the vote with a GPU
that really computes a wrong answer, nvbandwidth's parser on its captured H200 output, and the report
for healthy, slow-PCIe, corrupt-memory and wrong-answer GPUs through lint."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.analysis.gpupass import judge, pcie_gb_s
from clustereval.phases.gpupass import GpuPassPhase, figures_of
from clustereval.phases.settings import GpuPassSettings
from clustereval.probes import nvbandwidth
from clustereval.records import dumps, loads
from clustereval.records.gpupass import (
    GpuPassRecord,
    MemMismatch,
    MemoryHealth,
    NodePass,
    P2pCell,
    PassGpu,
    PcieLink,
    PcieRates,
    VoteCase,
)
from clustereval.report.gaps import say
from clustereval.workers import gpu_pass_bench as bench
from tests.conftest import FIXTURES
from tests.test_compute_phases import make_ctx
from tests.test_compute_report import lint, render, section

ROOT = Path(__file__).resolve().parents[1]
WRONG_MM = """import torch
_mm = torch.mm
def _wrong(a, b, *args, **kw):
    out = _mm(a, b, *args, **kw)
    if out.dtype == torch.bfloat16 and out.shape[0] == 64:
        out.view(-1)[7] += 1.0  # one element of one product off: a GPU that computes a wrong answer
    return out
torch.mm = _wrong
"""


# -- the worker's pieces on CPU tensors -----------------------------------------------------------


def test_the_memory_test_finds_a_flipped_bit_and_says_where():
    import torch

    def flip(pattern, chunks):
        if pattern == "address":
            chunks[1][100:101].bitwise_xor_(1 << 40)

    got = bench.memtest(torch, torch.device("cpu"), 4 * 2**20, 2**20, between=flip)
    assert got["bytes_tested"] == 4 * 2**20 and got["patterns"] == [n for n, _ in bench.PATTERNS]
    (bad,) = got["mismatches"]
    assert bad["pattern"] == "address" and bad["num_words"] == 1
    assert bad["first_offset_bytes"] == 2**20 + 100 * 8 and bad["got"] ^ bad["expected"] == 1 << 40
    assert bench.memtest(torch, torch.device("cpu"), 4 * 2**20, 2**20)["mismatches"] == []


def test_pcie_payload_rate_of_a_link():
    assert pcie_gb_s(5, 16) == 63.0 and pcie_gb_s(4, 16) == 31.5 and pcie_gb_s(4, 8) == 15.8
    assert pcie_gb_s(None, 16) is None and pcie_gb_s(5, 0) is None


# -- the phase with the real worker ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpupass")
    ctx = make_ctx(tmp)
    rec = GpuPassPhase(GpuPassSettings(device="cpu", cpu_gpus=2)).run(ctx)
    return tmp, ctx, rec


def test_the_phase_runs_every_step_on_two_cpu_stand_ins(cpu_run):
    tmp, ctx, rec = cpu_run
    assert rec.status == "ok" and not rec.gaps and rec.tool_rel == "tools/gpu_pass.py"
    (node,) = rec.nodes
    assert node.device == "cpu" and node.seconds > 0 and [g.gpu for g in node.gpus] == [0, 1]
    for g in node.gpus:
        assert g.copy_gb_s and g.read_gb_s and g.write_gb_s
        assert g.pcie_solo and g.pcie_solo.h2d_gb_s and g.pcie_solo.bidir_d2h_gb_s
        assert g.pcie_all and g.pcie_all.d2h_gb_s  # two GPUs: the all-at-once run too
        assert g.mem_bytes_tested == 16 * 2**20 and not g.mem_mismatches and len(g.mem_patterns) == 5
        assert len(g.vote) == len(bench.CPU_CASES) and all(len(set(c.hashes)) == 1 and len(c.hashes) == 3
                                                           for c in g.vote)
        assert all(c.ref_rel_err is not None and c.ref_rel_err < c.tolerance for c in g.vote)
    assert {(c.src, c.dst) for c in node.p2p} == {(0, 1), (1, 0)} and all(c.write_gb_s for c in node.p2p)
    assert (ctx.store.raw_dir / "gpupass" / "here.log").exists()
    assert (ctx.store.raw_dir / "tools" / "gpu_pass_bench.py").exists()
    again = loads(GpuPassRecord, dumps(rec))
    assert again == rec
    v = judge(rec)
    assert not v.problems and [len(g.members) for g in v.groups] == [2]


def test_the_report_of_a_real_cpu_run_lints(cpu_run, tmp_path):
    _, _, rec = cpu_run
    md = render({"gpupass": rec}).markdown
    body = section(md, "GPU memory and links")
    assert "**Pass**: 2 GPUs" in body and "`here(node0):gpu1`" in body and "(own)" in body
    assert "[`gpu_pass.py`](raw-t-2026-11-30-1938Z/tools/gpu_pass.py)" in md
    assert "Needs operator input" in md  # CPU stand-ins: no spec to judge bandwidth by
    lint(md, tmp_path)


def test_a_worker_that_cannot_start_is_the_nodes_gap(tmp_path):
    bad = tmp_path / "nopython"
    bad.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 1\n")
    bad.chmod(0o755)
    ctx = make_ctx(tmp_path, str(bad))
    rec = GpuPassPhase(GpuPassSettings(device="cpu", start_timeout_s=30)).run(ctx)
    assert rec.status == "partial" and [g.kind for g in rec.gaps] == ["gpupass.worker-failed"]
    assert "no torch here" in say(rec.gaps[0]).text


def test_every_copy_figure_keeps_each_repeats_rate_and_is_their_bytes_over_their_time(cpu_run):
    _, _, rec = cpu_run
    iters = 3  # the CPU stand-ins' repeats

    def over_summed_time(samples):  # equal bytes a repeat: the harmonic mean of the repeats' rates
        return len(samples) / sum(1 / x for x in samples)

    for g in rec.nodes[0].gpus:
        solo = g.pcie_solo
        figures = [(g.copy_gb_s, g.copy_samples_gb_s), (g.read_gb_s, g.read_samples_gb_s),
                   (g.write_gb_s, g.write_samples_gb_s), (solo.h2d_gb_s, solo.h2d_samples_gb_s),
                   (solo.d2h_gb_s, solo.d2h_samples_gb_s), (solo.bidir_h2d_gb_s, solo.bidir_h2d_samples_gb_s),
                   (solo.bidir_d2h_gb_s, solo.bidir_d2h_samples_gb_s)]
        for value, samples in figures:
            assert len(samples) == iters and all(x > 0 for x in samples)
            # the figure is rounded to 0.01 GB/s, each repeat to 0.001
            assert value == pytest.approx(over_summed_time(samples), rel=0.002, abs=0.006)
    assert all(len(c.write_samples_gb_s) == iters for c in rec.nodes[0].p2p)


def test_one_direction_is_timed_while_the_other_runs_all_along():
    """nvbandwidth's bidirectional method on CPU tensors: warm-ups on both sides, the load twice the
    bytes and running from before the first timed copy to after the last."""
    import threading
    import time

    import torch

    calls: dict[str, list[float]] = {"measured": [], "load": []}
    src, dst = torch.ones(2**20, dtype=torch.uint8), torch.empty(2**20, dtype=torch.uint8)
    big_src, big_dst = torch.ones(2**21, dtype=torch.uint8), torch.empty(2**21, dtype=torch.uint8)
    lock = threading.Lock()

    def stamp(name, work):
        def run():
            with lock:
                calls[name].append(time.perf_counter())
            return work()
        return run

    got = bench.under_load(torch, torch.device("cpu"), stamp("measured", lambda: dst.copy_(src)),
                           stamp("load", lambda: big_dst.copy_(big_src)), 2**20, 5)
    assert len(got.samples_gb_s) == 5 and got.gb_s > 0
    assert len(calls["measured"]) == bench.LOAD_WARMUP + 5 and len(calls["load"]) == bench.LOAD_WARMUP + 5
    assert bool(torch.equal(dst, src)) and bool(torch.equal(big_dst, big_src))


# -- the vote: one GPU that really computes a wrong answer ----------------------------------------


def _worker_events(env_extra: dict[str, str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*env_extra.pop("PREPEND", []), str(ROOT)]), **env_extra}
    out = subprocess.run([sys.executable, "-m", "clustereval.workers.gpu_pass", "--device", "cpu",
                          "--hbm-bytes", str(2**20), "--pcie-bytes", str(2**20), "--iters", "1"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_the_vote_names_the_gpu_that_computed_a_wrong_answer(tmp_path):
    """Four worker processes (four one-GPU nodes); the third's torch.mm is made wrong for one bf16
    shape, so it really returns other bits."""
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "sitecustomize.py").write_text(WRONG_MM)
    rec = GpuPassRecord(tool_rel="tools/gpu_pass.py")
    for i in range(4):
        node = NodePass(node=f"n{i}", index=i, hostname=f"host-{i}", gpus=[PassGpu(gpu=0)])
        GpuPassPhase._read(_worker_events({"PREPEND": [str(wrong)]} if i == 2 else {}), node)
        rec.nodes.append(node)
    v = judge(rec)
    votes = v.of("vote")
    assert [p.label for p in votes] == ["host-2(node2):gpu0"]
    assert votes[0].facts["cases"] == ["bfloat16 64×64×64"] and votes[0].facts["group_size"] == 4
    md = render({"gpupass": rec}).markdown
    assert "`host-2(node2):gpu0` — computed other bits than the majority of its 4 GPUs for bfloat16 64×64×64" in md
    assert "| `host-2(node2):gpu0` |" in md and "dissents" in md
    lint(md, tmp_path)


# -- nvbandwidth's output, captured on a 1x H200 ---------------------------------------------------


def test_nvbandwidth_json_of_an_h200():
    run = nvbandwidth.parse((FIXTURES / "nvbandwidth" / "h200x1-v0.8.json").read_text())
    assert run.version == "v0.8" and not run.error
    assert run.testcase("device_local_copy").per_gpu_gb_s() == {0: 2083.92}
    assert run.testcase("host_to_device_memcpy_ce").per_gpu_gb_s() == {0: 55.4586}
    assert run.testcase("device_to_device_memcpy_read_ce") is None  # one GPU: Waived
    assert [t.status for t in run.testcases].count("Waived") == 3
    figures = figures_of(run)
    assert {f.testcase for f in figures} == {"device_local_copy", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                                             "host_to_device_bidirectional_memcpy_ce",
                                             "device_to_host_bidirectional_memcpy_ce", "host_to_all_memcpy_ce",
                                             "all_to_host_memcpy_ce"}


def test_nvbandwidth_that_printed_no_json():
    assert nvbandwidth.parse("nvbandwidth: error while loading shared libraries: libnvidia-ml.so.1\n").error
    assert nvbandwidth.parse('{"nvbandwidth": {"error": "cudaErrorNoDevice: no CUDA-capable device"}}').error


# -- the report for hand-built H200 nodes -----------------------------------------------------------


# ten repeats around a figure, as the worker times them copy by copy: about 0.3% repeat noise
REPEAT_SPREAD = (-0.003, 0.002, 0.0, 0.004, -0.002, 0.001, -0.001, 0.003, -0.004, 0.0)


def _repeats(value: float) -> list[float]:
    return [round(value * (1 + d), 2) for d in REPEAT_SPREAD]


def _h200(gpu: int, *, copy=2150.0, h2d=55.5, d2h=55.4, gen=5, width=16, mismatches=(), ecc_after=0,
          hashes=("a1", "b2")) -> PassGpu:
    health = MemoryHealth(ecc_enabled=True, ecc_uncorrected_volatile=0, remapped_uncorrected=0, remap_failed=False,
                          remap_pending=False, retired_pending=False)
    after = MemoryHealth(**{**vars(health), "ecc_uncorrected_volatile": ecc_after})
    return PassGpu(gpu=gpu, name="NVIDIA H200", sm_count=132, memory_gib=139.8,
                   link=PcieLink(gen_current=1, gen_max=5, width_current=width, width_max=16, gen_under_load=gen,
                                 width_under_load=width),
                   health_before=health, health_after=after, copy_gb_s=copy, read_gb_s=2300.0, write_gb_s=2500.0,
                   copy_samples_gb_s=_repeats(copy),
                   pcie_solo=PcieRates(h2d, d2h, 51.0, 50.5, _repeats(h2d), _repeats(d2h), _repeats(51.0),
                                       _repeats(50.5)),
                   pcie_all=PcieRates(h2d - 2, d2h - 2, 45.0, 44.0),
                   mem_bytes_tested=120 * 2**30, mem_patterns=[n for n, _ in bench.PATTERNS],
                   mem_mismatches=list(mismatches),
                   vote=[VoteCase("bfloat16", [4096, 4096, 4096], [hashes[0]] * 3, 0.0011, 1e-2),
                         VoteCase("float32", [1024, 1024, 1024], [hashes[1]] * 3, 2e-7, 1e-5)])


def _rec(gpus_per_node: list[list[PassGpu]]) -> GpuPassRecord:
    nodes = []
    for i, gpus in enumerate(gpus_per_node):
        n = NodePass(node=f"gpu-{i}", index=i, hostname=f"gpu-{i}", torch="2.11.0+cu130", cuda="13.0", device="cuda",
                     telemetry=True, gpus=gpus, seconds=41.0)
        if len(gpus) > 1:
            n.p2p = [P2pCell(a.gpu, b.gpu, True, 380.0, 740.0) for a in gpus for b in gpus if a.gpu != b.gpu]
        nodes.append(n)
    return GpuPassRecord(quick=True, tool_rel="tools/gpu_pass.py", nodes=nodes)


def test_healthy_h200_nodes(tmp_path):
    rec = _rec([[_h200(0), _h200(1)], [_h200(0), _h200(1)]])
    rec.nodes[0].nvbandwidth = "v0.8"
    run = nvbandwidth.parse((FIXTURES / "nvbandwidth" / "h200x1-v0.8.json").read_text())
    rec.nodes[0].nvb_figures = figures_of(run)
    md = render({"gpupass": rec}).markdown
    body = section(md, "GPU memory and links")
    assert "**Pass**: 4 GPUs" in body and "Gen5 x16 of Gen5 x16" in body
    assert "HBM copy target 1920.0 GB/s" in body and "PCIe target 47.2 GB/s" in body
    assert "| `gpu-0(node0):gpu0` | HBM copy | `device_local_copy` | 2150.0 | 2083.9 | 1.032 |" in body
    assert "[`nvbandwidth`](https://github.com/NVIDIA/nvbandwidth)" in md
    findings = md[md.index("## Findings"):]
    assert "### Healthy subsystems" in findings and "HBM copy 2150.0 GB/s, PCIe H2D 55.5 GB/s on 4 GPUs" in findings
    lint(md, tmp_path)


def test_slow_pcie_gpu_is_named_with_its_link(tmp_path):
    rec = _rec([[_h200(0), _h200(1, h2d=24.1, d2h=23.9, gen=4, width=8)], [_h200(0), _h200(1)]])
    v = judge(rec)
    assert {p.kind for p in v.problems} == {"pcie-link", "pcie-slow"}  # below target: not named again as an outlier
    assert {p.label for p in v.problems} == {"gpu-0(node0):gpu1"}
    md = render({"gpupass": rec}).markdown
    assert "**Fail**: `gpu-0(node0):gpu1`" in md
    bullet = next(line for line in md.splitlines() if line.startswith("- **GPU memory and links** — `gpu-0(node0):gpu1`"))
    assert "PCIe link at Gen4 x8 under load, of a possible Gen5 x16" in bullet
    assert "PCIe H2D 24.1 GB/s and D2H 23.9 GB/s, below its 47.2 GB/s target" in bullet
    assert "fleet median" not in bullet and "### Underperforming subsystems" in md
    lint(md, tmp_path)


def test_corrupt_memory_gpu_is_named_with_the_pattern_and_the_new_ecc_errors(tmp_path):
    bad = MemMismatch("0x55", 3, 8 * 2**30 + 4096, 0x5555555555555555, 0x5555555555575555)
    rec = _rec([[_h200(0), _h200(1, mismatches=[bad], ecc_after=2)]])
    md = render({"gpupass": rec}).markdown
    bullet = next(line for line in md.splitlines() if line.startswith("- **GPU memory and links** — `gpu-0(node0):gpu1`"))
    assert "3 words of 8 bytes read back wrong under the 0x55 pattern" in bullet
    assert "ecc uncorrected volatile 0 → 2" in bullet
    assert "| 120 GiB: 3 bad words |" in md
    lint(md, tmp_path)


def test_wrong_answer_gpu_is_the_dissenter_and_two_gpus_without_a_majority_are_both_named(tmp_path):
    rec = _rec([[_h200(0), _h200(1), _h200(2, hashes=("ff", "b2"))]])
    md = render({"gpupass": rec}).markdown
    assert "- **GPU memory and links** — `gpu-0(node0):gpu2` — computed other bits than the majority of its 3 GPUs for " \
           "bfloat16 4096×4096×4096" in md
    assert "1 GPU dissented" in md
    lint(md, tmp_path)
    two = judge(_rec([[_h200(0), _h200(1, hashes=("ff", "b2"))]]))
    assert sorted(p.label for p in two.of("vote")) == ["gpu-0(node0):gpu0", "gpu-0(node0):gpu1"]
    assert two.of("vote")[0].facts["cases"] == ["bfloat16 4096×4096×4096 (no majority)"]


def test_a_one_gpu_node_checks_its_repeats_and_the_reference(tmp_path):
    g = _h200(0)
    g.vote[0].hashes = ["a1", "a1", "zz"]
    g.vote[1].ref_rel_err = 3e-3
    g.pcie_all = None  # a one-GPU node has no all-at-once run
    v = judge(_rec([[g]]))
    assert sorted(p.kind for p in v.problems) == ["reference", "repeat"]
    md = render({"gpupass": _rec([[g]])}).markdown
    assert "its own 3 rounds of the bfloat16 4096×4096×4096 matmul gave 2 distinct values" in md
    # one GPU: no all-at-once column and no rule for it (nothing shares its link in this pass)
    assert "all GPUs at once" not in md and "| one GPU |" not in md
    lint(md, tmp_path)


def test_operator_targets_replace_the_spec(tmp_path):
    rec = _rec([[_h200(0), _h200(1)]])
    rec.target_hbm_copy_gb_s, rec.target_pcie_gb_s = 2200.0, 56.0
    v = judge(rec, hbm_target_gb_s=2200.0, pcie_target_gb_s=56.0)
    assert {p.kind for p in v.problems} == {"hbm-slow", "pcie-slow"}
    md = render({"gpupass": rec}).markdown
    assert "HBM copy target 2200.0 GB/s (the operator's target; the HBM copy column)" in md
    lint(md, tmp_path)


def test_every_gpupass_gap_is_worded_and_lints(tmp_path):
    from clustereval.records import Gap

    gaps = [Gap("gpupass", node="gpu-0", kind="gpupass.busy", facts={"processes": ["pid 7 (python) on gpu1"]}),
            Gap("gpupass", node="gpu-0", kind="gpupass.worker-failed", facts={"error": "RuntimeError: CUDA error: 700"}),
            Gap("gpupass", kind="gpupass.gpu-error", facts={"node": "gpu-0", "gpu": 1, "step": "memtest",
                                                             "error": "RuntimeError: out of memory"}),
            Gap("gpupass", node="gpu-0", kind="gpupass.nvbandwidth-failed", facts={"rc": 1, "error": "no CUDA device"})]
    rec = _rec([[_h200(0), _h200(1)]])
    rec.gaps, rec.status = gaps, "partial"
    md = render({"gpupass": rec}).markdown
    for g in gaps:
        assert say(g).text and say(g).plan
    assert "### Gaps" in md and "`RuntimeError: out of memory`" in md
    lint(md, tmp_path)


# -- summary.json and diff carry the pass's figures -------------------------------------------------


def test_summary_figures_and_a_diff_that_names_a_slower_pcie_and_a_corrupt_gpu():
    from clustereval.analysis.diff import diff_summaries
    from clustereval.analysis.summary import build_summary
    from clustereval.report.diff import render_diff
    from clustereval.report.lint import lint_text
    from clustereval.store import RunState

    old = build_summary(RunState(name="a", stamp="2026-11-30-1938Z"), {"gpupass": _rec([[_h200(0), _h200(1)]])}, [], [])
    ids = {f["id"]: f for f in old["figures"]}
    assert set(ids) == {f"{k}/node0/gpu{g}" for k in ("hbm-copy", "pcie-h2d", "pcie-d2h") for g in (0, 1)} | {
        "p2p-write/node0/gpu0-gpu1", "p2p-write/node0/gpu1-gpu0"}
    assert ids["pcie-h2d/node0/gpu1"]["value"] == 55.5 and ids["pcie-h2d/node0/gpu1"]["unit"] == "GB/s"
    bad = MemMismatch("zeros", 1, 0, 0, 1)
    new = build_summary(RunState(name="a", stamp="2026-12-01-0900Z"),
                        {"gpupass": _rec([[_h200(0, mismatches=[bad]), _h200(1, h2d=40.0)]])}, [], [])
    rec = diff_summaries(old, new)
    beyond = {c.id: c for c in rec.beyond}
    # gpu1's H2D fell 28%; gpu0's figures held but its memory test now fails: every one of them changed
    assert set(beyond) == {"pcie-h2d/node0/gpu1", "hbm-copy/node0/gpu0", "pcie-h2d/node0/gpu0", "pcie-d2h/node0/gpu0"}
    assert beyond["pcie-h2d/node0/gpu1"].change_frac < -0.25
    assert beyond["hbm-copy/node0/gpu0"].new_state == "memory errors"
    assert lint_text(render_diff(rec, "raw-a-2026-12-01-0900Z")) == []


def test_the_fleet_names_a_gpu_whose_pcie_repeats_sit_below_its_peers_and_old_records_still_read(tmp_path):
    """4.5% under its peers' H2D is inside the pass's own 5% rule, but ten repeats at 0.3% noise show it
    is real: the fleet statistics name it, summary.json carries the kind; a record from before the
    repeats were kept still reads, summarises and renders."""
    from clustereval.analysis.fleet import fleet_judgements
    from clustereval.analysis.summary import build_summary
    from clustereval.store import RunState

    rec = _rec([[_h200(0), _h200(1)], [_h200(0), _h200(1, h2d=53.0)]])
    assert judge(rec).problems == []  # below the 5% outlier rule, above the target
    (h2d,) = [k for k in fleet_judgements({"gpupass": rec}) if k.kind == "pcie-h2d"]
    assert [u.unit for u in h2d.slow] == ["gpu-1(node1):gpu1"]
    md = render({"gpupass": rec}).markdown
    assert ("fleet-relative: `gpu-1(node1):gpu1` — PCIe H2D 53.0 GBps, the mean of 10 samples (52.8 GBps to "
            "53.2 GBps), 4.5% below the median of the 4 GPUs of its kind (NVIDIA H200), 55.5 GBps") in md
    lint(md, tmp_path)
    doc = build_summary(RunState(name="a", stamp="2026-12-01-0900Z"), {"gpupass": rec}, [], [])
    fleet = {(f["kind"], f["group"]): f for f in doc["fleet"]}
    assert [s["subject"] for s in fleet[("pcie-h2d", "NVIDIA H200")]["slow"]] == ["gpu-1(node1):gpu1"]
    fig = {f["id"]: f for f in doc["figures"]}["pcie-h2d/node1/gpu1"]
    assert fig["value"] == 53.0 and len(fig["samples"]) == 10 and fig["noise_df"] > 9

    old = json.loads(dumps(rec))
    for node in old["nodes"]:
        for g in node["gpus"]:
            for part in (g, g["pcie_solo"], g["pcie_all"]):
                for key in [k for k in part if k.endswith("_samples_gb_s")]:
                    del part[key]
    again = loads(GpuPassRecord, json.dumps(old))
    assert again.nodes[1].gpus[1].pcie_solo.h2d_samples_gb_s == [] and again.nodes[1].gpus[1].pcie_solo.h2d_gb_s == 53.0
    doc = build_summary(RunState(name="a", stamp="2026-12-01-0900Z"), {"gpupass": again}, [], [])
    fig = {f["id"]: f for f in doc["figures"]}["pcie-h2d/node1/gpu1"]
    # three of the four peers are identical: their spread is nil, so there is no noise to judge by
    assert fig["samples"] == [53.0] and fig["noise_frac"] is None and fig["noise_df"] == 0
    lint(render({"gpupass": again}).markdown, tmp_path)


def test_the_dcgm_gap_says_once_that_the_pass_stood_in_and_not_when_the_pass_did_not_run(tmp_path):
    from clustereval.analysis.summary import build_summary
    from clustereval.phases.health import dcgm_missing_gap
    from clustereval.records.compute import HealthRecord
    from clustereval.store import RunState

    def health():
        return HealthRecord(status="not-run", gaps=[dcgm_missing_gap(f"gpu-{i}", "ubuntu:24.04:debian", "13")
                                                    for i in range(3)])

    stands = "its memory pattern test, PCIe checks and correctness vote are this run's GPU health evidence"
    rec = _rec([[_h200(0), _h200(1)], [_h200(0)], [_h200(0)]])
    rec.nodes[2].gpus[0].vote = []  # node 2's vote did not finish: the pass is not its health evidence
    rendered = render({"health": health(), "gpupass": rec})
    md = rendered.markdown
    body = md[md.index("## Compute"):md.index("## Findings")]
    assert md.count(stands) == 1
    assert ("is not installed on gpu-0, so the hardware health check did not run there. The GPU memory and links "
            "pass ran there and on the 1 other node without DCGM: " + stands + " on those nodes.") in body
    assert body.count("is not installed on gpu-") == 3  # every node's own Gap, the sentence on one of them
    assert sum(stands in g.text for g in rendered.gaps) == 1 and len(rendered.gaps) == 3  # the close-out too
    lint(md, tmp_path)
    doc = build_summary(RunState(name="a", stamp="2026-12-01-0900Z"), {"health": health(), "gpupass": rec},
                        rendered.findings, rendered.gaps)
    assert sum(stands in g["text"] for g in doc["gaps"]) == 1

    one = _rec([[_h200(0)]])
    md = render({"health": HealthRecord(status="not-run", gaps=[dcgm_missing_gap("gpu-0", "", "")]),
                 "gpupass": one}).markdown
    assert "The GPU memory and links pass ran there: " + stands + " there." in md
    lint(md, tmp_path)

    failed = _rec([[_h200(0), _h200(1)]])
    failed.status, failed.nodes[0].error = "partial", "gpupass.worker-failed"
    skipped = GpuPassRecord(status="skipped")
    for gp in (failed, skipped, None):
        recs = {"health": health(), **({"gpupass": gp} if gp is not None else {})}
        md = render(recs).markdown
        assert stands not in md and "is not installed on gpu-0, so the hardware health check did not run there." in md
        lint(md, tmp_path)


# -- the 4-node namespace bed: the pass over SSH, one node's Python computing a wrong answer ---------


def test_the_vote_across_four_nodes_over_ssh_names_the_node_that_computed_a_wrong_answer(netns_cluster, tmp_path):
    from clustereval.config import Config
    from clustereval.phases.base import RunContext
    from clustereval.store import RunState, RunStore

    cluster = netns_cluster(4)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "sitecustomize.py").write_text(WRONG_MM)
    odd = cluster.nodes[2].name
    python = tmp_path / "python"  # node2's interpreter: the same Python, with torch.mm made wrong there
    python.write_text(f'#!/bin/sh\nif [ "$(hostname)" = "{odd}" ]; then PYTHONPATH="{wrong}:$PYTHONPATH"; '
                      f'export PYTHONPATH; fi\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes), ssh=cluster.ssh_settings(),
                    local_scratch=str(cluster.scratch_dir), eval_python=str(python))
    ctx = RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store,
                     eval_python=str(python))
    rec = GpuPassPhase(GpuPassSettings(device="cpu", cpu_gpus=1)).run(ctx)
    assert not rec.gaps and [n.hostname for n in rec.nodes] == [n.name for n in cluster.nodes]
    v = judge(rec)
    assert [(p.label, p.kind) for p in v.problems] == [(f"{odd}(node2):gpu0", "vote")]
    md = render({"gpupass": rec}).markdown
    assert f"`{odd}(node2):gpu0` — computed other bits than the majority of its 4 GPUs" in md
    lint(md, tmp_path)


def test_junit_fails_the_gpus_case_with_the_named_gpu():
    from clustereval.analysis.summary import build_summary
    from clustereval.report.junit import junit_xml
    from clustereval.store import RunState

    recs = {"gpupass": _rec([[_h200(0), _h200(1, h2d=24.1, d2h=23.9, gen=4, width=8)]])}
    rendered = render(recs)
    xml = junit_xml(build_summary(RunState(name="a", stamp="2026-12-01-0900Z"), recs, rendered.findings,
                                  rendered.gaps))
    assert '<testcase classname="clustereval.verdicts" name="GPUs"' in xml
    assert "<failure" in xml and "gpu-0(node0):gpu1" in xml and "PCIe link at Gen4 x8 under load" in xml


def test_without_nvml_the_counters_come_from_nvidia_smi_q():
    """The captured `nvidia-smi -q` of a 2x H200: the link and the memory-health counters, before and
    after; a second reading with a new uncorrectable error and a pending remap is named."""
    from clustereval.phases.gpupass import from_smi
    from clustereval.probes import nvsmi_q

    text = (FIXTURES / "h200x2" / "nvidia-smi-q.txt").read_text()
    worse = text.replace("            DRAM Uncorrectable                         : 0", "            DRAM Uncorrectable                         : 1", 1)
    worse = worse.replace("        Pending                                        : No", "        Pending                                        : Yes", 1)
    assert worse != text
    node = NodePass(node="n", hostname="h200", gpus=[PassGpu(gpu=0, name="NVIDIA H200"), PassGpu(gpu=1, name="NVIDIA H200")])
    from_smi(node, nvsmi_q.parse(text), nvsmi_q.parse(worse))
    g0, g1 = node.gpus
    assert (g0.link.gen_max, g0.link.gen_current, g0.link.width_max, g0.link.gen_gpu_max) == (5, 5, 16, 5)
    assert g0.health_before.ecc_enabled is True and g0.health_before.ecc_uncorrected_volatile == 0
    assert g0.health_before.remapped_uncorrected == 0 and g0.health_before.remap_failed is False
    assert g0.health_before.retired_sbe is None  # N/A on an H200: retired pages are Hopper's remapped rows
    assert g0.health_after.ecc_uncorrected_volatile == 1 and g0.health_after.remap_pending is True
    assert g1.health_after == g1.health_before
    v = judge(GpuPassRecord(nodes=[node]))
    (p,) = v.of("ecc")
    assert p.label == "h200(node0):gpu0" and p.facts == {"grew": {"ecc_uncorrected_volatile": (0, 1)},
                                                         "flags": ["remap_pending"]}


def test_a_gpu_below_the_fleet_but_above_its_target_is_an_outlier_with_its_node_median(tmp_path):
    rec = _rec([[_h200(0), _h200(1, copy=1990.0)], [_h200(0), _h200(1)]])
    v = judge(rec)
    (p,) = v.problems
    assert (p.label, p.kind, p.facts["measure"], p.facts["fleet_median"]) == ("gpu-0(node0):gpu1", "outlier",
                                                                             "copy_gb_s", 2150.0)
    md = render({"gpupass": rec}).markdown
    assert ("HBM copy 1990.0 GB/s, 7.4% below the fleet median of 2150.0 GB/s (its node's median 2070.0 GB/s)"
            in md)
    lint(md, tmp_path)


def test_operator_targets_from_cluster_toml_reach_the_record_and_the_spec_table_has_pcie(tmp_path):
    from clustereval.analysis.specs import lookup_gpu
    from clustereval.configload import load_config
    from clustereval.errors import ClusterEvalError

    cfg = tmp_path / "cluster.toml"
    cfg.write_text('name = "t"\naccess = "local"\n[targets]\nhbm_copy_gb_s = 2000\npcie_gb_s = 50.5\n')
    targets = load_config(cfg).targets
    assert (targets.hbm_copy_gb_s, targets.pcie_gb_s) == (2000.0, 50.5)
    cfg.write_text('name = "t"\naccess = "local"\n[targets]\npcie_gb_s = -3\n')
    with pytest.raises(ClusterEvalError) as info:
        load_config(cfg)
    assert any("pcie_gb_s" in str(p) for p in info.value.problems)
    ctx = make_ctx(tmp_path)
    ctx.config = dataclasses.replace(ctx.config, targets=targets)
    rec = GpuPassPhase(GpuPassSettings(device="cpu")).run(ctx)
    assert (rec.target_hbm_copy_gb_s, rec.target_pcie_gb_s) == (2000.0, 50.5)
    spec = lookup_gpu("NVIDIA H200")
    assert spec is not None and (spec.pcie_gen, spec.pcie_lanes) == (5, 16) and pcie_gb_s(5, 16) == 63.0
    assert lookup_gpu("NVIDIA A100-SXM4-80GB").pcie_gen == 4


def test_the_worker_output_of_a_real_h200_reads_into_a_healthy_record_and_a_lint_clean_report(tmp_path):
    """The quick pass as the worker printed it on a lent 1x H200, beside nvbandwidth's JSON of the same call."""
    events = [json.loads(line) for line in (FIXTURES / "gpupass" / "h200x1-quick.jsonl").read_text().splitlines()]
    node = NodePass(node="vm", index=0, hostname="vm")
    GpuPassPhase._read(events, node)
    (g,) = node.gpus
    assert g.name == "NVIDIA H200" and g.sm_count == 132
    assert g.copy_gb_s == pytest.approx(2132.5) and g.pcie_solo and g.pcie_solo.h2d_gb_s == pytest.approx(55.24)
    assert g.mem_bytes_tested > 100 * 2**30 and not g.mem_mismatches and len(g.mem_patterns) == 5
    run = nvbandwidth.parse((FIXTURES / "nvbandwidth" / "h200x1-v0.8-second-call.json").read_text())
    node.nvbandwidth, node.nvb_figures = "v0.8", figures_of(run)
    rec = GpuPassRecord(quick=True, tool_rel="tools/gpu_pass.py", nodes=[node])
    assert judge(rec).problems == []
    md = render({"gpupass": rec}).markdown
    assert "2132.5" in section(md, "GPU memory and links") and "2096.6" in section(md, "GPU memory and links")
    lint(md, tmp_path)


def test_the_planted_bit_flip_on_a_real_h200_names_the_gpu_the_word_and_the_bit():
    (e,) = [json.loads(line) for line in (FIXTURES / "gpupass" / "h200x1-planted.jsonl").read_text().splitlines()]
    (m,) = e["mismatches"]
    assert e["gpu"] == 0 and m["num_words"] == 1 and m["expected"] ^ m["got"] == 1 << 17


def test_the_copying_thread_is_bound_near_its_gpu_and_given_back_its_cpus():
    """NVML cannot run here: a stand-in for its one call binds this thread to one CPU, as the driver
    binds it to the GPU's; the thread's own CPUs come back after the block, and without NVML nothing
    is bound."""
    import threading

    from clustereval.workers.gpu_pass_nvml import near_gpu

    before = os.sched_getaffinity(0)
    one = min(before)

    class Driver:
        @staticmethod
        def nvmlDeviceSetCpuAffinity(handle):  # noqa: N802 - NVML's name
            os.sched_setaffinity(0, {one})

    seen = {}

    def copying_thread():
        with near_gpu(Driver, object()) as bound:
            seen["inside"], seen["bound"] = os.sched_getaffinity(0), bound
        seen["after"] = os.sched_getaffinity(0)

    t = threading.Thread(target=copying_thread)
    t.start()
    t.join()
    assert seen == {"inside": {one}, "bound": True, "after": before}
    assert os.sched_getaffinity(0) == before  # another thread's binding never reached this one
    with near_gpu(None, None) as bound:
        assert bound is False and os.sched_getaffinity(0) == before


def test_a_real_h200s_repeats_read_into_figures_that_are_their_bytes_over_their_summed_time(tmp_path):
    """The quick pass with each repeat's rate kept, as the worker printed it on a lent 1x H200 (the call
    that re-measured the bidirectional copies beside nvbandwidth, whose JSON is beside it)."""
    events = [json.loads(line) for line in
              (FIXTURES / "gpupass" / "h200x1-repeats-quick.jsonl").read_text().splitlines()]
    node = NodePass(node="vm", index=0, hostname="vm")
    GpuPassPhase._read(events, node)
    (g,) = node.gpus
    solo = g.pcie_solo
    assert solo is not None
    for figure, samples in ((g.copy_gb_s, g.copy_samples_gb_s), (solo.h2d_gb_s, solo.h2d_samples_gb_s),
                            (solo.bidir_h2d_gb_s, solo.bidir_h2d_samples_gb_s)):
        # each repeat moved the same bytes: the figure is the harmonic mean of the repeats' rates
        assert len(samples) >= 10 and figure == pytest.approx(len(samples) / sum(1 / r for r in samples), rel=1e-3)
        assert min(samples) <= figure <= max(samples)
    run = nvbandwidth.parse((FIXTURES / "nvbandwidth" / "h200x1-v0.8-third-call.json").read_text())
    node.nvbandwidth, node.nvb_figures = "v0.8", figures_of(run)
    rec = GpuPassRecord(quick=True, tool_rel="tools/gpu_pass.py", nodes=[node])
    assert judge(rec).problems == []
    lint(render({"gpupass": rec}).markdown, tmp_path)
