"""Print the eval Python's software versions as one JSON line (runs on a node).

Python, torch, the CUDA torch was built for, the NCCL torch links, and what torch sees of each
GPU (name, compute capability, SM count, memory). Standard library and torch only; without torch
(or without a GPU) it still prints what it has. A CPU build of torch is not imported: its answers are
its ``version.py`` (a version, no CUDA, no NCCL, no GPU), and the import costs seconds on every node.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys


def cpu_build_version() -> str:
    """torch's version when this interpreter's torch is a CPU build (its ``version.py`` names neither a
    CUDA nor a ROCm release), read from that file without importing torch; "" for any other build, or
    when the file cannot be read (the caller then imports torch)."""
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            return ""
        path = os.path.join(os.path.dirname(spec.origin), "version.py")
        file_spec = importlib.util.spec_from_file_location("_clustereval_torch_version", path)
        if file_spec is None or file_spec.loader is None:
            return ""
        version = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(version)
    except Exception:  # noqa: BLE001 - no answer from the file: the import decides
        return ""
    if getattr(version, "cuda", None) or getattr(version, "hip", None):
        return ""
    return str(getattr(version, "__version__", "") or "")


def collect() -> dict:
    out: dict = {"executable": sys.executable, "python": platform.python_version()}
    cpu = cpu_build_version()
    if cpu:  # what `import torch` would say of a CPU build, without its seconds
        out.update(torch=cpu, torch_cuda="", nccl="", cuda_available=False, devices=[])
        return out
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
