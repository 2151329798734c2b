"""Scratch discipline: every byte the eval writes on a node lives in one folder per mount.

``<mount>/<user>/cluster-eval-<date>-<time>/`` (``scratch_root`` in cluster.toml replaces
``<mount>/<user>``), created by the eval so nothing of the user's sits inside it. Only the
declared mounts (``local_scratch`` and ``shared_paths``) are ever written to. At the end of a run
(success, failure, Ctrl-C, a lost node) each folder is moved into ``<mount>/<user>/trash/<stamp>/``
on the same filesystem: a rename, never ``rm`` and never a copy across mounts. A folder on the
node's own ``/tmp`` filesystem is deleted instead: it is the eval's own and goes with the node.

Every folder is recorded in the run's raw folder the moment it exists, so
``clustereval cleanup RUN_DIR`` can move what an interrupted or crashed run left. That record only
says where to look: before anything is moved or deleted, the path's form, the declared mount it
resolves into, the marker this run wrote and the filesystem it is on are checked again, on the
node, at that moment (``_CLEAR``).

Nothing a run reuses can be planted: ``<mount>/<user>``, the run folder and its tools folder when a
recorded folder is used again, and ``trash/`` and ``trash/<stamp>/`` before anything is moved there,
must be owned by the eval user and writable by no one else (``PRIVATE_SH``, run on the node), else
the folder is refused with the reason and nothing is written or moved into it.
"""

from __future__ import annotations

import json
import posixpath
import re
import secrets
import textwrap
import threading
from dataclasses import dataclass

from clustereval.config import Config
from clustereval.errors import ScratchError, TransportError
from clustereval.probes._text import last_line
from clustereval.records import from_dict, to_dict
from clustereval.records.scratch import ScratchArea, ScratchMove
from clustereval.report.units import iec_one_decimal
from clustereval.store import RunStore, utc_now_iso
from clustereval.transport.base import Node, Transport

AREAS_FILE = "scratch/areas.json"
CLEANUP_FILE = "scratch/cleanup.json"
NODE_LOCAL_TMP = "/tmp"
PURGE_HINT = "Moving within the same filesystem does not free the space; "

# The ownership rule for every folder a run reuses (the user's folder, the run's own folder, its tools
# folder, the trash, the eval Python's cache): ``private PATH`` returns 0 when PATH is the eval user's
# own (owned by ``id -u``, not a symbolic link) and no one else can write it (no group or other write
# bit); else 7, with one line on stderr, ``not-private: <why>``. Paths arrive as arguments, never
# inside the script text. Shared with ``phases/venvcache.py``.
PRIVATE_SH = r'''
me=$(id -u)
private() {
  if [ -L "$1" ]; then echo "not-private: $1 is a symbolic link, not a plain folder" >&2; return 7; fi
  set -- "$1" $(stat -c '%u %a' -- "$1" 2>/dev/null)
  if [ -z "$3" ]; then echo "not-private: $1 cannot be read" >&2; return 7; fi
  if [ "$2" != "$me" ]; then
    echo "not-private: $1 is owned by uid $2, not by the eval user (uid $me)" >&2; return 7
  fi
  if [ $((0$3 & 022)) != 0 ]; then echo "not-private: $1 is writable by group or others (mode $3)" >&2; return 7; fi
}
'''
# $1 mount, $2 <mount>/<user>, $3 the run folder, $4 the marker text. The mount must exist (it is
# never created); <mount>/<user> is created private when absent and must be the eval user's and
# not writable by others; the run folder is created mode 700 by this run (an existing one is
# refused) and carries the marker cleanup later insists on.
_CREATE = PRIVATE_SH + r'''
mount=$1 root=$2 path=$3 mark=$4
[ -d "$mount" ] || { echo "no-mount: $mount does not exist on this node" >&2; exit 6; }
if [ ! -e "$root" ] && [ ! -L "$root" ]; then
  # another run of this user may create it at the same moment: then it is there, and checked below
  mkdir -p -- "$(dirname -- "$root")" && { mkdir -m 700 -- "$root" 2>/dev/null || [ -d "$root" ] || mkdir -m 700 -- "$root"; } || exit 5
fi
if [ ! -L "$root" ] && [ ! -d "$root" ]; then echo "not-private: $root is not a plain folder" >&2; exit 7; fi
private "$root" || exit 7
if [ -e "$path" ] || [ -L "$path" ]; then echo "exists: $path" >&2; exit 8; fi
mkdir -m 700 -- "$path" || exit 5
printf '%s\n' "$mark" > "$path/.clustereval-run" || exit 5
realpath -e -- "$mount" "$path"
'''
# A recorded folder asked for again (a resumed run, or a later phase in a new process): $1
# <mount>/<user>, $2 the run folder, $3 the marker text, then the names inside it this run reuses
# (its tools folder). ``absent`` when it is gone (the caller creates it anew); ``present`` when the
# user's folder, the run folder and each named entry that exists pass ``private`` and the marker is
# this run's; else exit 7 with the reason.
_REUSE = PRIVATE_SH + r'''
root=$1 path=$2 mark=$3
shift 3
if [ ! -e "$path" ] && [ ! -L "$path" ]; then echo absent; exit 0; fi
private "$root" || exit 7
private "$path" || exit 7
[ -d "$path" ] || { echo "not-private: $path is not a folder" >&2; exit 7; }
if [ ! -f "$path/.clustereval-run" ] || [ -L "$path/.clustereval-run" ] || \
   [ "$(head -c 200 -- "$path/.clustereval-run")" != "$mark" ]; then
  echo "not-private: $path has no marker file of this run (.clustereval-run)" >&2; exit 7
fi
for name in "$@"; do
  if [ -e "$path/$name" ] || [ -L "$path/$name" ]; then private "$path/$name" || exit 7; fi
done
echo present
'''
# Re-checks, on the node, that a recorded folder is this run's before anything touches it.
# $1 folder, $2 mount, $3 marker text, $4 trash folder, $5 1 when the mount is shared, $6 delete
# allowed (1) or move only (0), $7 <mount>/<user>. Exit 10 = refused (not provably this run's), 4 = it
# is this run's but could not be moved or deleted safely (the trash, or a folder on its way, is not the
# eval user's alone: ``private``); both leave the folder where it is.
_CLEAR = PRIVATE_SH + r'''
src=$1 mount=$2 mark=$3 trash=$4 shared=$5 may_delete=$6 root=$7
refuse() { echo "refused: $1" >&2; exit 10; }
# the mount a path is on, from the mount table (stat's %m walks st_dev and misses bind mounts)
mnt() { findmnt -n -o TARGET -T "$1" 2>/dev/null || stat -c %m -- "$1"; }
[ -e "$src" ] || [ -L "$src" ] || { echo absent; exit 0; }
[ -L "$src" ] && refuse "$src is a symbolic link, not the folder this run created"
[ -d "$src" ] || refuse "$src is not a folder"
real_mount=$(realpath -e -- "$mount") || refuse "the declared mount $mount is not there"
real=$(realpath -e -- "$src") || refuse "cannot resolve $src"
case "$real/" in "$real_mount"/*) ;; *) refuse "$src resolves to $real, outside the declared mount $mount";; esac
[ "$real" = "$real_mount" ] && refuse "$src is the declared mount itself"
[ -f "$src/.clustereval-run" ] && [ ! -L "$src/.clustereval-run" ] || refuse "$src has no marker file of this run (.clustereval-run)"
[ "$(head -c 200 -- "$src/.clustereval-run")" = "$mark" ] || refuse "the marker in $src names another run"
size=$(du -sb -- "$real" | cut -f1)
if [ "$shared" = 0 ] && [ "$may_delete" = 1 ]; then
  case "$real/" in
    /tmp/*)
      # node-local /tmp only: the folder sits on the very filesystem mounted for /tmp, of a local type
      if [ "$(stat -c %d -- "$real")" = "$(stat -c %d /tmp)" ] && [ "$(mnt "$real")" = "$(mnt /tmp)" ]; then
        case $(stat -f -c %T /tmp) in
          tmpfs|ramfs|ext2/ext3|xfs|btrfs|overlayfs|zfs|f2fs)
            rm -rf --one-file-system -- "$real" || exit 4
            echo "deleted $size"; exit 0;;
        esac
      fi;;
  esac
fi
# a move: the trash must be on the same filesystem and the same mount point (a bind-mount alias
# shares the device but rename(2) still fails across it); checked before the trash is created
probe=$trash
while [ ! -e "$probe" ]; do probe=$(dirname -- "$probe"); done
if [ "$(stat -c %d -- "$probe")" != "$(stat -c %d -- "$real")" ] || [ "$(mnt "$probe")" != "$(mnt "$real")" ]; then
  echo "cross-device: $trash is on another filesystem than $src (a move there would copy)" >&2; exit 4
fi
case "$(realpath -m -- "$trash")/" in "$real_mount"/*) ;; *) refuse "the trash $trash is outside the declared mount $mount";; esac
# the user's folder, its trash and this stamp's folder: each the eval user's alone, made mode 700 when
# absent, so nothing moved there lands in a folder someone else planted or can write
case "$trash" in "$root"/trash/*) ;; *) refuse "the trash $trash is not under $root/trash";; esac
for dir in "$root" "$root/trash" "$trash"; do
  if [ -e "$dir" ] || [ -L "$dir" ]; then private "$dir" || exit 4
  else mkdir -m 700 -- "$dir" 2>/dev/null || [ -d "$dir" ] || exit 5; private "$dir" || exit 4; fi
done
base=$(basename -- "$real"); target="$trash/$base"; n=1
while [ -e "$target" ]; do n=$((n+1)); target="$trash/$base.$n"; done
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$real" "$target" 2>&1 >/dev/null | tail -n 1 >&2
  [ -e "$target" ] && [ ! -e "$real" ] || { rmdir -- "$trash" 2>/dev/null; exit 4; }
elif mv --help 2>/dev/null | grep -q -e --no-copy; then
  mv -T --no-copy -- "$real" "$target" || { rmdir -- "$trash" 2>/dev/null; exit 4; }
else
  rmdir -- "$trash" 2>/dev/null
  echo "this node has neither python3 nor an mv with --no-copy, so a move could silently copy" >&2; exit 4
fi
echo "moved $size $target"
'''
_SPACE = 'df --block-size=1 --output=avail,target -- "$1" | tail -n 1'
MARKER_FILE = ".clustereval-run"
TOOLS_FOLDER = "pkg"  # the run's own copy of clustereval on a node (``phases/remote.py``), inside its run folder
REUSED_INSIDE = (TOOLS_FOLDER,)  # what a run reuses inside its run folder, checked with it (``_REUSE``)
FOLDER_FILE = "scratch/folder.json"
CLEAR_TIMEOUT_S = 600  # one area: du + rename (or rm on /tmp); a hung mount ends as a refusal, not a hang


def normalize(path: str) -> str:
    return posixpath.normpath(path) if path else path


def inside(path: str, mount: str) -> bool:
    """Whether ``path`` is ``mount`` or below it (lexically, after normalising both)."""
    path, mount = normalize(path), normalize(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def declared_mounts(config: Config) -> list[str]:
    """The only places the eval writes: the local scratch path and the shared paths."""
    seen: list[str] = []
    for m in (config.local_scratch, *config.shared_paths):
        m = normalize(m)
        if m and m not in seen:
            seen.append(m)
    return seen


def check_declared(config: Config, path: str) -> str:
    """The declared mount ``path`` lies under; a path anywhere else is refused."""
    if not posixpath.isabs(path):
        raise ScratchError(f"refusing to write to {path}: not an absolute path",
                           "give absolute paths in local_scratch and shared_paths")
    best = ""
    for mount in declared_mounts(config):
        if inside(path, mount) and len(mount) > len(best):
            best = mount
    if not best:
        raise ScratchError(f"refusing to write to {path}: it is outside the declared mounts "
                           f"({', '.join(declared_mounts(config))})",
                           "add the mount to shared_paths (or local_scratch) in cluster.toml, or write under one "
                           "of those")
    return best


def scratch_root(config: Config, mount: str) -> str:
    """``<mount>/<user>``, or what ``scratch_root`` says for that mount.

    ``scratch_root`` may be relative (joined under every mount), contain ``{mount}`` and ``{user}``,
    or be an absolute folder inside one declared mount (used for that mount only).
    """
    mount = normalize(mount)
    default = posixpath.join(mount, config.scratch_user)
    custom = config.scratch_root
    if not custom:
        return default
    custom = custom.replace("{mount}", mount).replace("{user}", config.scratch_user)
    if not posixpath.isabs(custom):
        return normalize(posixpath.join(mount, custom))
    return normalize(custom) if inside(custom, mount) else default


def run_folder_name(store: RunStore) -> str:
    """``cluster-eval-<date>-<time>`` from the run's stamp (with the store's ``-2`` when one repeats)."""
    return f"cluster-eval-{trash_stamp(store)}"


def trash_stamp(store: RunStore) -> str:
    state = store.load_state()
    run_id = store.run_id
    return run_id[len(state.name) + 1:] if run_id.startswith(state.name + "-") else run_id


def folder_name_pattern(store: RunStore) -> re.Pattern[str]:
    """The run folder names this run may have used: its stamp, plus a token when another run
    (same name, same minute, another controller or reports folder) already held the plain one."""
    return re.compile(re.escape(run_folder_name(store)) + r"(-[0-9a-f]{6})?")


@dataclass(frozen=True)
class Space:
    avail_bytes: int
    mount_point: str


class Scratch:
    """The run's scratch folders on every node: create, check space, measure, move to trash."""

    def __init__(self, config: Config, transport: Transport, store: RunStore) -> None:
        self.config = config
        self.transport = transport
        self.store = store
        # Locks, always taken in this order: ``_first_lock`` (held through creations until the run's
        # folder name is fixed), a folder's own lock (the nodes of a fleet create theirs at once, two
        # threads of one node never the same folder twice), ``_save_lock`` (one write of the
        # bookkeeping at a time), ``_lock`` (the bookkeeping itself, held briefly, never over a command)
        self._first_lock = threading.Lock()
        self._folder_locks: dict[str, threading.Lock] = {}
        self._save_lock = threading.Lock()
        self._lock = threading.Lock()
        # folders this process created or found on the node; forgotten when ``cleanup`` clears them
        self._present: set[str] = set()
        self._changes = self._saved = 0  # changes to the bookkeeping, and how many of them are on disk
        self._area_json: dict[tuple[str, str], str] = {}  # an area's entry in AREAS_FILE, by node and path
        self._folder_json = ""  # FOLDER_FILE as last written by this process
        self._areas: list[ScratchArea] = self._load(AREAS_FILE, ScratchArea)
        folder = self._load_folder()
        self._name: str = folder.get("name", "") or run_folder_name(store)
        self._nonce: str = folder.get("nonce", "") or secrets.token_hex(8)
        self._name_fixed = bool(folder.get("name")) or bool(self._areas)  # a path was already used

    # -- bookkeeping in the raw folder ------------------------------------------------------
    def _load(self, rel: str, cls: type) -> list:
        path = self.store.raw_dir / rel
        if not path.exists():
            return []
        return [from_dict(cls, d) for d in json.loads(path.read_text())]

    def _load_folder(self) -> dict:
        path = self.store.raw_dir / FOLDER_FILE
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _save_areas(self) -> None:
        """On return the bookkeeping on disk holds every change made before the call. The nodes of a
        fleet create their folders at once: a thread finding a write under way waits for it, and the
        next write carries every change made meanwhile (one write for many nodes, not one each)."""
        with self._lock:
            self._changes += 1
            wanted = self._changes
        with self._save_lock:
            if self._saved >= wanted:
                return
            with self._lock:
                version = self._changes
                folder = json.dumps({"name": self._name, "nonce": self._nonce}, indent=2) + "\n"
                entries = [self._entry(a) for a in self._areas]
            if folder != self._folder_json:
                self.store.write_raw(FOLDER_FILE, folder)
                self._folder_json = folder
            # the same text as json.dumps(areas, indent=2), from each area's entry made once
            self.store.write_raw(AREAS_FILE, ("[\n" + ",\n".join(entries) + "\n]\n") if entries else "[]\n")
            self._saved = version

    def _entry(self, area: ScratchArea) -> str:
        key = (area.node, area.path)  # an area is never changed once made; ``_ensure`` drops a replaced one's
        text = self._area_json.get(key)
        if text is None:
            text = self._area_json[key] = textwrap.indent(json.dumps(to_dict(area), indent=2), "  ")
        return text

    def areas(self) -> list[ScratchArea]:
        with self._lock:
            return list(self._areas)

    @property
    def marker(self) -> str:
        """What the run writes into every folder it creates, and what cleanup insists on finding."""
        return f"clustereval run {self.store.run_id} {self._nonce}"

    # -- paths ------------------------------------------------------------------------------
    def path_for(self, mount: str) -> str:
        mount = check_declared(self.config, mount)
        self._name_fixed = True  # a caller now holds the path: the name can no longer change
        return posixpath.join(scratch_root(self.config, mount), self._name)

    def is_shared(self, mount: str) -> bool:
        return any(inside(mount, s) for s in map(normalize, self.config.shared_paths))

    # -- creation ---------------------------------------------------------------------------
    def ensure(self, node: Node, mount: str) -> ScratchArea:
        """The run's folder on ``mount`` as ``node`` sees it, created (and recorded) when new.

        Until the run's folder name is fixed, creation is one node at a time: the first creation may
        find the plain name taken (another run of the same name and minute) and pick another for every
        node. After that each node creates its own at once; a folder is checked on the node once per
        process (after its creation, or the first time a recorded one is asked for) and again after
        ``cleanup`` cleared it."""
        declared = check_declared(self.config, mount)
        shared = self.is_shared(declared)
        with self._first_lock:
            if not self._name_fixed:
                return self._ensure(node, declared, shared)
        with self._lock:
            key = self._key(node.name, posixpath.join(scratch_root(self.config, declared), self._name), shared)
            folder_lock = self._folder_locks.setdefault(key, threading.Lock())
        with folder_lock:
            return self._ensure(node, declared, shared)

    @staticmethod
    def _key(node: str, path: str, shared: bool) -> str:
        return path if shared else f"{node}:{path}"

    def _ensure(self, node: Node, declared: str, shared: bool) -> ScratchArea:
        with self._lock:
            path = posixpath.join(scratch_root(self.config, declared), self._name)
            known = next((a for a in self._areas if a.path == path and (a.shared or a.node == node.name)), None)
            present = self._key(node.name, path, shared) in self._present
        if known is not None and (present or self._reusable(node, declared, path)):
            with self._lock:
                self._present.add(self._key(node.name, path, shared))
            return known
        res = self._create(node, declared, path)
        why = last_line(res.stderr, f"exit {res.rc}")
        if res.rc == 8 and not self._name_fixed:  # only the first creation (``_first_lock`` held) gets here
            # another run of the same name and minute holds the plain name on this mount
            self._name = f"{run_folder_name(self.store)}-{secrets.token_hex(3)}"
            path = posixpath.join(scratch_root(self.config, declared), self._name)
            res = self._create(node, declared, path)
            why = last_line(res.stderr, f"exit {res.rc}")
        if res.rc == 8:
            raise ScratchError(f"{node.name}: {path} already exists and this run did not create it",
                               "move it out of the way or set scratch_root in cluster.toml")
        if not res.ok:
            raise ScratchError(f"{node.name}: cannot create the scratch folder {path}: "
                               f"{why.split(': ', 1)[1] if why.startswith(('no-mount', 'not-private')) else why}",
                               _create_hint(why, declared, scratch_root(self.config, declared)))
        self._name_fixed = True
        real = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
        if len(real) == 2 and not inside(real[1], real[0]):
            # a symlinked mount component pointing elsewhere would put the scratch outside the mount
            self.transport.run(node, ["sh", "-c", 'rm -f -- "$1/.clustereval-run" && rmdir -- "$1"', "sh",
                                      path], timeout_s=30)
            raise ScratchError(f"{node.name}: {path} resolves to {real[1]}, outside {declared}",
                               "point scratch_root at a real folder on that mount")
        area = ScratchArea(node=node.name, mount=declared, path=path,
                           trash_root=posixpath.join(scratch_root(self.config, declared), "trash"),
                           shared=shared, node_local_tmp=False, created_utc=utc_now_iso())
        with self._lock:
            self._areas = [a for a in self._areas if not (a.path == path and a.node == node.name)] + [area]
            self._area_json.pop((node.name, path), None)
            self._present.add(self._key(node.name, path, shared))
        self._save_areas()
        return area

    def _create(self, node: Node, declared: str, path: str):  # noqa: ANN202 - CommandResult
        root = posixpath.dirname(path)
        return self.transport.run(node, ["sh", "-c", _CREATE, "sh", declared, root, path, self.marker],
                                  timeout_s=60)

    def _reusable(self, node: Node, declared: str, path: str) -> bool:
        """Whether the recorded run folder ``path`` is still there to reuse (False: create it anew).
        Raises ``ScratchError`` when it, the user's folder or its tools folder is not the eval user's
        alone, or its marker is not this run's: nothing is written into a folder someone else can."""
        root = scratch_root(self.config, declared)
        res = self.transport.run(node, ["sh", "-c", _REUSE, "sh", root, path, self.marker, *REUSED_INSIDE],
                                 timeout_s=60)
        out = last_line(res.stdout)
        if res.ok and out in ("present", "absent"):
            return out == "present"
        why = last_line(res.stderr, f"exit {res.rc}")
        raise ScratchError(f"{node.name}: refusing to reuse the scratch folder {path}: {why.removeprefix('not-private: ')}",
                           _create_hint(why, declared, root))

    # -- measurements -----------------------------------------------------------------------
    def space(self, node: Node, path: str) -> Space:
        res = self.transport.run(node, ["sh", "-c", _SPACE, "sh", path], timeout_s=60)
        fields = res.stdout.split(None, 1)
        if not res.ok or not fields or not fields[0].isdigit():
            raise ScratchError(f"{node.name}: cannot read how much room {path} has: "
                               f"{last_line(res.stderr, 'no df output')}",
                               "check that the path exists on the node")
        return Space(int(fields[0]), fields[1].strip() if len(fields) > 1 else path)

    def require_space(self, node: Node, path: str, need_bytes: int, what: str) -> Space:
        """Refuse before writing when ``path`` has less free space than ``need_bytes``."""
        space = self.space(node, path)
        if space.avail_bytes < need_bytes:
            raise ScratchError(
                f"{node.name}: {path} has room for {iec_one_decimal(space.avail_bytes)}, "
                f"and {what} needs {iec_one_decimal(need_bytes)}; "
                "nothing was written",
                "free space on that mount, or point the scan at a mount with room")
        return space

    def du_bytes(self, node: Node, path: str) -> int:
        """Bytes under ``path`` on the node (0 when it does not exist)."""
        res = self.transport.run(node, ["sh", "-c", '[ -e "$1" ] || { echo 0; exit 0; }; du -sb -- "$1"',
                                        "sh", path], timeout_s=600)
        head = res.stdout.split()
        return int(head[0]) if res.ok and head and head[0].isdigit() else -1

    def file_bytes(self, node: Node, path: str) -> int:
        """Bytes in regular files under ``path`` (what a run left behind; folders do not count)."""
        res = self.transport.run(node, ["sh", "-c", '[ -e "$1" ] || exit 0; find "$1" -type f -printf "%s\\n"',
                                        "sh", path], timeout_s=600)
        if not res.ok:
            return -1
        return sum(int(x) for x in res.stdout.split() if x.isdigit())

    # -- cleanup ----------------------------------------------------------------------------
    def refusal(self, area: ScratchArea) -> str:
        """Why the controller will not even ask a node to clear ``area`` ('' when it may ask).

        Only the config as it is now and the run's own name count: the recorded entry says which
        folder to look at, never that it may be deleted."""
        mount = normalize(area.mount)
        if mount not in declared_mounts(self.config):
            return f"its mount {area.mount} is not declared in this cluster.toml (local_scratch, shared_paths)"
        if normalize(area.path) != area.path or posixpath.dirname(area.path) != scratch_root(self.config, mount):
            return (f"it is not of the form {scratch_root(self.config, mount)}/{run_folder_name(self.store)}, "
                    "the only place this run creates folders")
        if not folder_name_pattern(self.store).fullmatch(posixpath.basename(area.path)):
            return f"its name is not this run's ({run_folder_name(self.store)})"
        return ""

    def cleanup(self, nodes: list[Node], areas: list[ScratchArea] | None = None, *,
                save: bool = True) -> list[ScratchMove]:
        """Move every recorded folder (or ``areas``) to its trash; delete node-local /tmp ones.

        Areas are cleared in parallel, each within ``CLEAR_TIMEOUT_S``. ``save=False``: the caller
        shows the result first and saves it with ``save_moves`` (a full disk must not hide it)."""
        todo = self.areas() if areas is None else list(areas)
        with self._lock:  # a folder cleared here is checked on the node again before it is used again
            for area in todo:
                self._present.discard(self._key(area.node, area.path, area.shared))
        by_name = {n.name: n for n in nodes}
        stamp = trash_stamp(self.store)
        jobs: list[tuple[ScratchArea, list[Node]]] = []
        done: set[str] = set()
        for area in todo:
            shared = self.is_shared(normalize(area.mount))
            key = area.path if shared else f"{area.node}:{area.path}"
            if key in done:
                continue
            done.add(key)
            candidates = ([by_name[area.node]] if area.node in by_name else [])
            if shared:
                candidates += [n for n in nodes if n.name != area.node]
            jobs.append((area, candidates))
        moves = _interruptible_parallel(jobs, lambda job: self._clear(job[0], job[1], stamp))
        if save:
            self.save_moves(moves)
        return moves

    def save_moves(self, moves: list[ScratchMove]) -> None:
        """Add ``moves`` to ``scratch/cleanup.json`` (raises ``StoreError`` when the disk refuses)."""
        if moves:
            try:
                previous = self._load(CLEANUP_FILE, ScratchMove)
            except (OSError, ValueError):
                previous = []
            self.store.write_raw(CLEANUP_FILE, json.dumps([to_dict(m) for m in previous + moves], indent=2) + "\n")

    def _clear(self, area: ScratchArea, candidates: list[Node], stamp: str) -> ScratchMove:
        mount = normalize(area.mount)
        why = self.refusal(area)
        if why:
            return ScratchMove(node=area.node, path=area.path, action="refused", error=why,
                               finished_utc=utc_now_iso())
        shared = self.is_shared(mount)
        trash_dir = posixpath.join(scratch_root(self.config, mount), "trash", stamp)
        if not candidates:
            return ScratchMove(node=area.node, path=area.path, action="failed", trash_dir=trash_dir,
                               error=f"{area.node} is not in this cluster's node list", finished_utc=utc_now_iso())
        last_error = ""
        argv = ["sh", "-c", _CLEAR, "sh", area.path, mount, self.marker, trash_dir, "1" if shared else "0",
                "0" if shared else "1", scratch_root(self.config, mount)]
        for node in candidates:
            try:
                res = self.transport.run(node, argv, timeout_s=CLEAR_TIMEOUT_S)
            except TransportError as exc:
                last_error = exc.message
                continue
            out = last_line(res.stdout)
            err = last_line(res.stderr)
            if res.ok and out == "absent":
                return ScratchMove(node=node.name, path=area.path, action="absent", finished_utc=utc_now_iso())
            if res.ok and out.startswith("deleted "):
                return ScratchMove(node=node.name, path=area.path, action="deleted",
                                   size_bytes=_int(out.split()[1]), finished_utc=utc_now_iso())
            if res.ok and out.startswith("moved "):
                _, size, target = out.split(" ", 2)
                return ScratchMove(node=node.name, path=area.path, action="moved", moved_to=target,
                                   size_bytes=_int(size), trash_dir=trash_dir, shared=shared,
                                   finished_utc=utc_now_iso())
            if res.timed_out:
                return ScratchMove(node=node.name, path=area.path, action="failed", trash_dir=trash_dir,
                                   error=f"the mount did not answer within {CLEAR_TIMEOUT_S} s (hung?); the folder "
                                         "is left in place", finished_utc=utc_now_iso())
            if res.rc == 10:
                return ScratchMove(node=node.name, path=area.path, action="refused",
                                   error=err.removeprefix("refused: ") or "refused on the node",
                                   finished_utc=utc_now_iso())
            return ScratchMove(node=node.name, path=area.path, action="failed", trash_dir=trash_dir,
                               error=err.removeprefix("not-private: ") or f"exit {res.rc}", finished_utc=utc_now_iso())
        return ScratchMove(node=area.node, path=area.path, action="failed", trash_dir=trash_dir,
                           error=last_error or "no node reachable", finished_utc=utc_now_iso())


def _interruptible_parallel(jobs: list, fn) -> list:  # noqa: ANN001
    """``fn`` over ``jobs`` on daemon threads, results in order; the waiting main thread still takes
    Ctrl-C (a pool's shutdown would hold it until the slowest mount answered)."""
    results: list = [None] * len(jobs)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = fn(jobs[i])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    if errors:
        raise errors[0]
    return results


def scratch_for(ctx) -> Scratch:  # noqa: ANN001 - a RunContext: phases/base.py imports this module
    """The run's one ``Scratch`` (every phase shares it, so its bookkeeping has one lock), made on
    first use from the raw folder's record of the folders."""
    with _SCRATCH_FOR_LOCK:  # called from parallel per-node threads: two Scratch objects would lose areas
        if ctx.scratch is None:
            ctx.scratch = Scratch(ctx.config, ctx.transport, ctx.store)
        return ctx.scratch


_SCRATCH_FOR_LOCK = threading.Lock()


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _create_hint(why: str, mount: str, root: str) -> str:
    low = why.lower()
    if why.startswith("no-mount"):
        return f"{mount} is named in cluster.toml but is not there; mount it, or fix local_scratch / shared_paths"
    if why.startswith("not-private"):
        return (f"{root} must be a folder of the eval user that only it can write: `chown $(id -u) {root} && "
                f"chmod go-w {root}` on the node, or set scratch_root in cluster.toml to a folder it owns")
    if "read-only" in low:
        return f"{mount} is mounted read-only; give a writable path in cluster.toml"
    if "no space" in low:
        return f"{mount} is full; free space there or choose another path"
    if "permission" in low:
        return f"the eval user cannot write under {mount}; set scratch_root to a folder it owns"
    return "check the path on the node"
