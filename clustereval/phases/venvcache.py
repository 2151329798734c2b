"""The eval venv's cache on the nodes: built once per torch build and node Python, reused by every
later run, removed only by ``clustereval cleanup --venvs``.

A venv lives in ``<mount>/clustereval-venvs/<digest>``, where ``<mount>`` is the first shared path
when there is one (one venv every node sees, built by the first node) and ``local_scratch``
otherwise (one venv a node, every node building its own at once). ``<digest>`` is a hash of
``VenvKey``: the index, the exact torch requirement, the extra packages and the node's Python
(its real path and version), so a new torch release or another Python is a new venv and never a
stale one.

A venv is built under a temporary name beside its final one and renamed into place only after
pip finished and its marker (``clustereval-venv.json``, the key and its digest) is written: a
folder under its final name is always complete, a build stopped halfway never looks reusable, and
two nodes racing for one folder on a shared home both end with a verified venv. Before reuse the
venv's own interpreter reads the marker and imports torch on the node; anything less is rebuilt.
Cleanup removes only folders whose marker names their own folder, and the temporary folders of
builds that never finished; nothing else under the mount is touched.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass

from clustereval.errors import ClusterEvalError
from clustereval.names import slug
from clustereval.phases.base import RunContext
from clustereval.probes._text import last_json, last_line
from clustereval.transport.base import Node, Transport, run_each

CACHE_DIR = "clustereval-venvs"
MARKER = "clustereval-venv.json"
PART = ".part-"  # <digest>.part-<node>-<random>: a build that has not been renamed into place yet

# The node's own python3, as the venv will be made from it.
_NODE_PYTHON = ("import json, os, platform, sys\n"
                "print(json.dumps({'executable': os.path.realpath(sys.executable), "
                "'python': platform.python_version()}))\n")

# Run by the venv's own interpreter: the marker must name this digest, the Python must be the one it
# was built with, and torch must import.
_VERIFY = ("import json, os, platform, sys\n"
           "out = {'ok': False}\n"
           "try:\n"
           "    with open(os.path.join(sys.prefix, sys.argv[1])) as fh:\n"
           "        mark = json.load(fh)\n"
           "    if mark.get('digest') != sys.argv[2]:\n"
           "        out['why'] = 'the marker names another key'\n"
           "    elif mark.get('key', {}).get('python') != platform.python_version():\n"
           "        out['why'] = 'built with another Python'\n"
           "    else:\n"
           "        import torch\n"
           "        out = {'ok': True, 'torch': torch.__version__}\n"
           "except Exception as exc:\n"
           "    out['why'] = f'{type(exc).__name__}: {exc}'\n"
           "print(json.dumps(out))\n")

# Run by the new venv's interpreter once pip is done: the imports every job of the run makes (the
# workers import torch, torchrun is torch.distributed.run), each module's bytecode written beside
# it even where the node's environment says not to (PYTHONDONTWRITEBYTECODE). pip installs with
# --no-compile: byte-compiling all of torch made pip take 22 CPU-s instead of 6 for torch 2.13's CPU
# wheel, mostly for modules no job imports; this import compiles the ~1200 that `import torch`
# needs in about 2 CPU-s, and a module a job imports beyond them is compiled when first imported.
_COMPILE_IMPORTS = "import sys\nsys.dont_write_bytecode = False\nimport torch, torch.distributed.run\n"

_WRITE_MARKER = ("import json, os, sys\n"
                 "with open(os.path.join(sys.prefix, sys.argv[1]), 'w') as fh:\n"
                 "    fh.write(sys.argv[2])\n")

# ``os.rename`` of a folder onto a non-empty one fails: the first build to finish wins, the other
# verifies the winner and drops its own copy.
_RENAME = "import os, sys\nos.rename(sys.argv[1], sys.argv[2])\n"

# What ``cleanup --venvs`` runs on a node (argv: the cache folder). A folder goes only when its
# marker names the folder itself, or when it is a build of ours that never finished (a venv under
# ``<digest>.part-...``); one JSON line per folder, removed or kept and why.
_CLEANUP = r"""import json, os, re, shutil, sys
root = sys.argv[1]
names = sorted(os.listdir(root)) if os.path.isdir(root) else []
def size_of(path):
    total = 0
    for base, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total
for name in names:
    path = os.path.join(root, name)
    why = ''
    if not os.path.isdir(path) or os.path.islink(path):
        why = 'not a folder clustereval made'
    elif re.fullmatch(r'[0-9a-f]{16}', name):
        try:
            with open(os.path.join(path, 'clustereval-venv.json')) as fh:
                if json.load(fh).get('digest') != name:
                    why = 'its marker names another folder'
        except (OSError, ValueError, AttributeError):
            why = 'no clustereval marker in it'
    elif re.fullmatch(r'[0-9a-f]{16}\.part-[A-Za-z0-9._-]+', name):
        if not os.path.isfile(os.path.join(path, 'pyvenv.cfg')):
            why = 'not a venv'
    else:
        why = 'not a folder clustereval made'
    if why:
        print(json.dumps({'path': path, 'removed': False, 'why': why}))
        continue
    size = size_of(path)
    try:
        shutil.rmtree(path)
        print(json.dumps({'path': path, 'removed': True, 'size_bytes': size}))
    except OSError as exc:
        print(json.dumps({'path': path, 'removed': False, 'why': f'{type(exc).__name__}: {exc}'}))
"""


class VenvBuildError(ClusterEvalError):
    """A node could not build (or find) the eval venv; the message is the step and pip's last line."""


@dataclass(frozen=True)
class VenvKey:
    """What makes two eval venvs the same: the index, the torch requirement, the extra packages
    and the node Python they are made from."""

    index: str  # the PyTorch index URL, or "pip's configured index"
    torch_spec: tuple[str, ...]  # ("torch==2.13.0+cpu",)
    packages: tuple[str, ...]
    python: str  # "3.11.7"
    python_executable: str  # the real path of the node's python3

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class VenvOnNode:
    """One node's eval venv: where it is and whether this run built it or found it."""

    path: str
    reused: bool
    torch: str = ""


def cache_root(ctx: RunContext) -> tuple[str, bool]:
    """The cache folder on the nodes and whether every node sees the same one (a shared path)."""
    return cache_root_of(ctx.config.shared_paths, ctx.config.local_scratch)


def cache_root_of(shared_paths: tuple[str, ...] | list[str], local_scratch: str) -> tuple[str, bool]:
    if shared_paths:
        return f"{shared_paths[0].rstrip('/')}/{CACHE_DIR}", True
    return f"{local_scratch.rstrip('/')}/{CACHE_DIR}", False


def node_python(ctx: RunContext, node: Node) -> dict:
    """The node's ``python3`` (real path and version) that a venv is made from."""
    res = ctx.repeatable.run(node, ["python3", "-c", _NODE_PYTHON], timeout_s=60)
    info = last_json(res.stdout)
    if not res.ok or "python" not in info:
        raise VenvBuildError("python3 did not run: " + last_line(res.stderr or res.stdout, "no output")[:200],
                             "install python3 (with its venv module) on the node", error_id="venv-python")
    return info


def verify(transport: Transport, node: Node, venv: str, digest: str) -> tuple[bool, str]:
    """Whether ``venv`` on ``node`` is the complete venv of ``digest`` with torch importable, and
    torch's version (or why not)."""
    res = transport.run(node, [f"{venv}/bin/python", "-c", _VERIFY, MARKER, digest], timeout_s=180)
    info = last_json(res.stdout)
    if res.ok and info.get("ok"):
        return True, str(info.get("torch", ""))
    return False, str(info.get("why") or last_line(res.stderr, f"exit {res.rc}"))


def find_or_build(ctx: RunContext, node: Node, key: VenvKey, pip_args: list[str], *,
                  progress: str) -> VenvOnNode:
    """The venv of ``key`` on ``node``: the cached one when it verifies, else built now (pip
    ``install`` with ``pip_args``). Raises ``VenvBuildError`` naming the step that failed."""
    root, _shared = cache_root(ctx)
    digest = key.digest()
    venv = f"{root}/{digest}"
    ok, torch = verify(ctx.transport, node, venv, digest)
    if ok:
        return VenvOnNode(venv, reused=True, torch=torch)
    part = f"{venv}{PART}{slug(node.name, default='node')}-{secrets.token_hex(3)}"
    try:
        _step(ctx, node, ["mkdir", "-p", root], "making the venv cache folder", 60)
        _step(ctx, node, ["python3", "-m", "venv", part], "python3 -m venv", 300)
        ctx.progress("evalpython", node.name, progress, None)
        # pip over a reset connection is the runbook's case for a retry: installing again is harmless
        _step(ctx, node, [f"{part}/bin/python", "-m", "pip", "install", "-q", "--no-compile", *pip_args,
                          *key.torch_spec, *key.packages], "pip install", 3600)
        _step(ctx, node, [f"{part}/bin/python", "-c", _COMPILE_IMPORTS], "importing torch in the new venv", 600)
        marker = json.dumps({"digest": digest, "key": asdict(key)})
        _step(ctx, node, [f"{part}/bin/python", "-c", _WRITE_MARKER, MARKER, marker], "writing the venv's marker", 60)
        moved = ctx.transport.run(node, ["python3", "-c", _RENAME, part, venv], timeout_s=60)
        if not moved.ok:  # another node on a shared home got there first: use its venv when it verifies
            ok, why = verify(ctx.transport, node, venv, digest)
            if not ok:
                raise VenvBuildError("the built venv could not be put in place: "
                                     + last_line(moved.stderr, f"exit {moved.rc}")[:200] + f" ({why})",
                                     "remove the folder named above (or run `clustereval cleanup --venvs`), then "
                                     "run again", error_id="venv-build")
            _remove(ctx, node, part)
            return VenvOnNode(venv, reused=True, torch=why)
    except ClusterEvalError:
        _remove(ctx, node, part)
        raise
    ok, torch = verify(ctx.transport, node, venv, digest)
    if not ok:
        raise VenvBuildError(f"the new venv cannot import torch ({torch[:200]})",
                             "run `clustereval cleanup --venvs`, then run again", error_id="venv-build")
    return VenvOnNode(venv, reused=False, torch=torch)


def _step(ctx: RunContext, node: Node, argv: list[str], what: str, timeout_s: float) -> None:
    res = ctx.repeatable.run(node, argv, timeout_s=timeout_s)
    if not res.ok:
        raise VenvBuildError(f"{what}: " + last_line(res.stderr or res.stdout, f"exit {res.rc}")[:200],
                             "see the eval Python's tried steps in the raw record", error_id="venv-build")


def _remove(ctx: RunContext, node: Node, part: str) -> None:
    """Drop this build's own temporary folder (its name is ours and unique to this attempt)."""
    try:
        ctx.transport.run(node, ["rm", "-rf", "--", part], timeout_s=600)
    except ClusterEvalError:
        pass  # the node is gone; cleanup --venvs removes the half-built folder later


@dataclass
class CachedVenv:
    """One folder ``cleanup --venvs`` looked at on a node."""

    node: str
    path: str
    removed: bool
    size_bytes: int = 0
    why: str = ""  # why it was kept


def cleanup_argv(root: str) -> list[str]:
    return ["python3", "-c", _CLEANUP, root]


def parse_cleanup(node: str, text: str) -> list[CachedVenv]:
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "path" in item:
            out.append(CachedVenv(node=node, path=str(item["path"]), removed=bool(item.get("removed")),
                                  size_bytes=int(item.get("size_bytes", 0)), why=str(item.get("why", ""))))
    return out


def clear_cache(transport: Transport, nodes: list[Node], shared_paths: tuple[str, ...] | list[str],
                local_scratch: str) -> list[CachedVenv]:
    """Remove every cached eval venv clustereval made (``cleanup --venvs``): on the first node when
    the cache is on a shared path, on every node otherwise. Raises for a node that did not answer."""
    root, shared = cache_root_of(shared_paths, local_scratch)
    targets = nodes[:1] if shared else nodes
    attempts = run_each(targets, lambda n: transport.run(n, cleanup_argv(root), timeout_s=1800), transport.fanout)
    found: list[CachedVenv] = []
    for node, a in zip(targets, attempts, strict=True):
        if a.error is not None:
            raise a.error
        res = a.value
        if res is None or not res.ok:
            why = last_line(res.stderr, f"exit {res.rc}") if res is not None else "no answer"
            raise VenvBuildError(f"{node.name}: the venv cleanup failed: {why}",
                                 "check that python3 runs on the node, then run it again", error_id="venv-cleanup")
        found += parse_cleanup(node.name, res.stdout)
    return found
