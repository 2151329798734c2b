"""Every process on a node starts with the interpreter the run decided, never PATH's ``python3``."""

from __future__ import annotations

import sys
from pathlib import Path

from clustereval.phases.base import configured_python
from tests.storagehelpers import make_ctx


def _wrapper(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter of its own (as a venv's python is): it notes each use, then runs Python."""
    log = tmp_path / "used.log"
    python = tmp_path / "venv-python"
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python, log


def test_a_context_takes_the_configured_eval_python(tmp_path: Path):
    python, log = _wrapper(tmp_path)
    ctx = make_ctx(tmp_path, local=tmp_path / "local", eval_python=str(python))
    assert ctx.eval_python == str(python) == configured_python(ctx.config)
    res = ctx.transport.run(ctx.nodes[0], [ctx.eval_python, "-c", "print('ran')"], timeout_s=60)
    assert res.ok and "ran" in res.stdout
    assert "print('ran')" in log.read_text()


def test_without_eval_python_the_nodes_python3_is_used(tmp_path: Path):
    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    assert ctx.eval_python == "python3" == configured_python(ctx.config)
