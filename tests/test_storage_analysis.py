"""Grouping before and after the scan, and judging against operator targets (hand-built records)."""

import pytest

from clustereval.analysis.storage import (
    Candidate,
    equivalent,
    group_by_measurement,
    judge,
    plan_scans,
    relative_difference,
    target_for,
)
from clustereval.config import StorageTarget
from clustereval.records.storage import FILE_SIZES, FioCell, MountScan
from clustereval.report.units import iec_df


def scan(mount, bw=100.0, scale=None, shared=True, size=2**40, **kw):
    """Six cells; ``scale`` maps a cell key to a factor on bw and IOPS."""
    cells = []
    for _, fsize, _ in FILE_SIZES:
        for rw in ("read", "write"):
            f = (scale or {}).get((fsize, rw), 1.0)
            cells.append(FioCell(fsize, rw, latency_msec=1.0, bw_mib_s=bw * f, iops=bw * f * 256))
    return MountScan(mount=mount, size_bytes=size, fstype="lustre", shared=shared, cells=cells, complete=True, **kw)


def test_size_labels_follow_df_precision():
    assert iec_df(270553174016) == "252 GiB"
    assert iec_df(int(2.3 * 2**40)) == "2.3 TiB"
    assert iec_df(28 * 2**40) == "28 TiB"
    assert iec_df(512) == "512 B"


def test_plan_one_scan_per_type_and_size():
    c = [Candidate("/code", "lustre", int(2.3 * 2**40), "a@tcp:/x"),
         Candidate("/home", "lustre", int(2.3 * 2**40) + 10 * 2**20, "b@tcp:/y"),  # same size as df -h shows it
         Candidate("/data", "lustre", 25 * 2**40, "c@tcp:/z"),
         Candidate("/code/alias", "lustre", int(2.3 * 2**40), "a@tcp:/x"),
         Candidate("/nfs", "nfs4", int(2.3 * 2**40), "srv:/e")]
    plans = plan_scans(c)
    assert [p.scan.path for p in plans] == ["/code", "/data", "/nfs"]
    assert plans[0].stands_for == ["/home"] and plans[0].same_volume == ["/code/alias"]
    assert plans[1].stands_for == [] and plans[2].stands_for == []


def test_relative_difference_is_symmetric():
    assert relative_difference(100, 105) == relative_difference(105, 100) == pytest.approx(0.05)
    assert relative_difference(0, 0) == 0 and relative_difference(0, 1) == float("inf")


def test_five_percent_rule_on_every_bw_and_iops_cell():
    a = scan("/a")
    assert equivalent(a, scan("/b", bw=105.0))  # exactly 5%: still one table
    assert not equivalent(a, scan("/c", bw=105.1))
    one_cell = scan("/d", scale={(2**30, "write"): 1.06})
    assert not equivalent(a, one_cell) and not equivalent(one_cell, a)
    missing = scan("/e")
    missing.cells = missing.cells[:-1]
    assert not equivalent(a, missing)


def test_groups_need_every_member_equivalent():
    a, b, c = scan("/a", bw=100.0), scan("/b", bw=104.0), scan("/c", bw=108.0)  # a~b, b~c, a!~c
    groups = group_by_measurement([a, b, c])
    assert [[s.mount for s in g] for g in groups] == [["/a", "/b"], ["/c"]]
    assert len(group_by_measurement([scan("/x"), scan("/y", bw=200.0)])) == 2


def test_targets_match_the_scanned_mount_or_its_volume():
    s = scan("/tmp", shared=False, volume_mount="/")
    targets = [StorageTarget("/code"), StorageTarget("/")]
    assert target_for(targets, s).mount == "/"
    assert target_for([StorageTarget("/code/")], scan("/code")).mount == "/code/"
    assert target_for([StorageTarget("/data")], scan("/code", stands_for=["/data"])) is None


def test_judge_with_and_without_targets():
    s = scan("/code")
    assert judge(s, None).verdict == "needs_input"
    assert judge(s, StorageTarget("/code")).verdict == "needs_input"  # no figure for any cell
    ok = judge(s, StorageTarget("/code", bw_mib_s={"16KiB-read": 104.0, "1GiB-write": 50.0}))
    assert ok.verdict == "healthy" and ok.unjudged == ["16KiB-write", "1MiB-read", "1MiB-write", "1GiB-read"]
    bad = judge(s, StorageTarget("/code", bw_mib_s={"16KiB-read": 106.0}, iops={"1GiB-write": 25600.0}))
    assert bad.verdict == "underperforming"
    assert [c.key for c in bad.short] == ["16KiB-read"]
    assert bad.short[0].shortfall == pytest.approx(6 / 106)
