"""The accelerator and NIC spec database (``data/accelerators.toml``), looked up by nvidia-smi name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


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
    sm_count: int  # 0: not an SM architecture
    source_url: str
    match: tuple[str, ...] = ()  # regexes on the nvidia-smi / rocm-smi name


@lru_cache(maxsize=1)
def _load() -> dict:
    text = resources.files("clustereval.data").joinpath("accelerators.toml").read_text()
    return tomllib.loads(text)


def gpu_specs() -> list[GpuSpec]:
    return [GpuSpec(key=k, match=tuple(v.pop("match", ())), **v) for k, v in
            ((k, dict(v)) for k, v in _load()["gpu"].items())]


def lookup_gpu(name: str, *, power_limit_w: float | None = None) -> GpuSpec | None:
    """The spec row for an nvidia-smi name, or None when unknown (never a guess).

    The power limit separates variants that share a name (H200 SXM 700 W vs H200 NVL 600 W).
    """
    hits = [s for s in gpu_specs() if any(re.search(p, name, re.IGNORECASE) for p in s.match)]
    if not hits:
        return None
    if len(hits) > 1 and power_limit_w:
        hits.sort(key=lambda s: abs(s.tdp_w - power_limit_w))
    return hits[0]
