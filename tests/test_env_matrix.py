"""The environments a cluster is met in, on the namespace bed with real sshd per node: nodes whose
``python3`` has no torch, with ``eval_python`` configured (the session's 4-node smoke run) and
without it (fresh nodes: the eval venv is built, then the gloo check proves the multi-node launch
before any benchmark)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import only_leftovers, python_without_and_with_torch, run_cli
from tests.test_evalpython_cache import find_links, node_wheels


def _report(workdir: Path) -> Path:
    (report,) = sorted((workdir / "reports").glob("*.md"))
    return report


def _record(report: Path, phase: str) -> dict:
    return json.loads((report.parent / f"raw-{report.stem}" / f"{phase}.record.json").read_text())


@pytest.mark.timeout(1800)  # the session's 4-node smoke run may start here
def test_four_nodes_whose_python3_has_no_torch_complete_a_smoke_run(four_node_smoke):
    cluster, res = four_node_smoke.cluster, four_node_smoke.result
    for node in cluster.nodes:  # the bed is what it claims: PATH's python3 cannot import torch
        probe = subprocess.run(cluster.ssh_argv(node.index, "python3 -c 'import torch'"), capture_output=True,
                               text=True, timeout=120)
        assert probe.returncode != 0 and "torch" in probe.stderr, probe.stderr
    assert only_leftovers(res), four_node_smoke.output[-4000:]
    report = _report(cluster.workdir)
    assert run_cli("lint", str(report)).returncode == 0
    text = report.read_text()
    for heading in ("Inter-node connectivity", "### Inter-node all-reduce benchmark", "### Pairwise all-reduce benchmark"):
        assert heading in text, heading
    ev = _record(report, "evalpython")
    assert ev["mode"] == "configured" and ev["interpreter"].endswith("evalvenv/bin/python") and ev["torch"]
    pre = _record(report, "preflight")
    gloo = [p for p in pre["probes"] if p["kind"] == "gloo"]
    assert len(gloo) == 4 and all(p["ok"] and not p["skipped"] for p in gloo)
    assert not pre["gloo_deferred"] and not pre["gloo_after_eval_python"]
    pairwise = _record(report, "pairwise")  # un-throttled: every pair completed, nobody named
    assert len(pairwise["pairs"]) == 6 and all(p["busbw_gb_s"] for p in pairwise["pairs"])
    assert pairwise["judged"] and pairwise["stragglers"] == []


@pytest.mark.timeout(1800)
def test_fresh_nodes_get_the_gloo_check_right_after_the_eval_python_is_built(netns_cluster, tmp_path):
    """No eval_python and no torch on the nodes: preflight defers the gloo check (never skips it),
    the eval-Python phase builds the venv, the check runs on it before any benchmark, and the
    run's collectives use it."""
    why = node_wheels(tmp_path / "wheels")
    if why:
        pytest.skip(why)
    cluster = netns_cluster(2)
    # a fresh node's python3: no torch, but pip and venv, as the chain needs
    subprocess.run(["python3", "-m", "venv", str(tmp_path / "fresh")], check=True, capture_output=True, timeout=300)
    cluster.set_node_env(python_dir=str(tmp_path / "fresh" / "bin"), PIP_FIND_LINKS=find_links(tmp_path / "wheels"))
    config = cluster.write_config(eval_python=None, torch_index="http://127.0.0.1:9/whl")
    res = run_cli("run", "--config", str(config), "--profile", "smoke", "--phases", "evalpython,connectivity",
                  cwd=cluster.workdir, timeout=1500)
    out = res.stdout + res.stderr
    assert only_leftovers(res), out[-4000:]
    report = _report(cluster.workdir)
    assert run_cli("lint", str(report)).returncode == 0
    pre = _record(report, "preflight")
    assert pre["gloo_after_eval_python"] and not pre["gloo_deferred"] and pre["passed"]
    gloo = [p for p in pre["probes"] if p["kind"] == "gloo"]
    assert len(gloo) == 2 and all(p["ok"] and not p["skipped"] for p in gloo), gloo
    assert not [g for g in pre["gaps"] if g["kind"].startswith("preflight.gloo")]
    ev = _record(report, "evalpython")
    assert ev["mode"] == "venv" and ev["venv_shared"] and ev["venv_built"] == [cluster.nodes[0].name]
    assert "Inter-node connectivity" in report.read_text()


def test_the_bed_interpreters_differ_in_torch_alone(tmp_path):
    node_python, eval_python = python_without_and_with_torch(tmp_path)
    assert subprocess.run([str(node_python), "-c", "import torch"], capture_output=True).returncode != 0
    assert subprocess.run([str(eval_python), "-c", "import torch"], capture_output=True).returncode == 0


NO_TOOLS = ("ibstat", "rdma", "nvidia-smi", "dcgmi")


@pytest.mark.timeout(2400)
def test_four_nodes_without_rdma_or_nvidia_tools_one_without_fio_and_one_rate_limited(netns_cluster, tmp_path):
    """No node has ``ibstat``, ``rdma``, ``nvidia-smi`` or ``dcgmi``; node3 has no ``fio`` (the scans
    run on node0, every node writes at once with its own tools, so nothing is missing); node2's link
    is rate-limited; PATH's python3 has no torch (eval_python a venv). Every phase ends ok, the
    pairwise hunt names node2 alone, the run exits 0 and its report is lint-clean."""
    cluster = netns_cluster(4, cpu_ranks_per_node=1)
    node_python, eval_python = python_without_and_with_torch(cluster.workdir)
    from tests.conftest import path_without

    common = path_without(tmp_path / "bin", *NO_TOOLS)
    no_fio = path_without(tmp_path / "bin-no-fio", *NO_TOOLS, "fio")
    cluster.set_node_env(python_dir=str(node_python.parent), paths={0: common, 1: common, 2: common, 3: no_fio})
    for tool in (*NO_TOOLS, "fio"):  # the bed is what it claims
        probe = subprocess.run(cluster.ssh_argv(3, f"command -v {tool} || echo none"), capture_output=True, text=True,
                               timeout=120)
        assert probe.stdout.strip() == "none", (tool, probe.stdout)
    config = cluster.write_config(eval_python=str(eval_python), rdzv_port=20000 + cluster.ssh_port % 9000)
    slow = cluster.nodes[2]
    cluster.shape(2, rate_mbit=100)
    res = run_cli("run", "--config", str(config), "--profile", "smoke", "--phases", "environment,pairwise,storage",
                  cwd=cluster.workdir, timeout=2000)
    out = res.stdout + res.stderr
    # the rate-limited node is a pairwise straggler: an Underperforming fabric bullet, exit 1, and nothing failed
    assert res.returncode == 1 and "underperforming: fabric" in out and "not every phase is ok" not in out, \
        out[-4000:]
    report = _report(cluster.workdir)
    lint = run_cli("lint", str(report))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    pairwise = _record(report, "pairwise")
    assert pairwise["stragglers"] == [slow.name], pairwise["pairs"]
    state = json.loads((report.parent / f"raw-{report.stem}" / "state.json").read_text())["outcomes"]
    assert all(state[p]["status"] == "ok" for p in ("environment", "pairwise", "storage")), state
    assert f"{slow.name}(node2)" in report.read_text().split("### Pairwise all-reduce benchmark")[1]


@pytest.mark.timeout(900)
def test_a_deferred_gloo_check_that_fails_stops_the_run_at_the_gate(netns_cluster, tmp_path):
    """The check preflight deferred runs on the eval Python; when its launch fails the gate fails
    (the runner stops before any benchmark, preflight counts as failed: exit 1) with the gloo Gap."""
    from clustereval.configload import load_config
    from clustereval.phases.base import RunContext
    from clustereval.phases.preflight import PreflightPhase
    from clustereval.phases.settings import PROFILES
    from clustereval.records.run import EvalPythonRecord
    from clustereval.report.gaps import say
    from clustereval.runner import RunOutcome, gate_after_eval_python
    from clustereval.store import RunState, RunStore
    from clustereval.transport.factory import make_transport, nodes_of

    cluster = netns_cluster(2)
    node_python, eval_python = python_without_and_with_torch(cluster.workdir)
    cluster.set_node_env(python_dir=str(node_python.parent))
    # an eval Python whose torch imports but whose launcher refuses to start: the launch fails for real
    broken = cluster.shared_dir / "python-no-launch"
    broken.write_text(f'#!/bin/sh\ncase "$*" in *torch.distributed.run*) echo "launcher refused" >&2; exit 1;; esac\n'
                      f'exec "{eval_python}" "$@"\n')
    broken.chmod(0o755)
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = load_config(cluster.write_config(cluster.workdir / "fresh.toml", eval_python=None,
                                              rdzv_port=20000 + cluster.ssh_port % 9000))
    ctx = RunContext(config=config, transport=make_transport(config), nodes=nodes_of(config), store=store)
    pre = PreflightPhase().run(ctx)
    assert pre.passed and pre.gloo_deferred
    ctx.records["preflight"] = pre
    ctx.eval_python = str(broken)
    ctx.records["evalpython"] = EvalPythonRecord(mode="configured", interpreter=str(broken), torch="2.13.0+cpu",
                                                 status="ok")
    outcome = RunOutcome(store=store)
    assert not gate_after_eval_python(ctx, PROFILES["smoke"], outcome)
    assert outcome.gate_failed and outcome.failed == ["preflight"]
    saved = store.load_record("preflight", type(pre))
    assert saved is not None and not saved.passed and saved.status == "failed" and saved.gloo_after_eval_python
    gaps = [say(g) for g in saved.gaps if g.kind == "preflight.gloo-failed"]
    assert {g.node for g in gaps} <= {n.name for n in cluster.nodes} and gaps
    assert store.load_state().outcomes["preflight"].status == "failed"
