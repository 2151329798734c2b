"""The environment's software worker: a CPU build of torch answers from its version.py, any other
build is imported (its GPUs, CUDA and NCCL are only known to torch itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

COLLECT = ("import json, sys; from clustereval.workers import software; out = software.collect(); "
           "out['imported'] = 'torch' in sys.modules; print(json.dumps(out))")


def _collect(*path: Path) -> dict:
    """The worker's answer in a fresh interpreter whose torch is found first on ``path``."""
    env_path = ":".join([*(str(p) for p in path), str(REPO)])
    res = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {env_path.split(':')!r}; {COLLECT}"],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _fake_torch(root: Path, cuda: str | None) -> Path:
    """A torch package whose import fails loudly, with a version.py naming ``cuda``."""
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('this torch was imported')\n")
    (pkg / "version.py").write_text(f"__version__ = '9.9.9'\ncuda = {cuda!r}\nhip = None\n")
    return root


def test_this_machines_torch_gives_the_same_answer_either_way():
    import torch

    got = _collect()
    assert got["torch"] == torch.__version__ and got["python"].count(".") == 2
    gpu_build = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    assert got["imported"] == gpu_build  # a CPU build is read, not imported
    if not gpu_build:
        assert (got["torch_cuda"], got["nccl"], got["cuda_available"], got["devices"]) == ("", "", False, [])


def test_a_cpu_build_is_read_from_its_version_file(tmp_path):
    got = _collect(_fake_torch(tmp_path, None))
    assert got["torch"] == "9.9.9" and not got["imported"] and "error" not in got
    assert got["devices"] == [] and got["cuda_available"] is False


def test_a_cuda_build_is_imported(tmp_path):
    got = _collect(_fake_torch(tmp_path, "12.8"))
    assert got["error"] == "torch: ImportError: this torch was imported"
    assert "torch" not in got
