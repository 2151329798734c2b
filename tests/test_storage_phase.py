"""The storage phase with real fio on temp folders (1 s runs, files scaled down)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustereval.phases.scratch import CLEANUP_FILE, scratch_for
from clustereval.phases.storage import StoragePhase
from clustereval.records import dumps, loads
from clustereval.records.storage import StorageRecord
from clustereval.report.gaps import say
from clustereval.report.render import RunView, render_report
from tests.conftest import REPO
from tests.storagehelpers import (
    SMALL_SIZES,
    du_bytes,
    files_outside_trash,
    make_ctx,
    needs_fio,
    processes_naming,
    small_storage,
    tmpfs,
)


@pytest.mark.slow
@needs_fio
def test_six_run_scan_of_local_and_shared_leaves_nothing_outside_trash(tmp_path):
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    ctx = make_ctx(tmp_path, local=local, shared=(shared,))
    notes = []
    ctx.progress = lambda phase, node, msg, eta: notes.append((msg, eta))
    rec = StoragePhase(small_storage(file_sizes=SMALL_SIZES)).run(ctx)
    assert rec.gaps == [] and rec.status == "ok", rec.gaps
    assert rec.fio_version.startswith("fio-")
    for scan in (rec.local, *rec.shared):
        assert scan.complete and len(scan.cells) == 6
        assert [(c.file_size_bytes, c.rw) for c in scan.cells] == [(s, rw) for s in SMALL_SIZES
                                                                   for rw in ("read", "write")]
        for cell in scan.cells:
            assert cell.bw_mib_s > 0 and cell.iops > 0 and cell.latency_msec > 0 and not cell.error
            # IOPS and bandwidth describe the same 4 KiB requests
            assert cell.iops * 4096 / 2**20 == pytest.approx(cell.bw_mib_s, rel=0.02)
            doc = json.loads((ctx.store.raw_dir / cell.raw_json).read_text())
            assert doc["global options"]["unlink"] == "1" and doc["jobs"][0]["job options"]["rw"] == cell.rw
        assert scan.leftover_bytes_after_first_run == 0  # fio's --unlink=1 left nothing after run 1
    assert rec.local.mount == str(local) and rec.shared[0].mount == str(shared)
    assert rec.partitions[0].mount == "/" and (ctx.store.raw_dir / "tools" / "storage.py").exists()
    # progress named each run and the time left shrank to the last run's
    runs = [m for m, _ in notes if m.startswith("fio ")]
    assert len(runs) == 12 and runs[0].endswith("(run 1 of 12)") and notes[-1][1] == pytest.approx(1.0)
    moves = scratch_for(ctx).cleanup(ctx.nodes)
    assert {m.action for m in moves} <= {"moved", "deleted"}
    assert files_outside_trash(local, shared) == []
    assert not any(p.name.startswith("cluster-eval-") for p in (shared / "evaluser").iterdir())
    assert json.loads((ctx.store.raw_dir / CLEANUP_FILE).read_text())
    # the record round-trips and renders
    back = loads(StorageRecord, dumps(rec))
    md = render_report(RunView("t", "s", "raw-t", "local", {"storage": back})).markdown
    assert "### Local disk IO benchmark" in md and "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |" in md


def test_missing_fio_is_a_gap_naming_the_package(tmp_path):
    ctx = make_ctx(tmp_path, local=tmp_path)
    rec = StoragePhase(small_storage(fio=str(tmp_path / "no-such-fio"))).run(ctx)
    (gap,) = rec.gaps
    assert gap.kind == "storage.fio-missing" and not gap.text  # the record holds facts; the report words them
    gap = say(gap)
    assert "[`fio`](https://github.com/axboe/fio) is not installed" in gap.text and "apt-get install -y fio" in gap.plan
    # nothing failed: the scans did not run for want of fio (the eval is incomplete, not broken)
    assert rec.local is None and rec.partitions and rec.status == "not-run"
    assert scratch_for(ctx).areas() == []


@needs_fio
def test_full_filesystem_gives_a_clear_error_and_leaves_nothing(tmp_path):
    small = tmp_path / "small"
    (tmp_path / "local").mkdir()
    with tmpfs(small, size="4m"):
        ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(small,))
        phase = StoragePhase(small_storage(file_sizes=(16 * 2**10,)))  # 16 x 16 KiB + the margin > 4 MiB
        rec = phase.run(ctx)
        assert [s.mount for s in rec.shared] == [str(small)] and rec.shared[0].cells == []
        (gap,) = rec.gaps
        assert gap.kind == "storage.scan-refused"
        gap = say(gap)
        assert f"The IO benchmark of `{small}` did not run" in gap.text and "nothing was written" in gap.text
        assert os.listdir(small) == []
        assert rec.local.complete  # the local scan still ran
        scratch_for(ctx).cleanup(ctx.nodes)


@needs_fio
def test_read_only_mount_gives_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    (tmp_path / "local").mkdir()
    with tmpfs(ro, size="1g", readonly=True):
        ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(ro,))
        rec = StoragePhase(small_storage(file_sizes=(16 * 2**10,))).run(ctx)
        (gap,) = rec.gaps
        assert gap.kind == "storage.scan-refused"
        gap = say(gap)
        assert "Read-only file system" in gap.text and "read-only" in gap.plan
        scratch_for(ctx).cleanup(ctx.nodes)


@needs_fio
def test_two_shared_mounts_of_different_size_each_get_a_scan_with_same_sized_ones_grouped(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    (tmp_path / "local").mkdir()
    with tmpfs(a, size="64m"), tmpfs(b, size="64m"), tmpfs(c, size="96m"):
        ctx = make_ctx(tmp_path, local=tmp_path / "local", shared=(a, b, c))
        rec = StoragePhase(small_storage(file_sizes=(16 * 2**10,))).run(ctx)
        assert [s.mount for s in rec.shared] == [str(a), str(c)]
        assert rec.shared[0].stands_for == [str(b)] and rec.shared[0].fstype == "tmpfs"
        scratch_for(ctx).cleanup(ctx.nodes)
        assert files_outside_trash(a, b, c) == []


def write_config(tmp_path, **extra) -> str:
    """A cluster.toml for this machine alone, its scratch under ``tmp_path``."""
    host = socket.gethostname().split(".")[0] or "localhost"
    lines = ['name = "t"', 'access = "local"', f'nodes = ["{host}"]', f'local_scratch = "{tmp_path / "local"}"',
             f'shared_paths = ["{tmp_path / "shared"}"]', 'scratch_user = "evaluser"',
             f'eval_python = "{sys.executable}"', "install_packages = false", "gpus_per_node = 0",
             f'reports_dir = "{tmp_path / "reports"}"']
    lines += [f"{k} = {v}" for k, v in extra.items()]
    path = tmp_path / "cluster.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def start_storage_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """``clustereval run --phases storage --profile quick`` on a local and a shared folder under
    ``tmp_path``, as a user starts it; the process and the folder its scratch goes to."""
    (tmp_path / "local").mkdir()
    (tmp_path / "shared").mkdir()
    config = write_config(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", config, "--phases", "storage",
                             "--profile", "quick"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, tmp_path / "local" / "evaluser"


@pytest.mark.slow
@needs_fio
def test_ctrl_c_mid_scan_still_moves_everything_to_trash(tmp_path):
    proc, users = start_storage_run(tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if users.exists() and any((p / "fio-test").exists() for p in users.glob("cluster-eval-*")):
            break
    else:
        proc.kill()
        pytest.fail("the scan never started: " + proc.communicate()[1][-2000:])
    time.sleep(1.0)  # fio is in its first 10 s run
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: resume with" in out and "scratch: deleted" in out
    raw = next((tmp_path / "reports").glob("raw-t-*"))
    rec = loads(StorageRecord, (raw / "storage.record.json").read_text())
    assert rec.status == "partial" and rec.local.cells[-1].error == "interrupted"
    assert files_outside_trash(tmp_path / "local", tmp_path / "shared") == []
    assert du_bytes(tmp_path / "local") < 64 * 1024  # only the empty <user> folder is left
    state = json.loads((raw / "state.json").read_text())
    assert state["interrupted"] and "storage" not in state["phases_finished"]


def test_targets_added_after_the_run_move_the_bullets_on_re_render(tmp_path):
    """`clustereval report RUN_DIR` reads the targets from the cluster.toml as it is now."""
    from tests.conftest import run_cli
    from tests.test_storage_report import two_groups

    (tmp_path / "local").mkdir()
    (tmp_path / "shared").mkdir()
    config = write_config(tmp_path)
    res = run_cli("run", "--config", config, "--phases", "preflight", cwd=tmp_path)  # a real run folder
    raw = next((tmp_path / "reports").glob("raw-t-*"))
    assert res.returncode == 0, res.stderr[-2000:]
    # Lustre measurements as a scan stores them (no Lustre here, and each real run takes 3 min)
    (raw / "storage.record.json").write_text(dumps(two_groups()))
    report = raw.parent / (raw.name[4:] + ".md")
    assert run_cli("report", str(raw), cwd=tmp_path).returncode == 0
    before = report.read_text()
    assert "### Healthy subsystems" not in before and "`/code` (2.3 TiB Lustre)" in before
    with open(config, "a") as fh:
        fh.write('\n[[targets.storage]]\nmount = "/code"\nsource = "tier 250"\n'
                 'bw_mib_s = { "16KiB-read" = 150, "16KiB-write" = 150, "1MiB-read" = 150, "1MiB-write" = 150, '
                 '"1GiB-read" = 150, "1GiB-write" = 150 }\n')
    res = run_cli("report", str(raw), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    after = report.read_text()
    healthy = after[after.index("### Healthy subsystems"):after.index("### Needs operator input")]
    assert "`/code` (2.3 TiB Lustre)" in healthy and "(tier 250)" in healthy
    assert "the previous rendering moved to" in res.stdout  # the old report went to trash, not deleted


@needs_fio
def test_concurrent_write_from_every_node_of_the_namespace_cluster(cluster3, tmp_path):
    """Over SSH on 3 namespace nodes: the scan runs on node0, every node writes at once, nothing is left."""
    from clustereval.phases.base import RunContext
    from clustereval.store import RunState, RunStore

    shared, local = cluster3.shared_dir, cluster3.scratch_dir
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="2026-11-30-1900Z"))
    from clustereval.config import Config

    cfg = Config(nodes=tuple(n.name for n in cluster3.nodes), access="ssh", local_scratch=str(local),
                 shared_paths=(str(shared),), scratch_user="evaluser")
    ctx = RunContext(config=cfg, transport=cluster3.transport(), nodes=cluster3.cluster_nodes(), store=store)
    rec = StoragePhase(small_storage(file_sizes=(16 * 2**10,), concurrent_bytes=16 * 2**20)).run(ctx)
    assert rec.gaps == [], rec.gaps
    assert rec.local.complete and rec.shared[0].complete and rec.local.node == cluster3.nodes[0].name
    cw = rec.concurrent
    assert [w.node for w in cw.nodes] == [n.name for n in cluster3.nodes]
    assert all(w.bytes_written == 16 * 2**20 and w.seconds > 0 and w.mib_s > 0 for w in cw.nodes)
    assert cw.aggregate_mib_s == pytest.approx(3 * 16 / max(w.seconds for w in cw.nodes))
    area = next(a for a in scratch_for(ctx).areas() if a.shared)
    assert sorted(os.listdir(os.path.join(area.path, "concurrent-write"))) == ["node0.bin", "node1.bin", "node2.bin"]
    moves = scratch_for(ctx).cleanup(ctx.nodes)
    shared_move = next(m for m in moves if m.path == area.path)
    assert shared_move.action == "moved" and shared_move.size_bytes >= 3 * 16 * 2**20
    assert files_outside_trash(local, shared) == []
    md = render_report(RunView("t", "s", "raw-t", "ssh", {"storage": rec})).markdown
    assert "### Concurrent write shared fs benchmark" in md and "3-node 16 MiB `O_DIRECT` `dd`" in md


@needs_fio
def test_a_local_scratch_on_tmpfs_is_not_taken_for_the_local_disk(tmp_path):
    ram = tmp_path / "ram"
    with tmpfs(ram, size="64m"):
        ctx = make_ctx(tmp_path, local=ram)
        rec = StoragePhase(small_storage(file_sizes=(16 * 2**10,))).run(ctx)
        (gap,) = rec.gaps
        assert gap.kind == "storage.local-in-memory" and gap.facts["fstype"] == "tmpfs"
        gap = say(gap)
        assert "is a tmpfs (memory, not a disk)" in gap.text and "local_scratch" in gap.plan
        assert rec.local is None and os.listdir(ram) == []



def _running_in(folder: Path) -> list[str]:
    """Command lines of the processes whose arguments name ``folder`` (this test's fio stand-in)."""
    return [cmdline for _, cmdline in processes_naming(folder)]


def test_a_stopped_run_leaves_no_job_behind_even_one_that_ignores_sigint(tmp_path):
    """fio forks a process per job, each in a session of its own; one that does not end on SIGINT (a
    job still setting up, stuck in its file layout) must not outlive the stop. A stand-in for fio whose
    parent and forked job (same command line, as fio's jobs have) both ignore SIGINT: the stop finds
    both by the run's folder and kills them after the grace."""
    import threading

    fake = tmp_path / "fio"
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1\" = --version ] && { echo fio-3.33; exit 0; }\n"
                    "trap '' INT\n"
                    "( while :; do sleep 0.2; done ) &\n"  # the forked job: a fork, the same command line
                    "while :; do sleep 0.2; done\n")
    fake.chmod(0o755)
    ctx = make_ctx(tmp_path, local=tmp_path / "local")
    phase = StoragePhase(small_storage(fio=str(fake), file_sizes=(16 * 2**10,), stop_grace_s=0.5))
    got = {}
    runner = threading.Thread(target=lambda: got.setdefault("rec", phase.run(ctx)), daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len([c for c in _running_in(tmp_path / "local") if "fio" in c]) < 2:
        time.sleep(0.1)
    assert len(_running_in(tmp_path / "local")) >= 2, "the run never started"  # the parent and its job
    ctx.stop.set()  # the first Ctrl-C
    runner.join(60)
    assert not runner.is_alive()
    assert _running_in(tmp_path / "local") == []
    assert got["rec"].local.cells[-1].error == "interrupted"
    scratch_for(ctx).cleanup(ctx.nodes)
    assert files_outside_trash(tmp_path / "local") == []
