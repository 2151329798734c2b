"""``nvidia-smi -q``: the long per-GPU report. Pure.

Read as an indentation tree; the fields the environment needs are picked out by path: PCIe
generation and width (current, max, and what the host allows), clock event reasons, ECC,
retired pages and remapped rows, clocks and power limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from clustereval.probes._text import body, integer, number

_LEAF = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")


@dataclass
class QGpu:
    bus_id: str
    fields: dict[str, Any] = field(default_factory=dict)  # nested: section -> key -> value

    def get(self, *path: str) -> str:
        node: Any = self.fields
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return ""
            node = node[key]
        return node if isinstance(node, str) else ""

    def num(self, *path: str) -> float | None:
        return number(self.get(*path))

    def int_at(self, *path: str) -> int:
        v = integer(self.get(*path))
        return v if v is not None else 0

    # -- what the environment reads ------------------------------------------------------
    @property
    def product_name(self) -> str:
        return self.get("Product Name")

    @property
    def architecture(self) -> str:
        return self.get("Product Architecture")

    def pcie(self) -> dict[str, int]:
        link = ("PCI", "GPU Link Info")
        return {
            "gen_max": self.int_at(*link, "PCIe Generation", "Max"),
            "gen_current": self.int_at(*link, "PCIe Generation", "Current"),
            "gen_device_max": self.int_at(*link, "PCIe Generation", "Device Max"),
            "gen_host_max": self.int_at(*link, "PCIe Generation", "Host Max"),
            "width_max": self.int_at(*link, "Link Width", "Max"),
            "width_current": self.int_at(*link, "Link Width", "Current"),
        }

    def clock_event_reasons(self) -> list[str]:
        """Names of the active clock event (throttle) reasons, e.g. ``["Idle"]``."""
        section = self.fields.get("Clocks Event Reasons") or self.fields.get("Clocks Throttle Reasons") or {}
        return [k for k, v in _flatten(section) if v.strip() == "Active"]

    def ecc_mode(self) -> str:
        return self.get("ECC Mode", "Current")

    def ecc_uncorrectable(self, scope: str) -> int:
        """Uncorrectable ECC errors, summed over SRAM/DRAM rows, for ``Volatile`` or ``Aggregate``."""
        section = self.fields.get("ECC Errors", {}).get(scope, {})
        total = 0
        for key, value in _flatten(section):
            if "Uncorrectable" in key or key in ("Double Bit", "Total Uncorrectable"):
                total += integer(value) or 0
        return total

    def remapped_rows(self) -> dict[str, str]:
        return {k: v for k, v in _flatten(self.fields.get("Remapped Rows", {}))
                if "Histogram" not in k and "bank" not in v}

    def retired_pages(self) -> dict[str, str]:
        return dict(_flatten(self.fields.get("Retired Pages", {})))

    def memory_health(self) -> str:
        """One line on retired pages / remapped rows, '' when nothing was retired, remapped or pending."""
        parts = []
        rows = self.remapped_rows()
        unc = integer(rows.get("Uncorrectable Error", "")) or 0
        cor = integer(rows.get("Correctable Error", "")) or 0
        if unc or cor:
            parts.append(f"rows remapped: {unc} rows after uncorrectable errors, {cor} rows after correctable ones")
        if rows.get("Pending", "").strip().lower() == "yes":
            parts.append("a row remapping pending (reset the GPU)")
        if rows.get("Remapping Failure Occurred", "").strip().lower() == "yes":
            parts.append("a row remapping failure")
        pages = self.retired_pages()
        sbe = integer(pages.get("Single Bit ECC", "")) or 0
        dbe = integer(pages.get("Double Bit ECC", "")) or 0
        if sbe or dbe:
            parts.append(f"{sbe + dbe} retired pages")
        if pages.get("Pending Page Blacklist", pages.get("Pending Page Retirement", "")).strip().lower() == "yes":
            parts.append("a page retirement pending")
        return "; ".join(parts)


@dataclass
class QReport:
    driver_version: str = ""
    cuda_version: str = ""
    gpus: list[QGpu] = field(default_factory=list)


def build_argv() -> list[str]:
    return ["nvidia-smi", "-q"]


def _flatten(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, dict):
                out += _flatten(v, k)
            else:
                out.append((k, v))
    return out


def parse(text: str) -> QReport:
    report = QReport()
    current: QGpu | None = None
    stack: list[tuple[int, dict]] = []  # (indent, section dict)
    for raw in body(text).splitlines():
        if not raw.strip() or raw.startswith("=") or set(raw.strip()) == {"="}:
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        m = _LEAF.match(raw)
        if indent == 0:
            if m and current is None:
                key, value = m.group(2).strip(), m.group(3).strip()
                if key == "Driver Version":
                    report.driver_version = value
                elif key == "CUDA Version":
                    report.cuda_version = value
                continue
            gm = re.match(r"^GPU\s+(\S+)", raw)
            if gm:
                current = QGpu(bus_id=gm.group(1))
                report.gpus.append(current)
                stack = [(0, current.fields)]
            continue
        if current is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else current.fields
        if m:
            key, value = m.group(2).strip(), m.group(3).strip()
            parent.setdefault(key, value)
        else:
            section: dict = {}
            parent[raw.strip()] = section
            stack.append((indent, section))
    return report

