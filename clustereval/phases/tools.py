"""Our own tools in the report: a worker's exact source is copied into the raw folder at run time
(``raw-<name>/tools/<file>.py``) so the report's ``### Introduction`` can link the code that
produced its numbers.

    link = publish_source(ctx, "clustereval.workers.matmul")   # -> "raw-<name>/tools/matmul.py"
    record.tool_links["matmul.py"] = link                      # the renderer writes [`matmul.py`](link)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from clustereval.errors import UsageError
from clustereval.phases.base import RunContext


def source_path(module: str) -> Path:
    """The file a module is loaded from (``clustereval.workers.software`` -> .../workers/software.py)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise UsageError(f"{module}: no Python source to publish", "pass a module name such as clustereval.workers.matmul")
    return Path(spec.origin)


def publish_source(ctx: RunContext, module: str) -> str:
    """Copy ``module``'s source to ``tools/<file>.py`` in the raw folder; return the report-relative link.

    Idempotent: phases may call it on every run (a resumed run rewrites the same bytes)."""
    path = source_path(module)
    rel = f"tools/{path.name}"
    ctx.store.write_raw(rel, path.read_bytes())
    return f"{ctx.store.raw_rel}/{rel}"
