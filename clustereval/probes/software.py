"""The software worker's JSON line, and the ``python -V`` / torch lines a person captures. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.probes._text import body, last_json, last_line
from clustereval.records.environment import SoftwareInfo


@dataclass
class DeviceProps:
    index: int
    name: str = ""
    compute_capability: str = ""  # "9.0"
    sm_count: int = 0
    total_memory_bytes: int = 0


@dataclass
class Software:
    info: SoftwareInfo
    devices: list[DeviceProps] = field(default_factory=list)


def parse(text: str) -> Software:
    """The last JSON line the worker printed; an empty ``SoftwareInfo`` with ``error`` when there is none."""
    data = last_json(body(text))
    if not data:
        return Software(SoftwareInfo(error=last_line(body(text), "the software worker printed nothing")))
    info = SoftwareInfo(python=data.get("python", ""), torch=data.get("torch", ""),
                        torch_cuda=data.get("torch_cuda", ""), nccl=data.get("nccl", ""),
                        interpreter=data.get("executable", ""), cuda_available=bool(data.get("cuda_available")),
                        error=data.get("error", ""))
    devices = [DeviceProps(index=int(d.get("index", i)), name=d.get("name", ""),
                           compute_capability=f"{d['major']}.{d['minor']}" if "major" in d else "",
                           sm_count=int(d.get("sm_count", 0)), total_memory_bytes=int(d.get("total_memory_bytes", 0)))
               for i, d in enumerate(data.get("devices") or [])]
    return Software(info, devices)


def parse_manual(text: str) -> Software:
    """``python3 -V`` then ``print(torch.__version__, torch.version.cuda)``, ``print(torch.cuda.nccl.version())``
    and ``print(torch.cuda.get_device_properties(0))``, as a person captures them."""
    info = SoftwareInfo()
    devices: list[DeviceProps] = []
    for line in body(text).splitlines():
        line = line.strip()
        m = re.match(r"^Python (\S+)", line)
        if m:
            info.python = m.group(1)
            continue
        m = re.match(r"^(\d+\.\d+\.\d+\S*)\s+(\d+\.\d+|None)$", line)
        if m:
            info.torch = m.group(1)
            info.torch_cuda = "" if m.group(2) == "None" else m.group(2)
            continue
        m = re.match(r"^\((\d+), (\d+), (\d+)\)$", line)
        if m:
            info.nccl = ".".join(m.groups())
            continue
        m = re.match(r"^_CudaDeviceProperties\((.*)\)$", line)
        if m:
            props = dict(re.findall(r"(\w+)=('[^']*'|[^,]+)", m.group(1)))
            devices.append(DeviceProps(index=len(devices), name=props.get("name", "").strip("'"),
                                       compute_capability=f"{props.get('major', '')}.{props.get('minor', '')}",
                                       sm_count=int(props.get("multi_processor_count", "0") or 0)))
    info.cuda_available = bool(devices)
    return Software(info, devices)
