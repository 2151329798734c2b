"""The controller's own disk fails: reports/ on a full or a read-only tmpfs. A full one ends the run with
a clear message and exit 1, the nodes' scratch cleared all the same; a read-only one is refused before
anything starts (exit 2)."""

import pytest

from tests.conftest import run_cli
from tests.storagehelpers import tmpfs


def _cfg(tmp_path, scratch, reports):
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{scratch}"\ninstall_packages = false\n'
                   f'reports_dir = "{reports}"\n')
    return cfg


def _left(scratch):
    return [str(p) for p in scratch.rglob("*") if "trash" not in p.relative_to(scratch).parts
            and p.name.startswith("cluster-eval-")]


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_reports_on_a_full_or_read_only_disk(tmp_path, fault):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reports = tmp_path / "reports"
    with tmpfs(reports, size="96k", readonly=fault == "read-only"):
        res = run_cli("run", "--config", str(_cfg(tmp_path, scratch, reports)), "--profile", "smoke",
                      "--phases", "environment", cwd=tmp_path, timeout=600)
    out = res.stdout + res.stderr
    assert "Traceback" not in out
    assert "reports_dir" in out  # the message names the setting that moves it
    assert _left(scratch) == []
    if fault == "read-only":  # known before anything starts: bad input, nothing slow ran
        assert res.returncode == 2, out[-3000:]
        assert "error[cannot-write]" in out and str(reports) in out
        return
    assert res.returncode == 1, out[-3000:]
    assert "error[save-failed]: could not save" in out and "No space left on device" in out
    assert "scratch: deleted" in out or "scratch: moved" in out  # the summary was printed, not lost
