"""The host snapshot: what was read on a node (``NodeReadings``), the tagged lines judged from it
(``Signal``), and the version drift across nodes. The probes fill the readings; analysis judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.records import PhaseRecord
from clustereval.records.environment import DfRow, GpuProcess, GpuQuery
from clustereval.records.storage import LustreTarget

LEVELS = ("CONCERN", "INFO", "OK")  # print order within a node is the collection order

# ---- readings (probe output) -------------------------------------------------------------


@dataclass
class ToolStatus:
    """How one collection step went: the tool was missing, failed, timed out, or answered."""

    section: str
    rc: int | None = 0
    missing: str = ""  # the tool that is not installed
    error: str = ""  # the last line the tool printed when it failed

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.missing

    @property
    def timed_out(self) -> bool:
        return self.rc in (124, 137)


@dataclass
class GpuDetail:
    """What the snapshot reads from one GPU's block of ``nvidia-smi -q``."""

    bus_id: str
    name: str = ""
    clock_events_active: list[str] = field(default_factory=list)  # reasons printed "Active", Idle excluded
    clock_event_counters_us: dict[str, int] = field(default_factory=dict)  # since the driver loaded
    ecc_volatile_uncorrectable: int = 0  # DRAM + SRAM
    ecc_aggregate_uncorrectable: int = 0
    remapped_uncorrectable: int | None = None
    remap_pending: bool = False
    remap_failure: bool = False
    repair_flags: list[str] = field(default_factory=list)  # "Channel Repair Pending", ... that say Yes
    fabric_state: str = ""  # "Completed", "In Progress", "N/A"
    fabric_status: str = ""  # "Success", ...
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    temperature_c: float | None = None


@dataclass
class NvlinkLink:
    link: int
    gb_s: float | None  # None: the link is inactive
    raw: str = ""


@dataclass
class GpuNvlinks:
    gpu: int
    links: list[NvlinkLink] = field(default_factory=list)


@dataclass
class TopoLink:
    a: str  # "GPU0"
    b: str  # "GPU1" or a NIC name
    kind: str  # "NV18", "SYS", "PIX", ...


@dataclass
class Topology:
    """``nvidia-smi topo -m``: the connection kind between every two devices."""

    gpus: list[str] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)
    links: list[TopoLink] = field(default_factory=list)

    def gpu_pairs(self) -> list[TopoLink]:
        return [t for t in self.links if t.a in self.gpus and t.b in self.gpus]


@dataclass
class XidEvent:
    xid: int
    bus_id: str  # normalized "0000:3b:00"
    detail: str  # the rest of the kernel line after the number
    nvswitch: bool = False  # an SXid (NVSwitch) line
    line: str = ""


@dataclass
class CpuTimes:
    """The aggregate ``cpu`` line of /proc/stat, in clock ticks."""

    user: int = 0
    nice: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0

    @property
    def total(self) -> int:
        # guest time is already counted in user / nice
        return (self.user + self.nice + self.system + self.idle + self.iowait + self.irq
                + self.softirq + self.steal)


@dataclass
class LustreMount:
    mount: str
    targets: list[LustreTarget] = field(default_factory=list)


@dataclass
class RdmaPort:
    device: str  # mlx5_0, rdmap79s0, efa_0
    port: int
    state: str  # "ACTIVE", "DOWN", "INIT"
    rate_gb_s: float | None  # Gb/s (bits), as sysfs prints it
    link_layer: str = ""  # InfiniBand | Ethernet | Unspecified
    driver: str = ""  # mlx5_core, efa, ...
    phys_state: str = ""  # "LinkUp", "Polling", "Disabled"

    @property
    def kind(self) -> str:
        if self.driver == "efa" or self.device.startswith(("rdmap", "efa")):
            return "efa"
        if self.link_layer.lower() == "ethernet":
            return "roce"
        if self.link_layer.lower() == "infiniband":
            return "infiniband"
        return "rdma"

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass
class NodeReadings:
    """Everything the snapshot read on one node, parsed; ``status`` says which tools answered."""

    node: str
    hostname: str = ""
    kernel: str = ""
    os: str = ""
    system_model: str = ""  # DMI vendor and product name: the instance type or server model
    addresses: list[str] = field(default_factory=list)  # global IPv4 addresses with prefix, "10.0.3.7/24"
    sample_s: float = 0.0
    cpu_samples: list[CpuTimes] = field(default_factory=list)
    gpus: list[GpuQuery] = field(default_factory=list)
    gpu_details: list[GpuDetail] = field(default_factory=list)
    driver_version: str = ""
    cuda_driver_version: str = ""
    nvlinks: list[GpuNvlinks] = field(default_factory=list)
    topology: Topology = field(default_factory=Topology)
    processes: list[GpuProcess] = field(default_factory=list)
    xids: list[XidEvent] = field(default_factory=list)
    rdma_ports: list[RdmaPort] = field(default_factory=list)
    efa_provider_visible: bool | None = None  # None: not checked (no EFA device, or no fi_info)
    nvswitch_devices: int = 0
    fabricmanager_service: str = ""  # systemctl is-active output; "" without systemd
    governors: dict[str, int] = field(default_factory=dict)  # governor -> number of CPUs
    shm: DfRow | None = None
    root: DfRow | None = None
    shared: list[DfRow] = field(default_factory=list)
    shared_requested: list[str] = field(default_factory=list)  # the configured shared paths
    lustre: list[LustreMount] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)  # item -> version ("" = not found)
    status: dict[str, ToolStatus] = field(default_factory=dict)  # section -> how it went

    def tool(self, section: str) -> ToolStatus:
        return self.status.get(section, ToolStatus(section=section, rc=None))


# ---- judged lines ------------------------------------------------------------------------


@dataclass
class Signal:
    """One tagged snapshot line."""

    node: str
    key: str  # stable id of the check: "gpu.temperature", "host.iowait", ...
    level: str  # CONCERN | INFO | OK
    text: str  # "temperature 91 °C"
    subject: str = ""  # gpu3, mlx5_0/1, /fsx; "" for the node itself
    threshold: str = ""  # what a CONCERN crossed: ">= 88 °C"
    pointer: str = ""  # the next step for a CONCERN: "hardware: ..." or a clustereval command

    @property
    def concern(self) -> bool:
        return self.level == "CONCERN"


@dataclass
class NodeSnapshot:
    node: str
    index: int = 0
    hostname: str = ""
    reachable: bool = True
    error: str = ""  # why the node could not be read
    seconds: float = 0.0
    signals: list[Signal] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    readings: NodeReadings | None = None
    raw: dict[str, str] = field(default_factory=dict)  # section -> raw tool output (evidence only)

    @property
    def concerns(self) -> list[Signal]:
        return [s for s in self.signals if s.concern]


@dataclass
class SnapshotRecord(PhaseRecord):
    nodes: list[NodeSnapshot] = field(default_factory=list)
    drift: list[Signal] = field(default_factory=list)  # node "cluster": one line per differing item
