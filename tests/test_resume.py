"""Phase outcomes in state.json, what --resume runs again, and the exit status, on this machine."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from clustereval import runner
from clustereval.app import exit_status
from clustereval.config import default_local_config
from clustereval.phases.base import RunContext
from clustereval.records import Gap, PhaseRecord, from_dict
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Node
from clustereval.transport.local import LocalTransport
from tests.conftest import run_cli

ATTEMPTS: list[str] = []


class Boom:
    """A phase with a bug in it (clustereval's own defect)."""

    name = "boom"
    title = "A phase that breaks"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> PhaseRecord:
        ATTEMPTS.append(self.name)
        return {}["missing"]  # KeyError


class Flaky:
    """Fails on node "b" until its marker file exists, then passes: a failure that gets fixed."""

    name = "flaky"
    title = "A phase that is fixed between attempts"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> PhaseRecord:
        ATTEMPTS.append(self.name)
        rec = PhaseRecord()
        fixed = (ctx.store.raw_dir / "fixed").exists()
        if not fixed:
            rec.status = "partial"
            rec.gaps.append(Gap(self.name, "`b(node1)` did not answer.", "fix it and resume", node="b"))
        return rec


class TwoSteps:
    """Ctrl-C arrives during its first step; like the all-reduce phase it then skips the second
    step and, having no failed step to report, says ok."""

    name = "twosteps"
    title = "A phase that stops between its steps"

    def applies(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> PhaseRecord:
        ATTEMPTS.append(self.name)
        if not (ctx.store.raw_dir / "resumed").exists():
            ctx.stop.set()  # what the first Ctrl-C does: stop after the current step
        if not ctx.stop.is_set():
            ATTEMPTS.append("second step")
        return PhaseRecord()


@pytest.fixture
def phases(monkeypatch):
    monkeypatch.setitem(runner.PHASES, "boom", "tests.test_resume:Boom")
    monkeypatch.setitem(runner.PHASES, "flaky", "tests.test_resume:Flaky")
    monkeypatch.setitem(runner.PHASES, "twosteps", "tests.test_resume:TwoSteps")
    ATTEMPTS.clear()


def make_ctx(tmp_path: Path, store: RunStore | None = None) -> RunContext:
    cfg = dataclasses.replace(default_local_config(), local_scratch=str(tmp_path))
    if store is None:
        store = RunStore.create(tmp_path / "reports", "t")
        store.save_state(RunState(name="t", stamp=utc_stamp(), started_utc=utc_now_iso()))
    return RunContext(config=cfg, transport=LocalTransport(), nodes=[Node("a", "a", 0), Node("b", "b", 1)],
                      store=store)


def test_a_defect_in_a_phase_fails_that_phase_and_exits_3(tmp_path, phases):
    ctx = make_ctx(tmp_path)
    outcome = runner.execute(ctx, ["boom", "flaky"], gate=None)
    assert ATTEMPTS == ["boom", "flaky"]  # the run went on
    assert outcome.defects == ["boom"] and outcome.failed == ["flaky"]
    state = ctx.store.load_state()
    assert state.outcomes["boom"].status == "failed" and "KeyError" in state.outcomes["boom"].defect
    assert "KeyError" in (ctx.store.raw_dir / "errors" / "boom.txt").read_text()
    rec = ctx.store.record_raw("boom")
    gap = from_dict(Gap, rec["gaps"][0])
    assert gap.kind == "phase.defect" and not gap.text  # the record holds the facts; the report words them
    assert "stopped on an error in clustereval itself" in say(gap).text
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the process
    assert exit_status(outcome, ctx, True, quiet, quiet) == 3


def test_partial_names_the_nodes_and_resume_runs_only_what_is_not_ok(tmp_path, phases):
    ctx = make_ctx(tmp_path)
    first = runner.execute(ctx, ["flaky"], gate=None)
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    assert exit_status(first, ctx, True, quiet, quiet) == 1
    state = json.loads((ctx.store.raw_dir / "state.json").read_text())
    assert state["outcomes"]["flaky"]["status"] == "partial" and state["outcomes"]["flaky"]["failed_nodes"] == ["b"]
    assert state["phases_finished"] == []
    (ctx.store.raw_dir / "fixed").write_text("")
    again = runner.execute(make_ctx(tmp_path, ctx.store), ["flaky"], gate=None)
    assert ATTEMPTS == ["flaky", "flaky"] and again.ran == ["flaky"] and not again.failed
    assert exit_status(again, ctx, True, quiet, quiet) == 0
    assert ctx.store.record_raw("flaky")["gaps"] == []  # the Gap is gone with the failure
    third = runner.execute(make_ctx(tmp_path, ctx.store), ["flaky"], gate=None)
    assert third.ran == [] and ATTEMPTS == ["flaky", "flaky"]  # ok: nothing to do


def test_a_phase_that_saw_the_stop_runs_again_on_resume_even_when_it_says_ok(tmp_path, phases):
    ctx = make_ctx(tmp_path)
    first = runner.execute(ctx, ["twosteps"], gate=None)  # the last phase: no next phase sees the stop
    assert first.interrupted and ATTEMPTS == ["twosteps"]
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    assert exit_status(first, ctx, True, quiet, quiet) == 130
    state = ctx.store.load_state()
    assert state.outcomes["twosteps"].interrupted and not state.done("twosteps")
    (ctx.store.raw_dir / "resumed").write_text("")
    again = runner.execute(make_ctx(tmp_path, ctx.store), ["twosteps"], gate=None)
    assert again.ran == ["twosteps"] and not again.interrupted
    assert ATTEMPTS == ["twosteps", "twosteps", "second step"]
    assert ctx.store.load_state().done("twosteps")


def _environment_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished smoke run of the environment inventory alone on this machine: its run folder and report."""
    (tmp_path / "scratch").mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'name = "here"\naccess = "local"\nlocal_scratch = "{tmp_path / "scratch"}"\n'
                   'install_packages = false\n')
    res = run_cli("run", "--config", str(cfg), "--profile", "smoke", "--phases", "environment", cwd=tmp_path,
                  timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return (tmp_path / re.search(r"run folder: (\S+)", res.stderr).group(1),
            tmp_path / re.search(r"report: (\S+)", res.stdout).group(1))


def test_a_finished_run_resumed_says_so_and_keeps_its_profile(tmp_path):
    folder, report = _environment_run(tmp_path)
    raw = str(folder)
    before = report.stat().st_mtime_ns
    again = run_cli("run", "--resume", raw, cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and "nothing to resume" in again.stdout
    assert "[preflight] start" not in again.stderr and report.stat().st_mtime_ns == before
    other = run_cli("run", "--resume", raw, "--profile", "quick", cwd=tmp_path, timeout=300)
    assert other.returncode == 2 and "--profile quick cannot apply" in other.stderr
    same = run_cli("run", "--resume", raw, "--profile", "smoke", cwd=tmp_path, timeout=300)
    assert same.returncode == 0 and "nothing to resume" in same.stdout


def test_a_resume_that_asks_for_a_phase_the_run_left_out_plans_it_and_the_report_no_longer_lists_it_as_not_asked(tmp_path):
    raw, report = _environment_run(tmp_path)
    not_asked = next(line for line in report.read_text().splitlines() if line.startswith("- Not asked for"))
    assert "the hardware health pass" in not_asked
    again = run_cli("run", "--resume", str(raw), "--phases", "environment,health", cwd=tmp_path, timeout=300)
    assert "[health] start" in again.stderr, again.stderr[-3000:]
    state = json.loads((raw / "state.json").read_text())
    assert "health" in state["phases_planned"] and "storage" not in state["phases_planned"]
    text = report.read_text()
    line = next(x for x in text.splitlines() if x.startswith("- Not asked for"))
    assert "the hardware health pass" not in line and "the storage benchmarks" in line
    assert run_cli("lint", str(report)).returncode == 0
