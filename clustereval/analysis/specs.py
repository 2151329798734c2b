"""The accelerator and NIC spec database (``data/accelerators.toml``), looked up by nvidia-smi name.

An unknown name returns None: the report then asks the operator for the figures (a Needs
operator input finding), it never guesses a near neighbour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TFLOPS_TABLE_URL = ("https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/"
                    "README.md#tflops-comparison-table")
NVLINK_TABLE_URL = "https://github.com/stas00/ml-engineering/blob/master/network/README.md#nvlink"
INTERNODE_TABLE_URL = "https://github.com/stas00/ml-engineering/blob/master/network/README.md#inter-node-networking"


@dataclass(frozen=True)
class GpuSpec:
    key: str  # "H200 SXM"
    vendor: str
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    hbm_gib: float
    hbm_tb_s: float
    tdp_w: float
    nvlink_gen: int  # 0: none
    nvlink_uni_gb_s: float  # per GPU, unidirectional
    sm_count: int  # 0: not stated by the vendor, or not an SM architecture
    source_url: str
    match: tuple[str, ...] = ()  # regexes on the nvidia-smi / rocm-smi name
    memory_type: str = ""  # HBM3e, GDDR6, ...
    pcie_gen: int = 0  # the host link's PCIe generation; 0: not PCIe, or not stated
    pcie_lanes: int = 0
    notes: str = ""


@dataclass(frozen=True)
class NicSpec:
    key: str  # "ConnectX-7 NDR"
    vendor: str
    rate_gb_s: float  # per port, Gb/s (bits)
    kinds: tuple[str, ...]
    ca_types: tuple[str, ...]
    source_url: str
    notes: str = ""


@lru_cache(maxsize=1)
def _load() -> dict:
    text = resources.files("clustereval.data").joinpath("accelerators.toml").read_text()
    return tomllib.loads(text)


@lru_cache(maxsize=1)
def _gpu_specs() -> tuple[GpuSpec, ...]:
    out = []
    for key, row in _load()["gpu"].items():
        row = dict(row)
        out.append(GpuSpec(key=key, match=tuple(row.pop("match", ())), **row))
    return tuple(out)


def gpu_specs() -> list[GpuSpec]:
    return list(_gpu_specs())


@lru_cache(maxsize=1)
def nic_specs() -> tuple[NicSpec, ...]:
    out = []
    for key, row in _load().get("nic", {}).items():
        row = dict(row)
        out.append(NicSpec(key=key, kinds=tuple(row.pop("kinds", ())), ca_types=tuple(row.pop("ca_types", ())), **row))
    return tuple(out)


def lookup_gpu(name: str, *, power_limit_w: float | None = None) -> GpuSpec | None:
    """The spec row for an nvidia-smi name, or None when unknown (never a guess).

    The power limit separates variants that share a name: the row whose TDP is closest wins.
    """
    if not name:
        return None
    hits = [s for s in _gpu_specs() if any(re.search(p, name, re.IGNORECASE) for p in s.match)]
    if not hits:
        return None
    if len(hits) > 1 and power_limit_w:
        hits.sort(key=lambda s: abs(s.tdp_w - power_limit_w))
    return hits[0]


def lookup_nic(kind: str, rate_gb_s: float, ca_type: str = "") -> NicSpec | None:
    """The adapter row for a link kind (infiniband / roce / efa), its port rate and ibstat CA type."""
    for spec in nic_specs():
        if kind not in spec.kinds or abs(spec.rate_gb_s - rate_gb_s) > 1:
            continue
        if spec.ca_types and ca_type and ca_type not in spec.ca_types:
            continue
        return spec
    return None


def short_gpu_name(name: str) -> str:
    """The model as a title says it: ``NVIDIA H200`` -> ``H200``, ``NVIDIA A100-SXM4-80GB`` -> ``A100``."""
    text = re.sub(r"^(NVIDIA|AMD|Intel)\s+(Instinct\s+)?", "", name.strip(), flags=re.IGNORECASE)
    text = re.sub(r"^(Tesla|GeForce|Quadro)\s+", "", text, flags=re.IGNORECASE)
    first = re.split(r"[\s\-]", text)[0] if text else name
    return first or name
