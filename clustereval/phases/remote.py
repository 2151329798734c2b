"""Getting our workers onto a node and building the argv that runs them with the eval Python.

The package is shipped once per node per run into the run's node-local scratch folder
(``<local_scratch>/<user>/cluster-eval-<stamp>/pkg``) with the transport's ``put``; on a local
transport the installed package is used where it is.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import clustereval
from clustereval.errors import ClusterEvalError
from clustereval.phases.base import RunContext
from clustereval.phases.scratch import TOOLS_FOLDER, scratch_for
from clustereval.transport.base import Node

PACKAGE_DIR = Path(clustereval.__file__).resolve().parent


def node_scratch(ctx: RunContext) -> str:
    """The run's folder on the node-local disk (``phases/scratch.py``: recorded, cleared at the end)."""
    return scratch_for(ctx).path_for(ctx.config.local_scratch)


def ensure_node_scratch(ctx: RunContext, node: Node) -> str:
    """Create (once) and record the run's node-local folder, so the end of the run clears it."""
    return scratch_for(ctx).ensure(node, ctx.config.local_scratch).path


def ensure_package(ctx: RunContext, node: Node) -> str:
    """Ship the package to ``node`` (once per run) and return the PYTHONPATH entry to use."""
    if ctx.transport.method == "local":
        return str(PACKAGE_DIR.parent)
    if node.name in ctx.shipped:
        return ctx.shipped[node.name]
    remote = f"{ensure_node_scratch(ctx, node)}/{TOOLS_FOLDER}"
    # the copy makes the folder and its parents on the node, and is safe to repeat
    ctx.repeatable.put(node, staged_package(), f"{remote}/clustereval")
    ctx.shipped[node.name] = remote
    return remote


_STAGED: tempfile.TemporaryDirectory | None = None  # removed when the interpreter exits
_STAGED_LOCK = threading.Lock()


def staged_package() -> Path:
    """The package's sources without compiled files, copied once per process into a temporary
    folder that every node's copy is made from."""
    global _STAGED
    with _STAGED_LOCK:
        if _STAGED is None:
            staged = tempfile.TemporaryDirectory(prefix="clustereval-pkg-")
            _copy_sources(PACKAGE_DIR, Path(staged.name) / "clustereval")
            _STAGED = staged
        return Path(_STAGED.name) / "clustereval"


def _copy_sources(src: Path, dst: Path) -> None:
    for path in src.rglob("*"):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def worker_env(ctx: RunContext, node: Node, extra: dict[str, str] | None = None) -> dict[str, str]:
    """PYTHONPATH for the shipped package plus unbuffered output, plus ``extra``."""
    ensure_node_scratch(ctx, node)  # workers write logs and files under it: record it for cleanup
    env = {"PYTHONPATH": ensure_package(ctx, node), "PYTHONUNBUFFERED": "1"}
    if extra:
        env.update(extra)
    return env


def worker_argv(ctx: RunContext, module: str, *args: str) -> list[str]:
    """``<eval python> -m clustereval.workers.<module> ARGS``."""
    return [ctx.eval_python, "-m", f"clustereval.workers.{module}", *args]


def interpreter_mismatch(ctx: RunContext, node: str, reported: dict) -> str:
    """'' when a worker's self-report (executable, torch) matches the eval Python; else why not.

    A launcher can silently substitute its own interpreter; every phase checks its workers' output
    against what the eval-Python phase recorded before a number is used.
    """
    ev = ctx.records.get("evalpython")
    if ev is None:
        return ""
    want_exe = ev.executables.get(node, "")
    got_exe = str(reported.get("executable", ""))
    if want_exe and got_exe and Path(got_exe).resolve() != Path(want_exe).resolve():
        return f"{node}: the worker ran on {got_exe}, not the eval Python {want_exe}"
    got_torch = str(reported.get("torch", ""))
    if ev.torch and got_torch and got_torch != ev.torch:
        return f"{node}: the worker ran on torch {got_torch}, not the eval Python's torch {ev.torch}"
    return ""


def require_torch(ctx: RunContext) -> None:
    """Stop a pass that runs on torch before it launches anything when the eval Python has none: the
    pass's Gap then says torch is missing, never a launcher or fabric failure it did not have."""
    ev = ctx.records.get("evalpython")
    no_torch = [g for g in (getattr(ev, "gaps", None) or []) if g.kind == "evalpython.no-torch" and g.node]
    if ev is None or getattr(ev, "status", "ok") != "failed" or not no_torch:
        return
    broken = [g.node for g in no_torch]
    raise ClusterEvalError(f"the eval Python cannot import torch on {', '.join(broken)}, and this pass runs on torch",
                           "give the nodes torch as the eval Python gap says, then run `clustereval run` again",
                           error_id="no-torch")

