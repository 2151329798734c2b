"""The environment phase's record: what every node is (inventory, not a benchmark).

Other phases read it: compute (GPU names, SM counts, power limits), network (NVLink generation
and spec, NICs), storage (the filesystem inventory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord


@dataclass
class GpuQuery:
    """One row of ``nvidia-smi --query-gpu ... --format=csv``, as the driver said it: None where it
    said N/A or was not asked (the snapshot's thresholds keep "not reported" apart from zero);
    text cells as printed."""

    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    temperature_c: float | None = None
    clocks_sm_mhz: float | None = None
    clocks_max_sm_mhz: float | None = None
    clock_event_mask: int | None = None  # NVML clock event reasons, active bits
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    ecc_uncorrected_volatile: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    memory_total_mib: float | None = None
    utilization_pct: float | None = None
    serial: str = ""
    power_max_limit_w: float | None = None
    power_default_limit_w: float | None = None
    clocks_max_mem_mhz: float | None = None
    ecc_corrected_volatile: int | None = None
    clock_event_reasons: str = ""  # the active mask as nvidia-smi prints it ("0x0000000000000001")
    persistence_mode: str = ""
    compute_mode: str = ""
    mig_mode: str = ""


@dataclass
class GpuProcess:
    """One row of ``nvidia-smi --query-compute-apps``."""

    pid: int
    name: str
    used_mib: float | None = None  # None: not reported
    gpu_uuid: str = ""

    def describe(self, gpu: int | None) -> str:
        where = f" on gpu{gpu}" if gpu is not None else ""
        return f"pid {self.pid} ({self.name}){where}"


@dataclass
class GpuInfo:
    index: int
    name: str  # as nvidia-smi prints it: "NVIDIA H200"
    uuid: str = ""
    serial: str = ""
    pci_bus_id: str = ""
    memory_total_mib: int = 0
    power_limit_w: float = 0.0
    power_max_limit_w: float = 0.0
    clocks_max_sm_mhz: int = 0  # boost
    clocks_sm_mhz: int = 0  # current (parked idle when nothing runs)
    clocks_max_mem_mhz: int = 0
    power_draw_w: float = 0.0  # idle draw when nothing runs
    pcie_gen_current: int = 0
    pcie_gen_max: int = 0
    pcie_width_current: int = 0
    pcie_width_max: int = 0
    temperature_c: int = 0
    ecc_uncorrected_volatile: int = 0
    ecc_corrected_volatile: int = 0
    clock_event_reasons: str = ""  # hex mask as nvidia-smi prints it
    sm_count: int = 0  # from torch / the spec database when nvidia-smi does not say
    arch: str = ""  # "Hopper", compute capability "9.0"
    retired_or_remapped: str = ""  # nvidia-smi -q remapped-rows summary
    driver_version: str = ""
    power_default_limit_w: float = 0.0
    pcie_gen_host_max: int = 0  # what the host side of the link allows (nvidia-smi -q "Host Max"); 0: not reported
    ecc_mode: str = ""  # Enabled / Disabled
    ecc_uncorrected_aggregate: int = 0
    persistence_mode: str = ""
    compute_mode: str = ""
    mig_mode: str = ""
    compute_capability: str = ""  # "9.0", from torch


@dataclass
class NvlinkInfo:
    num_links_per_gpu: int = 0
    per_link_gb_s: float = 0.0
    generation: int = 0  # 0: no NVLink (PCIe)
    spec_uni_gb_s: float = 0.0  # per GPU unidirectional (NVLink 4: 450)
    topo_bond: str = ""  # "NV18" from nvidia-smi topo -m
    links_down: list[str] = field(default_factory=list)  # "gpu0:link3"
    active_links_per_gpu: dict[str, int] = field(default_factory=dict)  # "gpu0" -> active link count


@dataclass
class NicInfo:
    name: str  # mlx5_0, rdmap0s31, ...
    kind: str  # infiniband | roce | efa | ethernet
    rate_gb_s: float = 0.0  # Gb/s (bits) as sysfs / ibstat print it
    state: str = ""  # ACTIVE / DOWN
    port: int = 1
    ca_type: str = ""  # ibstat "CA type" (MT4129 = ConnectX-7)
    product: str = ""  # from the spec database: "ConnectX-7 NDR", "EFA (second generation)"
    netdev: str = ""  # rdma link netdev


@dataclass
class DfRow:
    """One filesystem's line of ``df``."""

    source: str
    size_bytes: int
    target: str  # the mount point ("Mounted on")
    fstype: str = ""  # "" when df was run without -T
    used_bytes: int = 0
    avail_bytes: int = 0
    use_pct: float = 0.0
    path: str = ""  # the path df was asked about (a configured shared path may sit below the mount)


@dataclass
class FilesystemInfo:
    """One distinct backing volume (bind mounts and /tmp-on-/ already folded in)."""

    mount: str  # "/", "/code"
    size_bytes: int
    fstype: str  # backing type: ext4, xfs, lustre, nfs4, virtiofs, ... (never "overlay")
    source: str  # device or server: /dev/vda, md127 RAID, 10.4.138.63@tcp:/xmym3bev, virtiofs tag
    shared: bool = False  # network / parallel FS
    aliases: list[str] = field(default_factory=list)  # other mount points of the same volume
    product: str = ""  # vendor product when df -T shows a protocol (virtiofs -> the product)
    raid: str = ""  # "md127 RAID0 (8× 3.5 TiB NVMe)" when the device is Linux md


@dataclass
class SoftwareInfo:
    python: str = ""  # "3.12.3"
    torch: str = ""  # "2.11.0+cu130"
    torch_cuda: str = ""
    nccl: str = ""  # "2.28.9"
    interpreter: str = ""  # path of the eval Python (raw folder only; the report never shows it)
    driver: str = ""
    cuda_driver: str = ""  # "13.0" from nvidia-smi
    cuda_available: bool = False  # torch.cuda.is_available() in the eval Python
    error: str = ""  # why the software worker could not report (one line)


@dataclass
class NodeEnvironment:
    node: str  # identity as configured
    index: int = 0
    hostname: str = ""  # hostname -s
    datetime_utc: str = ""
    os_pretty: str = ""  # PRETTY_NAME
    kernel: str = ""  # uname -r
    uname: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0  # physical cores (sockets × cores per socket)
    cpu_threads: int = 0  # logical CPUs (nproc)
    cpu_sockets: int = 0
    numa_nodes: int = 0
    mem_total_bytes: int = 0
    gpus: list[GpuInfo] = field(default_factory=list)
    nvlink: NvlinkInfo = field(default_factory=NvlinkInfo)
    topo_matrix: str = ""  # raw nvidia-smi topo -m
    nics: list[NicInfo] = field(default_factory=list)
    filesystems: list[FilesystemInfo] = field(default_factory=list)
    software: SoftwareInfo = field(default_factory=SoftwareInfo)
    compute_processes: list[str] = field(default_factory=list)  # "pid name used_mib"
    has_gpu: bool = False
    gpu_visibility: str = ""  # why no GPU was seen: "nvidia-smi not found", "no devices", ... ('' with GPUs)
    errors: list[str] = field(default_factory=list)  # collectors that failed, one line each
    raw_files: dict[str, str] = field(default_factory=dict)  # tool -> path in the raw folder


@dataclass
class EnvironmentRecord(PhaseRecord):
    nodes: list[NodeEnvironment] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)  # one line per item that differs across nodes
    tool_links: dict[str, str] = field(default_factory=dict)  # our worker file -> its copy, report-relative

    @property
    def has_gpu(self) -> bool:
        return any(n.has_gpu for n in self.nodes)
