"""Who is computing on the GPUs: ``nvidia-smi --query-compute-apps`` and the busy-GPU rule.

A performance pass starts only on GPUs with no foreign compute process, and stops if one appears:
its own sibling loads are expected. In a container the pids nvidia-smi prints may be the host's,
so our own processes are also recognised by count: a GPU may hold as many unmatched processes as
we started there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COMPUTE_APPS_ARGV = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                     "--format=csv,noheader,nounits"]
GPU_INDEX_ARGV = ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,power.limit,clocks.max.sm",
                  "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class ComputeApp:
    gpu_uuid: str
    pid: int
    name: str
    used_mib: int = 0

    def describe(self, gpu: int | None) -> str:
        where = f" on gpu{gpu}" if gpu is not None else ""
        return f"pid {self.pid} ({self.name}){where}"


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str = ""
    memory_mib: int = 0
    power_limit_w: float | None = None
    boost_mhz: float | None = None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def _number(text: str) -> float | None:
    word = text.split(" ")[0] if text else ""
    try:
        return float(word)
    except ValueError:
        return None


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """Rows of ``gpu_uuid, pid, process_name, used_memory``; headers and notes are skipped."""
    apps = []
    for line in text.splitlines():
        cells = _cells(line)
        if len(cells) < 3 or not cells[1].isdigit():
            continue
        used = _number(cells[3]) if len(cells) > 3 else None
        apps.append(ComputeApp(cells[0], int(cells[1]), cells[2], int(used or 0)))
    return apps


def parse_gpu_rows(text: str) -> list[GpuRow]:
    """Rows of ``index, uuid, name, memory.total, power.limit, clocks.max.sm``."""
    rows = []
    for line in text.splitlines():
        cells = _cells(line)
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        extra = cells[2:] + [""] * (4 - len(cells[2:]))
        rows.append(GpuRow(int(cells[0]), cells[1], extra[0], int(_number(extra[1]) or 0),
                           _number(extra[2]), _number(extra[3])))
    return rows


def foreign_apps(apps: list[ComputeApp], uuid_to_index: Mapping[str, int], own_pids: set[int],
                 own_per_gpu: Mapping[int, int]) -> list[str]:
    """Descriptions ("pid 4242 (python3) on gpu3") of processes that are not ours.

    ``own_per_gpu``: how many processes we run on each GPU now. A process whose pid is ours is
    ours; past that, a GPU may hold as many unmatched processes as we started there and still be
    ours (pid namespaces); any more, and every unmatched process on it is named.
    """
    by_gpu: dict[int | None, list[ComputeApp]] = {}
    for app in apps:
        by_gpu.setdefault(uuid_to_index.get(app.gpu_uuid), []).append(app)
    found = []
    for gpu, on_gpu in sorted(by_gpu.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        matched = [a for a in on_gpu if a.pid in own_pids]
        unmatched = [a for a in on_gpu if a.pid not in own_pids]
        allowed = max(0, own_per_gpu.get(gpu, 0) - len(matched)) if gpu is not None else 0
        if len(unmatched) > allowed:
            found += [a.describe(gpu) for a in unmatched]
    return found
