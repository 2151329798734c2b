"""Cleanup decides from facts on the node, never from the raw folder: planted entries, mounts under
/tmp, bind-mount aliases, and a `<mount>/<user>` that is not the eval user's alone."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from clustereval.errors import ScratchError
from clustereval.phases.scratch import AREAS_FILE, scratch_for
from tests.conftest import run_cli
from tests.storagehelpers import files_outside_trash, make_ctx, tmpfs


def _cluster_toml(tmp_path, *, local, shared=()):
    cfg = tmp_path / "cluster.toml"
    paths = ", ".join(f'"{s}"' for s in shared)
    cfg.write_text(f'name = "t"\naccess = "local"\nlocal_scratch = "{local}"\nscratch_user = "evaluser"\n'
                   + (f"shared_paths = [{paths}]\n" if shared else ""))
    return cfg


def _plant(ctx, entries):
    """What a copied, edited or hostile raw folder could say."""
    path = ctx.store.raw_dir / AREAS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2))


def _entry(node, mount, path, *, node_local_tmp=True, shared=False):
    return {"node": node, "mount": str(mount), "path": str(path), "trash_root": f"{mount}/evaluser/trash",
            "shared": shared, "node_local_tmp": node_local_tmp, "created_utc": "2026-12-01T00:00:00Z"}


@pytest.fixture
def off_tmp():
    """A folder that is not under /tmp (so not on node-local /tmp by any path rule)."""
    base = tempfile.mkdtemp(prefix="clustereval-test-", dir="/var/tmp")
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_planted_entries_are_refused_and_left_untouched(tmp_path, off_tmp):
    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    host = socket.gethostname().split(".")[0] or "localhost"  # the node a local config names
    stamp_name = os.path.basename(scratch_for(ctx).path_for(str(local)))
    victim = os.path.join(off_tmp, "victim", "keep")  # outside every declared mount
    os.makedirs(victim)
    open(os.path.join(victim, "data.txt"), "w").write("someone's data")
    unmarked = local / "evaluser" / stamp_name  # the right form inside the mount, but not created by this run
    unmarked.mkdir(parents=True)
    (unmarked / "theirs.bin").write_bytes(b"x" * 4096)
    off_tmp_mount = os.path.join(off_tmp, "disk")  # a declared mount off /tmp, entry says node-local /tmp
    offpath = os.path.join(off_tmp_mount, "evaluser", stamp_name)
    os.makedirs(offpath)
    open(os.path.join(offpath, "keep.txt"), "w").write("keep")
    _plant(ctx, [_entry(host, local, victim), _entry(host, local, unmarked),
                 _entry(host, off_tmp_mount, offpath)])
    cfg = _cluster_toml(tmp_path, local=local, shared=(off_tmp_mount,))
    res = run_cli("cleanup", str(ctx.store.raw_dir), "--config", str(cfg), cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    refused = [ln for ln in res.stdout.splitlines() if "REFUSED" in ln]
    assert len(refused) == 3, res.stdout
    assert any(victim in ln and "not of the form" in ln for ln in refused)
    assert any(str(unmarked) in ln and "no marker file" in ln for ln in refused)
    assert any(offpath in ln and "no marker file" in ln for ln in refused)
    assert open(os.path.join(victim, "data.txt")).read() == "someone's data"
    assert (unmarked / "theirs.bin").stat().st_size == 4096
    assert open(os.path.join(offpath, "keep.txt")).read() == "keep"
    assert not os.path.exists(os.path.join(off_tmp_mount, "evaluser", "trash"))
    assert not (local / "evaluser" / "trash").exists()


def test_a_recorded_node_local_flag_never_makes_a_folder_off_tmp_deletable(tmp_path, off_tmp):
    mount = os.path.join(off_tmp, "nvme")
    os.makedirs(mount)
    ctx = make_ctx(tmp_path, local=Path(mount))
    sc = scratch_for(ctx)
    area = sc.ensure(ctx.nodes[0], mount)
    open(os.path.join(area.path, "work.bin"), "wb").write(b"\0" * 8192)
    entry = _entry(ctx.nodes[0].name, mount, area.path, node_local_tmp=True)
    _plant(ctx, [entry])
    (m,) = scratch_for(make_ctx_again(ctx)).cleanup(ctx.nodes)
    assert m.action == "moved", m
    assert os.path.getsize(os.path.join(m.moved_to, "work.bin")) == 8192
    assert m.moved_to.startswith(os.path.join(mount, "evaluser", "trash") + "/")


def make_ctx_again(ctx):
    """A fresh Scratch reading the (planted) raw folder, as `clustereval cleanup` does."""
    ctx.scratch = None
    return ctx


def test_a_tmpfs_under_tmp_listed_in_shared_paths_is_moved_never_deleted(tmp_path):
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("needs pytest's temp folder under /tmp")
    share = tmp_path / "share"
    node_disk = tmp_path / "nvme"
    with tmpfs(share, size="16m"), tmpfs(node_disk, size="16m"):
        ctx = make_ctx(tmp_path, local=node_disk, shared=(share,))
        sc = scratch_for(ctx)
        shared_area = sc.ensure(ctx.nodes[0], str(share))
        local_area = sc.ensure(ctx.nodes[0], str(node_disk))  # its own filesystem under /tmp: not /tmp's
        for area in (shared_area, local_area):
            open(os.path.join(area.path, "w.bin"), "wb").write(b"\0" * 65536)
        moves = {m.path: m for m in sc.cleanup(ctx.nodes)}
        assert {m.action for m in moves.values()} == {"moved"}, moves
        for area, root in ((shared_area, share), (local_area, node_disk)):
            m = moves[area.path]
            assert m.moved_to.startswith(f"{root}/evaluser/trash/")
            assert os.path.getsize(os.path.join(m.moved_to, "w.bin")) == 65536
            assert files_outside_trash(root) == []


def test_a_bind_mount_alias_trash_is_refused_and_nothing_is_copied(tmp_path):
    shared = tmp_path / "shared"
    elsewhere = tmp_path / "elsewhere"  # same filesystem, so the same st_dev
    shared.mkdir()
    elsewhere.mkdir()
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(shared,))
    area = scratch_for(ctx).ensure(ctx.nodes[0], str(shared))
    open(os.path.join(area.path, "big.bin"), "wb").write(b"\0" * 2**20)
    trash = shared / "evaluser" / "trash"
    trash.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    res = subprocess.run(["mount", "--bind", str(elsewhere), str(trash)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"cannot bind-mount here: {res.stderr.strip()}")
    try:
        assert os.stat(trash).st_dev == os.stat(area.path).st_dev  # the device check alone would pass
        (m,) = scratch_for(ctx).cleanup(ctx.nodes)
        assert m.action == "failed" and "another filesystem" in m.error, m
        assert os.path.getsize(os.path.join(area.path, "big.bin")) == 2**20  # left where it was
        assert os.listdir(elsewhere) == []  # no trash folder made, no byte copied
    finally:
        subprocess.run(["umount", "-l", str(trash)], check=False)


@pytest.mark.parametrize("how", ["other-owner", "mode-777"])
def test_a_user_folder_that_is_not_the_eval_users_alone_is_refused_with_the_fix(tmp_path, how):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    mount = tmp_path / "scratch"
    user_dir = mount / "evaluser"
    user_dir.mkdir(parents=True)
    if how == "other-owner":
        os.chown(user_dir, 54321, 54321)
        os.chmod(user_dir, 0o755)
    else:
        os.chmod(user_dir, 0o777)
    ctx = make_ctx(tmp_path, local=mount)
    with pytest.raises(ScratchError) as exc:
        scratch_for(ctx).ensure(ctx.nodes[0], str(mount))
    text = exc.value.message
    assert str(user_dir) in text
    assert ("owned by uid 54321" in text) if how == "other-owner" else ("writable by group or others" in text)
    assert f"chmod go-w {user_dir}" in exc.value.hint and "chown" in exc.value.hint
    assert os.listdir(user_dir) == []  # nothing shipped into a folder someone else controls
    assert scratch_for(ctx).areas() == []


def test_a_missing_mount_is_never_created(tmp_path):
    missing = tmp_path / "nonexistent" / "dir"
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(missing,))
    with pytest.raises(ScratchError, match="does not exist") as exc:
        scratch_for(ctx).ensure(ctx.nodes[0], str(missing))
    assert "mount it" in exc.value.hint
    assert not (tmp_path / "nonexistent").exists()
