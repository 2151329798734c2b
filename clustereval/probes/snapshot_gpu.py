"""nvidia-smi parsers for the snapshot: ``--query-gpu`` CSV, ``-q``, ``topo -m``, ``nvlink -s``,
``--query-compute-apps``. Pure: text in, dataclasses out.

Snapshot-specific for now; the environment phase's nvidia-smi parsers are the general ones and
these fold into them where they overlap.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from clustereval.records.snapshot import (
    GpuDetail,
    GpuNvlinks,
    GpuProcess,
    GpuQuery,
    NvlinkLink,
    TopoLink,
    Topology,
)


def _num(text: str) -> float | None:
    """The first number in a cell (``"700.00 W"`` -> 700.0); None for N/A, [N/A], Not Supported."""
    m = re.search(r"-?\d+(?:\.\d+)?", text or "")
    if not m or "n/a" in text.lower() or "not supported" in text.lower():
        return None
    return float(m.group())


def _int(text: str) -> int | None:
    v = _num(text)
    return int(v) if v is not None else None


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


_HEADER_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "clocks_event_reasons.hw_slowdown": "clocks_throttle_reasons.hw_slowdown",
    "clocks.max.memory": "clocks.max.mem",
}


def _header_key(cell: str) -> str:
    key = re.sub(r"\s*\[.*?\]\s*$", "", cell.strip())
    return _HEADER_ALIASES.get(key, key)


def _csv_rows(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    if not rows:
        return [], []
    return [_header_key(c) for c in rows[0]], rows[1:]


def parse_query_gpu(text: str) -> list[GpuQuery]:
    """``--format=csv`` output with its header line (units in the header are dropped)."""
    header, rows = _csv_rows(text)
    if "index" not in header:
        return []
    gpus: list[GpuQuery] = []
    for row in rows:
        cell = dict(zip(header, (c.strip() for c in row), strict=False))
        idx = _int(cell.get("index", ""))
        if idx is None:
            continue
        mask_text = cell.get("clocks_throttle_reasons.active", "")
        mask = int(mask_text, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", mask_text or "") else None
        gpus.append(GpuQuery(
            index=idx, name=cell.get("name", ""), uuid=cell.get("uuid", ""),
            pci_bus_id=cell.get("pci.bus_id", ""), driver_version=cell.get("driver_version", ""),
            temperature_c=_num(cell.get("temperature.gpu", "")),
            clocks_sm_mhz=_num(cell.get("clocks.sm", "")),
            clocks_max_sm_mhz=_num(cell.get("clocks.max.sm", "")),
            clock_event_mask=mask,
            pcie_gen_current=_int(cell.get("pcie.link.gen.current", "")),
            pcie_gen_max=_int(cell.get("pcie.link.gen.max", "")),
            pcie_width_current=_int(cell.get("pcie.link.width.current", "")),
            pcie_width_max=_int(cell.get("pcie.link.width.max", "")),
            ecc_uncorrected_volatile=_int(cell.get("ecc.errors.uncorrected.volatile.total", "")),
            power_draw_w=_num(cell.get("power.draw", "")),
            power_limit_w=_num(cell.get("power.limit", "")),
            memory_total_mib=_num(cell.get("memory.total", "")),
            utilization_pct=_num(cell.get("utilization.gpu", "")),
        ))
    return gpus


@dataclass
class SmiQ:
    driver_version: str = ""
    cuda_version: str = ""
    gpus: list[GpuDetail] = field(default_factory=list)


_KV = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")
_HEAD = re.compile(r"^(\s*)(\S.*?)\s*$")


def _nested(block: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """Indented ``key : value`` lines as (path of headings, value) pairs."""
    out: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    for line in block:
        if not line.strip():
            continue
        m = _KV.match(line)
        if m:
            indent = len(m.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            out.append((tuple(s for _, s in stack) + (m.group(2).strip(),), m.group(3)))
            continue
        h = _HEAD.match(line.rstrip(" :"))
        if h:
            indent = len(h.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, h.group(2).strip()))
    return out


def _yes(value: str) -> bool:
    return value.strip().lower() in ("yes", "true", "active")


def parse_smi_q(text: str) -> SmiQ:
    result = SmiQ()
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*$", line)
        if m:
            current = []
            blocks.append((m.group(1), current))
            continue
        if current is None:
            kv = _KV.match(line)
            if kv and kv.group(2).strip() == "Driver Version":
                result.driver_version = kv.group(3)
            elif kv and kv.group(2).strip() == "CUDA Version":
                result.cuda_version = kv.group(3)
        else:
            current.append(line)
    for bus, block in blocks:
        result.gpus.append(_gpu_detail(bus, block))
    return result


def _gpu_detail(bus: str, block: list[str]) -> GpuDetail:
    g = GpuDetail(bus_id=bus)
    for path, value in _nested(block):
        top, leaf = path[0], path[-1]
        if path == ("Product Name",):
            g.name = value
        elif top == "Clocks Event Reasons" or top == "Clocks Throttle Reasons":
            if len(path) >= 2 and value.strip() == "Active" and leaf != "Idle":
                g.clock_events_active.append(leaf)
        elif top in ("Clocks Event Reasons Counters", "Clocks Throttle Reasons Counters"):
            us = _int(value)
            if us is not None:
                g.clock_event_counters_us[leaf] = us
        elif top == "ECC Errors" and len(path) >= 3 and "Uncorrectable" in leaf:
            n = _int(value) or 0
            if path[1] == "Volatile":
                g.ecc_volatile_uncorrectable += n
            elif path[1] == "Aggregate":
                g.ecc_aggregate_uncorrectable += n
        elif top == "ECC Errors" and leaf in ("Channel Repair Pending", "TPC Repair Pending",
                                              "Unrepairable Memory") and _yes(value):
            g.repair_flags.append(leaf)
        elif top == "Remapped Rows":
            if leaf == "Uncorrectable Error" and len(path) == 2:
                g.remapped_uncorrectable = _int(value)
            elif leaf == "Pending":
                g.remap_pending = _yes(value)
            elif leaf == "Remapping Failure Occurred":
                g.remap_failure = _yes(value)
        elif top == "Fabric" and len(path) == 2:
            if leaf == "State":
                g.fabric_state = value
            elif leaf == "Status":
                g.fabric_status = value
        elif top == "PCI" and "GPU Link Info" in path:
            if "PCIe Generation" in path and leaf in ("Current", "Max"):
                setattr(g, f"pcie_gen_{leaf.lower()}", _int(value))
            elif "Link Width" in path and leaf in ("Current", "Max"):
                setattr(g, f"pcie_width_{leaf.lower()}", _int(value))
        elif top == "Temperature" and leaf == "GPU Current Temp":
            g.temperature_c = _num(value)
    return g


def parse_nvlink_status(text: str) -> list[GpuNvlinks]:
    """``nvidia-smi nvlink -s``: every GPU's links with their speed (None when inactive)."""
    gpus: list[GpuNvlinks] = []
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            gpus.append(GpuNvlinks(gpu=int(m.group(1))))
            continue
        m = re.match(r"^\s+Link (\d+):\s*(.*?)\s*$", line)
        if m and gpus:
            value = m.group(2)
            speed = None if "inactive" in value.lower() else _num(value)
            gpus[-1].links.append(NvlinkLink(link=int(m.group(1)), gb_s=speed, raw=value))
    return gpus


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> Topology:
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines() if not ln.startswith("$ ")]
    header_at = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    topo = Topology()
    if header_at is None:
        return topo
    cols = [c for c in re.split(r"\t+|\s{2,}", lines[header_at].strip()) if c]
    devs = [c for c in cols if re.fullmatch(r"(GPU|NIC|mlx|rdma|efa)\S*", c)]
    for ln in lines[header_at + 1:]:
        if not ln.strip() or ln.startswith("Legend"):
            break
        cells = [c.strip() for c in ln.split("\t")]
        if len(cells) < 2:
            cells = ln.split()
        row = cells[0]
        values = cells[1:1 + len(devs)]
        if row.startswith("GPU"):
            topo.gpus.append(row)
        else:
            topo.nics.append(row)
        for dev, val in zip(devs, values, strict=False):
            if dev == row or val == "X":
                continue
            a, b = sorted((row, dev))
            if not any(t.a == a and t.b == b for t in topo.links):
                topo.links.append(TopoLink(a=a, b=b, kind=val))
    return topo


def parse_compute_apps(text: str) -> list[GpuProcess]:
    header, rows = _csv_rows(text)
    procs: list[GpuProcess] = []
    for row in rows:
        cell = dict(zip(header, (c.strip() for c in row), strict=False))
        pid = _int(cell.get("pid", ""))
        if pid is None:
            continue
        procs.append(GpuProcess(pid=pid, name=cell.get("process_name", ""),
                                used_mib=_num(cell.get("used_gpu_memory", cell.get("used_memory", ""))),
                                gpu_uuid=cell.get("gpu_uuid", "")))
    return procs
