"""``lscpu``: CPU model, sockets, cores, threads, NUMA nodes. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustereval.probes._text import body


@dataclass
class CpuInfo:
    model: str = ""
    threads: int = 0  # logical CPUs
    sockets: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    numa_nodes: int = 0

    @property
    def cores(self) -> int:
        """Physical cores; falls back to logical CPUs when lscpu does not split them."""
        if self.sockets and self.cores_per_socket:
            return self.sockets * self.cores_per_socket
        return self.threads


def build_argv() -> list[str]:
    return ["lscpu"]


def parse(text: str) -> CpuInfo:
    fields: dict[str, str] = {}
    for line in body(text).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()

    def num(key: str) -> int:
        m = re.match(r"\d+", fields.get(key, ""))
        return int(m.group()) if m else 0

    return CpuInfo(
        model=re.sub(r"\s+", " ", fields.get("Model name", "")).strip(),
        threads=num("CPU(s)"),
        sockets=num("Socket(s)"),
        cores_per_socket=num("Core(s) per socket") or num("Core(s) per cluster"),
        threads_per_core=num("Thread(s) per core"),
        numa_nodes=num("NUMA node(s)"),
    )
