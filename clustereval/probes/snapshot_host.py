"""Host-side parsers for the snapshot: /proc/stat, CPU governors, RDMA ports from
sysfs, ``fi_info``, Fabric Manager, and the version strings compared across nodes. Pure.
"""

from __future__ import annotations

import re

from clustereval.records.snapshot import CpuTimes, RdmaPort

# ---- CPU ---------------------------------------------------------------------------------


def parse_proc_stat(text: str) -> list[CpuTimes]:
    """Every aggregate ``cpu`` line in ``text`` (the snapshot samples it twice)."""
    samples: list[CpuTimes] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != "cpu":
            continue
        nums = [int(p) for p in parts[1:9] if p.isdigit()]
        nums += [0] * (8 - len(nums))
        samples.append(CpuTimes(*nums[:8]))
    return samples


def iowait_pct(before: CpuTimes, after: CpuTimes) -> float | None:
    """Share of CPU time spent waiting on IO between two samples; None when no time passed."""
    total = after.total - before.total
    if total <= 0:
        return None
    return 100.0 * (after.iowait - before.iowait) / total


def parse_governors(text: str) -> dict[str, int]:
    """``sort | uniq -c`` of every CPU's scaling_governor -> {governor: number of CPUs}."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\S+)\s*$", line)
        if m:
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return counts


# ---- filesystems -------------------------------------------------------------------------


# ---- RDMA --------------------------------------------------------------------------------


def _strip_code(value: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``."""
    return value.split(":", 1)[1].strip() if ":" in value else value.strip()


def parse_rdma_ports(text: str) -> list[RdmaPort]:
    """The snapshot's tab-separated sysfs walk: device, port, state, rate, link layer, driver, phys."""
    ports: list[RdmaPort] = []
    for line in text.splitlines():
        cells = line.split("\t")
        if len(cells) < 3 or not cells[1].strip().isdigit():
            continue
        cells += [""] * (7 - len(cells))
        rate = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", cells[3])
        ports.append(RdmaPort(device=cells[0].strip(), port=int(cells[1]), state=_strip_code(cells[2]),
                              rate_gb_s=float(rate.group(1)) if rate else None,
                              link_layer=cells[4].strip(), driver=cells[5].strip(),
                              phys_state=_strip_code(cells[6])))
    return ports


def efa_provider_visible(text: str) -> bool:
    """``fi_info -p efa`` lists at least one ``provider: efa`` entry."""
    return re.search(r"^\s*provider:\s*efa\b", text, re.M) is not None


def parse_fabricmanager(text: str) -> tuple[int, str]:
    """(number of NVSwitch device nodes, ``systemctl is-active nvidia-fabricmanager`` or "")."""
    devices, service = 0, ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "nvswitch_devices" and value.strip().isdigit():
            devices = int(value.strip())
        elif key.strip() == "service":
            service = value.strip()
    return devices, service


# ---- versions compared across nodes ------------------------------------------------------


def parse_fi_version(text: str) -> str:
    m = re.search(r"^libfabric:\s*(\S+)", text, re.M)
    return m.group(1) if m else ""


def parse_efa_versions(text: str) -> dict[str, str]:
    """Installer, kernel module and aws-ofi-nccl versions from the snapshot's EFA section."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("installer:"):
            m = re.search(r"EFA installer version:\s*(\S+)", line)
            if m:
                out["EFA installer"] = m.group(1)
        elif line.startswith("module:"):
            out["EFA kernel module"] = line.split(":", 1)[1].strip()
        elif line.startswith("ofi-nccl:"):
            _, _, version = line.partition("\t")
            m = re.search(r"aws-ofi-nccl\s+(\S+)", version)
            if m and "aws-ofi-nccl" not in out:
                out["aws-ofi-nccl"] = m.group(1)
    return out


def parse_nccl_versions(text: str) -> str:
    """The system NCCL: from the library file name (libnccl.so.2.28.3), else from nccl.h."""
    libs = sorted({m.group(1) for m in re.finditer(r"libnccl\.so\.(\d+\.\d+\.\d+)", text)})
    if libs:
        return ", ".join(libs)
    parts: dict[str, str] = {}
    for m in re.finditer(r"#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)", text):
        parts.setdefault(m.group(1), m.group(2))
    if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return ""


def parse_cuda_toolkit(text: str) -> str:
    m = re.search(r"^(?:json|nvcc):\s*(\S+)", text, re.M)
    if m:
        return m.group(1)
    m = re.search(r"CUDA Version\s+(\S+)", text)
    return m.group(1) if m else ""


def parse_python_packages(text: str) -> dict[str, str]:
    """``name<TAB>version`` lines: torch and the pip NCCL wheels."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, version = line.partition("\t")
        if sep and name.strip():
            out[name.strip()] = version.strip()
    return out
