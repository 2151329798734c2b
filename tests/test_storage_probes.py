"""Layout, df and dd parsers on hand-written fixtures shaped like the tools' real output."""

from clustereval.probes import storage as p
from clustereval.probes.mounts import is_network


def read(fixtures, rel):
    return (fixtures / rel).read_text()


def test_df_rows(fixtures):
    rows = p.parse_df(read(fixtures, "df/output-root-tmp-shm.txt"))
    assert [r.target for r in rows] == ["/", "/", "/dev/shm"]
    assert rows[0].fstype == "ext4" and rows[0].source == "/dev/vda" and rows[0].size_bytes > 2**30
    assert rows[2].avail_bytes <= rows[2].size_bytes


def test_lfs_df(fixtures):
    df = p.parse_lfs_df(read(fixtures, "lfs/df-h-handwritten.txt"))
    assert (df.num_osts, df.num_mdts, df.ost_sizes, df.total) == (2, 1, ["1.1T", "1.1T"], "2.3T")


def test_lfs_getstripe_plain_and_progressive(fixtures):
    (plain,) = p.parse_lfs_getstripe(read(fixtures, "lfs/getstripe-d-handwritten.txt"))
    assert (plain.stripe_count, plain.stripe_size_bytes) == (1, 2**20)
    pfl = p.parse_lfs_getstripe(read(fixtures, "lfs/getstripe-d-pfl-handwritten.txt"))
    assert [(c.stripe_count, c.stripe_size_bytes, c.extent_end) for c in pfl] == [
        (1, 2**20, "1073741824"), (4, 2**20, "4294967296"), (-1, 4 * 2**20, "EOF")]


def test_lustre_summary_names_stripe_count_and_osts(fixtures):
    from clustereval.phases.storage import lustre_summary

    df = p.parse_lfs_df(read(fixtures, "lfs/df-h-handwritten.txt"))
    text = lustre_summary(df, p.parse_lfs_getstripe(read(fixtures, "lfs/getstripe-d-handwritten.txt")))
    assert text == "default stripe count 1, stripe size 1 MiB (`lfs getstripe -d`); 2 OSTs (object storage targets, `lfs df -h`)"
    pfl = lustre_summary(df, p.parse_lfs_getstripe(read(fixtures, "lfs/getstripe-d-pfl-handwritten.txt")))
    assert "1 up to 1 GiB, stripe count 4 up to 4 GiB, stripe count every OST (object storage target) beyond" in pfl


def test_gpfs(fixtures):
    flags = p.parse_mmlsfs(read(fixtures, "gpfs/mmlsfs-handwritten.txt"))
    assert flags["-B"] == "4194304" and flags["-T"] == "/gpfs/fs0"
    assert p.parse_size(flags["-B"]) == 4 * 2**20
    disks = p.parse_mmlsdisk(read(fixtures, "gpfs/mmlsdisk-handwritten.txt"))
    assert (disks.num_disks, disks.num_data_disks, disks.num_up) == (4, 3, 3)


def test_beegfs(fixtures):
    e = p.parse_beegfs_entryinfo(read(fixtures, "beegfs/getentryinfo-handwritten.txt"))
    assert (e.pattern, e.chunk_size, e.num_targets) == ("RAID0", "512K", 4)
    assert p.parse_size(e.chunk_size) == 512 * 2**10


def test_nfsstat_picks_the_mount_a_path_is_under(fixtures):
    mounts = p.parse_nfsstat_m(read(fixtures, "nfsstat/m-handwritten.txt"))
    assert [m.mount for m in mounts] == ["/mnt/nfs", "/home"]
    m = p.nfs_mount_for(mounts, "/mnt/nfs/users/me")
    assert m.server == "10.0.0.5:/export/data"
    assert (m.flags["vers"], m.flags["nconnect"], m.flags["rsize"]) == ("4.2", "8", "1048576")
    assert p.nfs_mount_for(mounts, "/mnt/nfsother") is None


def test_dd_closing_line(fixtures):
    assert p.parse_dd(read(fixtures, "dd/oflag-direct-16m.txt"))[0] == 16 * 2**20
    assert p.parse_dd(read(fixtures, "dd/decimal-comma-locale-handwritten.txt")) == (2**30, 2.34567)
    assert p.parse_dd("dd: failed to open 'x': Read-only file system\n") is None


def test_type_names():
    from clustereval.report.storage import type_label

    assert type_label("lustre") == "Lustre" and type_label("ext4") == "ext4"
    assert is_network("nfs4") and not is_network("xfs")
