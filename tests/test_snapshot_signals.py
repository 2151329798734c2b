"""Snapshot parsers and thresholds: the real 2x H200 captures, and hand-made cases crossing each
threshold (fixtures named handmade-*)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustereval.analysis.drift import version_drift
from clustereval.analysis.snapshot import THRESHOLDS, evaluate, format_signal, threshold_table
from clustereval.probes import snapshot_gpu as gpu
from clustereval.probes import snapshot_host as host
from clustereval.probes.df import parse_df
from clustereval.probes.gpu_procs import parse_compute_apps
from clustereval.probes.nvsmi_query import parse_rows
from clustereval.probes.snapshot_script import parse_output, split_sections
from clustereval.probes.storage import parse_lfs_df
from clustereval.probes.xid import parse_xid_lines
from tests.snapshot_helpers import FIXTURES, H200, captured, h200_sections, script_output

REPO = Path(__file__).resolve().parents[1]


def judge(**override) -> list:
    text = script_output(h200_sections(**override))
    return evaluate(parse_output("node0", text, sample_s=3))


def lines(signals, level: str | None = None, key: str | None = None) -> list[str]:
    return [format_signal(s) for s in signals
            if (level is None or s.level == level) and (key is None or s.key.startswith(key))]


# ---- parsers on the real captures ----------------------------------------------------------

def test_query_gpu_csv_real():
    gpus = parse_rows(captured(H200 / "nvidia-smi-query-gpu.csv"))
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[0]
    assert (g.name, g.temperature_c, g.clocks_sm_mhz, g.clocks_max_sm_mhz) == ("NVIDIA H200", 35, 345, 1980)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.clock_event_mask == 0x1 and g.ecc_uncorrected_volatile == 0
    assert g.pci_bus_id == "00000000:00:06.0" and gpu.normalize_bus_id(g.pci_bus_id) == "0000:00:06"


def test_smi_q_real():
    q = gpu.parse_smi_q(captured(H200 / "nvidia-smi-q.txt"))
    assert (q.driver_version, q.cuda_version) == ("580.159.04", "13.0")
    assert [d.bus_id for d in q.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    d = q.gpus[1]
    assert d.clock_events_active == []  # only Idle is Active, and idle is not a slowdown
    assert d.clock_event_counters_us["HW Thermal Slowdown"] == 0
    assert (d.ecc_volatile_uncorrectable, d.remap_pending, d.remap_failure, d.repair_flags) == (0, False, False, [])
    assert (d.fabric_state, d.fabric_status) == ("Completed", "Success")
    assert (d.pcie_gen_current, d.pcie_gen_max, d.pcie_width_current, d.pcie_width_max) == (5, 5, 16, 16)
    assert d.temperature_c == 35


def test_nvlink_topo_apps_real():
    links = gpu.parse_nvlink_status(captured(H200 / "nvidia-smi-nvlink-s.txt"))
    assert [(g.gpu, len(g.links)) for g in links] == [(0, 18), (1, 18)]
    assert {ln.gb_s for g in links for ln in g.links} == {26.562}
    topo = gpu.parse_topo(captured(H200 / "nvidia-smi-topo-m.txt"))
    assert topo.gpus == ["GPU0", "GPU1"]
    assert [(t.a, t.b, t.kind) for t in topo.gpu_pairs()] == [("GPU0", "GPU1", "NV18")]
    assert parse_compute_apps(captured(H200 / "nvidia-smi-compute-apps.csv")) == []


def test_host_parsers_real():
    assert parse_xid_lines(captured(H200 / "dmesg-xid.txt")) == []  # NVRM lines, no Xid
    (shm,) = parse_df(captured(H200 / "shm-loadavg.txt"))
    assert shm.target == "/dev/shm" and shm.size_bytes == 256 * 2**30 and shm.use_pct == 0
    rows = parse_df(captured(H200 / "mounts.txt"))
    assert [(r.target, r.fstype, r.use_pct) for r in rows] == [("/dev/shm", "tmpfs", 0), ("/", "ext4", 12)]
    (sample,) = host.parse_proc_stat(captured(H200 / "shm-loadavg.txt"))
    assert (sample.user, sample.system, sample.idle, sample.iowait) == (798, 1000, 101960, 255)
    # the VM exposes no scaling_governor: cat fails, nothing to count
    assert host.parse_governors(captured(H200 / "lscpu.txt")) == {}


def test_real_h200_node_is_clean():
    sigs = judge()
    assert lines(sigs, "CONCERN") == []
    ok = "\n".join(lines(sigs, "OK"))
    for expected in ("temperature 35 °C on 2 GPUs (below 88 °C)",
                     "no thermal, HW slowdown or power brake clock events active on 2 GPUs",
                     "PCIe Gen5 x16 on 2 GPUs (at the maximum)",
                     "no uncorrectable ECC errors and no pending row remaps on 2 GPUs",
                     "18 NVLink links per GPU at 26.562 GB/s each on 2 GPUs, all active",
                     "NVLink fabric state Completed / Success on 2 GPUs",
                     "no compute processes on the GPUs", "no Xid lines in the kernel log",
                     "host iowait 0.0% over 3 s", "/dev/shm 256 GiB, 0% used", "root volume 12% full"):
        assert expected in ok, expected
    info = "\n".join(lines(sigs, "INFO"))
    assert "SM clock 345 MHz of max 1980 MHz (2 of 2 GPUs idle)" in info
    assert "`nvidia-smi topo -m` GPU pairs: NV18 (1 pair)" in info
    assert "no CPU frequency governor exposed" in info
    assert "NVIDIA driver 580.159.04" in info and "torch 2.11.0+cu130" in info and "NCCL (system) 2.28.3" in info


# ---- every threshold crossed by a hand-made case -------------------------------------------

def test_hot_gpu_and_thermal_clock_events():
    sigs = judge(nvsmi_query=(FIXTURES / "nvidia-smi-query-gpu/handmade-hot-gpu.csv").read_text())
    concern = lines(sigs, "CONCERN")
    assert any("node0 gpu0: temperature 91 °C (threshold: >= 88 °C) → hardware" in c for c in concern)
    assert not any("gpu1: temperature" in c for c in concern)  # 87 °C is below the threshold
    assert any("gpu0: clock event reasons active: SW thermal slowdown, HW thermal slowdown" in c for c in concern)
    info = "\n".join(lines(sigs, "INFO"))
    assert "gpu1: clocks held at the power limit (SW power cap)" in info


def test_degraded_pcie_x8_and_gen_under_load_and_ecc():
    sigs = judge(nvsmi_query=(FIXTURES / "nvidia-smi-query-gpu/handmade-pcie-x8.csv").read_text())
    concern = lines(sigs, "CONCERN")
    assert any("gpu0: PCIe link x8 of max x16 (Gen5) (threshold: width below the maximum)" in c for c in concern)
    assert any("gpu1: PCIe Gen3 of max Gen5 (x16) while not idle" in c for c in concern)
    assert any("gpu1: 2 uncorrectable ECC errors" in c and "→ hardware" in c for c in concern)


def test_pcie_gen_below_max_at_idle_is_info():
    text = (FIXTURES / "nvidia-smi-query-gpu/handmade-pcie-x8.csv").read_text().replace(
        " 3, 5, 16, 16, 40, 2, 0, 0x0000000000000000", " 3, 5, 16, 16, 40, 0, 0, 0x0000000000000001")
    sigs = judge(nvsmi_query=text)
    assert not any("gpu1" in c for c in lines(sigs, "CONCERN"))
    assert any("gpu1: PCIe Gen3 of max Gen5 (x16) while idle" in i for i in lines(sigs, "INFO"))


def test_nvlink_link_down_and_slow_link():
    sigs = judge(nvsmi_nvlink=(FIXTURES / "nvidia-smi-nvlink-s/handmade-link-down.txt").read_text())
    concern = lines(sigs, "CONCERN")
    assert concern == [c for c in concern if "gpu1" in c]
    assert any("gpu1: NVLink 2 links inactive: 5, 9 (2 of 18) (threshold: a link inactive)" in c for c in concern)
    assert "18 NVLink links per GPU at 26.562 GB/s each on 1 GPU, all active" in "\n".join(lines(sigs, "OK"))
    sigs = judge(nvsmi_nvlink=(FIXTURES / "nvidia-smi-nvlink-s/handmade-slow-link.txt").read_text())
    assert any("gpu0: NVLink links slower than their siblings: link 3 13.281 GB/s (fastest 26.562 GB/s)" in c
               for c in lines(sigs, "CONCERN"))


def test_uneven_topology():
    sigs = judge(nvsmi_topo=(FIXTURES / "nvidia-smi-topo-m/handmade-uneven-nv.txt").read_text())
    (c,) = lines(sigs, "CONCERN", "gpu.topology")
    assert "NV12 (1 pair), NV18 (5 pairs)" in c and "NV12: GPU0-GPU3" in c and "debug nccl" in c


def test_remap_pending_ecc_hw_slowdown_fabric_from_smi_q():
    sigs = judge(nvsmi_q=(FIXTURES / "nvidia-smi-q/handmade-remap-pending.txt").read_text())
    concern = "\n".join(lines(sigs, "CONCERN"))
    assert "gpu1: row remap pending" in concern
    assert "gpu1: NVLink fabric state In Progress / N/A (threshold: not Completed / Success)" in concern
    assert "gpu1: row remapping failure" not in concern
    info = "\n".join(lines(sigs, "INFO"))
    assert "gpu1: 3 uncorrectable ECC errors over the GPU's lifetime (aggregate), 2 rows remapped" in info


def test_hw_slowdown_from_smi_q_when_the_mask_is_missing():
    old = (FIXTURES / "nvidia-smi-query-gpu/handmade-old-driver-na.csv").read_text().replace(
        "00000000:00:1E.0", "00000000:00:07.0")
    q = (FIXTURES / "nvidia-smi-q/handmade-remap-pending.txt").read_text()
    sigs = judge(nvsmi_query=old, nvsmi_q=q)
    assert any("gpu0: clock event reasons active: HW slowdown" in c for c in lines(sigs, "CONCERN"))


def test_xid_79_and_friends():
    text = (FIXTURES / "dmesg/handmade-xid-79.txt").read_text()
    events = parse_xid_lines(text)
    assert [(e.xid, e.bus_id, e.nvswitch) for e in events] == [
        (79, "0000:00:07", False), (79, "0000:00:07", False), (13, "0000:00:06", False),
        (31, "0000:00:06", False), (12028, "0000:05:00", True), (150, "0000:00:06", False)]
    sigs = judge(xid=text)
    concern = lines(sigs, "CONCERN", "xid")
    assert any(c.startswith("[CONCERN] node0 gpu1: Xid 79 ×2 (0000:00:07): GPU has fallen off the bus")
               and "(threshold: any Xid line in the kernel log) → hardware" in c for c in concern)
    assert any("gpu0: Xid 13 (0000:00:06): graphics engine exception" in c and "→ application first" in c
               for c in concern)
    assert any("gpu0: Xid 31" in c and "page fault" in c for c in concern)
    assert any("0000:05:00: SXid 12028" in c and "NVSwitch error" in c and "→ hardware (NVLink)" in c
               for c in concern)
    assert any("gpu0: Xid 150" in c and "NVLink" in c for c in concern)


def test_kernel_log_not_readable_is_info_not_ok():
    sigs = judge(xid=((FIXTURES / "dmesg/handmade-not-permitted.txt").read_text(), 1))
    assert lines(sigs, "OK", "xid") == []
    (info,) = lines(sigs, "INFO", "xid")
    assert "Operation not permitted" in info and "kernel.dmesg_restrict=0" in info


def test_governor_powersave():
    sigs = judge(governor=(FIXTURES / "governor/handmade-powersave.txt").read_text())
    (c,) = lines(sigs, "CONCERN", "cpu.governor")
    assert "CPU frequency governor powersave on 32 of 32 CPUs (threshold: anything but performance)" in c
    assert "cpupower frequency-set -g performance" in c
    sigs = judge(governor=(FIXTURES / "governor/handmade-mixed.txt").read_text())
    (c,) = lines(sigs, "CONCERN", "cpu.governor")
    assert "powersave on 2 of 32 CPUs" in c
    sigs = judge(governor="     32 performance\n")
    assert lines(sigs, "OK", "cpu.governor") == ["[OK] node0: CPU frequency governor performance on all 32 CPUs"]


def test_iowait_35_percent():
    sigs = judge(stat=(FIXTURES / "proc-stat/handmade-iowait-35.txt").read_text())
    (c,) = lines(sigs, "CONCERN", "cpu.iowait")
    assert "host iowait 35.0% over 3 s (threshold: > 20%) → storage: `clustereval debug fs MOUNT`" in c
    sigs = judge(stat="cpu  0 0 0 800 200 0 0 0\ncpu  0 0 0 1600 400 0 0 0")  # exactly 20%: not above
    assert lines(sigs, "OK", "cpu.iowait") == ["[OK] node0: host iowait 20.0% over 3 s (at most 20%)"]


def test_efa_port_down_and_provider_missing():
    sigs = judge(ib=(FIXTURES / "rdma-ports/handmade-efa-port-down.tsv").read_text(),
                 fi_efa=((FIXTURES / "fi_info/handmade-no-efa-provider.txt").read_text(), 1))
    concern = lines(sigs, "CONCERN")
    assert any("node0 rdmap96s0/1: EFA port state DOWN, physical Disabled (threshold: not ACTIVE)" in c
               for c in concern)
    assert any("EFA adapters present but `fi_info -p efa` lists no efa provider" in c
               and "falls back to TCP" in c for c in concern)
    assert "3 EFA ports ACTIVE at 100 Gb/s" in "\n".join(lines(sigs, "OK"))
    sigs = judge(ib=(FIXTURES / "rdma-ports/handmade-efa-port-down.tsv").read_text(),
                 fi_efa=(FIXTURES / "fi_info/handmade-efa-provider.txt").read_text())
    assert "`fi_info -p efa` lists the efa provider" in "\n".join(lines(sigs, "OK"))


def test_efa_without_fi_info_is_info():
    text = script_output(h200_sections(ib=(FIXTURES / "rdma-ports/handmade-efa-port-down.tsv").read_text()),
                         missing={"fi_efa": "fi_info"})
    sigs = evaluate(parse_output("node0", text))
    (info,) = lines(sigs, "INFO", "rdma.efa_provider")
    assert "`fi_info` is not installed; package: libfabric-bin" in info


def test_infiniband_port_slower_than_siblings():
    sigs = judge(ib=(FIXTURES / "rdma-ports/handmade-ib-slow-port.tsv").read_text())
    (c,) = lines(sigs, "CONCERN", "rdma")
    assert "mlx5_1/1: InfiniBand port at 200 Gb/s where its siblings run 400 Gb/s" in c
    ok = "\n".join(lines(sigs, "OK"))
    assert "2 InfiniBand ports ACTIVE at 400 Gb/s" in ok and "1 RoCE port ACTIVE at 25 Gb/s" in ok


def test_lustre_ost_imbalance_full_and_inactive():
    targets = parse_lfs_df((FIXTURES / "lfs-df/handmade-ost-imbalance.txt").read_text()).targets
    assert [(t.kind, t.index, t.use_pct, t.inactive) for t in targets] == [
        ("MDT", 0, 1, False), ("OST", 0, 40, False), ("OST", 1, 95, False), ("OST", 2, 42, False),
        ("OST", 3, 0, True)]
    df = ("Filesystem Type 1-blocks Used Available Capacity Mounted on\n"
          "10.0.0.5@tcp:/fsx lustre 3589397184512 2117744275456 1471652909056 59% /fsx")
    sigs = judge(**{"df /fsx": df, "lfs_df /fsx": (FIXTURES / "lfs-df/handmade-ost-imbalance.txt").read_text()})
    concern = "\n".join(lines(sigs, "CONCERN", "storage.lustre"))
    assert "node0 /fsx: 1 OST inactive: OST0003" in concern
    assert "1 OST nearly full: OST0001 95% (threshold: an OST >= 90% full)" in concern
    assert "OSTs unevenly filled: OST0001 95% vs OST0000 40% (55 points apart)" in concern
    assert "/fsx (lustre) 59% full" in "\n".join(lines(sigs, "OK"))
    sigs = judge(**{"df /fsx": df, "lfs_df /fsx": (FIXTURES / "lfs-df/handmade-balanced.txt").read_text()})
    assert lines(sigs, "CONCERN") == []
    assert "2 OSTs 40–44% full" in "\n".join(lines(sigs, "OK"))


def test_lfs_missing_is_info():
    df = "Filesystem Type 1-blocks Used Available Capacity Mounted on\nfsx lustre 100 10 90 10% /fsx"
    text = script_output(h200_sections(**{"df /fsx": df}), missing={"lfs_df /fsx": "lfs"})
    sigs = evaluate(parse_output("node0", text))
    (info,) = lines(sigs, "INFO", "storage.lustre")
    assert "OST balance of /fsx not available: `lfs` is not installed; package: lustre-client" in info


def test_root_full_small_shm_hung_mount():
    sigs = judge(root=(FIXTURES / "df/handmade-root-97pct.txt").read_text(),
                 shm=(FIXTURES / "df/handmade-shm-64m.txt").read_text(),
                 **{"df /data": ("", 124)})
    concern = "\n".join(lines(sigs, "CONCERN"))
    assert "root volume 97% full (3.8 GiB free of 96.7 GiB) (threshold: >= 90% full) → storage" in concern
    assert "/dev/shm is 64.0 MiB (threshold: smaller than 1.0 GiB)" in concern
    assert "node0 /data: `df /data` did not answer within 10 s (a hung network mount)" in concern


def test_foreign_gpu_process():
    sigs = judge(nvsmi_apps=(FIXTURES / "nvidia-smi-compute-apps/handmade-foreign-process.csv").read_text())
    (c,) = lines(sigs, "CONCERN", "gpu.processes")
    assert "1 compute process on the GPUs: gpu1 pid 31337 /usr/bin/python3 70321 MiB" in c


def test_fabric_manager_inactive_with_nvswitch():
    sigs = judge(fabricmanager="nvswitch_devices: 4\nservice: failed")
    (c,) = lines(sigs, "CONCERN", "gpu.fabricmanager")
    assert "4 NVSwitch devices present but nvidia-fabricmanager is failed" in c
    sigs = judge(fabricmanager="nvswitch_devices: 4\nservice: active")
    assert lines(sigs, "OK", "gpu.fabricmanager")


def test_missing_nvidia_smi_is_info_and_hung_nvidia_smi_is_concern():
    secs = h200_sections()
    for name in ("nvsmi_query", "nvsmi_q", "nvsmi_topo", "nvsmi_nvlink", "nvsmi_apps"):
        secs[name] = None
    text = script_output(secs, missing={n: "nvidia-smi" for n in ("nvsmi_query", "nvsmi_q", "nvsmi_topo")})
    sigs = evaluate(parse_output("node0", text))
    assert not [s for s in sigs if s.key.startswith("gpu") and s.level != "INFO"]
    (info,) = lines(sigs, "INFO", "gpu")
    assert "GPU signals (temperature, clocks, PCIe, ECC, NVLink, topology) not available: `nvidia-smi` is not " \
           "installed; package: nvidia-utils-<driver>" in info
    sigs = judge(nvsmi_query=("", 124))
    (c,) = lines(sigs, "CONCERN", "gpu")
    assert "`nvidia-smi` did not answer within its timeout" in c and "Xid 79" in c


def test_every_concern_names_a_threshold_and_a_pointer():
    crossing = judge(nvsmi_query=(FIXTURES / "nvidia-smi-query-gpu/handmade-hot-gpu.csv").read_text(),
                     nvsmi_nvlink=(FIXTURES / "nvidia-smi-nvlink-s/handmade-link-down.txt").read_text(),
                     xid=(FIXTURES / "dmesg/handmade-xid-79.txt").read_text(),
                     governor=(FIXTURES / "governor/handmade-powersave.txt").read_text(),
                     stat=(FIXTURES / "proc-stat/handmade-iowait-35.txt").read_text(),
                     ib=(FIXTURES / "rdma-ports/handmade-efa-port-down.tsv").read_text(),
                     root=(FIXTURES / "df/handmade-root-97pct.txt").read_text())
    concerns = [s for s in crossing if s.concern]
    assert len(concerns) >= 9
    for s in concerns:
        line = format_signal(s)
        assert s.threshold and s.pointer, line
        assert re.search(r"\(threshold: .+\) → \S", line), line


# ---- the scripted sections and version drift ------------------------------------------------

def test_split_sections_marks_missing_and_timeouts():
    secs = split_sections("@@ce a\nx\n@@ce-rc 0\n@@ce b\n@@ce-missing lfs\n@@ce c\npartial\n@@ce-rc 124\n@@ce d\n")
    assert secs["a"].ok and secs["a"].text == "x"
    assert secs["b"].missing == "lfs" and not secs["b"].ok
    assert secs["c"].timed_out and secs["c"].text == "partial"
    assert secs["d"].rc is None


def test_mismatched_driver_across_nodes():
    def versions(driver: str, nccl: str = "2.28.3", efa: str = "") -> dict[str, str]:
        return {"NVIDIA driver": driver, "NCCL (system)": nccl, "kernel": "6.8.0", "EFA installer": efa}
    sigs = version_drift([("node0", versions("580.159.04")), ("node1", versions("580.159.04")),
                          ("node2", versions("570.86.15", efa="1.38.0"))])
    concern = [format_signal(s) for s in sigs if s.concern]
    assert concern == [
        "[CONCERN] cluster NVIDIA driver: NVIDIA driver differs across nodes: 580.159.04 on node0, node1; "
        "570.86.15 on node2 (threshold: any difference between nodes) → versions: install one version on "
        "every node (a container image carries its own CUDA / NCCL / EFA stack: compare inside it too)",
        "[CONCERN] cluster EFA installer: EFA installer differs across nodes: 1.38.0 on node2; not found on "
        "node0, node1 (threshold: any difference between nodes) → versions: install one version on every "
        "node (a container image carries its own CUDA / NCCL / EFA stack: compare inside it too)",
    ]
    (ok,) = [s for s in sigs if s.level == "OK"]
    assert ok.text == "the same on all 3 nodes: NCCL (system), kernel"
    assert version_drift([("node0", versions("1"))]) == []


def test_drift_from_two_real_node_outputs():
    a = parse_output("node0", script_output(h200_sections()))
    q = captured(H200 / "nvidia-smi-query-gpu.csv").replace("580.159.04", "570.86.15")
    smi_q = captured(H200 / "nvidia-smi-q.txt").replace("580.159.04", "570.86.15")
    b = parse_output("node1", script_output(h200_sections(nvsmi_query=q, nvsmi_q=smi_q)))
    assert b.versions["NVIDIA driver"] == "570.86.15" and b.versions["GPU count"] == "2"
    (c,) = [s for s in version_drift([("node0", a.versions), ("node1", b.versions)]) if s.concern]
    assert c.text == "NVIDIA driver differs across nodes: 580.159.04 on node0; 570.86.15 on node1"


# ---- the thresholds live in one place and the docs show that table --------------------------

def test_docs_table_matches_the_code():
    doc = (REPO / "docs" / "snapshot.md").read_text().split("## Thresholds", 1)[1]
    rows = [ln for ln in doc.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    table = [tuple(c.strip() for c in ln.strip("|").split(" | ")) for ln in rows[1:]]
    table = [r for r in table if len(r) == 2]
    assert table == threshold_table()
    assert THRESHOLDS.gpu_temp_c == 88 and THRESHOLDS.iowait_pct == 20


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "dmesg").iterdir()))
def test_parsers_never_raise_on_fixture_text(name):
    text = (FIXTURES / "dmesg" / name).read_text()
    for fn in (parse_rows, gpu.parse_smi_q, gpu.parse_nvlink_status, gpu.parse_topo,
               parse_compute_apps, parse_df, parse_lfs_df, host.parse_rdma_ports,
               host.parse_proc_stat, host.parse_governors):
        out = fn(text)
        # a kernel log is not any of these tools' output: each parser reads nothing from it
        assert out == type(out)(), (fn.__name__, out)
