"""Environment records built with the real parsers from captured outputs (tests only).

``h200x2_outputs`` splits the combined captures of tests/fixtures/h200x2 into one output per tool,
as the environment phase collects them.
"""

from __future__ import annotations

from pathlib import Path

from clustereval.analysis.environment import drift, enrich
from clustereval.probes.node import assemble
from clustereval.records.environment import EnvironmentRecord, NodeEnvironment

H200 = Path(__file__).resolve().parent / "fixtures" / "h200x2"


def _read(name: str) -> str:
    return (H200 / name).read_text()


def _lines(name: str) -> list[str]:
    return _read(name).splitlines()[1:]  # drop the "$ command" line


def h200x2_outputs() -> dict[str, str]:
    host = _lines("host.txt")  # hostname -s; uname -a; nproc; grep MemTotal; cat /etc/os-release
    mounts = _lines("mounts.txt")  # df -hT; findmnt -rn -o TARGET,SOURCE,FSTYPE,SIZE; lsblk -f -b; /proc/mounts
    findmnt_start = next(i for i, ln in enumerate(mounts) if ln.startswith("/proc "))
    lsblk_start = next(i for i, ln in enumerate(mounts) if ln.startswith("NAME "))
    return {
        "date": _read("date.txt"),
        "hostname": host[0],
        "uname": host[1],
        "meminfo": host[3],
        "os-release": "\n".join(host[4:]),
        "lscpu": _read("lscpu.txt"),
        "nvidia-smi-query-gpu": _read("nvidia-smi-query-gpu.csv"),
        "nvidia-smi-q": _read("nvidia-smi-q.txt"),
        "nvidia-smi-topo-m": _read("nvidia-smi-topo-m.txt"),
        "nvidia-smi-nvlink-s": _read("nvidia-smi-nvlink-s.txt"),
        "nvidia-smi-compute-apps": _read("nvidia-smi-compute-apps.csv"),
        "ibstat": "",
        "rdma-link": "",
        "sys-class-infiniband": _read("sys-class-infiniband.txt"),
        "df": "\n".join(mounts[:findmnt_start]),
        "findmnt": "\n".join(mounts[findmnt_start:lsblk_start]),
        "lsblk": "\n".join(mounts[lsblk_start:lsblk_start + 4]),
        "proc-mounts": "\n".join(mounts[lsblk_start + 4:]),
    }


def h200_node(name: str = "vm", index: int = 0, **overrides: str) -> NodeEnvironment:
    from clustereval.probes import software

    outputs = h200x2_outputs()
    outputs.update(overrides)
    node = assemble(name, index, outputs)
    if "software" not in overrides:
        sw = software.parse_manual(_read("python-torch.txt"))
        node.software.python, node.software.torch = sw.info.python, sw.info.torch
        node.software.torch_cuda, node.software.nccl = sw.info.torch_cuda, sw.info.nccl
        node.software.cuda_available = True
        for dev in sw.devices:
            for gpu in node.gpus:  # the capture printed GPU 0's properties; every H200 here is the same board
                gpu.sm_count, gpu.compute_capability = dev.sm_count, dev.compute_capability
    node.raw_files = {tool: f"env/{name}/{tool}.txt" for tool in outputs if outputs[tool]}
    return enrich(node)


def h200_record(num_nodes: int = 1) -> EnvironmentRecord:
    nodes = [h200_node("vm" if num_nodes == 1 else f"vm{i}", i, hostname=f"vm{i}" if num_nodes > 1 else "vm")
             for i in range(num_nodes)]
    rec = EnvironmentRecord(phase="environment", nodes=nodes, drift=drift(nodes))
    rec.tool_links = {"software.py": "raw-h200-2026-11-30-1643Z/tools/software.py"}
    return rec
