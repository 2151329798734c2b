"""Our own code in the report: the exact source of what produced a phase's numbers is copied into
the raw folder at run time (``raw-<name>/tools/<file>.py``) so the report can link it. Every phase
publishes its code through ``publish_tools``:

    rels = publish_tools(ctx, "clustereval.workers.matmul", ("clustereval.analysis.matmul", "matmul_search.py"))
    # -> ["tools/matmul.py", "tools/matmul_search.py"]; the renderer links f"{raw_rel}/{rel}"

``store.write_raw`` writes ``tools/*.py`` byte for byte: the secret scrub never touches code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from clustereval.errors import UsageError
from clustereval.phases.base import RunContext
from clustereval.store import TOOLS_DIR


def source_path(module: str) -> Path:
    """The file a module is loaded from (``clustereval.workers.software`` -> .../workers/software.py)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise UsageError(f"{module}: no Python source to publish", "pass a module name such as clustereval.workers.matmul")
    return Path(spec.origin)


def publish_tools(ctx: RunContext, *modules: str | tuple[str, str]) -> list[str]:
    """Copy each module's source to ``tools/<file>.py`` in the raw folder; return those paths
    (relative to the raw folder), in order.

    A module given as ``(module, name)`` is published as ``tools/<name>`` (the matmul worker's
    helpers sit beside it under ``matmul_*`` names). Idempotent: phases may call it on every run (a
    resumed run rewrites the same bytes)."""
    rels = []
    for item in modules:
        module, name = item if isinstance(item, tuple) else (item, "")
        path = source_path(module)
        rel = f"{TOOLS_DIR}/{name or path.name}"
        ctx.store.write_raw(rel, path.read_bytes())
        rels.append(rel)
    return rels
