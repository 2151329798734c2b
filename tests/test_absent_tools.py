"""Absent hardware is not a Gap; an absent tool is said once, and a pass it keeps from running is
*not run*, not failed.

Each case runs the real CLI in a fresh folder (no cluster.toml: this machine alone), on a PATH that
lacks the tools a fresh CPU machine or a cloud GPU image lacks, and lints the report it wrote with
`clustereval lint`. The phase subsets and the smoke profile keep them short; the passes they leave
out need none of these tools.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, only_leftovers, path_without, run_cli

NO_RDMA_NO_NVIDIA = ("ibstat", "rdma", "nvidia-smi", "dcgmi", "nv-hostengine")
PHASES = "packages,environment,health,matmul,lemon,storage"


def _no_adapter() -> bool:
    return not any(Path("/sys/class/infiniband").glob("*"))


def _run(cwd: Path, path: str, *args: str, timeout: float = 600):
    proc = run_cli("run", *args, cwd=cwd, timeout=timeout, env={"PATH": path})
    assert "Traceback" not in proc.stdout + proc.stderr
    (report,) = sorted((cwd / "reports").glob("*.md"))
    lint = run_cli("lint", str(report), cwd=cwd, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr  # our own lint, as a user runs it
    (closeout,) = sorted((cwd / "reports").glob("raw-*/closeout.md"))
    return proc, report.read_text(), closeout.read_text()


def _gaps(closeout: str) -> list[str]:
    return re.findall(r"^\d+\. > (.*)$", closeout.split("\n## Gaps\n", 1)[1].split("\n## ", 1)[0], re.MULTILINE) \
        if "\n## Gaps\n" in closeout else []


@pytest.mark.slow
@pytest.mark.skipif(not _no_adapter(), reason="this machine has an RDMA adapter: ibstat and rdma are wanted here")
def test_a_cpu_machine_without_rdma_or_nvidia_tools(tmp_path):
    path = path_without(tmp_path / "bin", *NO_RDMA_NO_NVIDIA)
    work = tmp_path / "run"
    work.mkdir()
    proc, md, closeout = _run(work, path, "--profile", "smoke", "--phases", PHASES)
    assert only_leftovers(proc), proc.stdout + proc.stderr  # what the absent fio leaves unjudged, named
    # no adapter: the adapter tools are not wanted; no GPU: nothing names the NVIDIA tools
    for tool in ("ibstat", "rdma", "nvidia-smi", "dcgmi"):
        assert f"`{tool}`" not in md and f"`{tool}`" not in closeout, tool
    assert "nvidia-smi" not in md + closeout
    gaps = _gaps(closeout)
    assert len(gaps) == len(set(gaps))  # each Gap once
    assert "### Local disk IO benchmark" in md


@pytest.mark.skipif(not _no_adapter(), reason="this machine has an RDMA adapter: ibstat and rdma are wanted here")
def test_the_same_machine_without_fio(tmp_path):
    path = path_without(tmp_path / "bin", *NO_RDMA_NO_NVIDIA, "fio")
    work = tmp_path / "run"
    work.mkdir()
    proc, md, closeout = _run(work, path, "--profile", "smoke", "--phases", PHASES)
    # fio is missing, so the storage pass did not run: the eval is incomplete (1), nothing crashed (not 3)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "storage not run" in proc.stderr and 'skip = ["storage"]' in proc.stderr
    storage = md.split("\n## Storage\n", 1)[1].split("\n## ", 1)[0]
    intro = storage.split("\n### Introduction\n", 1)[1].split("\n### ", 1)[0]
    assert "1. [`fio`](https://github.com/axboe/fio)" in intro and "did not run: `fio` is not installed" in intro
    assert "figures above" not in md  # there are none to point at
    gaps = _gaps(closeout)
    assert len(gaps) == len(set(gaps))
    assert sum("is not installed on" in g and "fio" in g for g in gaps) == 1  # fio said once, not per phase
    # with the storage pass named as not wanted, the same machine's eval is complete
    (work / "cluster.toml").write_text('skip = ["storage"]\n')
    again = run_cli("run", "--profile", "smoke", "--phases", "packages,environment", cwd=work, timeout=600,
                    env={"PATH": path})
    assert again.returncode == 0, again.stdout + again.stderr


def _fake_gpu_bin(tmp_path: Path) -> str:
    """A PATH with a stand-in nvidia-smi that prints a real H200 capture, and no DCGM."""
    bin_dir = tmp_path / "gpubin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$*" in
  *query-compute-apps*) ;;
  *query-gpu*) cat "{FIXTURES}/nvidia-smi/handwritten-query-gpu-index.csv" ;;
  *) tail -n +2 "{FIXTURES}/h200x2/nvidia-smi.txt" ;;
esac
""")
    smi.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{path_without(tmp_path / 'bin', 'dcgmi', 'nv-hostengine', 'nvidia-smi')}"


def test_a_gpu_node_without_dcgm_has_its_health_pass_not_run(tmp_path):
    path = _fake_gpu_bin(tmp_path)
    work = tmp_path / "run"
    work.mkdir()
    proc, md, closeout = _run(work, path, "--phases", "health")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the eval is incomplete
    assert "[health] not-run: DCGM (Data Center GPU Manager" in proc.stdout + proc.stderr
    assert "health not run" in proc.stderr and "failed" not in proc.stderr
    (gap,) = _gaps(closeout)
    assert gap.startswith("DCGM (Data Center GPU Manager, [`dcgmi`](") and "did not run there" in gap
    assert "datacenter-gpu-manager-4-cuda" in closeout  # the install line
    assert md.count("DCGM (Data Center GPU Manager, [`dcgmi`]") == 1
    # the operator names the pass as not wanted: not asked for, and the eval is complete
    # (every other pass is left out too, so the run is the gate alone and stays short)
    accepted = tmp_path / "accepted"
    accepted.mkdir()
    (accepted / "cluster.toml").write_text('# no DCGM on this image\nskip = ["health", "packages", "evalpython", '
                                           '"environment", "connectivity", "gpupass", "matmul", "lemon", '
                                           '"allreduce", "pairwise", "storage"]\n')
    proc, md, closeout = _run(accepted, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Not asked for by the operator" in md and "the hardware health pass" in md
    assert "[health]" not in proc.stdout + proc.stderr and "DCGM" not in md


def test_dcgm_installed_later_and_resume_runs_the_health_pass_that_did_not_run(tmp_path):
    path = _fake_gpu_bin(tmp_path)
    work = tmp_path / "run"
    work.mkdir()
    proc, _, _ = _run(work, path, "--phases", "health")
    assert proc.returncode == 1
    (raw,) = sorted((work / "reports").glob("raw-*"))
    # DCGM arrives on the node (a stand-in dcgmi whose diag prints a real passing run's output)
    dcgmi = tmp_path / "gpubin" / "dcgmi"
    dcgmi.write_text(f"""#!/bin/sh
case "$1" in
  discovery) echo "1 GPU found." ;;
  diag) cat "{FIXTURES}/dcgmi/handwritten-diag-r2-pass-dcgm4.txt" ;;
esac
""")
    dcgmi.chmod(0o755)
    again = run_cli("run", "--resume", str(raw), cwd=work, timeout=600, env={"PATH": path})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[health] ok" in again.stdout + again.stderr
    (report,) = sorted((work / "reports").glob("*.md"))
    text = report.read_text()
    assert "### Hardware health" in text and "DCGM (Data Center GPU Manager, [`dcgmi`]" not in text.split("### Gaps")[-1]
    assert run_cli("lint", str(report), cwd=work, timeout=120).returncode == 0
