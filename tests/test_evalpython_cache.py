"""The eval venv over SSH: built on every node at once, a node that fails costs that node, the next
run finds the venv instead of building it, and ``cleanup --venvs`` moves only what it made to trash.

The venv is real: pip installs torch from the index pip on the nodes is configured with (the
PyTorch index is a closed port, so the chain's second step runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.evalpython import EvalPythonPhase
from clustereval.phases.venvcache import CACHE_DIR, MARKER, PART, cache_place, parse_cleanup
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from tests.conftest import run_cli


def node_wheels(folder) -> str:  # noqa: ANN001 - a Path
    """Why the nodes cannot get an eval venv from pip's configured index ('' when they can).

    The nodes have no route out: they install from pip's configured index on this machine (its
    find-links and file indexes, where torch lies) plus ``folder``, where the one extra package those
    lack (nvidia-ml-py) is downloaded first."""
    res = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", "--retries", "1", "--timeout",
                          "15", "--disable-pip-version-check"], capture_output=True, text=True, timeout=300)
    if "Available versions" not in res.stdout:
        return "pip's configured index has no torch here"
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder),
                          "nvidia-ml-py"], capture_output=True, text=True, timeout=300)
    return "" if got.returncode == 0 else f"nvidia-ml-py could not be downloaded: {got.stderr.strip()[-200:]}"


def find_links(folder) -> str:  # noqa: ANN001 - a Path
    here = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True,
                          text=True).stdout.strip()
    return " ".join(x for x in (here, str(folder)) if x)


def _ctx(cluster, tmp_path, name: str) -> RunContext:
    store = RunStore.create(tmp_path / name, "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", nodes=tuple(n.name for n in cluster.nodes), local_scratch=str(cluster.scratch_dir),
                    torch_index="http://127.0.0.1:9/whl")
    return RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store)


@pytest.mark.timeout(900)  # a real torch install, then two runs' checks: past the default 300 s on a busy machine
def test_each_node_builds_its_venv_a_lost_node_costs_itself_and_the_next_run_reuses_it(netns_cluster, tmp_path):
    why = node_wheels(tmp_path / "wheels")
    if why:
        pytest.skip(why)
    cluster = netns_cluster(2)
    cluster.set_node_env(PIP_FIND_LINKS=find_links(tmp_path / "wheels"))
    cluster.kill_sshd(1)  # node 1 refuses: its build fails, node 0's goes on
    ctx = _ctx(cluster, tmp_path, "first")
    first = EvalPythonPhase().run(ctx)
    assert (first.mode, first.source, first.status) == ("venv", "default-index", "partial"), first.tried
    assert first.venv_built == [cluster.nodes[0].name] and first.venv_reused == []
    assert first.torch and ctx.eval_python == first.interpreter
    place = cache_place(ctx.config)
    root, user = place.root, ctx.config.scratch_user
    assert not place.shared and first.interpreter.startswith(f"{cluster.scratch_dir}/{user}/{CACHE_DIR}/")
    (gap,) = [g for g in first.gaps if g.node]
    assert gap.node == cluster.nodes[1].name and gap.kind == "node.error"
    assert f"{cluster.nodes[1].name}(node1)" in say(gap).text
    assert list(ctx.node_failures["evalpython"]) == [cluster.nodes[1].name]
    # on node 0's own disk, complete and named by its key; no half-built folder beside it
    cache0, cache1 = (cluster.node_scratch_dir(i) / user / CACHE_DIR for i in (0, 1))
    on_disk = sorted(p.name for p in cache0.iterdir())
    digest = first.interpreter.split("/")[-3]
    assert on_disk == [digest] and json.loads((cache0 / digest / MARKER).read_text())["digest"] == digest
    assert not cache1.exists()
    assert oct(cache0.stat().st_mode & 0o777) == "0o700" and oct(cache0.parent.stat().st_mode & 0o777) == "0o700"

    second_ctx = _ctx(cluster, tmp_path, "second")
    second = EvalPythonPhase().run(second_ctx)
    assert second.venv_reused == [cluster.nodes[0].name] and second.venv_built == []
    assert second.interpreter == first.interpreter and second.torch == first.torch

    # cleanup --venvs: ours moves to trash, a folder it did not make stays, on every node; nothing is deleted
    cluster.start_sshd(1)
    stranger = cache0 / "0123456789abcdef"
    stranger.mkdir()
    (stranger / MARKER).write_text(json.dumps({"digest": "another"}))
    half = cache1 / f"0123456789abcdef{PART}n1-abc123"
    half.mkdir(parents=True)
    (half / "pyvenv.cfg").write_text("home = /usr/bin\n")
    config = cluster.write_config(shared_paths=[])
    res = run_cli("cleanup", "--venvs", "--config", str(config), cwd=cluster.workdir, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    stranger_seen = stranger.as_posix().replace(str(cluster.node_scratch_dir(0)), str(cluster.scratch_dir))
    assert f"moved {root}/{digest}" in res.stdout and f"left {stranger_seen} alone" in res.stdout
    assert sorted(p.name for p in cache0.iterdir()) == [stranger.name]
    assert list(cache1.iterdir()) == []
    for i, name in ((0, digest), (1, half.name)):
        (trashed,) = (cluster.node_scratch_dir(i) / user / "trash").glob(f"*/{CACHE_DIR}/{name}")
        assert trashed.is_dir()
    (moved,) = (cluster.node_scratch_dir(0) / user / "trash").glob(f"*/{CACHE_DIR}/{digest}")
    assert (moved / MARKER).is_file() and (moved / "bin").is_dir()  # moved whole, nothing deleted


def test_cleanup_keeps_every_folder_it_did_not_make(tmp_path):
    """The cleanup script on this machine: only marker-proven venvs and our half-built ones move to
    the user's trash, by rename; the rest stays where it was and nothing is deleted."""
    from clustereval.phases.venvcache import cleanup_argv

    user = tmp_path / "evaluser"
    root = user / CACHE_DIR
    ours = root / "00000000000000aa"
    ours.mkdir(parents=True)
    os.chmod(user, 0o700)
    (ours / MARKER).write_text(json.dumps({"digest": "00000000000000aa"}))
    (ours / "lib").mkdir()
    (ours / "lib" / "x.bin").write_bytes(b"x" * 1000)
    inode = (ours / "lib" / "x.bin").stat().st_ino
    for name, marker in (("00000000000000bb", {"digest": "00000000000000aa"}), ("00000000000000cc", None),
                         ("mine", {"digest": "mine"})):
        (root / name).mkdir()
        if marker is not None:
            (root / name / MARKER).write_text(json.dumps(marker))
    (root / f"00000000000000dd{PART}n0-1").mkdir()  # not a venv: kept
    (root / "file.txt").write_text("x")
    argv = cleanup_argv(str(user), str(root), "2026-12-07-1000Z")
    argv[0] = sys.executable
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    seen = {p.path.split("/")[-1]: p for p in parse_cleanup("here", res.stdout)}
    assert seen["00000000000000aa"].moved and seen["00000000000000aa"].size_bytes >= 1000
    trashed = user / "trash" / "2026-12-07-1000Z" / CACHE_DIR / "00000000000000aa"
    assert seen["00000000000000aa"].moved_to == str(trashed)
    assert (trashed / "lib" / "x.bin").stat().st_ino == inode  # renamed, not copied
    for folder in (user / "trash", user / "trash" / "2026-12-07-1000Z", trashed.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    kept = {n: p.why for n, p in seen.items() if not p.moved}
    assert kept == {"00000000000000bb": "its marker names another folder", "00000000000000cc": "no clustereval marker in it",
                    "mine": "not a folder clustereval made", f"00000000000000dd{PART}n0-1": "not a venv",
                    "file.txt": "not a folder clustereval made"}
    assert sorted(p.name for p in root.iterdir()) == sorted(kept)
    assert not any(p.failed for p in seen.values())
    shutil.rmtree(tmp_path / "evaluser")


@pytest.mark.timeout(900)  # a real torch install on a busy machine
def test_a_planted_shared_cache_is_refused_named_never_run_and_the_run_builds_its_own(netns_cluster, tmp_path):
    """On the bed, the cache on a shared path: a copy another uid planted at the very digest this run
    would reuse (marker, Python and torch all right: the cache before the ownership rule ran it) is
    refused and named, its interpreter never runs, the first node builds this run's own venv in the
    run folder and every node runs it; the same run again finds the copy group-writable, refuses it
    again and reuses its own; cleanup --venvs then moves only the user's own folder to trash."""
    from clustereval.phases.evalpython import (
        EXTRA_PACKAGES,
        PIP_DEFAULT,
        parse_available_versions,
        pick_default_index_version,
    )
    from clustereval.phases.scratch import scratch_for
    from clustereval.phases.venvcache import OWN_HOME, VenvKey, node_python
    from clustereval.report.lint import lint_text
    from tests.test_venv_cache_ownership import OTHER_UID, chown_tree, plant_venv
    from tests.test_wordings_generated import report_with

    if os.geteuid() != 0:
        pytest.skip("a folder of another uid needs chown (root)")
    why = node_wheels(tmp_path / "wheels")
    if why:
        pytest.skip(why)
    cluster = netns_cluster(2)
    cluster.set_node_env(PIP_FIND_LINKS=find_links(tmp_path / "wheels"))
    store = RunStore.create(tmp_path / "run", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", nodes=tuple(n.name for n in cluster.nodes), local_scratch=str(cluster.scratch_dir),
                    shared_paths=(str(cluster.shared_dir),), torch_index="http://127.0.0.1:9/whl")
    ctx = RunContext(config=config, transport=cluster.transport(), nodes=cluster.cluster_nodes(), store=store)
    place = cache_place(config)
    # the key the chain's second step asks for: pip's configured index, its newest CPU build
    first = ctx.nodes[0]
    listed = ctx.transport.run(first, ["python3", "-m", "pip", "index", "versions", "torch", *PIP_DEFAULT],
                               timeout_s=300).stdout
    base = node_python(ctx, first)
    key = VenvKey(index="pip's configured index",
                  torch_spec=(f"torch=={pick_default_index_version(parse_available_versions(listed), 'cpu')}",),
                  packages=EXTRA_PACKAGES, python=str(base["python"]), python_executable=str(base["executable"]))
    os.makedirs(place.root, mode=0o700)
    os.chmod(place.user_folder, 0o700)
    planted = Path(place.root) / key.digest()
    sentinel = tmp_path / "planted-interpreter-ran"
    plant_venv(planted, key.digest(), sentinel)
    chown_tree(planted, OTHER_UID)

    rec = EvalPythonPhase().run(ctx)
    assert (rec.mode, rec.source, rec.status) == ("venv", "default-index", "ok"), rec.tried
    assert not sentinel.exists()  # never run
    own = f"{scratch_for(ctx).path_for(place.mount)}/{OWN_HOME}/{key.digest()}/bin/python"
    assert rec.interpreter == own and ctx.eval_python == own and rec.venv_built == [first.name]
    assert set(rec.executables) == {n.name for n in ctx.nodes} and all(rec.executables.values())
    (gap,) = [g for g in rec.gaps if g.kind == "evalpython.cache-refused"]
    assert gap.node == first.name and gap.facts["what"] == "copy"
    assert gap.facts["problem"] == f"owned by uid {OTHER_UID}, not by the eval user (uid 0)"
    assert any(str(planted) in line and "refused, not run" in line for line in rec.tried)  # named in the raw record
    assert lint_text(report_with(gap)) == [] and str(planted) not in say(gap).text
    assert planted.stat().st_uid == OTHER_UID and sorted(p.name for p in planted.iterdir()) == ["bin", MARKER]

    chown_tree(planted, 0)
    planted.chmod(0o775)  # group-writable now: refused again, and this run's own venv is found
    again = EvalPythonPhase().run(ctx)
    assert again.venv_reused == [first.name] and again.interpreter == own and not sentinel.exists()
    (gap,) = [g for g in again.gaps if g.kind == "evalpython.cache-refused"]
    assert gap.facts["problem"] == "writable by group or others (mode 775)"

    mine = Path(place.root) / "00000000000000a1"
    plant_venv(mine, "00000000000000a1", sentinel)
    config_path = cluster.write_config(shared_paths=[str(cluster.shared_dir)])
    res = run_cli("cleanup", "--venvs", "--config", str(config_path), cwd=cluster.workdir, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"moved {mine}" in res.stdout and f"left {planted} alone: {planted} is writable by group" in res.stdout
    assert sorted(p.name for p in Path(place.root).iterdir()) == [planted.name]
    (trashed,) = (Path(place.user_folder) / "trash").glob(f"*/{CACHE_DIR}/{mine.name}")
    assert (trashed / MARKER).is_file() and not sentinel.exists()

