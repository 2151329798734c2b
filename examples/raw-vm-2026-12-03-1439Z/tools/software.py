"""Print the eval Python's software versions as one JSON line (runs on a node).

Python, torch, the CUDA torch was built for, the NCCL torch links, and what torch sees of each
GPU (name, compute capability, SM count, memory). Standard library and torch only; without torch
(or without a GPU) it still prints what it has.
"""

from __future__ import annotations

import json
import platform
import sys


def collect() -> dict:
    out: dict = {"executable": sys.executable, "python": platform.python_version()}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report any import failure as data
        out["error"] = f"torch: {type(exc).__name__}: {exc}"
        return out
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda or ""
    try:
        out["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - CPU builds have no NCCL
        out["nccl"] = ""
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        devices = []
        for i in range(torch.cuda.device_count() if out["cuda_available"] else 0):
            p = torch.cuda.get_device_properties(i)
            devices.append({"index": i, "name": p.name, "major": p.major, "minor": p.minor,
                            "sm_count": p.multi_processor_count, "total_memory_bytes": p.total_memory})
        out["devices"] = devices
    except Exception as exc:  # noqa: BLE001
        out["cuda_available"] = False
        out["error"] = f"torch.cuda: {type(exc).__name__}: {exc}"
    return out


def main() -> int:
    print(json.dumps(collect()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
