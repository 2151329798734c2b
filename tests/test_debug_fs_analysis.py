"""The slow-filesystem diagnosis on hand-built scans: capacity saturated vs I/O pattern."""

from __future__ import annotations

from clustereval.analysis.fs_debug import diagnose, sweep_text
from clustereval.debug.fs import pick_local
from clustereval.probes.mounts import Mount
from clustereval.records.snapshot import Signal
from clustereval.records.storage import FioCell, Layout

KIB16, MIB, GIB = 16 * 2**10, 2**20, 2**30


def cells(bw: dict[int, tuple[float, float]]) -> list[FioCell]:
    out = []
    for size, (r, w) in bw.items():
        out += [FioCell(file_size_bytes=size, rw="read", bw_mib_s=r),
                FioCell(file_size_bytes=size, rw="write", bw_mib_s=w)]
    return out


# the 2x H200 local disk (fixtures/h200x2/fio) and a slow shared mount
LOCAL = cells({KIB16: (1095.4, 1626.3), MIB: (996.4, 1565.9), GIB: (1014.9, 1402.0)})
SHARED = cells({KIB16: (20.5, 15.0), MIB: (180.0, 150.0), GIB: (400.0, 350.0)})


def test_without_targets_the_verdict_waits_for_the_operator():
    verdict, facts, guide = diagnose("/fsx", SHARED, LOCAL, Layout(tool="lfs", stripe_count=1, num_targets=8,
                                                                       summary="default stripe count 1, stripe size "
                                                                               "1 MiB (`lfs getstripe -d`); 8 OSTs"), [])
    assert verdict == "undecided"
    text = "\n".join(facts)
    assert "read / write: 16 KiB 20.5 MiB/s / 15.0 MiB/s, 1 MiB 180.0 MiB/s / 150.0 MiB/s, " \
           "1 GiB 400.0 MiB/s / 350.0 MiB/s" in text
    assert "16 KiB read 53.4×" in text and "1 GiB write 4.0×" in text
    assert "reading 16 KiB files on /fsx runs at 20.5 MiB/s against 400.0 MiB/s for 1 GiB files (19.5× apart)" in text
    assert "layout of a new folder on /fsx: default stripe count 1" in text and "single OST" in text
    assert guide[0].startswith("verdict: undecided until the operator's expected figures for /fsx are known")
    joined = "\n".join(guide)
    for phrase in ("pin_memory=True", "torch.distributed.checkpoint", "async_save", "rank 0",
                   "WebDataset", "lfs setstripe -c -1", "(this folder's default stripe count is 1)"):
        assert phrase in joined, phrase


def test_targets_decide_between_saturated_and_pattern():
    targets = {"1GiB-read": 1000.0, "1GiB-write": 800.0, "1MiB-read": 500.0}
    verdict, facts, guide = diagnose("/fsx", SHARED, LOCAL, None, [], targets)
    assert verdict == "saturated"  # 1 GiB read at 40% of the figure
    assert "against the operator's figures: 1 MiB read 36%, 1 GiB read 40%, 1 GiB write 44%" in "\n".join(facts)
    assert guide[1].startswith("If the filesystem's capacity is saturated")
    verdict, _, guide = diagnose("/fsx", SHARED, LOCAL, None, [], {"1GiB-read": 410.0, "1GiB-write": 360.0})
    assert verdict == "pattern" and guide[1].startswith("If the job's I/O pattern is the limit")


def test_storage_concerns_point_at_capacity_even_without_targets():
    full = Signal(node="n0", key="storage.lustre", level="CONCERN", text="1 OST nearly full: OST0001 95%",
                  subject="/fsx", threshold=">= 90%", pointer="storage")
    other = Signal(node="n0", key="storage.shared", level="CONCERN", text="/data 99% full", subject="/data",
                   threshold=">= 90%", pointer="storage")
    iowait = Signal(node="n0", key="cpu.iowait", level="CONCERN", text="host iowait 35.0% over 3 s",
                    threshold="> 20%", pointer="storage")
    verdict, facts, _ = diagnose("/fsx/users/me", SHARED, LOCAL, None, [full, other, iowait])
    assert verdict == "saturated"
    text = "\n".join(facts)
    assert "capacity side: 1 OST nearly full: OST0001 95%" in text and "/data 99%" not in text
    assert "the node spends CPU time waiting on IO: host iowait 35.0% over 3 s" in text


def test_a_cell_without_figures_is_said_so():
    assert sweep_text([FioCell(file_size_bytes=GIB, rw="read", error="timed out")]) == "no fio figures"


def _guide(fstype: str, layout: Layout | None = None) -> str:
    return "\n".join(diagnose("/m", SHARED, LOCAL, layout, [], fstype=fstype)[2])


def test_advice_follows_the_filesystem_type():
    lustre = _guide("lustre")
    assert "lfs setstripe -c -1" in lustre and "OSTs are full" in lustre
    for fstype in ("ext4", "xfs", "nfs4", "gpfs", "beegfs", "virtiofs", "tmpfs"):
        text = _guide(fstype)
        assert "lfs setstripe" not in text and "OST" not in text and "Lustre" not in text, fstype
    assert "`nvme list`" in _guide("ext4") and "/proc/mdstat" in _guide("xfs")
    assert "node-local NVMe" not in _guide("ext4")  # the advice to move data to a local disk, for a local disk
    assert "nconnect=" in _guide("nfs4") and "rsize=" in _guide("nfs")
    assert "pagepool" in _guide("gpfs") and "beegfs-ctl --setpattern" in _guide("beegfs")
    assert "cache=" in _guide("virtiofs")


def _m(target: str, source: str, fstype: str, options: str = "rw,relatime") -> Mount:
    return Mount(target=target, source=source, fstype=fstype, options=options)


def test_the_local_side_is_never_the_measured_filesystem():
    disk = [_m("/", "/dev/nvme0n1p1", "ext4"), _m("/tmp", "tmpfs", "tmpfs"), _m("/boot", "/dev/nvme0n1p2", "ext4"),
            _m("/scratch", "/dev/md127", "xfs"), _m("/fsx", "10.0.0.5@tcp:/fsx", "lustre")]
    # local_scratch on another filesystem: it is used as configured
    assert pick_local("/fsx/me", "/scratch", disk, "n0") == ("/scratch", "the local side is local_scratch "
                                                                         "/scratch (xfs on /dev/md127)")
    # local_scratch on the measured one: /tmp is RAM here, /var/tmp is on the measured disk, /scratch is next
    path, why = pick_local("/var/data", "/var/tmp", disk, "n0")
    assert path == "/scratch"
    assert why == ("local_scratch /var/tmp is on the same filesystem as /var/data (ext4 on /dev/nvme0n1p1), so the "
                   "local side is /scratch (xfs on /dev/md127)")
    # a configured tmpfs stays the user's choice
    assert pick_local("/fsx", "/tmp", disk, "n0")[0] == "/tmp"


def test_no_other_local_filesystem_is_said_so():
    only = [_m("/", "/dev/vda", "ext4"), _m("/run/netns", "/dev/vda", "ext4"), _m("/dev/shm", "tmpfs", "tmpfs"),
            _m("/etc/hosts", "/dev/vdb", "ext4"), _m("/tmp/pytest-7/loop", "/dev/loop3", "ext4"),
            _m("/mnt/iso", "/dev/sr0", "ext4", "ro,relatime")]
    assert pick_local("/home/me", "/tmp", only, "n0") == (
        None, "n0 has no local filesystem other than the one /home/me is on (ext4 on /dev/vda, mounted at /), so "
              "there is no local disk to compare it with")
