"""Host packages phase, run for real on this machine (installs switched off, so nothing changes)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from clustereval.config import SKIPPABLE, Config
from clustereval.phases.base import RunContext
from clustereval.phases.packages import NEEDS, PackagesPhase, packages_for, parse_probe
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import run_cli


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


def _apt_without_nvidia_repo(root: Path) -> dict[str, str]:
    """The real ``apt-get`` with no package source at all (its lists and dpkg state in ``root``):
    it cannot locate DCGM, as on a cloud image without NVIDIA's repository, and changes nothing
    on this machine."""
    for sub in ("lists/partial", "cache/archives/partial", "parts", "prefs", "dpkg"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "dpkg" / "status").touch()
    conf = root / "apt.conf"
    conf.write_text("".join(f'{key} "{value}";\n' for key, value in (
        ("Dir::Etc::SourceList", "/dev/null"), ("Dir::Etc::SourceParts", root / "parts"),
        ("Dir::Etc::Preferences", "/dev/null"), ("Dir::Etc::PreferencesParts", root / "prefs"),
        ("Dir::State::Lists", root / "lists"), ("Dir::State::status", root / "dpkg" / "status"),
        ("Dir::Cache", root / "cache"))))
    return {"APT_CONFIG": str(conf)}


@pytest.mark.skipif(shutil.which("apt-get") is None or os.geteuid() != 0,
                    reason="needs apt-get and root (the package install path)")
def test_dcgm_that_cannot_be_installed_is_the_health_gap_and_skipping_health_wants_no_dcgm(tmp_path):
    from tests.test_absent_tools import _fake_gpu_bin

    env = {"PATH": _fake_gpu_bin(tmp_path), **_apt_without_nvidia_repo(tmp_path / "apt")}
    work = tmp_path / "run"
    work.mkdir()
    proc = run_cli("run", "--phases", "packages,health", cwd=work, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # the health pass did not run: the eval is incomplete
    assert "[packages] ok" in out and "[health] not-run" in out and "Traceback" not in out
    (raw,) = (work / "reports").glob("raw-*")
    rec = json.loads((raw / "packages.record.json").read_text())
    assert rec["status"] == "ok"
    (node,) = rec["nodes"]
    assert node["missing"] == ["dcgmi"] and "Unable to locate package" in node["errors"][0]
    (report,) = (work / "reports").glob("*.md")
    assert report.read_text().count("DCGM (Data Center GPU Manager, [`dcgmi`]") == 1
    assert run_cli("lint", str(report), cwd=work, timeout=120).returncode == 0

    # the operator accepts a cluster without DCGM: nothing is installed for a pass left out
    accepted = tmp_path / "accepted"
    accepted.mkdir()
    # (every other pass is left out too, so the run stays short)
    skipped = [p for p in SKIPPABLE if p != "packages"]
    (accepted / "cluster.toml").write_text(f"skip = {json.dumps(skipped)}\n")
    proc = run_cli("run", cwd=accepted, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "installing" not in out and "dcgmi" not in out
    (raw,) = (accepted / "reports").glob("raw-*")
    (node,) = json.loads((raw / "packages.record.json").read_text())["nodes"]
    assert "dcgmi" not in node["missing"] + node["present"] and node["errors"] == []
