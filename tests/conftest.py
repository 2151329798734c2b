"""Shared test helpers. The CLI runs as a real subprocess from this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
    """`clustereval ARGS` as a user runs it, importing this checkout's package."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "clustereval", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
