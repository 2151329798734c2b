"""The header and Environment section rendered from the H200 captures: lint-clean, and the
template's words and tables where the runbook puts them."""

from __future__ import annotations

import re

from clustereval.analysis.environment import drift
from clustereval.records import Gap
from clustereval.records.environment import EnvironmentRecord, FilesystemInfo, NicInfo, NodeEnvironment
from clustereval.records.run import EvalPythonRecord
from clustereval.report.lint import lint_text
from clustereval.report.render import RunView, render_report
from tests.envfixtures import h200_record

RAW = "raw-h200-2026-11-30-1643Z"


def render(records: dict, access: str = "ssh") -> str:
    view = RunView(name="h200", stamp="2026-11-30-1643Z", raw_rel=RAW, access=access, records=records)
    return render_report(view).markdown


def normalise(md: str) -> str:
    return re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", "<datetime>", md)


def test_h200_report_is_lint_clean_and_follows_the_template():
    md = render({"environment": h200_record(1)})
    assert lint_text(md) == []
    lines = md.splitlines()
    assert lines[0] == "# Cluster eval: 1 node of 2× H200"
    assert "- Nodes / GPUs: 1 node (`vm`), 2 GPUs" in lines
    assert f"Raw logs: [`{RAW}/`]({RAW}/)." in lines
    assert "1. [Environment](#environment) — host, GPU, fabric, mounts, software (inventory, not a benchmark)" in lines
    assert [ln for ln in lines if ln.startswith("### ")] == ["### Host", "### GPU", "### Fabric", "### Filesystems",
                                                            "### Software"]
    host = md[md.index("### Host"):md.index("### GPU")]
    assert host.splitlines()[4] == "| OS | Ubuntu 24.04.3 LTS |"
    assert "| PCIe gen × width (GPU links) | Gen5 ×16 on every GPU |" in host
    gpu = md[md.index("### GPU"):md.index("### Fabric")]
    assert "| HBM (high-bandwidth memory) per GPU | 140.4 GiB |" in gpu
    assert "| SM clock, boost (`clocks.max.sm`) | 1980 MHz |" in gpu
    assert "| SM clock, parked idle (`clocks.sm` with no compute) | 345 MHz |" in gpu
    assert "| Power limit / idle draw | 700 W / 78–79 W |" in gpu
    assert "MiB" not in gpu and "MAMF" not in md and "MSMF" not in md
    assert "NVLink 4, NV18 (18 links × 26.562 GB/s per GPU); spec 450 GB/s unidirectional per GPU" in md
    assert "| Local | `/` 252 GiB, ext4 on `/dev/vda` |" in md
    assert "venv" not in md and "## Findings" not in md and "### Gaps" not in md
    assert f"[`software.py`]({RAW}/tools/software.py)" in md


def test_saturated_clock_comes_from_the_compute_record_when_present():
    class Matmul:  # the compute phase's record, read by attribute only
        saturated_sm_mhz = [1470, 1560]

    md = render({"environment": h200_record(1), "matmul": Matmul()})
    assert "| SM clock, saturated (at the power limit under a dense matmul) | 1470–1560 MHz |" in md
    assert lint_text(md) == []


def test_newest_torch_note_only_when_the_eval_python_verified_it():
    rec = h200_record(1)
    plain = render({"environment": rec, "evalpython": EvalPythonRecord(torch="2.11.0+cu130", verified_newest=False)})
    # the table says it could not be verified, and the reason is in the Gaps of the section it affects
    assert "| torch | 2.11.0+cu130 (not verified as the newest release, see Gaps) |" in plain
    noted = render({"environment": rec, "evalpython": EvalPythonRecord(torch="2.11.0+cu130", verified_newest=True)})
    assert "| torch | 2.11.0+cu130 (the newest release on the PyTorch wheel index at eval time) |" in noted


def test_two_nodes_with_drift_and_a_degraded_link():
    rec = h200_record(2)
    rec.nodes[1].software.driver = "575.57.08"
    rec.nodes[1].gpus[1].pcie_width_current = 8
    rec.drift = drift(rec.nodes)
    md = render({"environment": rec})
    assert lint_text(md) == [], [str(p) for p in lint_text(md)]
    assert md.splitlines()[0] == "# Cluster eval: 2 nodes of 2× H200"
    assert "| Hostname | `vm0`(node0), `vm1`(node1) |" in md
    assert "| Driver / CUDA | 580.159.04 / 13.0 on `vm0`(node0); 575.57.08 / 13.0 on `vm1`(node1) |" in md
    assert "### Underperforming subsystems" in md
    assert "`vm1(node1):gpu1` — the PCIe link runs at ×8 where the board supports ×16" in md
    assert "NVIDIA driver: `580.159.04` on `vm0(node0)`; `575.57.08` on `vm1(node1)`" in md
    toc = md[md.index("## Table of Contents"):md.index("## Environment")]
    assert "2. [Findings](#findings)\n   1. [Underperforming subsystems](#underperforming-subsystems)" in toc


def test_fabric_filesystems_and_unknown_gpu():
    rec = h200_record(1)
    node = rec.nodes[0]
    node.nics = [NicInfo(name=f"mlx5_{i}", kind="infiniband", rate_gb_s=400, state="ACTIVE", product="ConnectX-7 NDR")
                 for i in range(2)]
    node.filesystems += [FilesystemInfo(mount="/code", size_bytes=int(2.3 * 2**40), fstype="lustre",
                                        source="10.4.138.63@tcp:/xmym3bev", shared=True)]
    node.filesystems[0].raid = "md127 RAID0 (8× 3.5 TiB NVMe)"
    for g in node.gpus:
        g.name = "NVIDIA X900"
    md = render({"environment": rec})
    assert lint_text(md) == [], [str(p) for p in lint_text(md)]
    assert ("| Network adapters (inventory) | 2× ConnectX-7 NDR InfiniBand (`mlx5_0` … `mlx5_1`), 400 Gb/s each: "
            "800 Gb/s per node; one adapter per GPU") in md
    assert "| Local | `/` 252 GiB, ext4 on md127 RAID0 (8× 3.5 TiB NVMe) |" in md
    assert "| Shared network FS | Lustre `/code` 2.3 TiB, `10.4.138.63@tcp:/xmym3bev` |" in md
    assert "### Needs operator input" in md and "`NVIDIA X900` has no row" in md
    assert md.splitlines()[0] == "# Cluster eval: 1 node of 2× X900"

    class Matmul:  # the compute section asks for the figures itself, with its measurements
        saturated_sm_mhz = None

    assert "`NVIDIA X900` has no row" not in render({"environment": rec, "matmul": Matmul()})


def test_cpu_only_node_title_and_gaps():
    node = NodeEnvironment(node="cpu1", hostname="cpu1", os_pretty="Debian GNU/Linux 12 (bookworm)", kernel="6.1.0",
                           cpu_cores=2, cpu_threads=2, numa_nodes=1, mem_total_bytes=8 * 2**30,
                           gpu_visibility="no NVIDIA driver found",
                           filesystems=[FilesystemInfo(mount="/", size_bytes=100 * 2**30, fstype="ext4", source="/dev/sda1")])
    node.software.python, node.software.torch = "3.11.7", "2.13.0+cpu"
    rec = EnvironmentRecord(phase="environment", nodes=[node],
                            gaps=[Gap(phase="environment", text="The block device list of `cpu1` could not be read.", plan="install iproute2")])
    md = render({"environment": rec}, access="local")
    assert lint_text(md) == [], [str(p) for p in lint_text(md)]
    assert md.splitlines()[0] == "# Cluster eval: 1 node without GPUs"
    assert "- Nodes / GPUs: 1 node (`cpu1`), no GPU visible (no NVIDIA driver found)" in md
    # the five tables always, and no Gaps under Environment: an inventory problem is said in the
    # section it affects (none rendered here, so the close-out alone carries it)
    assert "### GPU\n\n| GPU | value |\n| --- | --- |\n| GPU name × count per node | no GPU visible (no NVIDIA driver found) |" in md
    assert "| Intra-node | no GPU on the node, so no GPU interconnect |" in md
    assert "| Network adapters (inventory) | no RDMA adapter found in `/sys/class/infiniband` |" in md
    assert "### Gaps" not in md
    assert "host, GPU, fabric, mounts, software (inventory, not a benchmark)" in md


def test_golden_head():
    md = normalise(render({"environment": h200_record(1)}))
    head = md[:md.index("## Environment")]
    assert head == (
        "# Cluster eval: 1 node of 2× H200\n\n"
        "- Datetime (UTC): <datetime>\n"
        "- Access: SSH from the controller to every node\n"
        "- Nodes / GPUs: 1 node (`vm`), 2 GPUs\n\n"
        f"Raw logs: [`{RAW}/`]({RAW}/).\n\n"
        "## Table of Contents\n\n"
        "1. [Environment](#environment) — host, GPU, fabric, mounts, software (inventory, not a benchmark)\n\n")


GOLDEN = __import__("pathlib").Path(__file__).parent / "fixtures" / "report" / "environment-h200x2.md"


def test_golden_h200_report():
    """The whole report rendered from the H200 captures, datetime normalised.
    Regenerate with CLUSTEREVAL_UPDATE_GOLDEN=1 after an intended change, and read the diff."""
    import os

    md = normalise(render({"environment": h200_record(1),
                           "evalpython": EvalPythonRecord(torch="2.11.0+cu130", verified_newest=True)}))
    if os.environ.get("CLUSTEREVAL_UPDATE_GOLDEN"):
        GOLDEN.write_text(md)
    assert md == GOLDEN.read_text()
