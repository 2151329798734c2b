"""nvidia-smi readings for the snapshot, from the environment's nvidia-smi parsers. Pure.

The parsing itself lives in ``nvsmi_q`` / ``nvsmi_nvlink`` / ``nvsmi_topo``; this module only turns
their results into the snapshot's records, keeping "not reported" (None) apart from zero, which
the thresholds need. ``--query-gpu`` rows (``nvsmi_query.parse_rows``) and compute processes
(``gpu_procs.parse_compute_apps``) are already the snapshot's records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustereval.probes import nvsmi_nvlink, nvsmi_q, nvsmi_topo
from clustereval.probes._text import integer
from clustereval.records.snapshot import (
    GpuDetail,
    GpuNvlinks,
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


def _int(cell: str | None) -> int | None:
    return integer(cell or "")


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
