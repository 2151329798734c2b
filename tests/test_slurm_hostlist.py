"""Slurm node lists on a command line: compressed as Slurm reads them, in a file past a bound, and
srun really runs on exactly the nodes of either form."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from clustereval.transport.slurm import hostlist
from clustereval.transport.slurm.hostlist import NODELIST_INLINE_MAX, argument, compress, expand

CASES = [
    [f"gpu{i:04d}" for i in range(1, 4097)],
    [f"h200-rack{i // 32:03d}-node{i:05d}" for i in range(4096)],
    ["n1", "n2", "n3", "n10", "n9"],
    ["a", "b1", "b01", "b2", "b02", "b10", "b100", "c"],
    ["node0", "node1", "node00"],
    [f"ip-10-0-3-{i}" for i in (17, 18, 19, 40)],
    ["z10", "z01", "z99", "z100", "z0999", "z1000"],
    ["single"],
]


@pytest.mark.parametrize("names", CASES, ids=lambda c: f"{c[0]}..{len(c)}")
def test_a_list_expands_to_exactly_its_names(names):
    assert sorted(expand(compress(names))) == sorted(set(names))


def test_a_numbered_fleet_is_a_few_bytes():
    assert compress([f"gpu{i:04d}" for i in range(1, 4097)]) == "gpu[0001-4096]"
    assert compress(["n1", "n2", "n3", "n10", "n9"]) == "n[1-3,9-10]"
    assert compress(["gpu-a"]) == "gpu-a" and compress(["node7"]) == "node7"


@pytest.mark.skipif(not shutil.which("scontrol"), reason="needs Slurm's scontrol")
@pytest.mark.parametrize("names", CASES, ids=lambda c: f"{c[0]}..{len(c)}")
def test_slurm_reads_each_list_as_its_names(names, tmp_path):
    conf = tmp_path / "slurm.conf"  # `scontrol show hostnames` only parses: any configuration will do
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    proc = subprocess.run(["scontrol", "show", "hostnames", compress(names)], capture_output=True, text=True,
                          env={**os.environ, "SLURM_CONF": str(conf)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(set(names))


def test_names_that_share_no_numbering_go_in_a_file():
    rng = random.Random(47)
    names = [f"{rng.choice('abcdefgh')}{rng.getrandbits(40):x}x" for _ in range(4096)]
    assert len(compress(names)) > NODELIST_INLINE_MAX
    value = argument(names)
    assert "/" in value and len(value) < 200
    assert Path(value).read_text().split() == names
    assert argument(names[:3]) == compress(names[:3])  # a short list stays on the command line


def test_slurm_runs_a_step_on_the_nodes_a_file_names(slurm_cluster, monkeypatch):
    from clustereval.config import SlurmConfig
    from clustereval.transport.slurm import SlurmTransport

    t = SlurmTransport(SlurmConfig(nodes=3, time_limit="5", wait_s=60))
    try:
        nodes = t.nodes()  # one srun step over every node, its --nodelist compressed
        assert [n.name for n in nodes] == slurm_cluster.node_names
        monkeypatch.setattr(hostlist, "NODELIST_INLINE_MAX", 1)  # now every list goes in a file
        assert "/" in argument([n.name for n in nodes])
        results = t.run_all(nodes[1:], ["hostname"], timeout_s=60)
        assert [r.stdout.strip() for r in results] == slurm_cluster.node_names[1:]
    finally:
        t.close()
