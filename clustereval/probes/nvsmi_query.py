"""``nvidia-smi --query-gpu=... --format=csv``: one row per GPU. Pure.

The field list is the runbook's environment dump plus what identifies and qualifies a board
(serial, bus id, PCIe width, ECC, clock event reasons, persistence, MIG).
"""

from __future__ import annotations

import csv
import io
import re

from clustereval.probes._text import body, integer, is_absent, number
from clustereval.records.environment import GpuInfo

FIELDS = (
    "index", "name", "uuid", "serial", "pci.bus_id", "driver_version", "memory.total",
    "power.limit", "power.max_limit", "power.default_limit", "clocks.max.sm", "clocks.sm",
    "clocks.max.mem", "power.draw", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "temperature.gpu",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
    "clocks_throttle_reasons.active", "persistence_mode", "compute_mode", "mig.mode.current",
)

# nvidia-smi prints some headers under a newer name than the one queried
_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "clocks.max.memory": "clocks.max.mem",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "used_gpu_memory": "used_memory",
}


def build_argv() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv"]


def header_key(cell: str) -> str:
    key = re.sub(r"\s*\[.*?\]\s*$", "", cell.strip())
    return _ALIASES.get(key, key)


def csv_rows(text: str) -> list[dict[str, str]]:
    """Rows of an nvidia-smi csv as dicts keyed by the queried field name."""
    lines = [ln for ln in body(text).splitlines() if ln.strip()]
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    if not rows:
        return []
    header = [header_key(c) for c in rows[0]]
    return [dict(zip(header, (c.strip() for c in row), strict=False)) for row in rows[1:]]


def _text(cell: str | None) -> str:
    return "" if cell is None or is_absent(cell) else cell.strip()


def _int(cell: str | None) -> int:
    v = integer(cell or "")
    return v if v is not None else 0


def _float(cell: str | None) -> float:
    v = number(cell or "")
    return v if v is not None else 0.0


def parse(text: str) -> list[GpuInfo]:
    """One ``GpuInfo`` per row; absent cells (``[N/A]``) become 0 / ''. No header: no GPUs."""
    gpus: list[GpuInfo] = []
    for row in csv_rows(text):
        if "index" not in row or integer(row["index"]) is None:
            continue
        gpus.append(GpuInfo(
            index=_int(row.get("index")),
            name=_text(row.get("name")),
            uuid=_text(row.get("uuid")),
            serial=_text(row.get("serial")),
            pci_bus_id=_text(row.get("pci.bus_id")),
            driver_version=_text(row.get("driver_version")),
            memory_total_mib=_int(row.get("memory.total")),
            power_limit_w=_float(row.get("power.limit")),
            power_max_limit_w=_float(row.get("power.max_limit")),
            power_default_limit_w=_float(row.get("power.default_limit")),
            clocks_max_sm_mhz=_int(row.get("clocks.max.sm")),
            clocks_sm_mhz=_int(row.get("clocks.sm")),
            clocks_max_mem_mhz=_int(row.get("clocks.max.mem")),
            power_draw_w=_float(row.get("power.draw")),
            pcie_gen_current=_int(row.get("pcie.link.gen.current")),
            pcie_gen_max=_int(row.get("pcie.link.gen.max")),
            pcie_width_current=_int(row.get("pcie.link.width.current")),
            pcie_width_max=_int(row.get("pcie.link.width.max")),
            temperature_c=_int(row.get("temperature.gpu")),
            ecc_uncorrected_volatile=_int(row.get("ecc.errors.uncorrected.volatile.total")),
            ecc_corrected_volatile=_int(row.get("ecc.errors.corrected.volatile.total")),
            clock_event_reasons=_text(row.get("clocks_throttle_reasons.active")),
            persistence_mode=_text(row.get("persistence_mode")),
            compute_mode=_text(row.get("compute_mode")),
            mig_mode=_text(row.get("mig.mode.current")),
        ))
    return gpus


# -- nvidia-smi --query-compute-apps ------------------------------------------------------

APPS_FIELDS = ("pid", "used_memory", "process_name", "gpu_uuid")


def apps_argv() -> list[str]:
    return ["nvidia-smi", f"--query-compute-apps={','.join(APPS_FIELDS)}", "--format=csv"]


def parse_apps(text: str, gpus: list[GpuInfo] | None = None) -> list[str]:
    """One line per GPU compute process: ``gpu0 pid 1234 python 1024 MiB``."""
    by_uuid = {g.uuid: g.index for g in gpus or []}
    out = []
    for row in csv_rows(text):
        pid = _text(row.get("pid"))
        if not pid.isdigit():
            continue
        where = f"gpu{by_uuid[row['gpu_uuid']]} " if row.get("gpu_uuid") in by_uuid else ""
        mem = _int(row.get("used_memory"))
        name = _text(row.get("process_name")) or "?"
        out.append(f"{where}pid {pid} {name}" + (f" {mem} MiB" if mem else ""))
    return out
