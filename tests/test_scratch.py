"""Scratch discipline on this machine's real filesystems: create, refuse, move to trash, clean up."""

import json
import os
import socket

import pytest

from clustereval.errors import ScratchError
from clustereval.phases.scratch import AREAS_FILE, Scratch, check_declared, scratch_for, scratch_root
from clustereval.report.cleanup import cleanup_lines
from clustereval.report.units import iec_one_decimal
from tests.conftest import run_cli
from tests.storagehelpers import du_bytes, files_outside_trash, make_ctx, tmpfs


def test_one_timestamped_folder_per_mount_recorded_in_the_raw_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(shared,))
    (tmp_path / "local").mkdir(exist_ok=True)
    sc = scratch_for(ctx)
    node = ctx.nodes[0]
    area = sc.ensure(node, str(shared))
    assert area.path == f"{shared}/evaluser/cluster-eval-{ctx.store.run_id[2:]}"
    assert area.trash_root == f"{shared}/evaluser/trash" and area.shared and not area.node_local_tmp
    # nothing of the user's inside: only the marker this run wrote, in a folder only the eval user can enter
    assert os.path.isdir(area.path) and os.listdir(area.path) == [".clustereval-run"]
    assert (open(os.path.join(area.path, ".clustereval-run")).read().split()[:3]
            == ["clustereval", "run", ctx.store.run_id])
    assert os.stat(area.path).st_mode & 0o777 == 0o700
    assert sc.ensure(node, str(shared)) is area  # reused, not created twice
    local = sc.ensure(node, str(tmp_path / "local"))
    assert not local.shared and not local.node_local_tmp  # decided on the node at cleanup time, never recorded
    recorded = json.loads((ctx.store.raw_dir / AREAS_FILE).read_text())
    assert [a["path"] for a in recorded] == [area.path, local.path]


def test_a_folder_that_already_exists_is_not_adopted(tmp_path):
    ctx = make_ctx(tmp_path, local=tmp_path)
    sc = scratch_for(ctx)
    users = sc.path_for(str(tmp_path))
    os.makedirs(users)
    (tmp_path / "evaluser" / os.path.basename(users) / "theirs.txt").write_text("not ours")
    with pytest.raises(ScratchError, match="did not create it"):
        sc.ensure(ctx.nodes[0], str(tmp_path))


def test_paths_outside_the_declared_mounts_are_refused(tmp_path):
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(tmp_path / "shared",))
    assert check_declared(ctx.config, f"{tmp_path}/shared/x/y") == f"{tmp_path}/shared"
    for bad in ("/etc", f"{tmp_path}/sharedX", f"{tmp_path}/shared/../elsewhere", "relative/path"):
        with pytest.raises(ScratchError, match="refusing to write"):
            scratch_for(ctx).ensure(ctx.nodes[0], bad)
    assert not (tmp_path / "elsewhere").exists()


def test_scratch_root_forms(tmp_path):
    ctx = make_ctx(tmp_path, local=tmp_path / "l", shared=(tmp_path / "s",), scratch_root="users/{user}")
    assert scratch_root(ctx.config, f"{tmp_path}/s") == f"{tmp_path}/s/users/evaluser"
    ctx = make_ctx(tmp_path, local=tmp_path / "l", shared=(tmp_path / "s",), scratch_root=f"{tmp_path}/s/mine")
    assert scratch_root(ctx.config, f"{tmp_path}/s") == f"{tmp_path}/s/mine"
    assert scratch_root(ctx.config, f"{tmp_path}/l") == f"{tmp_path}/l/evaluser"  # that root is on another mount


def test_cleanup_moves_shared_scratch_to_trash_on_the_same_mount(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "users-data.txt").write_text("someone else's")
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(shared,))
    sc = scratch_for(ctx)
    area = sc.ensure(ctx.nodes[0], str(shared))
    with open(os.path.join(area.path, "work.bin"), "wb") as fh:
        fh.write(b"\0" * 3 * 2**20)
    (moved,) = sc.cleanup(ctx.nodes)
    assert moved.action == "moved" and moved.size_bytes >= 3 * 2**20
    assert moved.moved_to == f"{shared}/evaluser/trash/{ctx.store.run_id[2:]}/{os.path.basename(area.path)}"
    assert os.path.getsize(os.path.join(moved.moved_to, "work.bin")) == 3 * 2**20
    assert files_outside_trash(shared) == [str(shared / "users-data.txt")]
    lines = cleanup_lines([moved], "RUN")
    assert "3.0 MiB" in lines[0] and area.path in lines[0] and moved.moved_to in lines[0]
    assert "does not free the space" in lines[-1] and f"rm -rf -- {moved.trash_dir}" in lines[-1]
    # cleaning again finds nothing; recreating after a move lands in a second trash name
    assert [m.action for m in sc.cleanup(ctx.nodes)] == ["absent"]
    sc.ensure(ctx.nodes[0], str(shared))
    (again,) = sc.cleanup(ctx.nodes)
    assert again.moved_to.endswith(".2")


def test_node_local_tmp_is_deleted_not_moved(tmp_path):
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("needs pytest's temp folder under /tmp")
    ctx = make_ctx(tmp_path, local=tmp_path)
    area = scratch_for(ctx).ensure(ctx.nodes[0], str(tmp_path))
    open(os.path.join(area.path, "x"), "w").write("x" * 5000)
    (m,) = scratch_for(ctx).cleanup(ctx.nodes)
    assert m.action == "deleted" and m.size_bytes >= 5000 and not os.path.exists(area.path)
    assert "node-local /tmp" in cleanup_lines([m], "RUN")[0]


def test_trash_on_another_filesystem_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(shared,))
    area = scratch_for(ctx).ensure(ctx.nodes[0], str(shared))
    with tmpfs(shared / "evaluser" / "trash"):
        (m,) = scratch_for(ctx).cleanup(ctx.nodes)
        assert m.action == "failed" and "another filesystem" in m.error
        assert os.path.isdir(area.path)  # left in place rather than copied across mounts
        assert "NOT cleared" in cleanup_lines([m], "RUNDIR")[0] and "clustereval cleanup RUNDIR" in cleanup_lines([m], "RUNDIR")[0]


def test_full_filesystem_is_refused_before_anything_is_written(tmp_path):
    small = tmp_path / "small"
    with tmpfs(small, size="4m"):
        ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(small,))
        with pytest.raises(ScratchError, match="room for.*needs") as exc:
            scratch_for(ctx).require_space(ctx.nodes[0], str(small), 16 * 2**30, "the scan's largest run")
        assert "nothing was written" in exc.value.message
        assert os.listdir(small) == []


def test_read_only_mount_gives_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    with tmpfs(ro, readonly=True):
        ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(ro,))
        with pytest.raises(ScratchError, match="Read-only file system") as exc:
            scratch_for(ctx).ensure(ctx.nodes[0], str(ro))
        assert "read-only" in exc.value.hint
        assert scratch_for(ctx).areas() == []


def test_cleanup_command_moves_what_a_crashed_run_left(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    host = socket.gethostname().split(".")[0] or "localhost"
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(shared,))
    sc = Scratch(ctx.config, ctx.transport, ctx.store)
    from clustereval.transport.base import Node

    area = sc.ensure(Node(host, host), str(shared))
    open(os.path.join(area.path, "left.bin"), "wb").write(b"\0" * 2**20)
    cfg = _cluster_toml(tmp_path, local=tmp_path / "local", shared=shared)
    res = run_cli("cleanup", str(ctx.store.raw_dir), "--config", str(cfg), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"moved {area.path} (1.0 MiB)" in res.stdout and "rm -rf --" in res.stdout
    assert files_outside_trash(shared) == []
    assert not os.path.exists(area.path) and du_bytes(shared / "evaluser" / "trash") >= 2**20
    again = run_cli("cleanup", str(ctx.store.raw_dir), "--config", str(cfg), cwd=tmp_path)
    assert "already cleared" in again.stdout


def _cluster_toml(tmp_path, *, local, shared=None):
    """The cluster.toml a user would hand ``cleanup``: cleanup trusts its mounts, not the raw folder."""
    cfg = tmp_path / "cluster.toml"
    lines = ['name = "t"', 'access = "local"', f'local_scratch = "{local}"', 'scratch_user = "evaluser"']
    if shared is not None:
        lines.append(f'shared_paths = ["{shared}"]')
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_human_bytes():
    assert iec_one_decimal(0) == "0 B" and iec_one_decimal(16 * 2**30) == "16.0 GiB" and iec_one_decimal(1536) == "1.5 KiB"


def test_a_lost_node_leaves_a_clear_note_and_shared_scratch_moves_through_another_node(cluster3, tmp_path):
    from clustereval.config import Config
    from clustereval.phases.base import RunContext
    from clustereval.store import RunState, RunStore

    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    local = tmp_path / "nodelocal"
    local.mkdir()  # a configured path must exist on the node: clustereval never creates a mount
    cfg = Config(nodes=tuple(n.name for n in cluster3.nodes), access="ssh", local_scratch=str(local),
                 shared_paths=(str(cluster3.shared_dir),), scratch_user="evaluser")
    ctx = RunContext(config=cfg, transport=cluster3.transport(), nodes=cluster3.cluster_nodes(), store=store)
    node0 = ctx.nodes[0]
    shared_area = scratch_for(ctx).ensure(node0, str(cluster3.shared_dir))
    local_area = scratch_for(ctx).ensure(node0, str(local))
    open(os.path.join(shared_area.path, "poke.bin"), "wb").write(b"\0" * 4096)
    cluster3.kill_sshd(0)
    moves = {m.path: m for m in scratch_for(ctx).cleanup(ctx.nodes)}
    shared_move, local_move = moves[shared_area.path], moves[local_area.path]
    assert shared_move.action == "moved" and shared_move.node == ctx.nodes[1].name
    assert files_outside_trash(cluster3.shared_dir) == []
    assert local_move.action == "failed" and local_move.error
    line = next(x for x in cleanup_lines(list(moves.values()), str(store.raw_dir)) if "NOT cleared" in x)
    assert local_area.path in line and f"clustereval cleanup {store.raw_dir}" in line


def test_a_folder_cleared_by_cleanup_is_made_again_when_asked_for_again(tmp_path):
    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    (tmp_path / "local").mkdir(exist_ok=True)
    sc = scratch_for(ctx)
    node = ctx.nodes[0]
    first = sc.ensure(node, str(tmp_path / "local"))
    assert sc.ensure(node, str(tmp_path / "local")) is first  # known and present: not made again
    moves = sc.cleanup(ctx.nodes)
    assert len(moves) == 1 and moves[0].action in ("moved", "deleted") and not os.path.exists(first.path)
    again = sc.ensure(node, str(tmp_path / "local"))
    assert again.path == first.path and os.path.isdir(again.path)
    assert os.listdir(again.path) == [".clustereval-run"]


class _MeetingTransport:
    """The bed's real SSH transport; each folder creation after the first waits on the node until
    ``meet`` others are under way at the same time (a barrier that breaks after ``timeout_s``)."""

    def __init__(self, inner, meet: int, timeout_s: float) -> None:
        import threading

        self._inner = inner
        self._barrier = threading.Barrier(meet, timeout=timeout_s)
        self._lock = threading.Lock()
        self.creations = 0
        self.broken = False

    def __getattr__(self, name):  # noqa: ANN001, ANN204 - everything else is the real transport's
        return getattr(self._inner, name)

    def run(self, node, argv, **kw):  # noqa: ANN001, ANN201
        import threading

        if argv[:2] == ["sh", "-c"] and "mkdir -m 700" in argv[2]:
            with self._lock:
                self.creations += 1
                first = self.creations == 1
            if not first:
                try:
                    self._barrier.wait()
                except threading.BrokenBarrierError:
                    self.broken = True
        return self._inner.run(node, argv, **kw)


@pytest.mark.timeout(300)
def test_the_nodes_of_a_fleet_create_their_folders_at_once_and_every_one_is_recorded(netns_cluster, tmp_path):
    """After the first creation has fixed the run's folder name, the other nodes' creations run at
    the same time (one at a time, a thousand nodes wait a thousand round trips); the bookkeeping on
    disk still lists every folder, written as one JSON list."""
    from clustereval.config import Config
    from clustereval.phases.base import RunContext
    from clustereval.store import RunState, RunStore
    from clustereval.transport.base import run_each

    cluster = netns_cluster(4)
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    cfg = Config(nodes=tuple(n.name for n in cluster.nodes), access="ssh", local_scratch=str(cluster.scratch_dir),
                 shared_paths=(str(cluster.shared_dir),), scratch_user="evaluser")
    transport = _MeetingTransport(cluster.transport(), meet=3, timeout_s=60)
    ctx = RunContext(config=cfg, transport=transport, nodes=cluster.cluster_nodes(), store=store)
    sc = scratch_for(ctx)
    first = sc.ensure(ctx.nodes[0], str(cluster.scratch_dir))
    attempts = run_each(ctx.nodes[1:], lambda n: sc.ensure(n, str(cluster.scratch_dir)), 8)
    assert [a.error for a in attempts] == [None, None, None]
    assert not transport.broken, "the creations on nodes 1-3 ran one after another"
    assert transport.creations == 4
    areas = [first, *(a.value for a in attempts)]
    assert sorted(a.node for a in areas) == sorted(n.name for n in ctx.nodes)
    for i, area in enumerate(areas):
        assert area.path == first.path and not area.shared
        made = cluster.node_scratch_dir(i) / "evaluser" / os.path.basename(area.path)
        assert sorted(os.listdir(made)) == [".clustereval-run"]
    text = (ctx.store.raw_dir / AREAS_FILE).read_text()
    recorded = json.loads(text)
    assert sorted(a["node"] for a in recorded) == sorted(n.name for n in ctx.nodes)
    assert text == json.dumps(recorded, indent=2) + "\n"
    # asked again, a node's folder is the one made: no second creation
    assert sc.ensure(ctx.nodes[2], str(cluster.scratch_dir)).node == ctx.nodes[2].name
    assert transport.creations == 4
    moves = sc.cleanup(ctx.nodes)
    assert len(moves) == 4 and all(m.action in ("moved", "deleted") for m in moves)
