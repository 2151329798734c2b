"""Judge one node's snapshot readings: ``[OK]`` / ``[CONCERN]`` / ``[INFO]`` lines. Pure.

Every threshold is in ``THRESHOLDS`` (docs/snapshot.md shows the same table, built by
``threshold_table``). Every CONCERN names the threshold it crossed and points at the next step.
A reading whose tool is missing or failed gives an INFO (or a CONCERN when the failure itself is
a symptom, such as ``nvidia-smi`` hanging), never an OK.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clustereval.analysis.xid import xid_meaning, xid_origin
from clustereval.records.snapshot import (
    GpuDetail,
    GpuQuery,
    NodeReadings,
    Signal,
    ToolStatus,
)

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
_Q_EVENT_NAMES = {
    "HW Slowdown": "HW slowdown", "HW Thermal Slowdown": "HW thermal slowdown",
    "HW Power Brake Slowdown": "HW power brake slowdown", "SW Thermal Slowdown": "SW thermal slowdown",
    "SW Power Cap": "SW power cap", "Sync Boost": "sync boost",
    "Applications Clocks Setting": "applications clocks setting",
    "Display Clock Setting": "display clock setting",
}

# Where a CONCERN points: a clustereval command, or the area that owns the fix.
POINT_HARDWARE = ("hardware: `clustereval run --phases health` (dcgmi diag -r 2) on this node; "
                  "drain it and ask for the GPU to be replaced if it persists")
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


def fmt_bytes(n: float) -> str:
    """IEC size with one decimal: 1.5 GiB, 256 GiB."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    value = float(n)
    i = 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    return f"{value:.0f} {units[i]}" if value >= 100 or i == 0 else f"{value:.1f} {units[i]}"


def _range(values: Iterable[float], unit: str) -> str:
    vals = sorted(values)
    lo, hi = vals[0], vals[-1]
    return f"{lo:g}{unit}" if lo == hi else f"{lo:g}–{hi:g}{unit}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _unavailable(node: str, key: str, what: str, st: ToolStatus) -> Signal:
    """INFO for a tool that is missing or failed (never an OK)."""
    if st.missing:
        pkg = TOOL_PACKAGES.get(st.missing, "")
        text = f"{what} not available: `{st.missing}` is not installed" + (f"; package: {pkg}" if pkg else "")
    elif st.rc is None:
        text = f"{what} not available: the collection stopped before it"
    else:
        text = f"{what} not available: the command failed (exit {st.rc}" + (f": {st.error}" if st.error else "") + ")"
    return Signal(node=node, key=key, level="INFO", text=text)


class _Out:
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


# ---- the judgement -----------------------------------------------------------------------


def evaluate(r: NodeReadings, t: Thresholds = THRESHOLDS) -> list[Signal]:
    """Every signal for one node, in a stable order: host, GPUs, fabric, CPU, storage, versions."""
    out = _Out(r.node)
    if r.hostname or r.kernel:
        out.info("host.identity", f"host {r.hostname or '?'}, kernel {r.kernel or '?'}"
                 + (f", {r.os}" if r.os else ""))
    _gpus(r, out, t)
    _xids(r, out)
    _rdma(r, out, t)
    _governor(r, out, t)
    _iowait(r, out, t)
    _storage(r, out, t)
    found = {k: v for k, v in r.versions.items() if v}
    if found:
        out.info("versions", "versions: " + "; ".join(f"{k} {v}" for k, v in found.items()))
    return out.signals


def _gpu_name(g: GpuQuery) -> str:
    return f"gpu{g.index}"


def _gpus(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    st = r.tool("nvsmi_query")
    if st.timed_out:
        out.concern("gpu.nvidia-smi", "`nvidia-smi` did not answer within its timeout", "no answer in 20 s",
                    "hardware: a GPU or the driver is hung (check the kernel log for Xid 79 / 119); "
                    + POINT_HARDWARE)
        return
    if st.missing:
        out.add(_unavailable(r.node, "gpu", "GPU signals (temperature, clocks, PCIe, ECC, NVLink, topology)", st))
        return
    if not st.ok:
        out.concern("gpu.nvidia-smi", f"`nvidia-smi` failed: {st.error or f'exit {st.rc}'}",
                    "nvidia-smi must answer", "hardware: the driver cannot talk to a GPU; " + POINT_HARDWARE)
        return
    if not r.gpus:
        out.info("gpu", "`nvidia-smi` lists no GPUs on this node")
        return
    details = {d.bus_id: d for d in r.gpu_details}
    pairs = [(g, details.get(g.pci_bus_id)) for g in r.gpus]
    _temperature(r, pairs, out, t)
    _clocks(r, pairs, out, t)
    _pcie(pairs, out)
    _ecc(r, pairs, out)
    _nvlink(r, out, t)
    _topology(r, out)
    _fabric(r, pairs, out)
    _processes(r, out)


def _temperature(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: _Out,
                 t: Thresholds) -> None:
    temps = {}
    for g, d in pairs:
        temp = g.temperature_c if g.temperature_c is not None else (d.temperature_c if d else None)
        if temp is not None:
            temps[g.index] = temp
    for idx, temp in temps.items():
        if temp >= t.gpu_temp_c:
            out.concern("gpu.temperature", f"temperature {temp:g} °C", f">= {t.gpu_temp_c:g} °C",
                        "hardware: check cooling (fans, airflow, inlet temperature); a hot GPU slows its "
                        "clocks; " + POINT_HARDWARE, subject=f"gpu{idx}")
    cool = [v for i, v in temps.items() if v < t.gpu_temp_c]
    if cool:
        out.ok("gpu.temperature", f"temperature {_range(cool, ' °C')} on {_plural(len(cool), 'GPU')} "
               f"(below {t.gpu_temp_c:g} °C)")
    missing = [g.index for g, _ in pairs if g.index not in temps]
    if missing:
        out.info("gpu.temperature", "temperature not reported for " + ", ".join(f"gpu{i}" for i in missing))


def _active_events(g: GpuQuery, d: GpuDetail | None) -> list[str] | None:
    if g.clock_event_mask is not None:
        return [name for bit, name in CLOCK_EVENT_BITS.items() if g.clock_event_mask & bit]
    if d is not None:
        return [_Q_EVENT_NAMES.get(n, n) for n in d.clock_events_active]
    return None


def _clocks(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: _Out,
            t: Thresholds) -> None:
    sm = [(g.clocks_sm_mhz, g.clocks_max_sm_mhz) for g, _ in pairs if g.clocks_sm_mhz is not None]
    idle = 0
    held_back = 0
    unknown = []
    for g, d in pairs:
        events = _active_events(g, d)
        if events is None:
            unknown.append(g.index)
            continue
        idle += "idle" in events
        bad = [e for e in events if e in t.clock_events]
        if bad:
            held_back += 1
            out.concern("gpu.clock_events", f"clock event reasons active: {', '.join(bad)} "
                        f"(SM clock {g.clocks_sm_mhz or 0:g} of {g.clocks_max_sm_mhz or 0:g} MHz)",
                        "any of: " + ", ".join(t.clock_events), POINT_HARDWARE, subject=_gpu_name(g))
        elif "SW power cap" in events:
            out.info("gpu.clock_events", "clocks held at the power limit (SW power cap): normal for a GPU "
                     "running dense work at its power limit", subject=_gpu_name(g))
        if d is not None:
            for reason in ("HW Thermal Slowdown", "HW Power Braking"):
                us = d.clock_event_counters_us.get(reason, 0)
                if us:
                    out.info("gpu.clock_events", f"{reason.lower().replace('hw', 'HW')} was active for "
                             f"{us / 1e6:.1f} s in total since the driver loaded", subject=_gpu_name(g))
    checked = len(pairs) - len(unknown)
    if sm:
        maxes = {m for _, m in sm if m}
        out.info("gpu.clocks", f"SM clock {_range([c for c, _ in sm], ' MHz')}"
                 + (f" of max {_range(maxes, ' MHz')}" if maxes else "")
                 + (f" ({idle} of {_plural(len(pairs), 'GPU')} idle)" if idle else ""))
    if checked and not held_back:
        out.ok("gpu.clock_events", f"no thermal, HW slowdown or power brake clock events active on "
               f"{_plural(checked, 'GPU')}")
    if unknown:
        out.info("gpu.clock_events", "clock event reasons not reported for "
                 + ", ".join(f"gpu{i}" for i in unknown))


def _pcie(pairs: list[tuple[GpuQuery, GpuDetail | None]], out: _Out) -> None:
    good: list[str] = []
    unknown = []
    for g, d in pairs:
        gen_cur = g.pcie_gen_current if g.pcie_gen_current is not None else (d.pcie_gen_current if d else None)
        gen_max = g.pcie_gen_max if g.pcie_gen_max is not None else (d.pcie_gen_max if d else None)
        w_cur = g.pcie_width_current if g.pcie_width_current is not None else (d.pcie_width_current if d else None)
        w_max = g.pcie_width_max if g.pcie_width_max is not None else (d.pcie_width_max if d else None)
        if None in (gen_cur, gen_max, w_cur, w_max):
            unknown.append(g.index)
            continue
        assert gen_cur is not None and gen_max is not None and w_cur is not None and w_max is not None
        idle = g.clock_event_mask is not None and bool(g.clock_event_mask & 0x1)
        if w_cur < w_max:
            out.concern("gpu.pcie", f"PCIe link x{w_cur} of max x{w_max} (Gen{gen_cur})",
                        "width below the maximum", "hardware: reseat or replace the GPU or riser; "
                        + POINT_HARDWARE, subject=_gpu_name(g))
        elif gen_cur < gen_max and not idle:
            out.concern("gpu.pcie", f"PCIe Gen{gen_cur} of max Gen{gen_max} (x{w_cur}) while not idle",
                        "generation below the maximum under load",
                        "hardware: check BIOS PCIe settings and the slot; " + POINT_HARDWARE,
                        subject=_gpu_name(g))
        elif gen_cur < gen_max:
            out.info("gpu.pcie", f"PCIe Gen{gen_cur} of max Gen{gen_max} (x{w_cur}) while idle: links "
                     "downshift at idle to save power; re-run the snapshot under load", subject=_gpu_name(g))
        else:
            good.append(f"Gen{gen_cur} x{w_cur}")
    if good:
        kinds = sorted(set(good))
        out.ok("gpu.pcie", f"PCIe {' / '.join(kinds)} on {_plural(len(good), 'GPU')} (at the maximum)")
    if unknown:
        out.info("gpu.pcie", "PCIe link not reported for " + ", ".join(f"gpu{i}" for i in unknown))


def _ecc(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: _Out) -> None:
    clean = 0
    unknown = []
    for g, d in pairs:
        vol = g.ecc_uncorrected_volatile
        if vol is None and d is not None:
            vol = d.ecc_volatile_uncorrectable
        if vol is None and d is None:
            unknown.append(g.index)
            continue
        problems = False
        if vol:
            problems = True
            out.concern("gpu.ecc", f"{vol} uncorrectable ECC errors since the last driver load",
                        "> 0 uncorrectable (volatile)", POINT_HARDWARE, subject=_gpu_name(g))
        if d is not None:
            if d.remap_pending:
                problems = True
                out.concern("gpu.ecc", "row remap pending (takes effect at the next GPU reset)",
                            "a pending remap", "hardware: reset the GPU (drain the node first), then "
                            "re-check; " + POINT_HARDWARE, subject=_gpu_name(g))
            if d.remap_failure:
                problems = True
                out.concern("gpu.ecc", "row remapping failure occurred", "a remapping failure",
                            "hardware: the GPU has run out of spare rows; drain the node and ask for "
                            "the GPU to be replaced", subject=_gpu_name(g))
            for flag in d.repair_flags:
                problems = True
                out.concern("gpu.ecc", f"{flag}: Yes", "a repair pending", POINT_HARDWARE, subject=_gpu_name(g))
            if d.ecc_aggregate_uncorrectable:
                out.info("gpu.ecc", f"{d.ecc_aggregate_uncorrectable} uncorrectable ECC errors over the GPU's "
                         "lifetime (aggregate)" + (f", {d.remapped_uncorrectable} rows remapped for them"
                                                   if d.remapped_uncorrectable else ""), subject=_gpu_name(g))
        if not problems:
            clean += 1
    if clean:
        out.ok("gpu.ecc", f"no uncorrectable ECC errors and no pending row remaps on {_plural(clean, 'GPU')}")
    if unknown:
        out.info("gpu.ecc", "ECC not reported (disabled or not supported) for "
                 + ", ".join(f"gpu{i}" for i in unknown))


def _nvlink(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    st = r.tool("nvsmi_nvlink")
    if not st.ok:
        out.add(_unavailable(r.node, "gpu.nvlink", "NVLink link state", st))
        return
    with_links = [g for g in r.nvlinks if g.links]
    if not with_links:
        out.info("gpu.nvlink", "no NVLink links reported (PCIe-only GPUs, or NVLink not supported)")
        return
    speeds = [ln.gb_s for g in with_links for ln in g.links if ln.gb_s is not None]
    fastest = max(speeds) if speeds else 0.0
    most = max(len(g.links) for g in with_links)
    floor = fastest * (1 - t.sibling_slower_pct / 100)
    healthy = 0
    for g in with_links:
        down = [ln.link for ln in g.links if ln.gb_s is None]
        slow = [ln for ln in g.links if ln.gb_s is not None and ln.gb_s < floor]
        bad = False
        if down:
            bad = True
            out.concern("gpu.nvlink", f"NVLink {_plural(len(down), 'link')} inactive: "
                        f"{', '.join(map(str, down))} ({len(down)} of {len(g.links)})", "a link inactive",
                        POINT_NVLINK, subject=f"gpu{g.gpu}")
        if slow:
            bad = True
            out.concern("gpu.nvlink", "NVLink links slower than their siblings: "
                        + ", ".join(f"link {ln.link} {ln.gb_s:g} GB/s" for ln in slow)
                        + f" (fastest {fastest:g} GB/s)", f"more than {t.sibling_slower_pct:g}% below "
                        "the fastest link", POINT_NVLINK, subject=f"gpu{g.gpu}")
        if len(g.links) < most:
            bad = True
            out.concern("gpu.nvlink", f"{len(g.links)} NVLink links where its siblings have {most}",
                        "fewer links than a sibling GPU", POINT_NVLINK, subject=f"gpu{g.gpu}")
        healthy += not bad
    if healthy:
        out.ok("gpu.nvlink", f"{most} NVLink links per GPU at {fastest:g} GB/s each on "
               f"{_plural(healthy, 'GPU')}, all active")


def _topology(r: NodeReadings, out: _Out) -> None:
    st = r.tool("nvsmi_topo")
    if not st.ok:
        out.add(_unavailable(r.node, "gpu.topology", "`nvidia-smi topo -m`", st))
        return
    pairs = r.topology.gpu_pairs()
    if not pairs:
        out.info("gpu.topology", "`nvidia-smi topo -m` shows a single GPU")
        return
    kinds: dict[str, list[str]] = {}
    for p in pairs:
        kinds.setdefault(p.kind, []).append(f"{p.a}-{p.b}")
    summary = ", ".join(f"{k} ({_plural(len(v), 'pair')})" for k, v in sorted(kinds.items()))
    nv = {k for k in kinds if k.startswith("NV")}
    if len(nv) > 1 or (nv and len(kinds) > len(nv)):
        common = max(kinds, key=lambda k: len(kinds[k]))
        odd = [f"{k}: {', '.join(v[:6])}{' …' if len(v) > 6 else ''}" for k, v in kinds.items() if k != common]
        out.concern("gpu.topology", f"GPU pairs are linked unevenly: {summary}; odd ones {'; '.join(odd)}",
                    "NVLink pairs with different link counts",
                    "hardware (NVLink) if the platform should be uniform; " + POINT_NCCL)
    else:
        out.info("gpu.topology", f"`nvidia-smi topo -m` GPU pairs: {summary}")
    if r.topology.nics:
        out.info("gpu.topology", f"`nvidia-smi topo -m` lists {_plural(len(r.topology.nics), 'NIC')}: "
                 + ", ".join(r.topology.nics[:8]) + (" …" if len(r.topology.nics) > 8 else ""))


def _fabric(r: NodeReadings, pairs: list[tuple[GpuQuery, GpuDetail | None]], out: _Out) -> None:
    states = [(g, d) for g, d in pairs if d is not None and d.fabric_state and d.fabric_state != "N/A"]
    bad = [(g, d) for g, d in states if d is not None
           and (d.fabric_state != "Completed" or d.fabric_status not in ("Success", ""))]
    for g, d in bad:
        assert d is not None
        out.concern("gpu.fabric", f"NVLink fabric state {d.fabric_state} / {d.fabric_status or '?'}",
                    "not Completed / Success", "hardware (NVSwitch): check nvidia-fabricmanager "
                    "(`systemctl status nvidia-fabricmanager`, its log); " + POINT_NVLINK, subject=_gpu_name(g))
    if states and not bad:
        out.ok("gpu.fabric", f"NVLink fabric state Completed / Success on {_plural(len(states), 'GPU')}")
    if r.nvswitch_devices:
        if r.fabricmanager_service == "active":
            out.ok("gpu.fabricmanager", f"nvidia-fabricmanager active ({_plural(r.nvswitch_devices, 'NVSwitch device')})")
        elif r.fabricmanager_service:
            out.concern("gpu.fabricmanager", f"{_plural(r.nvswitch_devices, 'NVSwitch device')} present but "
                        f"nvidia-fabricmanager is {r.fabricmanager_service}",
                        "NVSwitch present and the service not active",
                        "hardware (NVSwitch): `systemctl status nvidia-fabricmanager`; its version must match "
                        "the driver; without it the GPUs cannot use NVLink")
        else:
            out.info("gpu.fabricmanager", f"{_plural(r.nvswitch_devices, 'NVSwitch device')} present; the "
                     "nvidia-fabricmanager service state cannot be read here (no systemd)")


def _processes(r: NodeReadings, out: _Out) -> None:
    st = r.tool("nvsmi_apps")
    if not st.ok:
        out.add(_unavailable(r.node, "gpu.processes", "GPU compute processes", st))
        return
    if not r.processes:
        out.ok("gpu.processes", "no compute processes on the GPUs")
        return
    by_uuid = {g.uuid: g.index for g in r.gpus}
    listed = []
    for p in r.processes[:8]:
        where = f"gpu{by_uuid[p.gpu_uuid]} " if p.gpu_uuid in by_uuid else ""
        mem = f" {p.used_mib:g} MiB" if p.used_mib is not None else ""
        listed.append(f"{where}pid {p.pid} {p.name}{mem}")
    more = f", and {len(r.processes) - 8} more" if len(r.processes) > 8 else ""
    out.concern("gpu.processes", f"{_plural(len(r.processes), 'compute process')} on the GPUs: "
                + "; ".join(listed) + more, "any process on a GPU", POINT_PROCESSES)


def _xids(r: NodeReadings, out: _Out) -> None:
    st = r.tool("xid")
    if st.missing or not st.ok:
        sig = _unavailable(r.node, "xid", "Xid lines (kernel log)", st)
        if not st.missing and "not permitted" in (st.error or "").lower():
            sig.text += "; reading the kernel log needs root or kernel.dmesg_restrict=0"
        out.add(sig)
        return
    if not r.xids:
        out.ok("xid", "no Xid lines in the kernel log")
        return
    gpu_of = {g.pci_bus_id: f"gpu{g.index}" for g in r.gpus}
    groups: dict[tuple[bool, int, str], list] = {}
    for ev in r.xids:
        groups.setdefault((ev.nvswitch, ev.xid, ev.bus_id), []).append(ev)
    for (nvswitch, xid, bus), events in groups.items():
        last = events[-1]
        kind = "SXid" if nvswitch else "Xid"
        subject = gpu_of.get(bus, bus)
        origin = xid_origin(last)
        pointer = {"application": POINT_XID_APP, "nvlink": POINT_NVLINK}.get(origin, POINT_HARDWARE)
        count = f" ×{len(events)}" if len(events) > 1 else ""
        detail = last.detail if len(last.detail) <= 120 else last.detail[:117] + "…"
        out.concern("xid", f"{kind} {xid}{count} ({bus}): {xid_meaning(last)}; last: {detail}",
                    "any Xid line in the kernel log", pointer, subject=subject)


def _rdma(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    if not r.rdma_ports:
        out.info("rdma", "no RDMA adapters (InfiniBand / RoCE / EFA) under /sys/class/infiniband")
        return
    by_kind: dict[str, list] = {}
    for p in r.rdma_ports:
        by_kind.setdefault(p.kind, []).append(p)
    labels = {"efa": "EFA", "roce": "RoCE", "infiniband": "InfiniBand", "rdma": "RDMA"}
    for kind, ports in by_kind.items():
        rates = [p.rate_gb_s for p in ports if p.rate_gb_s is not None]
        fastest = max(rates) if rates else 0.0
        floor = fastest * (1 - t.sibling_slower_pct / 100)
        good = []
        for p in ports:
            if p.state.upper() != "ACTIVE":
                out.concern("rdma.state", f"{labels[kind]} port state {p.state or '?'}"
                            + (f", physical {p.phys_state}" if p.phys_state else ""), "not ACTIVE",
                            POINT_FABRIC + "; check the cable / switch port, `ibstat` / `rdma link`",
                            subject=p.name)
            elif p.rate_gb_s is not None and p.rate_gb_s < floor:
                out.concern("rdma.rate", f"{labels[kind]} port at {p.rate_gb_s:g} Gb/s where its siblings run "
                            f"{fastest:g} Gb/s", f"more than {t.sibling_slower_pct:g}% below the fastest "
                            f"{labels[kind]} port", POINT_FABRIC + "; check the cable and the switch port "
                            "speed", subject=p.name)
            else:
                good.append(p)
        if good:
            rate = _range([p.rate_gb_s for p in good if p.rate_gb_s is not None], " Gb/s") if any(
                p.rate_gb_s is not None for p in good) else "unknown rate"
            out.ok("rdma", f"{_plural(len(good), labels[kind] + ' port')} ACTIVE at {rate}")
    if "efa" in by_kind:
        st = r.tool("fi_efa")
        if r.efa_provider_visible is True:
            out.ok("rdma.efa_provider", "`fi_info -p efa` lists the efa provider")
        elif r.efa_provider_visible is False:
            out.concern("rdma.efa_provider", "EFA adapters present but `fi_info -p efa` lists no efa provider"
                        + (f" ({st.error})" if st.error else ""), "EFA present, provider missing", POINT_EFA)
        else:
            out.add(_unavailable(r.node, "rdma.efa_provider", "EFA provider check", st))


def _governor(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    if not r.governors:
        out.info("cpu.governor", "no CPU frequency governor exposed (no cpufreq driver; usual in a virtual "
                 "machine, where the host sets CPU clocks)")
        return
    total = sum(r.governors.values())
    others = {g: n for g, n in r.governors.items() if g != t.governor}
    if others:
        out.concern("cpu.governor", "CPU frequency governor " + ", ".join(
            f"{g} on {n} of {total} CPUs" for g, n in sorted(others.items())),
            f"anything but {t.governor}", POINT_GOVERNOR)
    else:
        out.ok("cpu.governor", f"CPU frequency governor {t.governor} on all {total} CPUs")


def _iowait(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    if len(r.cpu_samples) < 2:
        out.info("cpu.iowait", "host iowait not available: /proc/stat was not sampled twice")
        return
    a, b = r.cpu_samples[0], r.cpu_samples[-1]
    total = b.total - a.total
    if total <= 0:
        out.info("cpu.iowait", "host iowait not available: no CPU time passed between the samples")
        return
    pct = 100.0 * (b.iowait - a.iowait) / total
    over = f" over {r.sample_s:g} s" if r.sample_s else ""
    if pct > t.iowait_pct:
        out.concern("cpu.iowait", f"host iowait {pct:.1f}%{over}", f"> {t.iowait_pct:g}%",
                    POINT_IOWAIT + "; `iostat -x 1` names the busy device")
    else:
        out.ok("cpu.iowait", f"host iowait {pct:.1f}%{over} (at most {t.iowait_pct:g}%)")


def _storage(r: NodeReadings, out: _Out, t: Thresholds) -> None:
    # /dev/shm
    st = r.tool("shm")
    if r.shm is None:
        if "no such file" in st.error.lower():
            out.concern("storage.shm", "no /dev/shm", "/dev/shm must exist", POINT_SHM)
        else:
            out.add(_unavailable(r.node, "storage.shm", "/dev/shm size", st))
    elif r.shm.size_bytes < t.shm_min_bytes:
        out.concern("storage.shm", f"/dev/shm is {fmt_bytes(r.shm.size_bytes)}",
                    f"smaller than {fmt_bytes(t.shm_min_bytes)}", POINT_SHM)
    elif r.shm.use_pct >= t.fullness_pct:
        out.concern("storage.shm", f"/dev/shm {r.shm.use_pct:g}% full of {fmt_bytes(r.shm.size_bytes)}",
                    f">= {t.fullness_pct:g}% full", POINT_SHM + "; stale files of finished jobs fill it")
    else:
        out.ok("storage.shm", f"/dev/shm {fmt_bytes(r.shm.size_bytes)}, {r.shm.use_pct:g}% used")
    # root volume
    if r.root is None:
        out.add(_unavailable(r.node, "storage.root", "root volume fullness", r.tool("root")))
    elif r.root.use_pct >= t.fullness_pct:
        out.concern("storage.root", f"root volume {r.root.use_pct:g}% full ({fmt_bytes(r.root.avail_bytes)} "
                    f"free of {fmt_bytes(r.root.size_bytes)})", f">= {t.fullness_pct:g}% full", POINT_ROOT)
    else:
        out.ok("storage.root", f"root volume {r.root.use_pct:g}% full ({fmt_bytes(r.root.avail_bytes)} free "
               f"of {fmt_bytes(r.root.size_bytes)})")
    # shared mounts
    df_sections = {name[3:]: st for name, st in r.status.items() if name.startswith("df ")}
    if not df_sections:
        out.info("storage.shared", "no shared (network or parallel) filesystem mounted or configured")
    for path, st in df_sections.items():
        if st.timed_out:
            out.concern("storage.shared", f"`df {path}` did not answer within 10 s (a hung network mount)",
                        "df must answer", f"storage: check the mount and its server; `clustereval debug fs {path}`",
                        subject=path)
        elif not st.ok:
            out.concern("storage.shared", f"`df {path}` failed: {st.error or f'exit {st.rc}'}",
                        "df must answer", f"storage: is {path} mounted on this node?", subject=path)
    for row in r.shared:
        label = f"{row.mount}" + (f" ({row.fstype})" if row.fstype else "")
        if row.path and row.path != row.mount:
            label += f", holding {row.path}"
        if row.use_pct >= t.fullness_pct:
            out.concern("storage.shared", f"{label} {row.use_pct:g}% full ({fmt_bytes(row.avail_bytes)} free of "
                        f"{fmt_bytes(row.size_bytes)})", f">= {t.fullness_pct:g}% full",
                        f"storage: free space; a nearly full filesystem slows writes; `clustereval debug fs "
                        f"{row.path or row.mount}`", subject=row.mount)
        else:
            out.ok("storage.shared", f"{label} {row.use_pct:g}% full ({fmt_bytes(row.avail_bytes)} free of "
                   f"{fmt_bytes(row.size_bytes)})", subject=row.mount)
    for lm in r.lustre:
        st = r.tool(f"lfs_df {lm.mount}")
        if not st.ok:
            out.add(_unavailable(r.node, "storage.lustre", f"OST balance of {lm.mount}", st))
            continue
        osts = [x for x in lm.targets if x.kind == "OST"]
        if not osts:
            out.info("storage.lustre", f"`lfs df {lm.mount}` lists no OSTs", subject=lm.mount)
            continue
        pointer = f"storage: ask the filesystem's operator to rebalance or add capacity; `clustereval debug fs {lm.mount}`"
        inactive = [x for x in osts if x.inactive]
        if inactive:
            out.concern("storage.lustre", f"{_plural(len(inactive), 'OST')} inactive: "
                        + ", ".join(_ost(x) for x in inactive[:8]), "an inactive OST", pointer, subject=lm.mount)
        active = [x for x in osts if not x.inactive]
        full = [x for x in active if x.use_pct >= t.fullness_pct]
        if full:
            out.concern("storage.lustre", f"{_plural(len(full), 'OST')} nearly full: "
                        + ", ".join(f"{_ost(x)} {x.use_pct:g}%" for x in full[:8]),
                        f"an OST >= {t.fullness_pct:g}% full", pointer + " (files striped over a full OST "
                        "fail or slow down)", subject=lm.mount)
        if active:
            lo = min(active, key=lambda x: x.use_pct)
            hi = max(active, key=lambda x: x.use_pct)
            spread = hi.use_pct - lo.use_pct
            if spread >= t.ost_spread_pct_points:
                out.concern("storage.lustre", f"OSTs unevenly filled: {_ost(hi)} {hi.use_pct:g}% vs "
                            f"{_ost(lo)} {lo.use_pct:g}% ({spread:g} points apart)",
                            f"fullest minus emptiest >= {t.ost_spread_pct_points:g} points", pointer,
                            subject=lm.mount)
            elif not full:
                out.ok("storage.lustre", f"{_plural(len(active), 'OST')} {_range([x.use_pct for x in active], '%')} "
                       "full", subject=lm.mount)


def _ost(x) -> str:  # noqa: ANN001
    return f"OST{x.index:04x}"


def format_signal(sig: Signal) -> str:
    """``[CONCERN] node1 gpu3: temperature 91 °C (threshold: >= 88 °C) → hardware: …``"""
    where = sig.node + (f" {sig.subject}" if sig.subject else "")
    line = f"[{sig.level}] {where}: {sig.text}"
    if sig.level == "CONCERN":
        if sig.threshold:
            line += f" (threshold: {sig.threshold})"
        line += f" → {sig.pointer}"
    return line
