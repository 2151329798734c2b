"""Layout capture glue: which tool runs for which filesystem, raw output kept, summary made.

No Lustre, GPFS, BeeGFS or NFS server runs on this machine, so a transport replays the
hand-written tool outputs in tests/fixtures (the one fault here that cannot be produced for real).
"""

from pathlib import Path

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.storage import capture_layout
from clustereval.records import CommandResult
from clustereval.records.scratch import ScratchArea
from clustereval.records.storage import MountScan
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node, Transport

FIX = Path(__file__).parent / "fixtures"
OUTPUTS = {("lfs", "df"): "lfs/df-h-handwritten.txt", ("lfs", "getstripe"): "lfs/getstripe-d-pfl-handwritten.txt",
           ("mmlsfs",): "gpfs/mmlsfs-handwritten.txt", ("mmlsdisk",): "gpfs/mmlsdisk-handwritten.txt",
           ("beegfs-ctl",): "beegfs/getentryinfo-handwritten.txt", ("nfsstat",): "nfsstat/m-handwritten.txt"}


class ReplayTransport(Transport):
    method = "replay"

    def __init__(self, missing: set[str] = frozenset()):
        self.calls: list[list[str]] = []
        self.missing = missing

    def run(self, node, argv, *, timeout_s=60, env=None, cwd=None, stdin=None):
        self.calls.append(list(argv))
        if argv[0] in self.missing:
            return CommandResult(node.name, argv, 127, "", f"sh: 1: {argv[0]}: not found", 0.0)
        key = next(k for k in OUTPUTS if tuple(argv[:len(k)]) == k)
        return CommandResult(node.name, argv, 0, (FIX / OUTPUTS[key]).read_text(), "", 0.0)

    def put(self, node, local, remote, *, timeout_s=300):
        raise NotImplementedError

    def get(self, node, remote, local, *, timeout_s=300):
        raise NotImplementedError


def ctx_for(tmp_path, transport):
    store = RunStore.create(tmp_path, "t")
    store.save_state(RunState(name="t", stamp="s"))
    return RunContext(config=Config(nodes=("n0",)), transport=transport, nodes=[Node("n0", "n0")], store=store)


AREA = ScratchArea(node="n0", mount="/x", path="/x/u/cluster-eval-s", trash_root="/x/u/trash", shared=True)


@pytest.mark.parametrize("fstype,source,tools,summary", [
    ("lustre", "10.0.0.1@tcp:/fs", [["lfs", "df", "-h", "/x"], ["lfs", "getstripe", "-d", "/x/u/cluster-eval-s/fio-test"]],
     "progressive default layout, stripe count 1 up to 1 GiB, stripe count 4 up to 4 GiB, stripe count every OST "
     "(object storage target) beyond (`lfs getstripe -d`); 2 OSTs (`lfs df -h`)"),
    ("gpfs", "/dev/fs0", [["mmlsfs", "fs0"], ["mmlsdisk", "fs0"]],
     "block size 4 MiB (`mmlsfs`), 3 data disks of 4 (`mmlsdisk`)"),
    ("beegfs", "beegfs_nodev", [["beegfs-ctl", "--getentryinfo", "/x/u/cluster-eval-s/fio-test"]],
     "4 storage targets per file, chunk size 512 KiB (`beegfs-ctl --getentryinfo`)"),
    ("nfs4", "10.0.0.5:/export/data", [["nfsstat", "-m"]],
     "mount options `vers=4.2,proto=tcp,rsize=1048576,wsize=1048576,nconnect=8` (`nfsstat -m`)"),
])
def test_each_parallel_fs_gets_its_own_tool(tmp_path, fstype, source, tools, summary):
    transport = ReplayTransport()
    ctx = ctx_for(tmp_path, transport)
    mount = "/mnt/nfs" if fstype == "nfs4" else "/x"
    scan = MountScan(mount, 2**40, fstype, source, mount, True, "n0")
    area = ScratchArea(**{**AREA.__dict__, "mount": mount})
    layout = capture_layout(ctx, ctx.nodes[0], scan, area)
    if fstype == "nfs4":
        tools = [["nfsstat", "-m"]]
    assert transport.calls == tools
    assert layout.summary == summary and layout.errors == []
    for rel in layout.raw_files:
        text = (ctx.store.raw_dir / rel).read_text()
        assert text.startswith("$ ") and len(text.splitlines()) > 2


def test_missing_layout_tool_is_recorded_not_fatal(tmp_path):
    ctx = ctx_for(tmp_path, ReplayTransport(missing={"lfs"}))
    layout = capture_layout(ctx, ctx.nodes[0], MountScan("/x", 2**40, "lustre", "a@tcp:/b", "/x", True), AREA)
    assert layout.summary == "" and len(layout.errors) == 2 and "not found" in layout.errors[0]


def test_local_types_have_no_layout(tmp_path):
    ctx = ctx_for(tmp_path, ReplayTransport())
    assert capture_layout(ctx, ctx.nodes[0], MountScan("/x", 2**40, "ext4", "/dev/sda", "/x", True), AREA) is None
