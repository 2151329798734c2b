"""What every torchrun-launched worker shares: rank identity, self-report, process group, JSON lines.

Runs on a node under ``torch.distributed.run``; stdlib + torch only. Every line a worker prints
is one JSON object with an ``event`` key; torchrun's ``--tee`` puts ``[<node>:<local rank>]:``
in front of it.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn


def emit(event: str, **fields: Any) -> None:
    """One JSON line, written whole: torchrun's ``--tee`` reads the rank's log file while it grows,
    and a line that reached the file in two writes (``print`` writes the text, then the newline) can
    be read in two pieces, each with the rank's prefix, and lost to the parser."""
    sys.stdout.write(json.dumps({"event": event, **fields}, sort_keys=False) + "\n")
    sys.stdout.flush()


@dataclass
class RankEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    role: str


def rank_env() -> RankEnv:
    env = os.environ
    return RankEnv(rank=int(env.get("RANK", "0")), local_rank=int(env.get("LOCAL_RANK", "0")),
                   world_size=int(env.get("WORLD_SIZE", "1")),
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
                   node_rank=int(env.get("GROUP_RANK", "0")), role=env.get("ROLE_NAME", ""))


def choose_backend(requested: str) -> str:
    import torch

    if requested != "auto":
        return requested
    return "nccl" if torch.cuda.is_available() else "gloo"


def _pci_numa_node(domain: int, bus: int, device: int) -> int:
    path = f"/sys/bus/pci/devices/{domain:04x}:{bus:02x}:{device:02x}.0/numa_node"
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return -1


def _affinity() -> str:
    """The CPUs this process may run on, as a compact range list (``0-31``)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return ""
    spans: list[str] = []
    start = prev = None
    for c in cpus:
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            spans.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = c
    if start is not None:
        spans.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(spans)


def setup_device(backend: str, local_rank: int):
    """Bind this rank to its GPU (NCCL) and return the torch.device."""
    import torch

    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def self_report(backend: str, device) -> dict[str, Any]:
    """Who this rank is and what it runs on: the controller checks it against the eval Python."""
    import torch

    env = rank_env()
    info: dict[str, Any] = {
        "rank": env.rank, "local_rank": env.local_rank, "world_size": env.world_size,
        "node_rank": env.node_rank, "role": env.role.rstrip(":"), "host": socket.gethostname(),
        "executable": sys.executable, "python": platform.python_version(), "torch": torch.__version__,
        "backend": backend, "device": str(device), "device_name": "", "numa_node": -1,
        "cpu_affinity": _affinity(), "nccl": "",
    }
    try:
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a CPU build has no NCCL
        info["nccl"] = ""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device_name"] = props.name
        info["numa_node"] = _pci_numa_node(getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", 0),
                                           getattr(props, "pci_device_id", 0))
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def start_rank(requested_backend: str) -> tuple[RankEnv, str, Any]:
    """(this rank's identity, the backend, its torch.device): pick the backend, bind the device and
    print the ``hello`` line, before the process group is joined (a join that hangs still shows who
    came)."""
    env = rank_env()
    backend = choose_backend(requested_backend)
    device = setup_device(backend, env.local_rank)
    emit("hello", **self_report(backend, device))
    return env, backend, device


def init_group(backend: str, device, timeout_s: float = 120.0) -> None:
    import datetime

    import torch.distributed as dist

    kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
    if backend == "nccl":
        kwargs["device_id"] = device  # eager communicator: a broken fabric fails here, not later
    dist.init_process_group(**kwargs)


def finish() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run_main(main: Callable[[], int]) -> NoReturn:
    """Run a worker's ``main`` as a rank and exit with its status, or with 1 and the traceback on
    stderr when it raised.

    torchrun starts the ranks either as new interpreters or forked from its own process
    (``--run_path --start_method fork``). A forked rank inherits the launcher's signal handlers and
    would hand an uncaught exception to torchrun's summary instead of printing it; here both kinds of
    rank stop on SIGTERM and SIGINT as an interpreter does, and print their own traceback, so a rank's
    output reads the same either way."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = main()
    except Exception:  # noqa: BLE001 - printed as the interpreter would, then the rank fails
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)
