"""Parsers and judgements of the compute phases: dcgmi diag, nvidia-smi compute apps, the
three-pass rule, SM wave coverage, GPU names."""

import pytest

from clustereval.analysis.gpu_passes import below_median, gpu_label, sm_coverage, three_pass
from clustereval.probes.dcgmi import connection_error, cuda_major, failed_gpus, parse_diag
from clustereval.probes.gpu_procs import foreign_apps, parse_compute_apps, parse_gpu_rows


def _read(fixtures, rel):
    return (fixtures / rel).read_text()


def test_dcgm4_pass(fixtures):
    rep = parse_diag(_read(fixtures, "dcgmi/handwritten-diag-r2-pass-dcgm4.txt"))
    assert rep.ran and rep.version == "4.2.3" and not rep.errors
    assert [(r.plugin, r.category, r.result) for r in rep.results] == [
        ("software", "Deployment", "Pass"), ("memory", "Hardware", "Pass"),
        ("pcie", "Integration", "Pass"), ("memory_bandwidth", "Stress", "Pass")]
    assert all(r.gpus == {0: "Pass", 1: "Pass"} for r in rep.results)
    assert failed_gpus(rep) == []


def test_dcgm4_fail_names_the_gpu_and_keeps_the_wrapped_warning(fixtures):
    rep = parse_diag(_read(fixtures, "dcgmi/handwritten-diag-r2-fail-dcgm4.txt"))
    memory = next(r for r in rep.results if r.plugin == "memory")
    assert memory.result == "Fail" and memory.gpus == {0: "Pass", 1: "Fail"}
    assert memory.messages == ["Warning: GPU1 GPU 1 Error using CUDA API cudaMemcpy Check DCGM and system logs "
                               "for errors. Reset GPU. Restart DCGM. Rerun diagnostics."]
    assert next(r for r in rep.results if r.plugin == "memory_bandwidth").result == "Skip"
    assert failed_gpus(rep) == [1]


def test_dcgm3_fail_list_form(fixtures):
    rep = parse_diag(_read(fixtures, "dcgmi/handwritten-diag-r2-fail-dcgm3.txt"))
    assert rep.ran and rep.version == "3.3.9"
    assert len([r for r in rep.results if r.category == "Deployment"]) == 9
    assert next(r for r in rep.results if r.plugin == "Inforom").messages == []  # not an "Info" row
    mem = next(r for r in rep.results if r.plugin == "GPU Memory")
    assert mem.result == "Fail" and mem.gpus[0] == "Fail" and all(mem.gpus[g] == "Pass" for g in range(1, 8))
    assert mem.messages[0].startswith("Warning: GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 "
                                      "seconds into the test for GPU 0 Verify")
    assert next(r for r in rep.results if r.plugin == "PCIe").result == "Pass"
    assert failed_gpus(rep) == [0]


def test_dcgmi_without_host_engine(fixtures):
    text = _read(fixtures, "dcgmi/handwritten-diag-no-hostengine.txt")
    rep = parse_diag(text)
    assert not rep.ran and len(rep.errors) == 2 and connection_error(text)
    assert not connection_error(_read(fixtures, "dcgmi/handwritten-diag-r2-pass-dcgm4.txt"))


def test_cuda_major_from_nvidia_smi(fixtures):
    assert cuda_major(_read(fixtures, "h200x2/nvidia-smi.txt")) == "13"
    assert cuda_major("") == ""


def test_compute_apps_on_an_idle_node(fixtures):
    assert parse_compute_apps(_read(fixtures, "h200x2/nvidia-smi-compute-apps.csv")) == []


def test_foreign_processes_are_named_and_our_loads_are_not(fixtures):
    apps = parse_compute_apps(_read(fixtures, "nvidia-smi/handwritten-compute-apps-busy.csv"))
    rows = parse_gpu_rows(_read(fixtures, "nvidia-smi/handwritten-query-gpu-index.csv"))
    assert [(r.index, r.name, r.memory_mib, r.power_limit_w, r.boost_mhz) for r in rows] == [
        (0, "NVIDIA H200", 143771, 700.0, 1980.0), (1, "NVIDIA H200", 143771, 700.0, 1980.0)]
    index = {r.uuid: r.index for r in rows}
    assert [a.pid for a in apps] == [48211, 48377, 51003]
    # nothing of ours running: every process is foreign
    assert foreign_apps(apps, index, set(), {}) == [
        "pid 48211 (/usr/bin/python3) on gpu0", "pid 48377 (/opt/conda/bin/python) on gpu1",
        "pid 51003 (./train_llm) on gpu1"]
    # our loads are 48211 and 48377: only the stranger is named
    assert foreign_apps(apps, index, {48211, 48377}, {0: 1, 1: 1}) == ["pid 51003 (./train_llm) on gpu1"]
    # a pid namespace hides our pids: one unmatched process per GPU where we run a load is ours
    assert foreign_apps(apps[:1], index, set(), {0: 1}) == []
    assert foreign_apps(apps, index, set(), {0: 1, 1: 1}) == [
        "pid 48377 (/opt/conda/bin/python) on gpu1", "pid 51003 (./train_llm) on gpu1"]


def test_three_pass_rule():
    # pass 1: gpu3 6% low, gpu5 3% low -> both flagged; gpu3 stays low, gpu5's dip does not repeat
    p1 = {0: 750.0, 1: 752.0, 2: 748.0, 3: 705.0, 4: 751.0, 5: 727.0, 6: 749.0, 7: 750.0}
    v = three_pass([p1])
    assert v.flagged == [3, 5] and v.needs_more_passes and not v.underperforming
    p2 = {**p1, 3: 701.0, 5: 763.0}
    p3 = {**p1, 3: 704.0, 5: 745.0}
    v = three_pass([p1, p2, p3])
    assert v.underperforming == [3] and v.dip_not_repeated == [5]
    assert all(f > 0.05 for f in v.below[3]) and len(v.medians) == 3
    # a dead GPU (None) is not part of the median
    assert below_median({0: 700.0, 1: 702.0, 2: None, 3: 650.0}) == {3: pytest.approx(50 / 700)}
    assert three_pass([{0: 700.0, 1: 701.0}]).flagged == []
    assert three_pass([]).medians == []


def test_sm_coverage_from_this_gpus_sm_count():
    h200 = sm_coverage(132)
    assert (h200.num_ctas, h200.full_waves, h200.tail_ctas) == (8192, 62, 8)
    assert round(100 * h200.wave_efficiency, 1) == 99.9
    b200 = sm_coverage(148)
    assert (b200.full_waves, b200.tail_ctas) == (55, 52) and b200.wave_efficiency == 1 - 52 / 8192
    assert sm_coverage(128).tail_ctas == 0
    with pytest.raises(ValueError):
        sm_coverage(0)


def test_gpu_names():
    assert gpu_label("blah-176", 0, 7) == "blah-176(node0):gpu7"
    assert gpu_label("10.0.0.12", 3, 0) == "10.0.0.12(node3):gpu0"
