"""The storage phase's record: the partitions, each fio scan, the layout, the concurrent write."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.config import StorageTarget
from clustereval.records import PhaseRecord
from clustereval.records.environment import FilesystemInfo

# The scan's shape: six fio runs per directory, every run 16 jobs of 4 KiB blocks at depth 64.
NUM_JOBS = 16
BLOCK_SIZE = "4k"
BLOCK_BYTES = 4096
IODEPTH = 64
RAMP_S = 2
PUBLISHED_RUNTIME_S = 180  # 3 min of timed IO per run

# (fio's spelling, bytes, IEC label): the three file sizes, small / medium / large
FILE_SIZES: tuple[tuple[str, int, str], ...] = (
    ("16k", 16 * 2**10, "16 KiB"),
    ("1m", 2**20, "1 MiB"),
    ("1g", 2**30, "1 GiB"),
)
OPS: tuple[str, ...] = ("read", "write")


@dataclass
class FioCell:
    """One of the six runs: a file size and a direction."""

    file_size_bytes: int
    rw: str  # read | write
    latency_msec: float = 0.0  # mean of fio's lat_ns
    bw_mib_s: float = 0.0  # bw_bytes / 2**20
    iops: float = 0.0
    runtime_ms: int = 0  # timed IO fio counted
    argv: list[str] = field(default_factory=list)
    raw_json: str = ""  # path in the raw folder
    seconds: float = 0.0  # wall time of the run, file layout included
    error: str = ""  # why this run has no figures


@dataclass
class Layout:
    """How a parallel FS spreads a file, captured on the node in the same pass as the scan."""

    tool: str = ""  # lfs | mmlsfs | beegfs-ctl | nfsstat
    raw_files: list[str] = field(default_factory=list)
    stripe_count: int | None = None  # Lustre default stripe count (-1: all OSTs)
    stripe_size_bytes: int | None = None
    num_targets: int | None = None  # OSTs / NSD disks / BeeGFS storage targets
    block_size_bytes: int | None = None  # GPFS block size
    options: str = ""  # NFS mount options that decide throughput (vers, rsize, wsize, proto, nconnect)
    summary: str = ""  # one sentence for the report, e.g. "default stripe count 1, stripe size 1 MiB"
    errors: list[str] = field(default_factory=list)


@dataclass
class MountScan:
    """One scanned path and the six runs against it."""

    mount: str  # the declared path scanned
    size_bytes: int = 0  # of the volume behind it
    fstype: str = ""  # backing type
    source: str = ""  # device or server
    volume_mount: str = ""  # where that volume is mounted ("/" for /tmp on the root disk)
    shared: bool = False
    node: str = ""
    stands_for: list[str] = field(default_factory=list)  # declared mounts of the same type and size, not scanned
    same_volume: list[str] = field(default_factory=list)  # declared paths on this very volume
    cells: list[FioCell] = field(default_factory=list)
    scratch_path: str = ""
    leftover_bytes_after_first_run: int = -1  # du of the scan directory after run 1 (-1: not measured)
    layout: Layout | None = None
    seconds: float = 0.0
    complete: bool = False  # all six runs have figures

    def cell(self, file_size_bytes: int, rw: str) -> FioCell | None:
        return next((c for c in self.cells if c.file_size_bytes == file_size_bytes and c.rw == rw and not c.error),
                    None)


@dataclass
class NodeWrite:
    node: str
    bytes_written: int = 0
    seconds: float = 0.0
    mib_s: float = 0.0
    error: str = ""


@dataclass
class ConcurrentWrite:
    """Every node writes one file with O_DIRECT to the same shared mount at the same moment."""

    mount: str
    size_bytes: int = 0  # of the volume
    fstype: str = ""
    bytes_per_node: int = 2**30
    tool: str = "dd"
    argv: list[str] = field(default_factory=list)  # one node's command, the file name in place
    nodes: list[NodeWrite] = field(default_factory=list)
    aggregate_mib_s: float = 0.0  # every byte written / the slowest node's time
    wall_s: float = 0.0


@dataclass
class LustreTarget:
    """One MDT or OST line of ``lfs df`` (sizes in KiB, as lfs prints them)."""

    uuid: str  # fsname-OST0003_UUID
    kind: str  # "OST" | "MDT"
    index: int
    size_kib: int = 0
    used_kib: int = 0
    avail_kib: int = 0
    use_pct: float = 0.0
    inactive: bool = False
    size_text: str = ""  # the size cell as lfs printed it ("1.1T" with -h)


@dataclass
class StorageRecord(PhaseRecord):
    partitions: list[FilesystemInfo] = field(default_factory=list)  # the inventory (/ first)
    local: MountScan | None = None
    shared: list[MountScan] = field(default_factory=list)
    concurrent: ConcurrentWrite | None = None
    runtime_s: int = 180
    ramp_s: int = 2
    published_runtime_s: int = 180
    fio_version: str = ""
    tool_files: list[str] = field(default_factory=list)  # raw-folder copies of the code that ran fio
    num_nodes: int = 1
    targets: list[StorageTarget] = field(default_factory=list)  # the config's targets when the scan ran
    shared_paths: list[str] | None = None  # cluster.toml's shared_paths when the scan ran (None: not recorded)
