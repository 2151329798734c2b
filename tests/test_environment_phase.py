"""The environment phase for real on this machine (LocalTransport, no GPU), the run's close-out,
and `clustereval report` re-rendering, closing out and linting what it wrote."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest

from clustereval.analysis.gpus import gpu_label, no_gpu_gap
from clustereval.config import default_local_config
from clustereval.errors import TransportError
from clustereval.phases.base import RunContext
from clustereval.phases.environment import EnvironmentPhase
from clustereval.records.environment import EnvironmentRecord
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from clustereval.runner import execute, load_records, render
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import has_gpu, run_cli


def make_ctx(tmp_path: Path, nodes: list[Node] | None = None, transport=None) -> RunContext:
    # each test its own scratch mount: phase-level runs do not clear scratch, and two runs in the
    # same minute would otherwise meet in /tmp/<user>/cluster-eval-<minute>
    (tmp_path / "scratch").mkdir(exist_ok=True)
    cfg = dataclasses.replace(default_local_config(), local_scratch=str(tmp_path / "scratch"))
    store = RunStore.create(tmp_path / "reports", cfg.name)
    store.save_state(RunState(name=cfg.name, stamp=utc_stamp(), phases_planned=["environment"], started_utc=utc_now_iso()))
    nodes = nodes or [Node(name=cfg.nodes[0], address=cfg.nodes[0], index=0)]
    return RunContext(config=cfg, transport=transport or LocalTransport(), nodes=nodes, store=store)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    ctx = make_ctx(tmp_path_factory.mktemp("env"))
    outcome = execute(ctx, ["environment"], gate=None)
    assert outcome.finished == ["environment"]
    return ctx


def test_phase_inventories_this_machine(local_run):
    rec = local_run.store.load_record("environment", EnvironmentRecord)
    [node] = rec.nodes
    assert node.hostname == socket.gethostname().split(".")[0]
    assert node.os_pretty and node.kernel and node.cpu_threads >= 1 and node.mem_total_bytes > 0
    assert node.filesystems[0].mount == "/" and node.filesystems[0].size_bytes > 0
    assert node.software.python.count(".") == 2 and node.software.torch  # torch is installed here
    assert node.datetime_utc.endswith("Z")
    assert node.errors == [] and rec.drift == []
    if not has_gpu():
        assert not rec.has_gpu and node.gpu_visibility and rec.status == "ok"


def test_raw_outputs_and_worker_source_are_kept(local_run):
    raw = local_run.store.raw_dir
    rec = local_run.store.load_record("environment", EnvironmentRecord)
    node = rec.nodes[0]
    for tool in ("date", "hostname", "uname", "os-release", "meminfo", "lscpu", "findmnt", "df", "software"):
        text = (raw / node.raw_files[tool]).read_text()
        assert text.startswith("$ ") and node.raw_files[tool] == f"env/{node.node}/{tool}.txt"
    worker = Path(__file__).resolve().parents[1] / "clustereval" / "workers" / "software.py"
    assert (raw / "tools" / "software.py").read_bytes() == worker.read_bytes()
    assert rec.tool_links["software.py"] == f"{local_run.store.raw_rel}/tools/software.py"
    json.loads((raw / node.raw_files["software"]).read_text().splitlines()[-1])


def test_cpu_report_passes_lint_and_gpu_phases_get_a_gap(local_run):
    from clustereval.report.gaps import say

    rendered = render(local_run.store, "local")
    assert lint_text(rendered.markdown) == [], [str(p) for p in lint_text(rendered.markdown)]
    rec = load_records(local_run.store)["environment"]
    gap = no_gpu_gap("matmul", rec, "the GPU performance benchmarks")
    if has_gpu():
        assert gap is None
        return
    assert rendered.markdown.startswith("# Cluster eval: 1 node without GPUs\n")
    assert gap.kind == "gpu.not-visible" and not gap.text  # facts; the report words them
    gap = say(gap)
    assert gap.phase == "matmul" and gap.text.startswith("The GPU performance benchmarks did not run: no NVIDIA GPU")
    assert "accept as-is" in gap.plan
    assert no_gpu_gap("matmul", None, "x") is None  # nothing known without the environment record


def test_report_command_closes_out_and_lints(local_run):
    res = run_cli("report", str(local_run.store.raw_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    closeout = (local_run.store.raw_dir / "closeout.md").read_text()
    assert closeout.startswith("# Close-out: Cluster eval: 1 node")
    assert closeout.rstrip() in res.stdout.replace("\r", "")
    assert lint_text(local_run.store.report_path.read_text()) == []


def test_report_command_fails_loudly_on_a_lint_problem(local_run, tmp_path):
    # a record edited into something the renderer writes badly: a hostname that reads as an absence
    rec = local_run.store.load_record("environment", EnvironmentRecord)
    rec.nodes[0].os_pretty = "N/A"
    local_run.store.save_record("environment", rec)
    try:
        res = run_cli("report", str(local_run.store.raw_dir))
        assert res.returncode == 3  # our own defect: the report it wrote fails its lint
        assert "[absence]" in res.stderr and "error[lint-failed]" in res.stderr
    finally:
        rec.nodes[0].os_pretty = "restored"
        local_run.store.save_record("environment", rec)


class _HalfDown(LocalTransport):
    """Node ``down`` cannot be reached (a fault the 1-machine test bed cannot produce for real)."""

    def run(self, node, argv, **kw):  # noqa: ANN001, ANN003
        if node.name == "down":
            raise TransportError(node.name, "ssh: connect to host down port 22: Connection refused",
                                 "check sshd on the node", error_id="ssh-unreachable")
        return super().run(node, argv, **kw)


def test_unreachable_node_is_a_gap_and_the_others_are_inventoried(tmp_path):
    here = socket.gethostname().split(".")[0]
    ctx = make_ctx(tmp_path, [Node(here, here, 0), Node("down", "down", 1)], _HalfDown())
    rec = EnvironmentPhase().run(ctx)
    assert rec.status == "partial"
    assert [n.node for n in rec.nodes] == [here, "down"]
    assert rec.nodes[0].hostname and not rec.nodes[1].hostname
    [gap] = [say(g) for g in rec.gaps if g.node == "down"]
    assert "Connection refused" in gap.text and gap.plan == "check sshd on the node"
    assert rec.nodes[1].errors == ["down: ssh: connect to host down port 22: Connection refused"]


def test_gpu_label():
    assert gpu_label("blah-176", 0, 7) == "blah-176(node0):gpu7"


def test_record_round_trips():
    from clustereval.records import dumps, loads
    from tests.envfixtures import h200_record

    rec = h200_record(2)
    again = loads(EnvironmentRecord, dumps(rec))
    assert dataclasses.asdict(again) == dataclasses.asdict(rec)
