"""Host packages phase, run for real on this machine (installs switched off, so nothing changes)."""

import shutil
from pathlib import Path

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.packages import NEEDS, PackagesPhase, packages_for, parse_probe
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport


def test_probe_parsing():
    have, uid, cuda = parse_probe("have:fio\nhave:nvidia-smi\nuid:0\ncuda:13\n")
    assert have == {"fio", "nvidia-smi"} and uid == 0 and cuda == "13"


def test_dcgm_package_follows_the_driver_cuda_major():
    dcgm = [n for n in NEEDS if n.binary == "dcgmi"]
    assert packages_for(dcgm, "apt", "13") == ["datacenter-gpu-manager-4-cuda13"]
    rdma = [n for n in NEEDS if n.binary == "rdma"]
    assert packages_for(rdma, "dnf", "") == ["iproute", "rdma-core"]


def test_missing_binaries_become_gaps_when_installs_are_off(tmp_path):
    store = RunStore.create(tmp_path, "t")
    store.save_state(RunState(name="t", stamp="s"))
    ctx = RunContext(config=Config(nodes=("here",), install_packages=False), transport=LocalTransport(),
                     nodes=[Node("here", "here")], store=store)
    rec = PackagesPhase().run(ctx)
    (node,) = rec.nodes
    gpu = shutil.which("nvidia-smi") is not None
    adapter = any(Path("/sys/class/infiniband").glob("*"))
    expected = {n.binary for n in NEEDS if (gpu or not n.gpu_only) and (adapter or not n.adapter_only)}
    assert set(node.present) | set(node.missing) == expected
    assert set(node.present) == {b for b in expected if shutil.which(b)}
    assert node.installed == []
    assert {g.facts["binary"] for g in rec.gaps if g.kind == "packages.missing"} == set(node.missing)
    gaps = [say(g) for g in rec.gaps]
    assert {g.text.split("`")[1] for g in gaps} == set(node.missing)
    assert all(g.text.startswith("[`") and "](https://" in g.text for g in gaps)  # linked at first mention
    assert all("install_packages = false" in g.plan for g in gaps if "dcgmi" not in g.text)
