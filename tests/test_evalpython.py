"""The eval Python phase, run for real over the local transport."""

import os
import sys

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.evalpython import (
    EvalPythonPhase,
    cuda_tags_for,
    parse_available_versions,
    parse_index_versions,
    pick_default_index_version,
)
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport


def _ctx(tmp_path, **cfg):
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    (tmp_path / "scratch").mkdir(exist_ok=True)  # the node's local disk: clustereval never creates it
    config = Config(name="t", nodes=("here",), local_scratch=str(tmp_path / "scratch"), **cfg)
    return RunContext(config=config, transport=LocalTransport(), nodes=[Node("here", "here")], store=store)


def test_cuda_tags_follow_the_driver():
    assert cuda_tags_for("13.0")[0] == "cu130"
    assert cuda_tags_for("12.4") == ["cu124", "cu121", "cu118"]
    assert cuda_tags_for("") == ["cpu"]


def test_parse_pip_index_versions():
    text = "torch (2.9.1)\nAvailable versions: 2.9.1, 2.9.0\n  INSTALLED: \n  LATEST:    2.9.1\n"
    assert parse_index_versions(text) == "2.9.1"
    assert parse_index_versions("ERROR: No matching distribution found for torch") == ""


def test_configured_interpreter_is_used_and_gap_says_unverified(tmp_path):
    ctx = _ctx(tmp_path, eval_python=sys.executable)
    rec = EvalPythonPhase().run(ctx)
    assert rec.mode == "configured" and ctx.eval_python == sys.executable
    assert rec.torch  # this test environment has torch
    assert len(rec.gaps) == 1 and "could not be verified as the newest" in say(rec.gaps[0]).text
    assert rec.gaps[0].kind == "evalpython.configured"


def test_interpreter_without_torch_is_a_gap_naming_the_node(tmp_path):
    ctx = _ctx(tmp_path, eval_python="/bin/false")
    rec = EvalPythonPhase().run(ctx)
    assert rec.status == "failed"
    assert any("here" in g.text and "cannot import torch" in g.text for g in map(say, rec.gaps))
    assert [g.node for g in rec.gaps if g.kind == "evalpython.no-torch"] == ["here"]


def _no_default_index(monkeypatch):
    """pip's own configured index refuses too: no config file, no find-links, an index on a closed port."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)


def test_no_route_to_the_index_falls_back_to_the_node_python(tmp_path, monkeypatch):
    # port 9 on loopback refuses at once: the same answer a node without internet gets, only faster
    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, torch_index="http://127.0.0.1:9/whl")
    rec = EvalPythonPhase().run(ctx)
    assert rec.mode == "node-python" and ctx.eval_python == "python3"
    assert list((tmp_path / "scratch").iterdir()) == []  # nothing was built on the local disk
    assert rec.tried and any("could not reach the PyTorch wheel index" in g.text for g in map(say, rec.gaps))


def test_worker_on_another_interpreter_is_caught(tmp_path):
    from clustereval.phases.remote import interpreter_mismatch

    ctx = _ctx(tmp_path, eval_python=sys.executable)
    ctx.records["evalpython"] = EvalPythonPhase().run(ctx)
    torch_version = ctx.records["evalpython"].torch
    assert interpreter_mismatch(ctx, "here", {"executable": sys.executable, "torch": torch_version}) == ""
    assert "not the eval Python" in interpreter_mismatch(ctx, "here", {"executable": "/usr/bin/python2"})
    assert "torch 1.0" in interpreter_mismatch(ctx, "here", {"executable": sys.executable, "torch": "1.0"})


def test_the_chain_reaches_fallback_python_before_the_node_python(tmp_path, monkeypatch):
    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, torch_index="http://127.0.0.1:9/whl", fallback_python=sys.executable)
    rec = EvalPythonPhase().run(ctx)
    assert (rec.mode, rec.source) == ("fallback", "fallback-python") and ctx.eval_python == sys.executable
    assert rec.status == "ok" and rec.torch
    # both indexes were asked, in order, and each said why it gave nothing
    assert [t.split(":")[0] for t in rec.tried] == ["PyTorch index cpu", "pip's configured index"]
    (gap,) = map(say, rec.gaps)
    assert gap.kind == "evalpython.fallback"
    assert "`fallback_python`" in gap.text and "could not be verified as the newest" in gap.text
    assert sys.executable not in gap.text + gap.plan


def test_a_fallback_python_without_torch_goes_on_to_the_node_python(tmp_path, monkeypatch):
    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, torch_index="http://127.0.0.1:9/whl", fallback_python="/bin/false")
    rec = EvalPythonPhase().run(ctx)
    assert rec.source == "node-python" and ctx.eval_python == "python3"
    assert any(t.startswith("fallback_python:") for t in rec.tried)
    # why it was passed over, node by node: here, /bin/false ran and printed no version
    assert "fallback_python: here: exit 1" in rec.tried, rec.tried


def test_no_gap_text_carries_an_interpreter_path(tmp_path, monkeypatch):
    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, eval_python=str(tmp_path / "venv" / "bin" / "python3"))
    rec = EvalPythonPhase().run(ctx)
    assert rec.status == "failed"
    assert rec.gaps
    for gap in map(say, rec.gaps):
        assert str(tmp_path) not in gap.text + gap.plan and "venv" not in gap.text + gap.plan


def test_default_index_versions_are_read_and_the_cpu_build_preferred_without_a_gpu():
    text = ("torch (2.15.0)\nAvailable versions: 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.12.1\n"
            "  INSTALLED: 2.13.0+cpu\n  LATEST:    2.15.0\n")
    listed = parse_available_versions(text)
    assert listed[:3] == ["2.15.0", "2.14.1", "2.13.0+cpu"]
    assert pick_default_index_version(listed, "cpu") == "2.13.0+cpu"
    assert pick_default_index_version(listed, "cu130") == "2.15.0"
    assert pick_default_index_version(["2.15.0", "2.14.1"], "cpu") == "2.15.0"
    assert parse_available_versions("ERROR: No matching distribution found for torch") == []


def test_a_missing_torch_stops_the_torch_passes_with_a_gap_never_a_launcher_finding(tmp_path, monkeypatch):
    from clustereval.phases.network import AllreducePhase, ConnectivityPhase
    from clustereval.report.render import RunView, render_report
    from clustereval.runner import run_phase

    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, eval_python="/bin/false")
    ctx.records["evalpython"] = EvalPythonPhase().run(ctx)
    assert ctx.records["evalpython"].status == "failed"
    for phase in (ConnectivityPhase(), AllreducePhase()):
        rec = run_phase(phase, ctx)
        ctx.records[phase.name] = rec
        assert rec.status == "failed"
        (gap,) = map(say, rec.gaps)
        assert "cannot import torch on here" in gap.text and gap.plan
    view = RunView(name="t", stamp="2026-11-30-1938Z", raw_rel="raw-t", access="local", records=ctx.records)
    out = render_report(view)
    # no verdict on the launcher or the fabric: only the leftover bullet saying what the missing torch left unjudged
    assert not [f for f in out.findings if f.subsystem in ("torchrun", "fabric")
                and not f.text.startswith("not judged in full: ")]
    network = out.markdown.split("## Network")[1]
    assert "### Introduction" not in network and "cannot import torch" in network.split("### Gaps")[1]


def test_preflight_says_whether_torch_is_there_without_gating_on_it(tmp_path):
    from clustereval.phases.preflight import PreflightPhase

    ctx = _ctx(tmp_path, eval_python="/bin/false")
    (tmp_path / "scratch").mkdir(exist_ok=True)
    rec = PreflightPhase().run(ctx)
    (probe,) = [p for p in rec.probes if p.kind == "torch"]
    assert not probe.ok and not probe.gating and "`eval_python` cannot import torch" in probe.detail
    assert "/bin/false" not in probe.detail
    ctx = _ctx(tmp_path, eval_python=sys.executable)
    rec = PreflightPhase().run(ctx)
    (probe,) = [p for p in rec.probes if p.kind == "torch"]
    assert probe.ok and probe.detail.startswith("torch 2.")


def test_a_resumed_run_whose_venv_went_to_trash_finds_its_interpreter_again(tmp_path, monkeypatch):
    from clustereval.records.run import EvalPythonRecord

    _no_default_index(monkeypatch)
    ctx = _ctx(tmp_path, torch_index="http://127.0.0.1:9/whl")
    gone = EvalPythonRecord(mode="venv", source="default-index", interpreter=str(tmp_path / "gone" / "bin" / "python"),
                            torch="2.13.0+cpu")
    EvalPythonPhase().restore(ctx, gone)
    assert gone.source == "node-python" and ctx.eval_python == "python3"
    assert ctx.store.load_record("evalpython", EvalPythonRecord).source == "node-python"
    here = EvalPythonRecord(mode="configured", interpreter=sys.executable)
    EvalPythonPhase().restore(ctx, here)
    assert ctx.eval_python == sys.executable
