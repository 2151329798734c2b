"""Preflight's checks across nodes (the TCP port check, passwordless SSH between nodes, the CPU gloo
all-reduce) run only when the run goes on to a phase that starts a job across nodes: the runner's
decision from the phases asked for, ``skip`` and what a resume has left, and what preflight, the
report and the console make of it. Real runs over the local transport, two nodes of this machine."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from clustereval.app import select_phases
from clustereval.config import Config, HostEntry
from clustereval.console import show_preflight
from clustereval.phases.base import PhasesAhead, RunContext
from clustereval.phases.preflight import across_nodes_not_run
from clustereval.records import dumps, loads
from clustereval.records.run import AcrossNodesNotRun, PreflightRecord
from clustereval.report.lint import lint_text
from clustereval.report.preflight import across_nodes_line
from clustereval.runner import across_nodes, execute, phase_names, phases_ahead, render
from clustereval.store import PhaseOutcome, RunState, RunStore
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import run_cli

NETWORK = ["connectivity", "allreduce", "pairwise"]


def test_the_phases_that_start_a_job_across_nodes_are_the_torchrun_launches_over_nodes():
    assert across_nodes(phase_names()) == NETWORK


@pytest.mark.parametrize(("phase_list", "skip", "across"), [
    (None, (), NETWORK),
    ("packages,environment,storage", (), []),
    ("environment,pairwise", (), ["pairwise"]),
    (None, tuple(NETWORK), []),
    (None, ("connectivity", "pairwise"), ["allreduce"]),
])
def test_a_run_checks_across_nodes_only_when_a_phase_asked_for_starts_a_job_across_nodes(phase_list, skip, across):
    phases = select_phases(phase_list, skip)
    ahead = phases_ahead(phases, RunState(name="t", stamp="s"), "preflight")
    assert list(ahead.phases) == [p for p in phases if p != "preflight"]
    assert list(ahead.across_nodes) == across and ahead.checks_across_nodes == bool(across)
    assert list(ahead.every_across_nodes) == NETWORK and not ahead.resume


def test_a_run_of_preflight_alone_checks_across_nodes_as_clustereval_preflight_does():
    ahead = phases_ahead(select_phases("preflight"), RunState(name="t", stamp="s"), "preflight")
    assert ahead.phases == () and ahead.checks_across_nodes


def _state(done: list[str], failed: list[str]) -> RunState:
    outcomes = {p: PhaseOutcome() for p in ["preflight", *done]}
    outcomes.update({p: PhaseOutcome(status="failed") for p in failed})
    return RunState(name="t", stamp="s", outcomes=outcomes)


def test_a_resume_checks_across_nodes_when_what_it_runs_again_starts_a_job_across_nodes():
    # the first attempt ran environment; the resume is asked for connectivity too (--resume --phases)
    ahead = phases_ahead(["preflight", "environment", "connectivity"], _state(["environment"], []), "preflight")
    assert ahead.phases == ("connectivity",) and ahead.checks_across_nodes and ahead.resume
    # connectivity finished before the interruption; storage is what is left
    ahead = phases_ahead(["preflight", "connectivity", "storage"], _state(["connectivity"], ["storage"]), "preflight")
    assert ahead.phases == ("storage",) and not ahead.checks_across_nodes and ahead.resume


def _ctx(tmp_path, num_nodes: int) -> RunContext:
    (tmp_path / "scratch").mkdir(parents=True, exist_ok=True)
    names = tuple(f"n{i}" for i in range(num_nodes))
    config = Config(name="t", access="local", nodes=names, hosts=tuple(HostEntry("127.0.0.1") for _ in names),
                    local_scratch=str(tmp_path / "scratch"), given=frozenset({"shared_paths"}),
                    install_packages=False, rdzv_port=1)  # two nodes of one machine cannot both listen on a port:
    # the TCP check fails here whenever it runs, so a run that passes the gate did not run it
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="2026-12-04-0400Z", phases_planned=["preflight", "packages"]))
    return RunContext(config=config, transport=LocalTransport(), nodes=[Node(n, "127.0.0.1", i) for i, n in
                                                                         enumerate(names)], store=store)


def test_outside_a_run_and_on_one_node_nothing_is_left_out(tmp_path):
    ctx = _ctx(tmp_path, 2)
    assert ctx.ahead is None and across_nodes_not_run(ctx) is None  # `clustereval preflight`
    one = _ctx(tmp_path / "one", 1)
    one.ahead = PhasesAhead(phases=("environment",), across_nodes=(), every_across_nodes=tuple(NETWORK))
    assert across_nodes_not_run(one) is None  # one node has no check across nodes to leave out


def test_a_two_node_run_of_packages_alone_leaves_the_checks_across_nodes_out_and_says_why(tmp_path):
    ctx = _ctx(tmp_path, 2)
    outcome = execute(ctx, ["preflight", "packages"])
    assert not outcome.failed and not outcome.gate_failed, outcome
    pre = ctx.store.load_record("preflight", PreflightRecord)
    assert pre is not None and pre.passed
    assert pre.across_nodes_not_run == AcrossNodesNotRun(phases=["packages"], across_nodes=NETWORK)
    # the node-by-node checks ran on both nodes; nothing across them (port 1 would have failed the gate)
    assert {p.kind for p in pre.probes} == {"exec", "torch"} and len(pre.probes) == 4
    assert not pre.gloo_deferred and pre.rendezvous_plan is None
    assert not list(ctx.store.raw_dir.glob("preflight/gloo-*"))
    assert loads(PreflightRecord, dumps(pre)) == pre

    rendered = render(ctx.store, "local")
    assert lint_text(rendered.markdown) == [], rendered.markdown
    line = ("- Checks across nodes in preflight (TCP between the nodes, a CPU all-reduce through gloo): not run, "
            "as no phase of this run starts a job across nodes (it ran the host packages check; the connectivity "
            "test, the all-reduce benchmarks and the pairwise all-reduce benchmark do)")
    assert line in rendered.markdown.splitlines()

    out = io.StringIO()
    show_preflight(pre, Console(file=out, width=200))
    assert line.removeprefix("- ") in " ".join(out.getvalue().split())  # rich wraps it at the width


def test_the_resumed_wording_names_what_the_resume_ran_again():
    text = across_nodes_line(AcrossNodesNotRun(phases=["environment", "storage"], across_nodes=["pairwise"],
                                               resume=True))
    assert text == ("Checks across nodes in preflight (TCP between the nodes, a CPU all-reduce through gloo): not "
                    "run when the run was resumed, as no phase it ran again starts a job across nodes (it ran the "
                    "environment inventory and the storage benchmarks again; the pairwise all-reduce benchmark does)")


def test_a_resume_that_adds_a_phase_across_nodes_runs_the_checks_the_first_attempt_left_out(tmp_path):
    """A run of packages alone, then ``--resume --phases packages,connectivity`` of its folder: the
    resume's preflight runs the TCP check (failing here, as every check across these two nodes does)."""
    ctx = _ctx(tmp_path, 2)
    execute(ctx, ["preflight", "packages"])
    first = ctx.store.load_record("preflight", PreflightRecord)
    assert first is not None and first.passed and first.across_nodes_not_run is not None
    again = RunContext(config=ctx.config, transport=ctx.transport, nodes=ctx.nodes, store=ctx.store)
    outcome = execute(again, ["preflight", "packages", "connectivity"])
    assert again.ahead is not None and again.ahead.resume and again.ahead.phases == ("connectivity",)
    pre = ctx.store.load_record("preflight", PreflightRecord)
    assert pre is not None and pre.across_nodes_not_run is None and "tcp" in {p.kind for p in pre.probes}
    assert outcome.gate_failed and outcome.ran == ["preflight"]


def test_a_run_that_goes_on_to_a_phase_across_nodes_keeps_every_check(tmp_path):
    """The decision reaches preflight: a plan with connectivity runs the TCP check (which fails here,
    at port 1, before anything slow: the gate stops the run there)."""
    ctx = _ctx(tmp_path, 2)
    outcome = execute(ctx, ["preflight", "connectivity"])
    pre = ctx.store.load_record("preflight", PreflightRecord)
    assert pre is not None and pre.across_nodes_not_run is None
    assert outcome.gate_failed and "tcp" in {p.kind for p in pre.probes}
    assert "connectivity" not in outcome.ran


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_four_node_run_of_the_environment_alone_runs_no_gloo_and_says_why(netns_cluster):
    """`clustereval run --phases environment` over SSH on the 4-node bed: preflight checks every node
    and nothing across them (no TCP check, no torchrun), the report's header says why, lint-clean."""
    cluster = netns_cluster(4)
    res = run_cli("run", "--config", str(cluster.config_path), "--profile", "smoke", "--phases", "environment",
                  cwd=cluster.workdir, timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    report = Path(re.search(r"report: (\S+)", res.stdout).group(1))
    raw = report.parent / f"raw-{report.stem}"
    pre = json.loads((raw / "preflight.record.json").read_text())
    assert pre["passed"] and {p["kind"] for p in pre["probes"]} == {"ssh", "torch"}, pre["probes"]
    assert pre["across_nodes_not_run"] == {"phases": ["environment"], "across_nodes": NETWORK, "resume": False}
    assert not list(raw.glob("preflight/gloo-*")) and not list(raw.glob("**/preflight-gloo*"))
    assert "CPU gloo all-reduce" not in res.stderr  # the progress line of the launch never came
    (ssh_row,) = [c for c in pre["checklist"] if c["need"] == "SSH / launcher details"]
    assert ssh_row["value"].endswith("; passwordless SSH between nodes not checked (no check across nodes here)")
    text = report.read_text()
    assert ("- Checks across nodes in preflight (TCP between the nodes, a CPU all-reduce through gloo): not run, "
            "as no phase of this run starts a job across nodes (it ran the environment inventory; the connectivity "
            "test, the all-reduce benchmarks and the pairwise all-reduce benchmark do)") in text.splitlines()
    assert run_cli("lint", str(report)).returncode == 0


def test_a_job_across_nodes_in_a_run_whose_preflight_left_the_checks_out_is_our_defect(tmp_path):
    # a phase that launches across nodes without saying `across_nodes = True` would run ungated: the
    # launch refuses before anything starts, and the runner records it as clustereval's own defect (exit 3)
    from clustereval.phases.torchrun import launch

    ctx = _ctx(tmp_path, 2)
    ctx.ahead = PhasesAhead(phases=("environment",), across_nodes=(), every_across_nodes=tuple(NETWORK))
    with pytest.raises(RuntimeError, match="must say `across_nodes = True`"):
        launch(ctx, label="forgot", module="gloo_check", args=[], nodes=ctx.nodes, nproc=1, port=29500, timeout_s=5)
    # a run whose preflight kept the checks launches across nodes as before: every bed run with a network
    # phase (tests/test_e2e.py, tests/test_env_matrix.py) goes through this launch with ``ahead`` set
