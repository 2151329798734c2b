"""Nothing the run reuses can be planted: the eval venv cache, the run folder, its tools folder and the
trash must be the eval user's alone, checked on the node before anything there is run or moved.

Real folders on this machine (local transport), made another user's by ``chown`` to uid 65534 or
writable by group; the planted interpreter is a script that leaves a file behind when it runs, and
forwards to this interpreter (which has torch), so the cache code before the ownership rule would
have reused it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.errors import ScratchError
from clustereval.phases.scratch import TOOLS_FOLDER, scratch_for
from clustereval.phases.venvcache import (
    CACHE_DIR,
    MARKER,
    VenvBuildError,
    VenvKey,
    cache_place,
    find_or_build,
    look,
)
from tests.storagehelpers import make_ctx

OTHER_UID = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's needs root (chown)")


def plant_venv(folder: Path, digest: str, sentinel: Path) -> None:
    """A folder that passes every check the cache made before the ownership rule: its marker names
    ``digest``, its Python is this one and torch imports. Its interpreter writes ``sentinel`` when run."""
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho ran >> "{sentinel}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    version = subprocess.run([sys.executable, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (folder / MARKER).write_text(json.dumps({"digest": digest, "key": {"python": version}}))


def chown_tree(path: Path, uid: int) -> None:
    for base, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.lchown(os.path.join(base, name), uid, uid)
    os.lchown(path, uid, uid)


KEY = VenvKey(index="pip's configured index", torch_spec=("torch",), packages=(), python="3", python_executable="/x")


def _plant_case(how: str, place, venv: Path, sentinel: Path) -> str:  # noqa: ANN001 - a CachePlace
    """Plant ``how`` around ``venv``; the path the refusal must name."""
    plant_venv(venv, KEY.digest(), sentinel)
    if how == "other-uid":
        chown_tree(venv, OTHER_UID)
        return str(venv)
    if how == "group-writable":
        venv.chmod(0o775)
        return str(venv)
    if how == "other-uid-file-inside":
        (venv / "lib").mkdir()
        (venv / "lib" / "sitecustomize.py").write_text("print('planted')\n")
        os.chown(venv / "lib" / "sitecustomize.py", OTHER_UID, OTHER_UID)
        return str(venv / "lib" / "sitecustomize.py")
    if how == "interpreter-of-another-user":
        target = venv.parent.parent.parent / "theirs-python"
        (venv / "bin" / "python").rename(target)
        os.chown(target, OTHER_UID, OTHER_UID)
        (venv / "bin" / "python").symlink_to(target)
        return str(target)
    if how == "symlinked-copy":
        real = venv.parent.parent.parent / "elsewhere"
        venv.rename(real)
        venv.symlink_to(real)
        return str(venv)
    if how == "group-writable-cache-folder":
        Path(place.root).chmod(0o770)
        return place.root
    if how == "user-folder-of-another-uid":
        os.chown(place.user_folder, OTHER_UID, OTHER_UID)
        return place.user_folder
    raise AssertionError(how)


CASES = ["other-uid", "group-writable", "other-uid-file-inside", "interpreter-of-another-user", "symlinked-copy",
         "group-writable-cache-folder", "user-folder-of-another-uid"]


@pytest.mark.parametrize("how", CASES)
def test_a_planted_cache_is_refused_named_and_never_run(tmp_path, how):
    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    place = cache_place(ctx.config)
    node = ctx.nodes[0]
    assert look(ctx, node, place.user_folder, place.root, KEY.digest()).state == "absent"
    # made private by the first look, as the run makes them
    assert Path(place.user_folder).stat().st_mode & 0o777 == 0o700 and Path(place.root).stat().st_mode & 0o777 == 0o700
    venv = Path(place.root) / KEY.digest()
    sentinel = tmp_path / "planted-interpreter-ran"
    named = _plant_case(how, place, venv, sentinel)
    before = sorted(str(p) for p in Path(place.root).rglob("*")) if how != "user-folder-of-another-uid" else []

    found = look(ctx, node, place.user_folder, place.root, KEY.digest())
    assert found.state == "refused" and found.path == named, found
    assert "\n" not in found.why and found.why.startswith(named)
    with pytest.raises(VenvBuildError) as exc:
        find_or_build(ctx, node, KEY, ["--no-index"], progress="", user_folder=place.user_folder, home=place.root)
    assert exc.value.error_id == "venv-refused" and named in exc.value.message
    assert not sentinel.exists()  # never run
    if before:  # left where it was, untouched
        assert sorted(str(p) for p in Path(place.root).rglob("*")) == before
    assert not (Path(place.user_folder) / "trash").exists() or how == "user-folder-of-another-uid"


def test_our_own_cached_copy_that_no_longer_verifies_goes_to_trash_not_away(tmp_path):
    """A copy that passes the ownership rule but is not a complete venv of the key is ours: it is
    run to verify it, and moved to trash (a rename) before the new build; the failed build goes too."""
    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    place = cache_place(ctx.config)
    venv = Path(place.root) / KEY.digest()
    look(ctx, ctx.nodes[0], place.user_folder, place.root, KEY.digest())
    sentinel = tmp_path / "ours-ran"
    plant_venv(venv, "another-digest", sentinel)
    inode = (venv / MARKER).stat().st_ino
    with pytest.raises(VenvBuildError) as exc:  # offline: pip finds no torch
        find_or_build(ctx, ctx.nodes[0], KEY, ["--no-index"], progress="", user_folder=place.user_folder,
                      home=place.root)
    assert exc.value.message.startswith("pip install: ")
    assert sentinel.exists()  # ours, so it was verified
    trash = Path(place.user_folder) / "trash"
    (moved,) = trash.glob(f"*/{CACHE_DIR}/{KEY.digest()}")
    assert (moved / MARKER).stat().st_ino == inode  # renamed, not copied
    (part,) = trash.glob(f"*/{CACHE_DIR}/{KEY.digest()}.part-*")  # the failed build: moved, not deleted
    assert (part / "pyvenv.cfg").is_file()
    assert list(Path(place.root).iterdir()) == []
    for folder in (trash, *trash.iterdir()):
        assert folder.stat().st_mode & 0o777 == 0o700


def _cleanup_config(tmp_path: Path, local: Path) -> Path:
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "t"\naccess = "local"\nlocal_scratch = "{local}"\nscratch_user = "evaluser"\n')
    return cfg


def test_cleanup_venvs_moves_only_the_users_own_folders_to_trash(tmp_path):
    from tests.conftest import run_cli

    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    place = cache_place(ctx.config)
    look(ctx, ctx.nodes[0], place.user_folder, place.root, KEY.digest())
    root = Path(place.root)
    sentinel = tmp_path / "ran"
    for name in ("00000000000000a1", "00000000000000b2", "00000000000000c3"):
        plant_venv(root / name, name, sentinel)
    chown_tree(root / "00000000000000b2", OTHER_UID)
    (root / "00000000000000c3").chmod(0o777)
    other_user = local / "someoneelse" / CACHE_DIR / "00000000000000d4"  # another user's own cache
    plant_venv(other_user, "00000000000000d4", sentinel)
    res = run_cli("cleanup", "--venvs", "--config", str(_cleanup_config(tmp_path, local)), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert f"moved {root}/00000000000000a1" in out
    assert (f"left {root}/00000000000000b2 alone: {root}/00000000000000b2 is owned by uid {OTHER_UID}, not by the "
            "eval user (uid 0)") in out
    assert f"left {root}/00000000000000c3 alone: {root}/00000000000000c3 is writable by group or others (mode 777)" in out
    assert "someoneelse" not in out
    assert sorted(p.name for p in root.iterdir()) == ["00000000000000b2", "00000000000000c3"]
    (moved,) = (Path(place.user_folder) / "trash").glob(f"*/{CACHE_DIR}/00000000000000a1")
    assert (moved / MARKER).is_file()
    assert (other_user / MARKER).is_file() and not sentinel.exists()


def test_cleanup_venvs_touches_nothing_when_the_users_folder_is_not_theirs_alone(tmp_path):
    from tests.conftest import run_cli

    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    place = cache_place(ctx.config)
    look(ctx, ctx.nodes[0], place.user_folder, place.root, KEY.digest())
    plant_venv(Path(place.root) / "00000000000000a1", "00000000000000a1", tmp_path / "ran")
    Path(place.user_folder).chmod(0o777)
    res = run_cli("cleanup", "--venvs", "--config", str(_cleanup_config(tmp_path, local)), cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "is writable by group or others (mode 777)" in res.stdout
    assert (Path(place.root) / "00000000000000a1" / MARKER).is_file()
    assert not (Path(place.user_folder) / "trash").exists()


# ---- scratch: the run folder, its tools folder and the trash ---------------------------------


@pytest.mark.parametrize("how", ["run-folder-of-another-uid", "tools-folder-group-writable",
                                 "tools-folder-of-another-uid", "user-folder-group-writable"])
def test_a_recorded_run_folder_reused_must_still_be_the_users_alone(tmp_path, how):
    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    area = scratch_for(ctx).ensure(ctx.nodes[0], str(local))
    tools = Path(area.path) / TOOLS_FOLDER
    tools.mkdir()
    named = {"run-folder-of-another-uid": area.path, "tools-folder-group-writable": str(tools),
             "tools-folder-of-another-uid": str(tools), "user-folder-group-writable": str(local / "evaluser")}[how]
    if how == "run-folder-of-another-uid":
        os.chown(area.path, OTHER_UID, OTHER_UID)
    elif how == "tools-folder-group-writable":
        tools.chmod(0o775)
    elif how == "tools-folder-of-another-uid":
        os.chown(tools, OTHER_UID, OTHER_UID)
    else:
        (local / "evaluser").chmod(0o775)
    ctx.scratch = None  # a resumed run: a new process reads the recorded folder
    with pytest.raises(ScratchError) as exc:
        scratch_for(ctx).ensure(ctx.nodes[0], str(local))
    assert f"refusing to reuse the scratch folder {area.path}: {named} " in exc.value.message
    assert "chmod go-w" in exc.value.hint


def test_a_recorded_run_folder_reused_as_it_was_is_used(tmp_path):
    local = tmp_path / "local"
    ctx = make_ctx(tmp_path, local=local)
    area = scratch_for(ctx).ensure(ctx.nodes[0], str(local))
    (Path(area.path) / TOOLS_FOLDER).mkdir(mode=0o755)
    ctx.scratch = None
    assert scratch_for(ctx).ensure(ctx.nodes[0], str(local)).path == area.path


@pytest.mark.parametrize("how", ["trash-of-another-uid", "stamp-folder-group-writable", "trash-a-symlink"])
def test_nothing_is_moved_into_a_trash_someone_else_can_write(tmp_path, how):
    local = Path("/var/tmp") / f"clustereval-test-{os.getpid()}-{how}"  # off /tmp: cleared by a move
    try:
        ctx = make_ctx(tmp_path, local=local)
        area = scratch_for(ctx).ensure(ctx.nodes[0], str(local))
        (Path(area.path) / "result.bin").write_bytes(b"x" * 4096)
        trash = local / "evaluser" / "trash"
        stamp = trash / os.path.basename(area.path).removeprefix("cluster-eval-")
        theirs = local / "someoneelse" / "trash"
        if how == "trash-a-symlink":  # inside the declared mount, on the same filesystem: only the rule stops it
            theirs.mkdir(parents=True)
            trash.symlink_to(theirs)
        else:
            stamp.mkdir(parents=True)
            if how == "trash-of-another-uid":
                os.chown(trash, OTHER_UID, OTHER_UID)
            else:
                stamp.chmod(0o777)
        (move,) = scratch_for(ctx).cleanup(ctx.nodes)
        assert move.action in ("failed", "refused"), move
        assert (Path(area.path) / "result.bin").stat().st_size == 4096  # left where it was
        assert ("symbolic link" in move.error) if how == "trash-a-symlink" else (
            ("owned by uid 65534" in move.error) if how == "trash-of-another-uid" else "mode 777" in move.error)
        assert not theirs.exists() or list(theirs.iterdir()) == []
    finally:
        subprocess.run(["rm", "-rf", "--", str(local)], check=False)


def test_a_resumed_run_checks_its_recorded_venv_before_running_it(tmp_path):
    """A resumed run reuses the interpreter its record names: when that venv is no longer the user's
    alone it is not run (the run finds or builds one again); while it still is, it is used."""
    from clustereval.phases.evalpython import EvalPythonPhase

    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    place = cache_place(ctx.config)
    look(ctx, ctx.nodes[0], place.user_folder, place.root, KEY.digest())
    venv = Path(place.root) / KEY.digest()
    sentinel = tmp_path / "recorded-interpreter-ran"
    plant_venv(venv, KEY.digest(), sentinel)
    python = str(venv / "bin" / "python")
    assert EvalPythonPhase()._still_there(ctx, python) and sentinel.exists()  # ours: run, and torch imports
    sentinel.unlink()
    chown_tree(venv, OTHER_UID)
    assert not EvalPythonPhase()._still_there(ctx, python) and not sentinel.exists()


def test_the_cache_never_creates_its_mount(tmp_path):
    """A shared path that is not mounted on the node must not become a folder on its own disk."""
    missing = tmp_path / "shared-not-mounted"
    ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(missing,))
    place = cache_place(ctx.config)
    assert place.shared and place.mount == str(missing)
    with pytest.raises(VenvBuildError) as exc:
        look(ctx, ctx.nodes[0], place.user_folder, place.root, KEY.digest(), mount=place.mount)
    assert f"{missing} does not exist on this node" in exc.value.message
    assert not missing.exists()
