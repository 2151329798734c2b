"""Close-out text, the spec database lookups, and cross-node drift."""

from __future__ import annotations

import re

import pytest

from clustereval.analysis.environment import drift, findings
from clustereval.analysis.specs import gpu_specs, lookup_gpu, lookup_nic, nic_specs, short_gpu_name
from clustereval.records import Finding, Gap
from clustereval.records.environment import EnvironmentRecord
from clustereval.report.closeout import closeout_text
from clustereval.report.render import Rendered
from tests.envfixtures import h200_node

# -- close-out -------------------------------------------------------------------------------


def test_closeout_complete():
    text = closeout_text(Rendered("", [Finding("healthy", "GPUs", "fine")], [], []), "Cluster eval: 1 node of 8× H200")
    assert text == ("# Close-out: Cluster eval: 1 node of 8× H200\n\nThe eval is complete: nothing is missing, and every "
                    "measurement had a target to be judged against.\n")


def test_closeout_quotes_gaps_with_plans_and_questions():
    gaps = [Gap("matmul", "The GPU performance benchmarks did not run.", "run on the GPU nodes", node="n1")]
    asks = [Finding("needs_input", "shared network FS", "`/code` (2.3 TiB): 206.7 MiB/s; ask for the figures.")]
    text = closeout_text(Rendered("", asks, gaps, []), "T")
    assert "2 open items." in text
    assert "1. > The GPU performance benchmarks did not run. (n1)\n\n   Proposed plan of action: run on the GPU nodes" in text
    assert "## Needs operator input\n\n1. > **shared network FS** — `/code` (2.3 TiB)" in text
    assert text.index("## Gaps") < text.index("## Needs operator input")


# -- specs -------------------------------------------------------------------------------------

NAMES = {
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB", "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB", "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM", "NVIDIA H200 NVL": "H200 NVL", "NVIDIA GH200 480GB": "GH200 96GB",
    "NVIDIA GH200 144G HBM3e": "GH200 144GB", "NVIDIA B200": "B200", "NVIDIA GB200": "GB200",
    "NVIDIA B300 SXM6 AC": "B300", "NVIDIA L40S": "L40S", "AMD Instinct MI300X": "MI300X",
    "AMD Instinct MI325X": "MI325X", "AMD Instinct MI355X": "MI355X", "Intel Gaudi 3": "Gaudi 3",
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_lookup_by_nvidia_smi_name(name):
    spec = lookup_gpu(name)
    assert spec is not None and spec.key == NAMES[name]


def test_every_row_is_sourced_and_plausible():
    rows = gpu_specs()
    assert len(rows) >= 19
    for s in rows:
        assert s.source_url.startswith("https://"), s.key
        assert 100 < s.bf16_dense_tflops < 5000 and 0 < s.hbm_gib <= 300 and 0.5 < s.hbm_tb_s < 10, s.key
        assert 200 <= s.tdp_w <= 1500, s.key
        assert (s.nvlink_gen == 0) == (s.nvlink_uni_gb_s == 0), s.key
    for n in nic_specs():
        assert n.source_url.startswith("https://") and n.rate_gb_s in (100, 200, 400, 800)


def test_power_limit_separates_variants_and_unknown_is_none():
    h200 = lookup_gpu("NVIDIA H200", power_limit_w=700)
    assert (h200.key, h200.bf16_dense_tflops, h200.nvlink_gen, h200.nvlink_uni_gb_s) == ("H200 SXM", 989.0, 4, 450.0)
    assert lookup_gpu("NVIDIA GH200 480GB").key.startswith("GH200")  # never the H200 row
    assert lookup_gpu("NVIDIA X900") is None and lookup_gpu("") is None


def test_power_limit_picks_the_closest_tdp(monkeypatch):
    from clustereval.analysis import specs

    twins = (specs.GpuSpec("Z SXM", "V", 1, 1, 1, 1, 700, 0, 0, 0, "https://x", ("Z9",)),
             specs.GpuSpec("Z PCIe", "V", 1, 1, 1, 1, 350, 0, 0, 0, "https://x", ("Z9",)))
    monkeypatch.setattr(specs, "_gpu_specs", lambda: twins)
    assert specs.lookup_gpu("Z9", power_limit_w=360).key == "Z PCIe"
    assert specs.lookup_gpu("Z9", power_limit_w=690).key == "Z SXM"


def test_nic_lookup():
    assert lookup_nic("infiniband", 400, "MT4129").key == "ConnectX-7 NDR"
    assert lookup_nic("infiniband", 800, "MT4131").key == "ConnectX-8 XDR"
    assert lookup_nic("infiniband", 400, "MT4123") is None  # a ConnectX-6 cannot run NDR: no guess
    assert lookup_nic("efa", 100).key == "EFA 100 Gb/s" and lookup_nic("efa", 400).key == "EFA 400 Gb/s"
    assert lookup_nic("roce", 200, "MT4125").key == "ConnectX-6 HDR"


def test_short_names():
    assert [short_gpu_name(n) for n in ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X", "NVIDIA B200")] == \
        ["H200", "A100", "MI300X", "B200"]


# -- drift ---------------------------------------------------------------------------------------


def test_identical_nodes_have_no_drift():
    assert drift([h200_node("a", 0), h200_node("b", 1)]) == []
    assert drift([h200_node("a", 0)]) == []


def test_drift_lines_and_finding():
    a, b = h200_node("a", 0, hostname="a"), h200_node("b", 1, hostname="b")
    b.software.driver, b.software.nccl, b.software.torch = "575.57.08", "2.27.3", "2.10.0+cu128"
    b.gpus = b.gpus[:1]
    b.gpus[0].pcie_width_current = 8
    lines = drift([a, b])
    labels = [ln.split(":")[0] for ln in lines]
    assert labels == ["GPUs", "NVIDIA driver", "torch", "NCCL", "PCIe link width"]
    assert lines[1] == "NVIDIA driver: `580.159.04` on `a(node0)`; `575.57.08` on `b(node1)`"
    rec = EnvironmentRecord(nodes=[a, b], drift=lines)
    [f] = [f for f in findings(rec) if f.subsystem == "node consistency"]
    assert f.category == "underperforming" and "`2× NVIDIA H200`" in f.text and "`1× NVIDIA H200`" in f.text


def test_findings_name_gpus_as_host_node_gpu():
    node = h200_node("a", 2, hostname="blah-176")
    node.gpus[1].ecc_uncorrected_volatile = 2
    node.gpus[0].clock_event_reasons = "HW Slowdown (0x0000000000000008)"
    texts = [f.text for f in findings(EnvironmentRecord(nodes=[node]))]
    assert any(t.startswith("`blah-176(node2):gpu1` — 2 uncorrectable ECC errors") for t in texts)
    assert any(t.startswith("`blah-176(node2):gpu0` — clock event reasons active") for t in texts)
    assert all(re.search(r"gpu\d", t) is None or "(node2):gpu" in t for t in texts)
