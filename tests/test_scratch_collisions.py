"""Two runs started in the same minute never share a run folder, a report stamp or a scratch folder."""

import os
import re
import subprocess
import sys
import threading

import pytest

from clustereval.phases.scratch import scratch_for
from clustereval.store import RunStore
from tests.conftest import REPO, only_leftovers
from tests.storagehelpers import files_outside_trash, make_ctx


def test_concurrent_stores_in_one_reports_folder_get_their_own_stamp(tmp_path):
    made: list[RunStore] = []
    barrier = threading.Barrier(6)

    def one():
        barrier.wait()
        made.append(RunStore.create(tmp_path / "reports", "t"))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.raw_dir for s in made}) == 6 and len({s.report_path for s in made}) == 6


def test_same_run_name_from_two_reports_folders_gets_two_scratch_folders(tmp_path):
    mount = tmp_path / "scratch"
    a = make_ctx(tmp_path / "a", local=mount)
    b = make_ctx(tmp_path / "b", local=mount)
    if a.store.run_id != b.store.run_id:  # the minute turned between the two: nothing to collide
        b = make_ctx(tmp_path / "c", local=mount)
    assert a.store.run_id == b.store.run_id
    area_a = scratch_for(a).ensure(a.nodes[0], str(mount))
    area_b = scratch_for(b).ensure(b.nodes[0], str(mount))
    assert area_a.path != area_b.path
    assert os.path.basename(area_b.path).startswith(os.path.basename(area_a.path) + "-")
    open(os.path.join(area_a.path, "a.bin"), "wb").write(b"a" * 4096)
    open(os.path.join(area_b.path, "b.bin"), "wb").write(b"b" * 4096)
    # b's cleanup of a planted copy of a's entry is refused: a's marker names another run
    (refused,) = scratch_for(b).cleanup(b.nodes, [area_a])
    assert refused.action == "refused" and "another run" in refused.error
    assert os.path.getsize(os.path.join(area_a.path, "a.bin")) == 4096
    (mb,) = scratch_for(b).cleanup(b.nodes)
    (ma,) = scratch_for(a).cleanup(a.nodes)
    assert {ma.action, mb.action} == {"moved"} or {ma.action, mb.action} == {"deleted"}
    assert files_outside_trash(mount) == []
    # a resumed run (a fresh Scratch on the same raw folder) keeps the name it chose
    b.scratch = None
    assert scratch_for(b).path_for(str(mount)) == area_b.path


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_concurrent_runs_by_one_user_on_one_mount(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\ninstall_packages = false\n')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "clustereval", "run", "--config", str(cfg), "--profile", "smoke",
            "--phases", "storage"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        # the shared scan of this one-node run is a leftover Gap (no shared path named): 1, and nothing failed
        assert only_leftovers(subprocess.CompletedProcess(p.args, p.returncode, out, "")), out[-3000:]
    folders = [re.search(r"run folder: (\S+)", out).group(1) for out in outs]
    assert folders[0] != folders[1]
    reports = sorted((tmp_path / "reports").glob("*.md"))
    assert len(reports) == 2
    for report in reports:
        assert "0 ranks" not in report.read_text()
    moved = [re.findall(r"scratch: (?:moved|deleted) (\S+)", out) for out in outs]
    assert moved[0] and moved[1] and not set(moved[0]) & set(moved[1]), [o[-2500:] for o in outs]
    assert files_outside_trash(scratch) == []
