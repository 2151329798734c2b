"""Who is computing on the GPUs: ``nvidia-smi --query-compute-apps`` and the busy-GPU rule.

A performance pass starts only on GPUs with no foreign compute process, and stops if one appears:
its own sibling loads are expected. In a container the pids nvidia-smi prints may be the host's,
so our own processes are also recognised by count: a GPU may hold as many unmatched processes as
we started there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clustereval.probes._text import is_absent, number
from clustereval.probes.nvsmi_query import csv_rows, parse_rows
from clustereval.records.environment import GpuInfo, GpuProcess

# the one compute-apps query: the environment, the busy-GPU check and the snapshot all run it
COMPUTE_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
COMPUTE_APPS_ARGV = ["nvidia-smi", f"--query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}", "--format=csv"]
GPU_INDEX_FIELDS = ("index", "uuid", "name", "memory.total", "power.limit", "clocks.max.sm")
GPU_INDEX_ARGV = ["nvidia-smi", f"--query-gpu={','.join(GPU_INDEX_FIELDS)}", "--format=csv,noheader,nounits"]


def compute_apps_argv() -> list[str]:
    return list(COMPUTE_APPS_ARGV)


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str = ""
    memory_mib: int = 0
    power_limit_w: float | None = None
    boost_mhz: float | None = None


def parse_compute_apps(text: str) -> list[GpuProcess]:
    """Rows of ``--query-compute-apps``, with a header (any field order, units in the cells) or
    without one (``noheader``: the order of COMPUTE_APPS_FIELDS); notes are skipped."""
    apps = []
    for cell in csv_rows(text, COMPUTE_APPS_FIELDS):
        pid = cell.get("pid", "")
        if not pid.isdigit():
            continue
        mem = cell.get("used_memory", "")
        apps.append(GpuProcess(pid=int(pid), name=cell.get("process_name", ""),
                               used_mib=None if is_absent(mem) else number(mem), gpu_uuid=cell.get("gpu_uuid", "")))
    return apps


def describe_compute_apps(text: str, gpus: Sequence[GpuInfo] | None = None) -> list[str]:
    """The inventory's line per GPU compute process: ``gpu0 pid 1234 python 1024 MiB``."""
    by_uuid = {g.uuid: g.index for g in gpus or []}
    out = []
    for app in parse_compute_apps(text):
        where = f"gpu{by_uuid[app.gpu_uuid]} " if app.gpu_uuid in by_uuid else ""
        name = "" if is_absent(app.name) else app.name
        mem = int(app.used_mib or 0)
        out.append(f"{where}pid {app.pid} {name or '?'}" + (f" {mem} MiB" if mem else ""))
    return out


def parse_gpu_rows(text: str) -> list[GpuRow]:
    """Rows of GPU_INDEX_ARGV: ``index, uuid, name, memory.total, power.limit, clocks.max.sm``."""
    return [GpuRow(g.index, g.uuid, g.name, int(g.memory_total_mib or 0), g.power_limit_w, g.clocks_max_sm_mhz)
            for g in parse_rows(text, GPU_INDEX_FIELDS)]


def foreign_apps(apps: list[GpuProcess], uuid_to_index: Mapping[str, int], own_pids: set[int],
                 own_per_gpu: Mapping[int, int]) -> list[str]:
    """Descriptions ("pid 4242 (python3) on gpu3") of processes that are not ours.

    ``own_per_gpu``: how many processes we run on each GPU now. A process whose pid is ours is
    ours; past that, a GPU may hold as many unmatched processes as we started there and still be
    ours (pid namespaces); any more, and every unmatched process on it is named.
    """
    by_gpu: dict[int | None, list[GpuProcess]] = {}
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
