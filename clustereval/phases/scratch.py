"""Scratch discipline: every byte the eval writes on a node lives in one folder per mount.

``<mount>/<user>/cluster-eval-<date>-<time>/`` (``scratch_root`` in cluster.toml replaces
``<mount>/<user>``), created by the eval so nothing of the user's sits inside it. Only the
declared mounts (``local_scratch`` and ``shared_paths``) are ever written to. At the end of a run
(success, failure, Ctrl-C, a lost node) each folder is moved into ``<mount>/<user>/trash/<stamp>/``
on the same filesystem: a rename, never ``rm`` and never a copy across mounts. A folder under
node-local ``/tmp`` is deleted instead: it is the eval's own and goes with the node.

Every folder is recorded in the run's raw folder the moment it exists, so
``clustereval cleanup RUN_DIR`` can move what an interrupted or crashed run left.
"""

from __future__ import annotations

import json
import posixpath
import threading
from dataclasses import dataclass

from clustereval.analysis.storage import human_bytes
from clustereval.config import Config
from clustereval.errors import ScratchError, TransportError
from clustereval.records import from_dict, to_dict
from clustereval.records.scratch import ScratchArea, ScratchMove
from clustereval.store import RunStore, utc_now_iso
from clustereval.transport.base import Node, Transport

AREAS_FILE = "scratch/areas.json"
CLEANUP_FILE = "scratch/cleanup.json"
NODE_LOCAL_TMP = "/tmp"
PURGE_HINT = "Moving within the same filesystem does not free the space; "

# Fixed scripts: user paths arrive as positional arguments, never inside the script text.
_CREATE = ('mkdir -p -- "$1" && mkdir -- "$2" && realpath -e -- "$3" "$2"')
_MOVE = r'''
src="$1"; dst_dir="$2"
[ -e "$src" ] || { echo absent; exit 0; }
size=$(du -sb -- "$src" | cut -f1)
mkdir -p -- "$dst_dir" || exit 5
if [ "$(stat -c %d -- "$src")" != "$(stat -c %d -- "$dst_dir")" ]; then
  echo "cross-device: $dst_dir is on another filesystem than $src" >&2; exit 3
fi
base=$(basename -- "$src"); target="$dst_dir/$base"; n=1
while [ -e "$target" ]; do n=$((n+1)); target="$dst_dir/$base.$n"; done
mv -T -- "$src" "$target" || exit 4
echo "moved $size $target"
'''
_DELETE = r'''
src="$1"
[ -e "$src" ] || { echo absent; exit 0; }
size=$(du -sb -- "$src" | cut -f1)
rm -rf --one-file-system -- "$src" || exit 4
echo "deleted $size"
'''
_SPACE = 'df --block-size=1 --output=avail,target -- "$1" | tail -n 1'


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
    state = store.load_state()
    run_id = store.run_id
    suffix = run_id[len(state.name) + 1:] if run_id.startswith(state.name + "-") else run_id
    return f"cluster-eval-{suffix}"


def trash_stamp(store: RunStore) -> str:
    return run_folder_name(store).removeprefix("cluster-eval-")


def is_node_local_tmp(path: str, shared: bool) -> bool:
    return not shared and inside(path, NODE_LOCAL_TMP)


@dataclass(frozen=True)
class Space:
    avail_bytes: int
    mount_point: str


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class Scratch:
    """The run's scratch folders on every node: create, check space, measure, move to trash."""

    def __init__(self, config: Config, transport: Transport, store: RunStore) -> None:
        self.config = config
        self.transport = transport
        self.store = store
        self._lock = threading.Lock()
        self._areas: list[ScratchArea] = self._load(AREAS_FILE, ScratchArea)

    # -- bookkeeping in the raw folder ------------------------------------------------------
    def _load(self, rel: str, cls: type) -> list:
        path = self.store.raw_dir / rel
        if not path.exists():
            return []
        return [from_dict(cls, d) for d in json.loads(path.read_text())]

    def _save_areas(self) -> None:
        self.store.write_raw(AREAS_FILE, json.dumps([to_dict(a) for a in self._areas], indent=2) + "\n")

    def areas(self) -> list[ScratchArea]:
        with self._lock:
            return list(self._areas)

    # -- paths ------------------------------------------------------------------------------
    def path_for(self, mount: str) -> str:
        mount = check_declared(self.config, mount)
        return posixpath.join(scratch_root(self.config, mount), run_folder_name(self.store))

    def is_shared(self, mount: str) -> bool:
        return any(inside(mount, s) for s in map(normalize, self.config.shared_paths))

    # -- creation ---------------------------------------------------------------------------
    def ensure(self, node: Node, mount: str) -> ScratchArea:
        """The run's folder on ``mount`` as ``node`` sees it, created (and recorded) when new."""
        declared = check_declared(self.config, mount)
        shared = self.is_shared(declared)
        path = self.path_for(declared)
        with self._lock:
            for area in self._areas:
                if area.path == path and (area.shared or area.node == node.name):
                    if self._exists(node, path):
                        return area
            root = posixpath.dirname(path)
            res = self.transport.run(node, ["sh", "-c", _CREATE, "sh", root, path, declared], timeout_s=60)
            if not res.ok:
                why = _last_line(res.stderr) or f"exit {res.rc}"
                if "File exists" in why and not any(a.path == path for a in self._areas):
                    raise ScratchError(f"{node.name}: {path} already exists and this run did not create it",
                                       "move it out of the way or set scratch_root in cluster.toml")
                if "File exists" not in why:
                    raise ScratchError(f"{node.name}: cannot create the scratch folder {path}: {why}",
                                       _create_hint(why, declared))
            real = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
            if len(real) == 2 and not inside(real[1], real[0]):
                # a symlinked <user> folder pointing elsewhere would put the scratch outside the mount
                self.transport.run(node, ["rmdir", "--", path], timeout_s=30)
                raise ScratchError(f"{node.name}: {path} resolves to {real[1]}, outside {declared}",
                                   "point scratch_root at a real folder on that mount")
            area = ScratchArea(node=node.name, mount=declared, path=path,
                               trash_root=posixpath.join(scratch_root(self.config, declared), "trash"),
                               shared=shared, node_local_tmp=is_node_local_tmp(path, shared),
                               created_utc=utc_now_iso())
            self._areas = [a for a in self._areas if not (a.path == path and a.node == node.name)] + [area]
            self._save_areas()
            return area

    def _exists(self, node: Node, path: str) -> bool:
        return self.transport.run(node, ["test", "-d", path], timeout_s=30).ok

    # -- measurements -----------------------------------------------------------------------
    def space(self, node: Node, path: str) -> Space:
        res = self.transport.run(node, ["sh", "-c", _SPACE, "sh", path], timeout_s=60)
        fields = res.stdout.split(None, 1)
        if not res.ok or not fields or not fields[0].isdigit():
            raise ScratchError(f"{node.name}: cannot read the free space of {path}: "
                               f"{_last_line(res.stderr) or 'no df output'}",
                               "check that the path exists on the node")
        return Space(int(fields[0]), fields[1].strip() if len(fields) > 1 else path)

    def require_space(self, node: Node, path: str, need_bytes: int, what: str) -> Space:
        """Refuse before writing when ``path`` has less free space than ``need_bytes``."""
        space = self.space(node, path)
        if space.avail_bytes < need_bytes:
            raise ScratchError(
                f"{node.name}: {path} has {_gib(space.avail_bytes)} free, and {what} needs {_gib(need_bytes)}; "
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
    def cleanup(self, nodes: list[Node], areas: list[ScratchArea] | None = None) -> list[ScratchMove]:
        """Move every recorded folder (or ``areas``) to its trash; delete node-local /tmp ones."""
        todo = self.areas() if areas is None else list(areas)
        by_name = {n.name: n for n in nodes}
        stamp = trash_stamp(self.store)
        moves: list[ScratchMove] = []
        done: set[str] = set()
        for area in todo:
            key = area.path if area.shared else f"{area.node}:{area.path}"
            if key in done:
                continue
            done.add(key)
            candidates = ([by_name[area.node]] if area.node in by_name else [])
            if area.shared:
                candidates += [n for n in nodes if n.name != area.node]
            moves.append(self._clear(area, candidates, stamp))
        if moves:
            previous = self._load(CLEANUP_FILE, ScratchMove)
            self.store.write_raw(CLEANUP_FILE, json.dumps([to_dict(m) for m in previous + moves], indent=2) + "\n")
        return moves

    def _clear(self, area: ScratchArea, candidates: list[Node], stamp: str) -> ScratchMove:
        trash_dir = posixpath.join(area.trash_root, stamp)
        if not candidates:
            return ScratchMove(node=area.node, path=area.path, action="failed", trash_dir=trash_dir,
                               error=f"{area.node} is not in this cluster's node list", finished_utc=utc_now_iso())
        last_error = ""
        for node in candidates:
            if area.node_local_tmp:
                argv = ["sh", "-c", _DELETE, "sh", area.path]
            else:
                argv = ["sh", "-c", _MOVE, "sh", area.path, trash_dir]
            try:
                res = self.transport.run(node, argv, timeout_s=900)
            except TransportError as exc:
                last_error = exc.message
                continue
            out = _last_line(res.stdout)
            if res.ok and out == "absent":
                return ScratchMove(node=node.name, path=area.path, action="absent", finished_utc=utc_now_iso())
            if res.ok and out.startswith("deleted "):
                return ScratchMove(node=node.name, path=area.path, action="deleted",
                                   size_bytes=_int(out.split()[1]), finished_utc=utc_now_iso())
            if res.ok and out.startswith("moved "):
                _, size, target = out.split(" ", 2)
                return ScratchMove(node=node.name, path=area.path, action="moved", moved_to=target,
                                   size_bytes=_int(size), trash_dir=trash_dir, shared=area.shared,
                                   finished_utc=utc_now_iso())
            return ScratchMove(node=node.name, path=area.path, action="failed", trash_dir=trash_dir,
                               error=_last_line(res.stderr) or f"exit {res.rc}", finished_utc=utc_now_iso())
        return ScratchMove(node=area.node, path=area.path, action="failed", trash_dir=trash_dir,
                           error=last_error or "no node reachable", finished_utc=utc_now_iso())


def scratch_for(ctx) -> Scratch:  # noqa: ANN001 - RunContext; imported lazily to keep layers one-way
    """The run's one ``Scratch`` (every phase shares it, so its bookkeeping has one lock)."""
    with _SCRATCH_FOR_LOCK:  # called from parallel per-node threads: two Scratch objects would lose areas
        found = ctx.records.get("_scratch")
        if not isinstance(found, Scratch):
            found = Scratch(ctx.config, ctx.transport, ctx.store)
            ctx.records["_scratch"] = found
        return found


_SCRATCH_FOR_LOCK = threading.Lock()


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _gib(num_bytes: int) -> str:
    return human_bytes(num_bytes)


def _create_hint(why: str, mount: str) -> str:
    low = why.lower()
    if "read-only" in low:
        return f"{mount} is mounted read-only; give a writable path in cluster.toml"
    if "no space" in low:
        return f"{mount} is full; free space there or choose another path"
    if "permission" in low:
        return f"the eval user cannot write under {mount}; set scratch_root to a folder it owns"
    return "check the path on the node"
