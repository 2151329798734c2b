"""Environment parsers on the real 2x H200 captures and on hand-written edge cases."""

from __future__ import annotations

from pathlib import Path

from clustereval.probes import df as df_probe
from clustereval.probes import (
    filesystems,
    gpu_procs,
    host,
    lscpu,
    mounts,
    nics,
    nvsmi_nvlink,
    nvsmi_q,
    nvsmi_query,
    nvsmi_topo,
)
from clustereval.probes import software as software_probe
from clustereval.report.units import iec
from tests.envfixtures import h200x2_outputs

FIX = Path(__file__).resolve().parent / "fixtures"


def read(rel: str) -> str:
    return (FIX / rel).read_text()


# -- host ----------------------------------------------------------------------------------


def test_host_facts_from_h200_capture():
    out = h200x2_outputs()
    assert host.parse_date(out["date"]) == "2026-11-30T16:43:23Z"
    assert host.parse_hostname(out["hostname"]) == "vm"
    un = host.parse_uname(out["uname"])
    assert un.kernel == "6.18.44-fc-v657-gpu" and un.machine == "x86_64"
    assert host.pretty_name(out["os-release"]) == "Ubuntu 24.04.3 LTS"
    assert host.parse_mem_total_bytes(out["meminfo"]) == 263998500 * 1024


def test_host_parsers_on_empty_output():
    assert host.parse_date("$ date -u +%FT%TZ\n") == ""
    assert host.parse_uname("").kernel == ""
    assert host.pretty_name('NAME="Rocky Linux"\nVERSION="9.4 (Blue Onyx)"\n') == "Rocky Linux 9.4 (Blue Onyx)"
    assert host.parse_mem_total_bytes("") == 0


def test_lscpu_h200_vm_and_two_sockets():
    vm = lscpu.parse(read("h200x2/lscpu.txt"))
    assert (vm.threads, vm.cores, vm.sockets, vm.numa_nodes) == (32, 32, 1, 1)
    assert vm.model == "Intel(R) Xeon(R) Processor"
    big = lscpu.parse(read("lscpu/2socket-smt.txt"))
    assert (big.threads, big.cores, big.sockets, big.numa_nodes, big.threads_per_core) == (224, 112, 2, 2, 2)


# -- nvidia-smi ---------------------------------------------------------------------------


def test_query_gpu_h200():
    gpus = nvsmi_query.parse(read("h200x2/nvidia-smi-query-gpu.csv"))
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[0]
    assert g.name == "NVIDIA H200" and g.memory_total_mib == 143771 and g.power_limit_w == 700.0
    assert (g.clocks_max_sm_mhz, g.clocks_sm_mhz, g.clocks_max_mem_mhz) == (1980, 345, 3201)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.driver_version == "580.159.04" and g.power_draw_w == 77.97
    assert g.clock_event_reasons == "0x0000000000000001" and g.mig_mode == "Disabled"


def test_query_gpu_8_gpus_degraded_and_no_driver():
    gpus = nvsmi_query.parse(read("nvidia-smi-query-gpu/8gpu-h100-degraded-pcie.csv"))
    assert len(gpus) == 8
    assert [g.index for g in gpus if g.pcie_width_current < g.pcie_width_max] == [3]
    assert gpus[0].mig_mode == ""  # [N/A]
    assert nvsmi_query.parse(read("nvidia-smi-query-gpu/no-gpu-driver.txt")) == []
    assert nvsmi_query.parse("") == []


def test_query_argv_has_the_runbook_fields():
    argv = nvsmi_query.build_argv()
    fields = argv[1].split("=", 1)[1].split(",")
    for f in ("index", "name", "uuid", "driver_version", "memory.total", "power.limit", "power.max_limit",
              "clocks.max.sm", "clocks.sm", "power.draw", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max"):
        assert f in fields


def test_compute_apps_empty_and_mapped():
    assert gpu_procs.describe_compute_apps(read("h200x2/nvidia-smi-compute-apps.csv")) == []
    gpus = nvsmi_query.parse(read("h200x2/nvidia-smi-query-gpu.csv"))
    text = ("pid, used_gpu_memory [MiB], process_name, gpu_uuid\n"
            "4242, 1024 MiB, python, GPU-6694dc7c-be51-33ec-e369-88986d706a6f\n")
    assert gpu_procs.describe_compute_apps(text, gpus) == ["gpu1 pid 4242 python 1024 MiB"]


def test_nvidia_smi_q_h200():
    q = nvsmi_q.parse(read("h200x2/nvidia-smi-q.txt"))
    assert (q.driver_version, q.cuda_version, len(q.gpus)) == ("580.159.04", "13.0", 2)
    g = q.gpus[0]
    assert g.bus_id == "00000000:00:06.0" and g.architecture == "Hopper"
    assert g.pcie() == {"gen_max": 5, "gen_current": 5, "gen_device_max": 5, "gen_host_max": 0,
                        "width_max": 16, "width_current": 16}
    assert g.clock_event_reasons() == ["Idle"]
    assert g.ecc_mode() == "Enabled" and g.ecc_uncorrectable("Volatile") == 0
    assert g.memory_health() == ""
    assert g.get("Max Clocks", "SM") == "1980 MHz"


def test_nvidia_smi_q_degraded_board():
    q = nvsmi_q.parse(read("nvidia-smi-q/h200-degraded-gpu1.txt"))
    good, bad = q.gpus
    assert good.pcie()["width_current"] == 16
    assert bad.pcie()["width_current"] == 8 and bad.pcie()["gen_host_max"] == 4
    assert "HW Slowdown" in bad.clock_event_reasons()
    health = bad.memory_health()
    assert "3 rows after uncorrectable errors" in health and "pending" in health


def test_topo_h200_nv18():
    topo = nvsmi_topo.parse(read("h200x2/nvidia-smi-topo-m.txt"))
    assert topo.gpus == ["GPU0", "GPU1"] and topo.nics == []
    assert topo.bond() == "NV18" and topo.nvlink_bonds() == [18]
    assert topo.cpu_affinity["GPU0"] == "0-31" and topo.numa_affinity["GPU1"] == "0"


def test_topo_8gpu_with_nic_legend_and_pcie_only():
    topo = nvsmi_topo.parse(read("nvidia-smi-topo-m/8gpu-nv18-8nic.txt"))
    assert len(topo.gpus) == 8 and len(topo.nics) == 8
    assert topo.bond() == "NV18"
    assert topo.nic_names() == [f"mlx5_{i}" for i in range(8)]
    assert topo.links[("GPU0", "NIC0")] == "PIX" and topo.links[("GPU0", "NIC7")] == "SYS"
    pcie = nvsmi_topo.parse(read("nvidia-smi-topo-m/pcie-only-2gpu.txt"))
    assert pcie.bond() == "SYS" and pcie.nvlink_bonds() == []


def test_nvlink_h200_is_nvlink4_450():
    links = nvsmi_nvlink.parse(read("h200x2/nvidia-smi-nvlink-s.txt"))
    assert [len(g.active) for g in links] == [18, 18]
    info = nvsmi_nvlink.summarize(links, "NV18")
    assert (info.generation, info.spec_uni_gb_s, info.num_links_per_gpu, info.per_link_gb_s) == (4, 450.0, 18, 26.562)
    assert info.links_down == []


def test_nvlink_b200_link_down_is_nvlink5_900():
    info = nvsmi_nvlink.summarize(nvsmi_nvlink.parse(read("nvidia-smi-nvlink-s/8gpu-b200-link-down.txt")))
    assert (info.generation, info.spec_uni_gb_s) == (5, 900.0)
    assert info.links_down == ["gpu2:link7"] and info.active_links_per_gpu["gpu2"] == 17


def test_nvlink_older_and_absent():
    a100 = nvsmi_nvlink.summarize(nvsmi_nvlink.parse(read("nvidia-smi-nvlink-s/a100-nvlink3.txt")))
    assert (a100.generation, a100.spec_uni_gb_s) == (3, 300.0)
    l40s = nvsmi_nvlink.summarize(nvsmi_nvlink.parse(read("nvidia-smi-nvlink-s/pcie-only-l40s.txt")))
    assert (l40s.generation, l40s.spec_uni_gb_s, l40s.links_down) == (0, 0.0, [])
    assert nvsmi_nvlink.generation(12.5) == 0 and nvsmi_nvlink.generation(25.0, 6) == 2


# -- RDMA adapters -------------------------------------------------------------------------


def test_h200_capture_has_no_rdma_adapters():
    assert nics.parse_ibstat(read("h200x2/ibstat-rdma.txt")) == []
    assert nics.parse_sysfs(read("h200x2/sys-class-infiniband.txt")) == []
    assert nics.merge([], [], []) == []


def test_infiniband_cx7_with_a_port_down():
    merged = nics.merge(nics.parse_ibstat(read("ibstat/infiniband-cx7.txt")),
                        nics.parse_rdma_link(read("rdma-link/infiniband.txt")),
                        nics.parse_sysfs(read("sys-class-infiniband/infiniband-cx7.txt")))
    by = {n.name: n for n in merged}
    assert by["mlx5_0"].kind == "infiniband" and by["mlx5_0"].rate_gb_s == 400 and by["mlx5_0"].state == "ACTIVE"
    assert by["mlx5_0"].ca_type == "MT4129"
    assert by["mlx5_1"].state == "DOWN"
    assert by["mlx5_2"].netdev == "ens1f0np0"


def test_efa_empty_ibstat_uses_rdma_and_sysfs():
    assert nics.parse_ibstat(read("ibstat/efa-empty.txt")) == []
    merged = nics.merge([], nics.parse_rdma_link(read("rdma-link/efa.txt")),
                        nics.parse_sysfs(read("sys-class-infiniband/efa.txt")))
    assert [n.name for n in merged] == ["rdmap16s27", "rdmap32s27", "rdmap48s27", "rdmap64s27"]
    assert {(n.kind, n.rate_gb_s, n.state) for n in merged} == {("efa", 100.0, "ACTIVE")}


def test_roce_is_ethernet_link_layer():
    merged = nics.merge(nics.parse_ibstat(read("ibstat/roce-cx6dx.txt")), [], [])
    assert [(n.kind, n.rate_gb_s, n.ca_type) for n in merged] == [("roce", 200.0, "MT4125")]


# -- filesystems ---------------------------------------------------------------------------


def test_h200_mounts_are_one_root_row():
    out = h200x2_outputs()
    table = mounts.parse_findmnt(out["findmnt"])
    assert ("/", "/dev/vda", "ext4") in [(m.target, m.source, m.fstype) for m in table]
    df = df_probe.parse_df_sizes(out["df"])
    assert [(d.target, d.fstype) for d in df] == [("/dev/shm", "tmpfs"), ("/", "ext4")]
    blocks = mounts.parse_lsblk(out["lsblk"])
    assert [(b.name, b.mountpoint) for b in blocks] == [("zram0", ""), ("vda", "/"), ("vdb", "/usr/local/nvidia")]
    inv = filesystems.inventory(table, blocks, df)
    assert [(f.mount, f.fstype, f.source, f.shared) for f in inv] == [("/", "ext4", "/dev/vda", False)]
    assert inv[0].size_bytes == 252 * 2**30
    # /proc/mounts alone (no findmnt) gives the same row, sized from df
    inv2 = filesystems.inventory(mounts.parse_proc_mounts(out["proc-mounts"]), blocks, df)
    assert [(f.mount, f.size_bytes) for f in inv2] == [("/", df[1].size_bytes)]


def test_overlay_root_looks_through_and_lustre_folds_binds():
    table = mounts.parse_findmnt(read("findmnt/overlay-root-k8s.txt"))
    inv = filesystems.inventory(table)
    rows = [(f.mount, f.fstype, f.source, f.shared) for f in inv]
    assert rows == [("/", "xfs", "/dev/nvme0n1p1", False),
                    ("/checkpoint", "lustre", "10.1.9.9@tcp:/zzzzzzzz", True),
                    ("/fsx", "lustre", "10.1.2.3@tcp:/abcdefgh", True)]
    assert inv[0].aliases == ["/tmp"]
    assert inv[2].aliases == ["/data"]
    # the mount the cluster uses for work names the row
    preferred = filesystems.inventory(table, prefer=["/data/team"])
    assert [f.mount for f in preferred if f.shared] == ["/checkpoint", "/data"]


def test_md_raid_root_and_nfs_alias():
    table = mounts.parse_findmnt(read("findmnt/md-raid-nfs.txt"))
    blocks = mounts.parse_lsblk(read("lsblk/md-raid0-8nvme.txt"))
    inv = filesystems.inventory(table, blocks)
    assert [(f.mount, f.fstype, f.shared) for f in inv] == [("/", "xfs", False), ("/home", "nfs4", True)]
    assert inv[0].raid == "md127 RAID0 (8× 3.5 TiB NVMe)"
    assert inv[0].aliases == ["/tmp"]
    assert inv[1].source == "nfs.example.com:/export/home" and inv[1].aliases == ["/mnt/home alias"]


def test_virtiofs_tag_is_the_source():
    inv = filesystems.inventory(mounts.parse_findmnt(read("findmnt/virtiofs.txt")))
    assert [(f.mount, f.fstype, f.source, f.shared) for f in inv] == [
        ("/", "ext4", "/dev/vda1", False), ("/mnt/data", "virtiofs", "mnt_data", True)]


def test_df_wrapped_source_and_sizes_only():
    rows = df_probe.parse_df_sizes(read("df/wrapped-long-source.txt"))
    assert [(r.target, r.fstype) for r in rows] == [("/", "overlay"), ("/dev", "tmpfs"), ("/fsx", "lustre"),
                                                    ("/etc/hosts", "xfs")]
    assert rows[2].source.startswith("10.1.2.3@tcp:/") and rows[0].size_bytes == int(3.5 * 2**40)
    assert not hasattr(rows[0], "used_bytes")


def test_iec_size():
    assert iec(3840755982336) == "3.5 TiB"
    assert iec(270582939648) == "252 GiB"


# -- software ------------------------------------------------------------------------------


def test_software_manual_capture_and_worker_lines():
    sw = software_probe.parse_manual(read("h200x2/python-torch.txt"))
    assert (sw.info.python, sw.info.torch, sw.info.torch_cuda, sw.info.nccl) == ("3.12.3", "2.11.0+cu130", "13.0", "2.28.9")
    assert sw.devices[0].sm_count == 132 and sw.devices[0].compute_capability == "9.0"
    gpu = software_probe.parse(read("software/worker-8gpu.txt"))
    assert gpu.info.cuda_available and [d.sm_count for d in gpu.devices] == [148, 148]
    cpu = software_probe.parse(read("software/worker-cpu-only.txt"))
    assert cpu.info.torch == "2.13.0+cpu" and cpu.info.nccl == "" and not cpu.info.cuda_available
    bare = software_probe.parse(read("software/worker-no-torch.txt"))
    assert bare.info.python == "3.12.3" and "No module named" in bare.info.error
    assert software_probe.parse("Traceback ...\nSyntaxError: boom\n").info.error == "SyntaxError: boom"
