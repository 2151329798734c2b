"""benchmarks/storage_scan.py --smoke: our scan and plain fio side by side, on this machine, in seconds."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")]


def test_smoke_compares_our_scan_with_plain_fio(tmp_path):
    scan_root = tmp_path / "disk"
    scan_root.mkdir()
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "storage_scan.py"), "--out", str(tmp_path / "out"),
                          "--path", str(scan_root), "--smoke"], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    data = json.loads((tmp_path / "out" / "storage-scan.json").read_text())
    assert len(data["rows"]) == 6 and data["scan_wall_s"] > 0 and data["plain_wall_s"] > 0
    for row in data["rows"]:
        assert row["ours_bw_mib_s"] > 0 and row["plain_bw_mib_s"] > 0
    # Same parameters, same disk: the options fio itself reports for each of our six runs are those of the plain
    # run beside it (bandwidths are not compared: 1 s runs on a busy 2-core machine differ by 5x either way).
    ours_raw = {p.name.removeprefix("fio-local-"): json.loads(p.read_text())
                for p in (tmp_path / "out" / "reports").glob("raw-*/storage/fio-local-*.json")}
    assert len(ours_raw) == 6
    for name, ours in ours_raw.items():
        plain = json.loads((tmp_path / "out" / f"plain-fio-{name}").read_text())
        ours_dir, plain_dir = ours["global options"].pop("directory"), plain["global options"].pop("directory")
        assert ours_dir.startswith(str(scan_root)) and plain_dir.startswith(str(scan_root)), (ours_dir, plain_dir)
        assert ours["global options"] == plain["global options"], name
        assert [j["job options"] for j in ours["jobs"]] == [j["job options"] for j in plain["jobs"]], name
    assert "| size | rw | ours bw (MiBps) | plain bw (MiBps) |" in (tmp_path / "out" / "storage-scan.md").read_text()
    assert sorted(p.name for p in (tmp_path / "out").glob("plain-fio-*.json"))[0] == "plain-fio-16k-read.json"
    # nothing left on the scanned disk but the empty <user> folder
    left = [os.path.join(d, f) for d, _, files in os.walk(scan_root) for f in files]
    assert left == [] and {m["action"] for m in data["scratch"]} <= {"deleted", "moved"}
