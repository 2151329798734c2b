"""``nvidia-smi topo -m``: the GPU/NIC connection matrix and its NIC legend. Pure.

``NV#`` is a bonded set of # NVLinks; ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` are PCIe paths
of increasing distance (no NVLink).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from clustereval.probes._text import body

PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass
class Topology:
    gpus: list[str] = field(default_factory=list)  # "GPU0", ...
    nics: list[str] = field(default_factory=list)  # "NIC0", ...
    links: dict[tuple[str, str], str] = field(default_factory=dict)  # ("GPU0", "GPU1") -> "NV18"
    nic_legend: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)

    def gpu_pairs(self) -> dict[tuple[str, str], str]:
        return {k: v for k, v in self.links.items() if k[0] in self.gpus and k[1] in self.gpus and k[0] < k[1]}

    def bond(self) -> str:
        """The GPU-to-GPU link as one word: ``NV18`` when every pair agrees, ``NV12/NV6`` when mixed, '' for one GPU."""
        kinds = Counter(self.gpu_pairs().values())
        if not kinds:
            return ""
        return "/".join(k for k, _ in kinds.most_common())

    def nvlink_bonds(self) -> list[int]:
        return [int(v[2:]) for v in self.gpu_pairs().values() if re.fullmatch(r"NV\d+", v)]

    def nic_names(self) -> list[str]:
        return [self.nic_legend.get(n, n) for n in self.nics]


def build_argv() -> list[str]:
    return ["nvidia-smi", "topo", "-m"]


def parse(text: str) -> Topology:
    topo = Topology()
    lines = body(text).splitlines()
    header: list[str] = []
    in_legend = False
    for line in lines:
        if not line.strip():
            continue
        if line.strip().startswith("Legend:"):
            in_legend = True
            continue
        if line.strip().startswith("NIC Legend:"):
            in_legend = True
            continue
        if in_legend:
            m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)", line)
            if m:
                topo.nic_legend[m.group(1)] = m.group(2)
            continue
        cells = [c.strip() for c in line.split("\t")]
        if not header:
            if re.match(r"^\s*GPU0\b", line) or re.match(r"^\s*NIC0\b", line):
                header = [c for c in cells if c]
                topo.gpus = [c for c in header if re.fullmatch(r"GPU\d+", c)]
                topo.nics = [c for c in header if re.fullmatch(r"NIC\d+", c)]
            continue
        row = cells[0]
        if not re.fullmatch(r"(GPU|NIC)\d+", row):
            continue
        values = cells[1:]
        devices = topo.gpus + topo.nics
        for col, value in zip(devices, values, strict=False):
            topo.links[(row, col)] = value
        rest = values[len(devices):]
        if row in topo.gpus and rest:
            topo.cpu_affinity[row] = rest[0]
            if len(rest) > 1:
                topo.numa_affinity[row] = rest[1]
    return topo
