"""``nvidia-smi --query-gpu=... --format=csv``: one row per GPU. Pure.

One field mapping (``parse_rows``) for every query clustereval runs: the environment's field list
is the runbook's environment dump plus what identifies and qualifies a board (serial, bus id, PCIe
width, ECC, clock event reasons, persistence, MIG); the snapshot asks for what its thresholds read.
``csv_rows`` reads every nvidia-smi csv, with or without a header.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

from clustereval.probes._text import body, integer, is_absent, number
from clustereval.records.environment import GpuInfo, GpuQuery

FIELDS = (
    "index", "name", "uuid", "serial", "pci.bus_id", "driver_version", "memory.total",
    "power.limit", "power.max_limit", "power.default_limit", "clocks.max.sm", "clocks.sm",
    "clocks.max.mem", "power.draw", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "temperature.gpu",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
    "clocks_throttle_reasons.active", "persistence_mode", "compute_mode", "mig.mode.current",
)
# The snapshot's query. ``clocks_throttle_reasons.active`` is accepted by old and new drivers (new
# ones print the header as clocks_event_reasons.active).
SNAPSHOT_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "driver_version", "temperature.gpu", "clocks.sm",
    "clocks.max.sm", "clocks_throttle_reasons.active", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "ecc.errors.uncorrected.volatile.total",
    "power.draw", "power.limit", "memory.total", "utilization.gpu",
)
# Fallback when a field above is unknown to an old driver (the whole query fails then).
SNAPSHOT_FIELDS_MINIMAL = ("index", "name", "uuid", "pci.bus_id", "driver_version", "temperature.gpu",
                           "clocks.sm", "clocks.max.sm", "memory.total")

# nvidia-smi prints some headers under a newer name than the one queried
_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "clocks.max.memory": "clocks.max.mem",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "used_gpu_memory": "used_memory",
}

# queried field -> GpuQuery attribute; text fields stay as printed, the rest are numbers
_TEXT = {"name": "name", "uuid": "uuid", "serial": "serial", "pci.bus_id": "pci_bus_id",
         "driver_version": "driver_version", "clocks_throttle_reasons.active": "clock_event_reasons",
         "persistence_mode": "persistence_mode", "compute_mode": "compute_mode", "mig.mode.current": "mig_mode"}
_FLOAT = {"temperature.gpu": "temperature_c", "clocks.sm": "clocks_sm_mhz", "clocks.max.sm": "clocks_max_sm_mhz",
          "clocks.max.mem": "clocks_max_mem_mhz", "power.draw": "power_draw_w", "power.limit": "power_limit_w",
          "power.max_limit": "power_max_limit_w", "power.default_limit": "power_default_limit_w",
          "memory.total": "memory_total_mib", "utilization.gpu": "utilization_pct"}
_INT = {"pcie.link.gen.current": "pcie_gen_current", "pcie.link.gen.max": "pcie_gen_max",
        "pcie.link.width.current": "pcie_width_current", "pcie.link.width.max": "pcie_width_max",
        "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected_volatile",
        "ecc.errors.corrected.volatile.total": "ecc_corrected_volatile"}


def build_argv() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv"]


def header_key(cell: str) -> str:
    key = re.sub(r"\s*\[.*?\]\s*$", "", cell.strip())
    return _ALIASES.get(key, key)


def csv_rows(text: str, fields: Sequence[str] = ()) -> list[dict[str, str]]:
    """Rows of an nvidia-smi csv as dicts keyed by the queried field name. ``fields``: the query's
    fields, in order, for output without a header (``--format=csv,noheader``)."""
    lines = [ln for ln in body(text).splitlines() if ln.strip()]
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    if not rows:
        return []
    if fields and header_key(rows[0][0]) not in fields:
        header = list(fields)
    else:
        header, rows = [header_key(c) for c in rows[0]], rows[1:]
    return [dict(zip(header, (c.strip() for c in row), strict=False)) for row in rows]


def _mask(cell: str) -> int | None:
    text = cell.strip()
    return int(text, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", text) else None


def parse_rows(text: str, fields: Sequence[str] = ()) -> list[GpuQuery]:
    """One ``GpuQuery`` per GPU row; rows without an index (notes, errors) are skipped."""
    gpus: list[GpuQuery] = []
    for cell in csv_rows(text, fields):
        idx = cell.get("index", "").strip()
        if not idx.isdigit():
            continue
        gpu = GpuQuery(index=int(idx))
        for key, value in cell.items():
            if key in _TEXT:
                setattr(gpu, _TEXT[key], value)
            elif key in _FLOAT:
                setattr(gpu, _FLOAT[key], number(value))
            elif key in _INT:
                setattr(gpu, _INT[key], integer(value))
        gpu.clock_event_mask = _mask(gpu.clock_event_reasons)
        gpus.append(gpu)
    return gpus


def _text(cell: str) -> str:
    return "" if is_absent(cell) else cell.strip()


def _int(value: float | None) -> int:
    return int(value) if value is not None else 0


def to_gpu_info(q: GpuQuery) -> GpuInfo:
    """The environment's inventory row: absent cells become 0 / ''."""
    return GpuInfo(
        index=q.index, name=_text(q.name), uuid=_text(q.uuid), serial=_text(q.serial),
        pci_bus_id=_text(q.pci_bus_id), driver_version=_text(q.driver_version),
        memory_total_mib=_int(q.memory_total_mib), power_limit_w=q.power_limit_w or 0.0,
        power_max_limit_w=q.power_max_limit_w or 0.0, power_default_limit_w=q.power_default_limit_w or 0.0,
        clocks_max_sm_mhz=_int(q.clocks_max_sm_mhz), clocks_sm_mhz=_int(q.clocks_sm_mhz),
        clocks_max_mem_mhz=_int(q.clocks_max_mem_mhz), power_draw_w=q.power_draw_w or 0.0,
        pcie_gen_current=_int(q.pcie_gen_current), pcie_gen_max=_int(q.pcie_gen_max),
        pcie_width_current=_int(q.pcie_width_current), pcie_width_max=_int(q.pcie_width_max),
        temperature_c=_int(q.temperature_c), ecc_uncorrected_volatile=_int(q.ecc_uncorrected_volatile),
        ecc_corrected_volatile=_int(q.ecc_corrected_volatile), clock_event_reasons=_text(q.clock_event_reasons),
        persistence_mode=_text(q.persistence_mode), compute_mode=_text(q.compute_mode), mig_mode=_text(q.mig_mode),
    )


def parse(text: str) -> list[GpuInfo]:
    """One ``GpuInfo`` per row; absent cells (``[N/A]``) become 0 / ''. No header: no GPUs."""
    return [to_gpu_info(q) for q in parse_rows(text)]
