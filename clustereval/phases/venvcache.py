"""The eval venv's cache on the nodes: built once per torch build and node Python, reused by every
later run, moved to trash only by ``clustereval cleanup --venvs``.

A venv lives in ``<mount>/<user>/clustereval-venvs/<digest>``: ``<mount>/<user>`` is the user's own
folder on that mount (``scratch_root``, the folder the run's scratch and trash live in), ``<mount>``
the first shared path when there is one (one venv every node sees, built by the first node) and
``local_scratch`` otherwise (one venv a node, every node building its own at once). ``<digest>`` is
a hash of ``VenvKey``: the index, the exact torch requirement, the extra packages and the node's
Python (its real path and version), so a new torch release or another Python is a new venv and never
a stale one.

Nothing in the cache can be planted (``_CHECK``, run on the node before anything there is run): the
user's folder and ``clustereval-venvs/`` are created mode 700 when absent, and they, the venv folder
and everything in it must be owned by the eval user and writable by no one else, and the interpreter
its ``bin/python`` resolves to must be the eval user's or root's (the system Python a venv links to)
and writable by no one else. A cache that fails this is refused with a one-line reason naming the
folder, never run, and left where it is; the run builds its own venv in its scratch folder instead
(``own_home``), which is cleared with the rest of the scratch when the run ends. Builds run
under ``umask 077``, so the next run's check passes for what this run made.

A venv is built under a temporary name beside its final one and renamed into place only after
pip finished and its marker (``clustereval-venv.json``, the key and its digest) is written: a
folder under its final name is always complete, a build stopped halfway never looks reusable, and
two runs racing for one folder both end with a verified venv. Before reuse the venv's own
interpreter reads the marker and imports torch on the node; a venv of ours that fails that is
moved to ``<mount>/<user>/trash/<stamp>/clustereval-venvs/`` and built again. Cleanup moves only
folders whose marker names their own folder, and the temporary folders of builds that never
finished, each passing the same ownership rule, into that trash (a rename on the same filesystem);
nothing is deleted and nothing else under the mount is touched.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import secrets
from dataclasses import asdict, dataclass

from clustereval.config import Config
from clustereval.errors import ClusterEvalError
from clustereval.names import slug
from clustereval.phases.base import RunContext
from clustereval.phases.scratch import PRIVATE_SH, normalize, scratch_for, scratch_root, trash_stamp
from clustereval.probes._text import last_json, last_line
from clustereval.transport.base import Node, Transport, run_each

CACHE_DIR = "clustereval-venvs"
MARKER = "clustereval-venv.json"
PART = ".part-"  # <digest>.part-<node>-<random>: a build that has not been renamed into place yet
OWN_HOME = "eval-python"  # the run's own venv folder inside its scratch folder, when the cache is refused
TRASH = "trash"  # <mount>/<user>/trash/<stamp>/clustereval-venvs/: where superseded venvs go
# The steps of a build run with this umask: the venv is the eval user's alone, so the ownership
# check of the next run passes for it whatever umask the node's login gives.
UMASK = "077"

# The node's own python3, as the venv will be made from it.
_NODE_PYTHON = ("import json, os, platform, sys\n"
                "print(json.dumps({'executable': os.path.realpath(sys.executable), "
                "'python': platform.python_version()}))\n")

# Run on the node before anything in the cache is run. $1 the user's folder, $2 the cache folder,
# $3 the venv folder, $4 the mount the user's folder is on (never created: a shared path that is not
# mounted must not become a folder on the node's own disk). The first two are made mode 700 when
# absent. Prints ``absent`` (no venv there yet) or ``present`` (the venv, everything in it and its
# interpreter pass the ownership rule); exit 7 with ``not-private: <path> <problem>`` on stderr when
# something fails it; exit 5 when a folder cannot be made.
_CHECK = PRIVATE_SH + r'''
user=$1 root=$2 venv=$3 mount=$4
[ -d "$mount" ] || { echo "$mount does not exist on this node" >&2; exit 5; }
for dir in "$user" "$root"; do
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    [ "$dir" = "$user" ] && mkdir -p -- "$(dirname -- "$dir")" 2>/dev/null
    err=$(mkdir -m 700 -- "$dir" 2>&1) || [ -d "$dir" ] || { echo "cannot create $dir: ${err##*: }" >&2; exit 5; }
  fi
  private "$dir" || exit 7
  [ -d "$dir" ] || { echo "not-private: $dir is not a folder" >&2; exit 7; }
done
if [ ! -e "$venv" ] && [ ! -L "$venv" ]; then echo absent; exit 0; fi
private "$venv" || exit 7
[ -d "$venv" ] || { echo "not-private: $venv is not a folder" >&2; exit 7; }
# everything inside: the eval user's, and (symbolic links, whose mode means nothing, aside) writable by no one else
bad=$(find "$venv" \( ! -user "$me" -o \( ! -type l -perm /022 \) \) -print -quit 2>/dev/null)
if [ -n "$bad" ]; then
  set -- $(stat -c '%u %a' -- "$bad")
  if [ "$1" != "$me" ]; then echo "not-private: $bad is owned by uid $1, not by the eval user (uid $me)" >&2
  else echo "not-private: $bad is writable by group or others (mode $2)" >&2; fi
  exit 7
fi
if [ -e "$venv/bin/python" ]; then
  real=$(realpath -e -- "$venv/bin/python") || { echo "not-private: $venv/bin/python cannot be resolved" >&2; exit 7; }
  set -- $(stat -c '%u %a' -- "$real")
  case "$1" in "$me"|0) ;; *) echo "not-private: $real, the interpreter it runs, is owned by uid $1, neither by the eval user (uid $me) nor by root" >&2; exit 7;; esac
  if [ $((0$2 & 022)) != 0 ]; then echo "not-private: $real, the interpreter it runs, is writable by group or others (mode $2)" >&2; exit 7; fi
fi
echo present
'''

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

# Moving into the user's trash, shared by the stale-venv move and ``cleanup --venvs`` (run by the
# node's python3): the user's folder, ``trash/``, ``trash/<stamp>/`` and ``clustereval-venvs/`` in
# it are each made mode 700 when absent and must pass the same ownership rule as the cache; the
# move is one ``os.rename`` (never a copy: across filesystems it fails and the folder stays).
_TRASH_LIB = r'''import json, os, re, stat, sys
ME = os.geteuid()
class Refused(Exception):
    pass
def private(path):
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f'{path} cannot be read ({exc.strerror})'
    if stat.S_ISLNK(st.st_mode):
        return f'{path} is a symbolic link, not a plain folder'
    if st.st_uid != ME:
        return f'{path} is owned by uid {st.st_uid}, not by the eval user (uid {ME})'
    if st.st_mode & 0o022:
        return f'{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})'
    return ''
def folder(path):
    if not os.path.lexists(path):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    why = private(path)
    if why:
        raise Refused(why)
    return path
def to_trash(user, stamp, src):
    """``src`` renamed into <user>/trash/<stamp>/clustereval-venvs/ (a free name there); the new path."""
    where = user
    for part in ('trash', stamp, 'clustereval-venvs'):
        where = folder(os.path.join(where, part))
    base = os.path.basename(src)
    target, n = os.path.join(where, base), 1
    while os.path.lexists(target):
        n += 1
        target = os.path.join(where, f'{base}.{n}')
    os.rename(src, target)
    return target
'''

# Moves one venv of ours (argv: the user's folder, the stamp, the venv) into the trash: one that no
# longer verifies, or a build of this run that did not finish.
_SUPERSEDE = _TRASH_LIB + r'''
user, stamp, src = sys.argv[1:4]
folder(user)
if not os.path.lexists(src):
    print(json.dumps({'absent': src}))
    sys.exit(0)
why = private(src)
if why:
    raise Refused(why)
print(json.dumps({'moved_to': to_trash(user, stamp, src)}))
'''

# What ``cleanup --venvs`` runs on a node (argv: the user's folder, the cache folder, the stamp). A
# folder moves only when its marker names the folder itself, or when it is a build of ours that
# never finished (a venv under ``<digest>.part-...``), and it passes the ownership rule; one JSON
# line per folder, moved or kept and why. Nothing is moved when the user's folder or the cache
# folder fails the rule (one line that says why).
_CLEANUP = _TRASH_LIB + r'''
user, root, stamp = sys.argv[1:4]
def size_of(path):
    total = 0
    for base, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total
if not os.path.lexists(root):
    sys.exit(0)
whole = private(user) or private(root)
if whole:
    print(json.dumps({'path': root, 'moved': False, 'failed': True, 'why': whole}))
    sys.exit(0)
for name in sorted(os.listdir(root)):
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
    why = why or private(path)
    if why:
        print(json.dumps({'path': path, 'moved': False, 'why': why}))
        continue
    size = size_of(path)
    try:
        print(json.dumps({'path': path, 'moved': True, 'moved_to': to_trash(user, stamp, path), 'size_bytes': size}))
    except (OSError, Refused) as exc:
        why = str(exc) if isinstance(exc, Refused) else f'{type(exc).__name__}: {exc.strerror}'
        print(json.dumps({'path': path, 'moved': False, 'failed': True, 'why': why}))
'''


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


@dataclass(frozen=True)
class CachePlace:
    """Where the cache is: the user's own folder on the cache's mount and ``clustereval-venvs/`` in it."""

    mount: str  # the first shared path, else local_scratch
    user_folder: str  # <mount>/<user> (``scratch_root``)
    root: str  # <mount>/<user>/clustereval-venvs
    shared: bool  # every node sees the same folder


@dataclass(frozen=True)
class CacheLook:
    """What ``_CHECK`` found on one node: ``absent``, ``present`` (it passes the ownership rule) or
    ``refused`` (``why``: the path and what is wrong with it, one line)."""

    state: str
    why: str = ""
    path: str = ""  # the folder or file the refusal names


def cache_place(config: Config) -> CachePlace:
    """The cache folder on the nodes and whether every node sees the same one (a shared path)."""
    shared = bool(config.shared_paths)
    mount = normalize(config.shared_paths[0] if shared else config.local_scratch)
    user = scratch_root(config, mount)
    return CachePlace(mount=mount, user_folder=user, root=posixpath.join(user, CACHE_DIR), shared=shared)


def node_python(ctx: RunContext, node: Node) -> dict:
    """The node's ``python3`` (real path and version) that a venv is made from."""
    res = ctx.repeatable.run(node, ["python3", "-c", _NODE_PYTHON], timeout_s=60)
    info = last_json(res.stdout)
    if not res.ok or "python" not in info:
        raise VenvBuildError("python3 did not run: " + last_line(res.stderr or res.stdout, "no output")[:200],
                             "install python3 and its `python3-venv` package (Debian, Ubuntu) on the node",
                             error_id="venv-python")
    return info


def look(ctx: RunContext, node: Node, user_folder: str, home: str, digest: str, *, mount: str = "") -> CacheLook:
    """``_CHECK`` on ``node``: ``user_folder`` and ``home`` made private when absent, then what
    ``home/digest`` holds. ``mount`` (default: the folder ``user_folder`` is in) must exist: it is never
    made. Raises ``VenvBuildError`` when a folder cannot be made there."""
    mount = mount or posixpath.dirname(user_folder)
    res = ctx.transport.run(node, ["sh", "-c", _CHECK, "sh", user_folder, home, f"{home}/{digest}", mount],
                            timeout_s=120)
    out = last_line(res.stdout)
    if res.ok and out in ("absent", "present"):
        return CacheLook(out)
    why = last_line(res.stderr, f"exit {res.rc}")
    if res.rc == 7 and why.startswith("not-private: "):
        why = why.removeprefix("not-private: ")
        return CacheLook("refused", why, _refused_path(why, (user_folder, home, f"{home}/{digest}")))
    raise VenvBuildError(f"the eval Python's cache folder could not be made: {why[:200]}",
                         "check that the eval user can write to that mount on the node", error_id="venv-build")


def _refused_path(why: str, known: tuple[str, ...]) -> str:
    """The path a refusal line starts with: one of ``known`` when it is one of those, else the path up
    to its problem (a file inside the venv, or the interpreter it runs)."""
    for path in sorted(known, key=len, reverse=True):
        if why.startswith((path + " ", path + ",")):
            return path
    return re.split(r" is |, the interpreter it runs", why, maxsplit=1)[0]


def own_home(ctx: RunContext, node: Node, mount: str) -> str:
    """The run's own venv folder on ``mount`` (``<run folder>/eval-python``): used when the cache is
    refused; the run folder is private and this run's (``phases/scratch.py``), and cleared with the
    rest of the scratch when the run ends. The same path on every node."""
    return f"{scratch_for(ctx).ensure(node, mount).path}/{OWN_HOME}"


def verify(transport: Transport, node: Node, venv: str, digest: str) -> tuple[bool, str]:
    """Whether ``venv`` on ``node`` is the complete venv of ``digest`` with torch importable, and
    torch's version (or why not). Run only on a venv ``look`` found ``present``."""
    res = transport.run(node, [f"{venv}/bin/python", "-c", _VERIFY, MARKER, digest], timeout_s=180)
    info = last_json(res.stdout)
    if res.ok and info.get("ok"):
        return True, str(info.get("torch", ""))
    return False, str(info.get("why") or last_line(res.stderr, f"exit {res.rc}"))


def find_or_build(ctx: RunContext, node: Node, key: VenvKey, pip_args: list[str], *, progress: str,
                  user_folder: str, home: str, mount: str = "") -> VenvOnNode:
    """The venv of ``key`` in ``home`` on ``node``: the one there when it passes the ownership rule and
    verifies, else built now (pip ``install`` with ``pip_args``); one of ours that no longer verifies
    is moved to trash first. ``user_folder`` is the folder ``home`` lies in that the rule checks from,
    on ``mount`` (``look``).
    Raises ``VenvBuildError`` naming the step that failed, or the refusal when ``home`` or what is in
    it fails the rule (the caller decided ``home`` after ``look`` on every node; a refusal here is a
    folder planted since)."""
    digest = key.digest()
    venv = f"{home}/{digest}"
    found = look(ctx, node, user_folder, home, digest, mount=mount)
    if found.state == "refused":
        raise _refusal(found)
    if found.state == "present":
        ok, torch = verify(ctx.transport, node, venv, digest)
        if ok:
            return VenvOnNode(venv, reused=True, torch=torch)
        _supersede(ctx, node, user_folder, venv, torch)
    part = f"{venv}{PART}{slug(node.name, default='node')}-{secrets.token_hex(3)}"
    try:
        _step(ctx, node, ["mkdir", "-p", "-m", "700", "--", part], "making the folder of the new eval Python", 60)
        _step(ctx, node, ["python3", "-m", "venv", part], "creating the eval Python's environment", 300)
        ctx.progress("evalpython", node.name, progress, None)
        # pip over a reset connection is the runbook's case for a retry: installing again is harmless
        _step(ctx, node, [f"{part}/bin/python", "-m", "pip", "install", "-q", "--no-compile", *pip_args,
                          *key.torch_spec, *key.packages], "pip install", 3600)
        _step(ctx, node, [f"{part}/bin/python", "-c", _COMPILE_IMPORTS], "importing torch in the new eval Python",
              600)
        marker = json.dumps({"digest": digest, "key": asdict(key)})
        _step(ctx, node, [f"{part}/bin/python", "-c", _WRITE_MARKER, MARKER, marker],
              "writing the eval Python's marker", 60)
        moved = ctx.transport.run(node, ["python3", "-c", _RENAME, part, venv], timeout_s=60)
        if not moved.ok:  # another build of this user got there first: use it when it passes and verifies
            winner = look(ctx, node, user_folder, home, digest, mount=mount)
            if winner.state == "refused":
                raise _refusal(winner)
            ok, why = verify(ctx.transport, node, venv, digest) if winner.state == "present" else (False, "gone")
            if not ok:
                raise VenvBuildError("the new eval Python could not be put in place: "
                                     + last_line(moved.stderr, f"exit {moved.rc}")[:200] + f" ({why[:200]})",
                                     "run `clustereval cleanup --venvs` (it moves the cache to trash), then run again",
                                     error_id="venv-build")
            _remove(ctx, node, user_folder, part)
            return VenvOnNode(venv, reused=True, torch=why)
    except ClusterEvalError:
        _remove(ctx, node, user_folder, part)
        raise
    ok, torch = verify(ctx.transport, node, venv, digest)
    if not ok:
        raise VenvBuildError(f"the new eval Python cannot import torch ({torch[:200]})",
                             "run `clustereval cleanup --venvs` (it moves the cache to trash), then run again",
                             error_id="venv-build")
    return VenvOnNode(venv, reused=False, torch=torch)


def _refusal(found: CacheLook) -> VenvBuildError:
    return VenvBuildError(f"refused the eval Python's cache: {found.why}",
                          "make sure only the eval user can write there, or move the folder named away, then run "
                          "again", error_id="venv-refused")


def _supersede(ctx: RunContext, node: Node, user_folder: str, venv: str, why: str) -> None:
    """Move our own venv that no longer verifies (``why``) into the user's trash, so it can be built again."""
    ctx.progress("evalpython", node.name, f"moving the cached eval Python to trash ({why[:120]})", None)
    res = ctx.transport.run(node, ["python3", "-c", _SUPERSEDE, user_folder, trash_stamp(ctx.store), venv],
                            timeout_s=120)
    if not res.ok or "moved_to" not in last_json(res.stdout):
        raise VenvBuildError(f"the cached eval Python does not verify ({why[:200]}) and could not be moved to trash: "
                             + last_line(res.stderr, f"exit {res.rc}")[:200],
                             "run `clustereval cleanup --venvs` (it moves the cache to trash), then run again",
                             error_id="venv-build")


def _step(ctx: RunContext, node: Node, argv: list[str], what: str, timeout_s: float) -> None:
    """One build step, under ``umask 077`` so what it makes is the eval user's alone."""
    res = ctx.repeatable.run(node, ["sh", "-c", f'umask {UMASK} && exec "$@"', "sh", *argv], timeout_s=timeout_s)
    if not res.ok:
        raise VenvBuildError(f"{what}: " + last_line(res.stderr or res.stdout, f"exit {res.rc}")[:200],
                             "see the eval Python's tried steps in the raw record", error_id="venv-build")


def _remove(ctx: RunContext, node: Node, user_folder: str, part: str) -> None:
    """Move this build's own unfinished folder (its name is ours and unique to this attempt, made by
    this build mode 700 inside a folder that passed the ownership rule) into the user's trash:
    nothing is deleted."""
    try:
        ctx.transport.run(node, ["python3", "-c", _SUPERSEDE, user_folder, trash_stamp(ctx.store), part],
                          timeout_s=600)
    except ClusterEvalError:
        pass  # the node is gone; cleanup --venvs moves the half-built folder to trash later


@dataclass
class CachedVenv:
    """One folder ``cleanup --venvs`` looked at on a node."""

    node: str
    path: str
    moved: bool
    moved_to: str = ""
    size_bytes: int = 0
    why: str = ""  # why it was kept
    failed: bool = False  # ours, or the whole cache, and it could not be moved (``why`` says why)


def cleanup_argv(user_folder: str, root: str, stamp: str) -> list[str]:
    return ["python3", "-c", _CLEANUP, user_folder, root, stamp]


def parse_cleanup(node: str, text: str) -> list[CachedVenv]:
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "path" in item:
            out.append(CachedVenv(node=node, path=str(item["path"]), moved=bool(item.get("moved")),
                                  moved_to=str(item.get("moved_to", "")), size_bytes=int(item.get("size_bytes", 0)),
                                  why=str(item.get("why", "")), failed=bool(item.get("failed"))))
    return out


def clear_cache(transport: Transport, nodes: list[Node], config: Config, stamp: str) -> list[CachedVenv]:
    """Move every cached eval venv of this user that clustereval made into ``<mount>/<user>/trash/<stamp>/``
    (``cleanup --venvs``): on the first node when the cache is on a shared path, on every node
    otherwise. Raises for a node that did not answer."""
    place = cache_place(config)
    targets = nodes[:1] if place.shared else nodes
    argv = cleanup_argv(place.user_folder, place.root, stamp)
    attempts = run_each(targets, lambda n: transport.run(n, argv, timeout_s=1800), transport.fanout)
    found: list[CachedVenv] = []
    for node, a in zip(targets, attempts, strict=True):
        if a.error is not None:
            raise a.error
        res = a.value
        if res is None or not res.ok:
            why = last_line(res.stderr, f"exit {res.rc}") if res is not None else "no answer"
            raise VenvBuildError(f"{node.name}: the eval Python cache cleanup failed: {why}",
                                 "check that python3 runs on the node, then run it again", error_id="venv-cleanup")
        found += parse_cleanup(node.name, res.stdout)
    return found
