"""``nvidia-smi nvlink -s``: per-link speed for every GPU -> NVLink generation and spec. Pure.

The per-link rate nvidia-smi prints identifies the generation (about 53 GB/s: NVLink 5,
about 26.5 GB/s: NVLink 4, 25 GB/s: NVLink 3 or 2, 20 GB/s: NVLink 1). The spec is the
vendor's unidirectional figure per link times the active links: 18 NVLink 4 links are the
450 GB/s of an H100/H200 SXM, 18 NVLink 5 links the 900 GB/s of a B200.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from clustereval.probes._text import body
from clustereval.records.environment import NvlinkInfo

# generation -> advertised unidirectional GB/s per link
SPEC_PER_LINK_GB_S = {5: 50.0, 4: 25.0, 3: 25.0, 2: 25.0, 1: 20.0}
NVLINK_TABLE_URL = "https://github.com/stas00/ml-engineering/blob/master/network/README.md#nvlink"


@dataclass
class GpuLinks:
    index: int
    name: str
    speeds_gb_s: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s; None: inactive

    @property
    def active(self) -> list[float]:
        return [s for s in self.speeds_gb_s.values() if s]

    @property
    def down(self) -> list[int]:
        return [link for link, s in self.speeds_gb_s.items() if not s]


def build_argv() -> list[str]:
    return ["nvidia-smi", "nvlink", "-s"]


def parse(text: str) -> list[GpuLinks]:
    gpus: list[GpuLinks] = []
    for line in body(text).splitlines():
        m = re.match(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID.*)?$", line.strip())
        if m:
            gpus.append(GpuLinks(index=int(m.group(1)), name=m.group(2)))
            continue
        m = re.match(r"^Link\s+(\d+):\s*(.*)$", line.strip())
        if m and gpus:
            speed = re.match(r"(\d+(?:\.\d+)?)\s*GB/s", m.group(2))
            gpus[-1].speeds_gb_s[int(m.group(1))] = float(speed.group(1)) if speed else None
    return gpus


def generation(per_link_gb_s: float, num_links: int = 0) -> int:
    """NVLink generation from the per-link rate; 0 when the rate matches none."""
    if per_link_gb_s >= 45:
        return 5
    if 26.0 <= per_link_gb_s < 30:
        return 4
    if 24.0 <= per_link_gb_s < 26.0:
        return 2 if 0 < num_links <= 6 else 3  # V100: 6 links of NVLink 2; A100: 12 of NVLink 3
    if 18.0 <= per_link_gb_s < 24.0:
        return 1
    return 0


def summarize(links: list[GpuLinks], topo_bond: str = "") -> NvlinkInfo:
    """The node's NVLink fabric: typical links per GPU, per-link rate, generation, spec, links down."""
    info = NvlinkInfo(topo_bond=topo_bond)
    if not links:
        return info
    counts = Counter(len(g.active) for g in links)
    info.num_links_per_gpu = counts.most_common(1)[0][0]
    info.active_links_per_gpu = {f"gpu{g.index}": len(g.active) for g in links}
    speeds = Counter(s for g in links for s in g.active)
    if speeds:
        info.per_link_gb_s = speeds.most_common(1)[0][0]
        info.generation = generation(info.per_link_gb_s, info.num_links_per_gpu)
        if info.generation:
            info.spec_uni_gb_s = SPEC_PER_LINK_GB_S[info.generation] * max(len(g.active) + len(g.down) for g in links)
    # links are down only where some links run: a board with every link inactive has no NVLink in use
    if speeds:
        info.links_down = [f"gpu{g.index}:link{n}" for g in links for n in g.down]
    return info
