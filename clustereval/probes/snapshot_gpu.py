"""nvidia-smi readings for the snapshot, from the environment's nvidia-smi parsers. Pure.

The parsing itself lives in ``nvsmi_query`` / ``nvsmi_q`` / ``nvsmi_nvlink`` / ``nvsmi_topo``;
this module only turns their results into the snapshot's records, keeping "not reported" (None)
apart from zero, which the thresholds need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.probes import nvsmi_nvlink, nvsmi_q, nvsmi_query, nvsmi_topo
from clustereval.probes._text import integer, is_absent, number
from clustereval.records.snapshot import (
    GpuDetail,
    GpuNvlinks,
    GpuProcess,
    GpuQuery,
    NvlinkLink,
    TopoLink,
    Topology,
)


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:00:06.0`` / ``PCI:0000:00:06`` / ``0000:00:06.0`` -> ``0000:00:06`` (lower case)."""
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    text = text.split(".")[0]
    parts = text.split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    elif len(parts) == 2:
        parts.insert(0, "0000")
    return ":".join(parts)


def _num(cell: str | None) -> float | None:
    return number(cell or "")


def _int(cell: str | None) -> int | None:
    return integer(cell or "")


def parse_query_gpu(text: str) -> list[GpuQuery]:
    """``--query-gpu ... --format=csv`` rows (header with units); None where the driver said N/A."""
    gpus: list[GpuQuery] = []
    for cell in nvsmi_query.csv_rows(text):
        idx = _int(cell.get("index"))
        if idx is None:
            continue
        mask_text = (cell.get("clocks_throttle_reasons.active") or "").strip()
        mask = int(mask_text, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", mask_text) else None
        gpus.append(GpuQuery(
            index=idx, name=cell.get("name", ""), uuid=cell.get("uuid", ""),
            pci_bus_id=cell.get("pci.bus_id", ""), driver_version=cell.get("driver_version", ""),
            temperature_c=_num(cell.get("temperature.gpu")),
            clocks_sm_mhz=_num(cell.get("clocks.sm")),
            clocks_max_sm_mhz=_num(cell.get("clocks.max.sm")),
            clock_event_mask=mask,
            pcie_gen_current=_int(cell.get("pcie.link.gen.current")),
            pcie_gen_max=_int(cell.get("pcie.link.gen.max")),
            pcie_width_current=_int(cell.get("pcie.link.width.current")),
            pcie_width_max=_int(cell.get("pcie.link.width.max")),
            ecc_uncorrected_volatile=_int(cell.get("ecc.errors.uncorrected.volatile.total")),
            power_draw_w=_num(cell.get("power.draw")),
            power_limit_w=_num(cell.get("power.limit")),
            memory_total_mib=_num(cell.get("memory.total")),
            utilization_pct=_num(cell.get("utilization.gpu")),
        ))
    return gpus


@dataclass
class SmiQ:
    driver_version: str = ""
    cuda_version: str = ""
    gpus: list[GpuDetail] = field(default_factory=list)


def _yes(value: str) -> bool:
    return value.strip().lower() in ("yes", "true", "active")


def _section(q: nvsmi_q.QGpu, *names: str) -> dict:
    for name in names:
        node = q.fields.get(name)
        if isinstance(node, dict):
            return node
    return {}


def _detail(q: nvsmi_q.QGpu) -> GpuDetail:
    d = GpuDetail(bus_id=q.bus_id, name=q.product_name)
    d.clock_events_active = [r for r in q.clock_event_reasons() if r != "Idle"]
    counters = _section(q, "Clocks Event Reasons Counters", "Clocks Throttle Reasons Counters")
    d.clock_event_counters_us = {k: v for k, v in ((k, _int(v)) for k, v in counters.items()
                                                   if isinstance(v, str)) if v is not None}
    d.ecc_volatile_uncorrectable = q.ecc_uncorrectable("Volatile")
    d.ecc_aggregate_uncorrectable = q.ecc_uncorrectable("Aggregate")
    ecc = _section(q, "ECC Errors")
    d.repair_flags = [k for k in ("Channel Repair Pending", "TPC Repair Pending", "Unrepairable Memory")
                      if isinstance(ecc.get(k), str) and _yes(ecc[k])]
    rows = _section(q, "Remapped Rows")
    if rows:
        unc = rows.get("Uncorrectable Error", "")
        d.remapped_uncorrectable = _int(unc) if isinstance(unc, str) else None
        d.remap_pending = _yes(q.get("Remapped Rows", "Pending"))
        d.remap_failure = _yes(q.get("Remapped Rows", "Remapping Failure Occurred"))
    d.fabric_state = q.get("Fabric", "State")
    d.fabric_status = q.get("Fabric", "Status")
    link = ("PCI", "GPU Link Info")
    d.pcie_gen_current = _int(q.get(*link, "PCIe Generation", "Current"))
    d.pcie_gen_max = _int(q.get(*link, "PCIe Generation", "Max"))
    d.pcie_width_current = _int(q.get(*link, "Link Width", "Current"))
    d.pcie_width_max = _int(q.get(*link, "Link Width", "Max"))
    d.temperature_c = q.num("Temperature", "GPU Current Temp")
    return d


def parse_smi_q(text: str) -> SmiQ:
    report = nvsmi_q.parse(text)
    return SmiQ(driver_version=report.driver_version, cuda_version=report.cuda_version,
                gpus=[_detail(q) for q in report.gpus])


def parse_nvlink_status(text: str) -> list[GpuNvlinks]:
    """``nvidia-smi nvlink -s``: every GPU's links with their speed (None when inactive)."""
    return [GpuNvlinks(gpu=g.index, links=[NvlinkLink(link=n, gb_s=speed) for n, speed in g.speeds_gb_s.items()])
            for g in nvsmi_nvlink.parse(text)]


def parse_topo(text: str) -> Topology:
    """``nvidia-smi topo -m`` as the snapshot's record (one entry per unordered device pair)."""
    topo = nvsmi_topo.parse(text)
    nics = [topo.nic_legend.get(n, n) for n in topo.nics]
    out = Topology(gpus=list(topo.gpus), nics=nics)
    seen: set[tuple[str, str]] = set()
    for (a, b), kind in topo.links.items():
        if a == b or kind.strip() == "X":
            continue
        key = (a, b) if a < b else (b, a)
        if key not in seen:
            seen.add(key)
            out.links.append(TopoLink(a=key[0], b=key[1], kind=kind))
    return out


def parse_compute_apps(text: str) -> list[GpuProcess]:
    procs: list[GpuProcess] = []
    for cell in nvsmi_query.csv_rows(text):
        pid = _int(cell.get("pid"))
        if pid is None:
            continue
        mem = cell.get("used_memory", "")
        procs.append(GpuProcess(pid=pid, name=cell.get("process_name", ""),
                                used_mib=None if is_absent(mem) else _num(mem), gpu_uuid=cell.get("gpu_uuid", "")))
    return procs
