"""The snapshot's rules, in one place: thresholds, where each CONCERN points, the packages that
provide a missing tool, and how a signal is written as a line. Pure.

docs/snapshot.md shows ``threshold_table()``; a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clustereval.records.snapshot import Signal, ToolStatus

GIB = 2**30


@dataclass(frozen=True)
class Thresholds:
    gpu_temp_c: float = 88.0  # CONCERN at or above
    iowait_pct: float = 20.0  # CONCERN above
    fullness_pct: float = 90.0  # root volume, shared mounts, /dev/shm, each OST: CONCERN at or above
    ost_spread_pct_points: float = 20.0  # fullest OST minus emptiest OST: CONCERN at or above
    shm_min_bytes: int = 1 * GIB  # /dev/shm: CONCERN below
    sibling_slower_pct: float = 5.0  # an NVLink link or RDMA port this much below its fastest sibling
    governor: str = "performance"  # any other CPU frequency governor is a CONCERN
    # clock event reasons that mean the GPU is held back by heat or the board (SW power cap is
    # the normal state of a GPU at its power limit, so it is INFO)
    clock_events: tuple[str, ...] = ("HW slowdown", "SW thermal slowdown", "HW thermal slowdown",
                                     "HW power brake slowdown")


THRESHOLDS = Thresholds()

# NVML clock event reason bits, as nvidia-smi prints the active mask.
CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
# nvidia-smi -q spells the same reasons this way
Q_EVENT_NAMES = {
    "HW Slowdown": "HW slowdown", "HW Thermal Slowdown": "HW thermal slowdown",
    "HW Power Brake Slowdown": "HW power brake slowdown", "SW Thermal Slowdown": "SW thermal slowdown",
    "SW Power Cap": "SW power cap", "Sync Boost": "sync boost",
    "Applications Clocks Setting": "applications clocks setting",
    "Display Clock Setting": "display clock setting",
}

# Where a CONCERN points: a clustereval command, or the area that owns the fix.
POINT_HARDWARE = ("hardware: drain this node and run `dcgmi diag -r 2` on it (`clustereval run --phases health` "
                  "runs it on every node of the config); ask for the GPU to be replaced if it persists")
POINT_NVLINK = ("hardware (NVLink): `nvidia-smi nvlink -e` for error counters; a link that stays "
                "down needs the node drained and repaired")
POINT_NCCL = "NCCL: `clustereval debug nccl` measures every node pair and names the slow node"
POINT_FABRIC = ("NCCL / fabric: this port carries inter-node traffic; `clustereval debug nccl` "
                "shows whether this node is the slow one")
POINT_EFA = ("NCCL: without the efa provider NCCL falls back to TCP sockets; install or expose "
             "libfabric with EFA (aws-efa-installer) in the environment the job runs in")
POINT_VERSIONS = ("versions: install one version on every node (a container image carries its own "
                  "CUDA / NCCL / EFA stack: compare inside it too)")
POINT_GOVERNOR = ("host configuration: `cpupower frequency-set -g performance` on every node; "
                  "uneven CPU clocks give uneven step times")
POINT_PROCESSES = ("workload: find the owner (`ps -o user,etime,cmd -p PID`); a GPU shared with "
                   "another job measures slow (expected if your own job is running)")
POINT_XID_APP = ("application first (this Xid is usually a code fault); hardware if it repeats "
                 "under unrelated code: " + POINT_HARDWARE)
POINT_IOWAIT = "storage: `clustereval debug fs MOUNT` on the mount the job reads and writes"
POINT_ROOT = ("storage: free space on the root volume (a full root volume fails process forks, "
              "logs and checkpoint writes)")
POINT_SHM = ("host configuration: give /dev/shm more space (containers: --shm-size or a memory-backed "
             "emptyDir); NCCL and DataLoader workers use it")

TOOL_PACKAGES = {
    "nvidia-smi": "nvidia-utils-<driver> on Ubuntu, nvidia-driver on RHEL; it ships with the NVIDIA driver",
    "dmesg": "util-linux",
    "fi_info": "libfabric-bin, or on AWS the aws-efa-installer (/opt/amazon/efa/bin)",
    "lfs": "lustre-client, or lustre-client-utils",
    "df": "coreutils",
    "python3": "python3",
}


def threshold_table() -> list[tuple[str, str]]:
    """(signal, CONCERN when): the table docs/snapshot.md prints, from ``THRESHOLDS``."""
    t = THRESHOLDS
    pct = f"{t.sibling_slower_pct:g}%"
    return [
        ("GPU temperature", f">= {t.gpu_temp_c:g} °C"),
        ("GPU clock event reasons", "active: " + ", ".join(t.clock_events)),
        ("PCIe link width", "below the GPU's maximum width"),
        ("PCIe link generation", "below the GPU's maximum while the GPU is not idle"),
        ("uncorrectable ECC errors (volatile)", "> 0"),
        ("row remapping", "a remap pending, a remapping failure, or a repair pending"),
        ("NVLink links", f"a link inactive, a GPU with fewer links than its siblings, or a link more than {pct} "
                         "below the node's fastest link"),
        ("GPU-to-GPU topology (`nvidia-smi topo -m`)", "NVLink pairs with different link counts"),
        ("NVLink fabric state (`nvidia-smi -q`)", "not Completed / Success"),
        ("NVSwitch Fabric Manager", "NVSwitch devices present and the service not active"),
        ("Xid / SXid in the kernel log", "any line"),
        ("GPU compute processes", "any process on a GPU"),
        ("InfiniBand / RoCE / EFA port state", "not ACTIVE"),
        ("InfiniBand / RoCE / EFA port rate", f"more than {pct} below the fastest port of the same kind"),
        ("EFA libfabric provider", "EFA devices present and `fi_info -p efa` lists no efa provider"),
        ("CPU frequency governor", f"anything but {t.governor}"),
        ("host iowait (sampled from /proc/stat)", f"> {t.iowait_pct:g}%"),
        ("/dev/shm", f"smaller than {t.shm_min_bytes / GIB:g} GiB, or >= {t.fullness_pct:g}% full"),
        ("root volume fullness", f">= {t.fullness_pct:g}% full"),
        ("shared mount fullness (`df`)", f">= {t.fullness_pct:g}% full, or `df` failing / hanging"),
        ("Lustre OST fullness (`lfs df`)", f"an OST >= {t.fullness_pct:g}% full, or inactive"),
        ("Lustre OST imbalance (`lfs df`)",
         f"fullest minus emptiest OST >= {t.ost_spread_pct_points:g} percentage points"),
        ("version drift across nodes", "any item with different values on different nodes"),
    ]


# ---- helpers -----------------------------------------------------------------------------


def value_range(values: Iterable[float], unit: str) -> str:
    vals = sorted(values)
    lo, hi = vals[0], vals[-1]
    return f"{lo:g}{unit}" if lo == hi else f"{lo:g}–{hi:g}{unit}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def unavailable(node: str, key: str, what: str, st: ToolStatus) -> Signal:
    """INFO for a tool that is missing or failed (never an OK)."""
    if st.missing:
        pkg = TOOL_PACKAGES.get(st.missing, "")
        text = f"{what} not available: `{st.missing}` is not installed" + (f"; package: {pkg}" if pkg else "")
    elif st.rc is None:
        text = f"{what} not available: the collection stopped before it"
    else:
        text = f"{what} not available: the command failed (exit {st.rc}" + (f": {st.error}" if st.error else "") + ")"
    return Signal(node=node, key=key, level="INFO", text=text)


class Collector:
    def __init__(self, node: str) -> None:
        self.node = node
        self.signals: list[Signal] = []

    def ok(self, key: str, text: str, subject: str = "") -> None:
        self.signals.append(Signal(self.node, key, "OK", text, subject))

    def info(self, key: str, text: str, subject: str = "") -> None:
        self.signals.append(Signal(self.node, key, "INFO", text, subject))

    def concern(self, key: str, text: str, threshold: str, pointer: str, subject: str = "") -> None:
        self.signals.append(Signal(self.node, key, "CONCERN", text, subject, threshold, pointer))

    def add(self, sig: Signal) -> None:
        self.signals.append(sig)


def format_signal(sig: Signal) -> str:
    """``[CONCERN] node1 gpu3: temperature 91 °C (threshold: >= 88 °C) → hardware: …``"""
    where = sig.node + (f" {sig.subject}" if sig.subject else "")
    line = f"[{sig.level}] {where}: {sig.text}"
    if sig.level == "CONCERN":
        if sig.threshold:
            line += f" (threshold: {sig.threshold})"
        line += f" → {sig.pointer}"
    return line
