"""`clustereval debug fs` with real fio on temp folders and a real, nearly full tmpfs."""

from __future__ import annotations

import tarfile

import pytest

from clustereval.analysis.fs_debug import report_lines
from clustereval.config import Config
from clustereval.debug.fs import debug_fs
from clustereval.report.gaps import say
from tests.conftest import run_cli
from tests.storagehelpers import SMALL_SIZES, files_outside_trash, needs_fio, tmpfs


def _config(tmp_path, local) -> Config:
    return Config(name="t", nodes=("here",), local_scratch=str(local), scratch_user="evaluser",
                  reports_dir=str(tmp_path / "reports"))


@pytest.mark.slow
@needs_fio
def test_quick_scan_layout_verdict_and_evidence(tmp_path):
    # the mount is its own filesystem (a tmpfs), so the local disk under tmp_path is a different one
    local = tmp_path / "local"
    local.mkdir()
    with tmpfs(tmp_path / "shared", size="400m") as shared:
        _quick_scan_layout_verdict_and_evidence(tmp_path, local, shared)


def _quick_scan_layout_verdict_and_evidence(tmp_path, local, shared):
    (shared / "dataset.bin").write_bytes(b"d" * 1024)
    rec, store = debug_fs(_config(tmp_path, local), str(shared), runtime_s=1, sample_s=0.3, file_sizes=SMALL_SIZES,
                          ramp_s=0)
    assert rec.local_note.startswith(f"the local side is local_scratch {local} (")
    assert rec.gaps == [], rec.gaps
    assert rec.shared is not None and rec.shared.complete and rec.local is not None and rec.local.complete
    assert all(c.bw_mib_s > 0 for c in rec.shared.cells + rec.local.cells)
    assert rec.path == str(shared) and rec.mount == str(shared) and rec.fstype == "tmpfs"
    assert rec.verdict == "undecided"  # no operator figures in the config
    lines = report_lines(rec)
    text = "\n".join(lines)
    assert f"`fio` on {shared}, one client, 16 jobs: read / write: 16 KiB " in text
    assert "is this many times slower than the local disk" in text
    assert "verdict: undecided until the operator's expected figures" in text
    assert "async_save" in text and "pin_memory=True" in text
    assert any("host iowait" in ln for ln in lines)
    # scratch went to trash on both folders; the user's file is untouched
    assert files_outside_trash(local, shared) == [str(shared / "dataset.bin")]
    assert (shared / "dataset.bin").read_bytes() == b"d" * 1024
    # the shared folder's scratch moved to its trash; the local one (under /tmp here) deleted
    assert rec.cleanup and all(c.startswith(("moved ", "deleted ")) for c in rec.cleanup)
    assert any(c.startswith(f"moved {shared}/evaluser/cluster-eval-") for c in rec.cleanup)
    with tarfile.open(rec.evidence) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"README.txt", "snapshot.txt", "dmesg-xid.txt"} <= names
    assert any(n.startswith("fio-") and n.endswith(".json") for n in names)
    assert (store.raw_dir / "debug-fs.record.json").exists()


@needs_fio
def test_targets_in_the_config_decide_the_verdict(tmp_path):
    from clustereval.config import StorageTarget, Targets

    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    # figures no temp folder can reach: the scan is far below them
    targets = Targets(storage=(StorageTarget(mount=str(shared), bw_mib_s={"256KiB-read": 1e9, "256KiB-write": 1e9}),))
    cfg = Config(name="t", nodes=("here",), local_scratch=str(local), scratch_user="evaluser",
                 reports_dir=str(tmp_path / "reports"), targets=targets)
    rec, _ = debug_fs(cfg, str(shared), runtime_s=1, sample_s=0.3, file_sizes=(256 * 2**10,), ramp_s=0)
    assert rec.verdict == "saturated"
    assert any(f.startswith("against the operator's figures: 256 KiB read 0%") for f in rec.facts)


@needs_fio
def test_a_nearly_full_mount_points_at_capacity(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    with tmpfs(tmp_path / "full", size="8m") as full:
        (full / "blob").write_bytes(b"x" * (int(7.7 * 2**20)))
        rec, _ = debug_fs(_config(tmp_path, local), str(full), runtime_s=1, sample_s=0.3, file_sizes=(2**20,),
                          ramp_s=0)
        assert rec.mount == str(full) and rec.fstype == "tmpfs"
        assert rec.verdict == "saturated"
        full_lines = [s for s in rec.storage_signals if s.concern and s.key == "storage.shared"]
        assert full_lines and "% full" in full_lines[0].text
        # the scan refused to start for lack of room, and said so
        assert any("did not run" in say(g).text for g in rec.gaps)
        assert any(g.kind == "debugfs.scan-refused" for g in rec.gaps)
        assert sorted(p.name for p in full.iterdir()) == ["blob"]


def test_a_path_that_is_not_there_is_a_usage_error(tmp_path):
    proc = run_cli("debug", "fs", str(tmp_path / "nope"), "--reports-dir", str(tmp_path / "r"),
                   "--sample-seconds", "0.2", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'nope'} is not readable on" in " ".join(proc.stderr.split())


def test_a_file_is_refused_before_any_snapshot_or_scan(tmp_path):
    afile = tmp_path / "hostname"
    afile.write_text("vm\n")
    proc = run_cli("debug", "fs", str(afile), "--reports-dir", str(tmp_path / "r"), "--sample-seconds", "0.2",
                   cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"error[not-a-directory]: {afile} on ") and lines[0].endswith(
        " is a file, not a directory; `debug fs` measures a folder of a mounted filesystem")
    assert lines[1] == f"  hint: give its folder or the mount point, e.g. clustereval debug fs {tmp_path}"
    assert "Traceback" not in proc.stderr
    assert not any((tmp_path / "r").glob("raw-*"))  # no run folder, no snapshot, no scan


@pytest.mark.slow
@needs_fio
def test_the_local_side_is_another_filesystem_and_the_eta_never_restarts(tmp_path):
    # local_scratch sits on the very tmpfs being measured: comparing it with itself says nothing
    with tmpfs(tmp_path / "fs", size="400m") as fs:
        (fs / "local").mkdir()
        (fs / "shared").mkdir()
        seen: list[tuple[str, float | None]] = []
        rec, _ = debug_fs(_config(tmp_path, fs / "local"), str(fs / "shared"), runtime_s=1, sample_s=0.3,
                          file_sizes=SMALL_SIZES, ramp_s=0, progress=lambda p, n, msg, eta: seen.append((msg, eta)))
        assert rec.local is not None and rec.local.complete, rec.gaps
        assert rec.local.mount in ("/tmp", "/var/tmp") and rec.local.volume_mount != str(fs)
        assert rec.local_note.startswith(f"local_scratch {fs / 'local'} is on the same filesystem as {fs / 'shared'} "
                                         f"(tmpfs on tmpfs), so the local side is {rec.local.mount} (")
        assert any(f.startswith(f"`fio` on the local disk {rec.local.mount} (") for f in rec.facts)
        assert files_outside_trash(fs) == []
    runs = [(msg, eta) for msg, eta in seen if msg.startswith("fio ") and "(run " in msg]
    assert [m.rsplit("(run ", 1)[1] for m, _ in runs] == [f"{i} of 12)" for i in range(1, 13)]
    first_shared = next(i for i, (m, _) in enumerate(runs) if f"on {fs / 'shared'} " in m)
    assert first_shared == 6
    # one estimate for both scans: the mount's first run has less time left than the very first run had
    assert runs[0][1] is not None and max(eta or 0 for _, eta in runs[first_shared:]) < runs[0][1]


def test_advice_is_for_the_filesystem_measured(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    with tmpfs(tmp_path / "ram", size="400m") as ram:
        rec, _ = debug_fs(_config(tmp_path, local), str(ram), runtime_s=1, sample_s=0.3, file_sizes=(16 * 2**10,),
                          ramp_s=0)
    text = "\n".join(report_lines(rec))
    assert rec.fstype == "tmpfs"
    assert "a RAM filesystem (tmpfs)" in text
    assert "lfs setstripe" not in text and "OST" not in text and "Lustre" not in text
