"""Phase order, gating, persistence, resume, interruption, cleanup.

Each phase's record is on the controller's disk the moment the phase ends; ``state.json``
says which finished, so ``--resume`` continues from the first unfinished phase.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clustereval.errors import ClusterEvalError
from clustereval.phases.base import Phase, RunContext
from clustereval.records import Gap, PhaseRecord
from clustereval.records.registry import RECORD_TYPES
from clustereval.report.render import Rendered, RunView, render_report
from clustereval.store import RunState, RunStore, utc_now_iso

# The seed's loop, in order: name -> "module:Class". A phase module joins the run by adding a line.
PHASES: dict[str, str] = {
    "preflight": "clustereval.phases.preflight:PreflightPhase",
    "packages": "clustereval.phases.packages:PackagesPhase",
    "evalpython": "clustereval.phases.evalpython:EvalPythonPhase",
    "environment": "clustereval.phases.environment:EnvironmentPhase",
    "connectivity": "clustereval.phases.network:ConnectivityPhase",
    "health": "clustereval.phases.compute:HealthPhase",
    "matmul": "clustereval.phases.compute:MatmulPhase",
    "lemon": "clustereval.phases.compute:LemonPhase",
    "allreduce": "clustereval.phases.network:AllreducePhase",
    "pairwise": "clustereval.phases.pairwise:PairwisePhase",
    "storage": "clustereval.phases.storage:StoragePhase",
}


def load_phase(name: str) -> Phase:
    module, _, cls = PHASES[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def phase_names() -> list[str]:
    return list(PHASES)


@dataclass
class RunOutcome:
    store: RunStore
    rendered: Rendered | None = None
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    interrupted: bool = False
    gate_failed: bool = False


def load_records(store: RunStore) -> dict[str, Any]:
    records: dict[str, Any] = {}
    for phase, cls in RECORD_TYPES.items():
        rec = store.load_record(phase, cls)
        if rec is not None:
            records[phase] = rec
    return records


def view_of(store: RunStore, state: RunState, access: str, records: dict[str, Any],
            shortenings: tuple[str, ...] = (), targets: Any = None) -> RunView:
    return RunView(name=state.name, stamp=state.stamp, raw_rel=store.raw_rel, access=access,
                   records=records, profile=state.profile, shortenings=shortenings,
                   interrupted=state.interrupted, targets=targets)


def run_phase(phase: Phase, ctx: RunContext) -> Any:
    """Run one phase; an error becomes a failed record with a Gap, never a crash of the run."""
    started = utc_now_iso()
    t0 = time.monotonic()
    try:
        record = phase.run(ctx)
    except ClusterEvalError as exc:
        cls = RECORD_TYPES.get(phase.name, PhaseRecord)
        record = cls()
        record.status = "failed"
        record.gaps = [Gap(phase=phase.name, text=f"{phase.title} did not complete: {exc.message}",
                           plan=exc.hint or "fix the error above and run `clustereval run --resume RUN_DIR`")]
    if isinstance(record, PhaseRecord):
        record.phase = record.phase or phase.name
        record.started_utc = record.started_utc or started
        record.finished_utc = utc_now_iso()
        record.seconds = round(time.monotonic() - t0, 1)
    return record


def execute(ctx: RunContext, phases: list[str], *, on_phase: Callable[[str, str], None] | None = None,
            gate: str | None = "preflight") -> RunOutcome:
    """Run ``phases`` in order, skipping the ones ``state.json`` marks finished.

    ``gate``: when that phase's record says it did not pass, nothing after it runs.
    """
    store = ctx.store
    state = store.load_state()
    outcome = RunOutcome(store=store)
    ctx.records.update(load_records(store))
    for name in phases:
        if ctx.stop.is_set():
            outcome.interrupted = True
            break
        if name in state.phases_finished:
            outcome.finished.append(name)
            restore = getattr(load_phase(name), "restore", None)
            if restore and name in ctx.records:
                restore(ctx, ctx.records[name])  # e.g. the eval Python chosen before the interruption
            continue
        phase = load_phase(name)
        if not phase.applies(ctx):
            continue
        if on_phase:
            on_phase(name, "start")
        try:
            record = run_phase(phase, ctx)
        except KeyboardInterrupt:
            ctx.stop.set()
            outcome.interrupted = True
            if on_phase:
                on_phase(name, "interrupted")
            break
        store.save_record(name, record)
        ctx.records[name] = record
        if ctx.stop.is_set() and getattr(record, "status", "ok") != "ok":
            # interrupted mid-phase: what finished is saved, the phase runs again on --resume
            outcome.interrupted = True
            if on_phase:
                on_phase(name, "interrupted")
            break
        store.mark_finished(name)
        outcome.finished.append(name)
        if getattr(record, "status", "ok") == "failed":
            outcome.failed.append(name)
        if on_phase:
            on_phase(name, getattr(record, "status", "ok"))
        if gate and name == gate and not getattr(record, "passed", True):
            outcome.gate_failed = True
            break
    state = store.load_state()
    state.interrupted = outcome.interrupted
    if not outcome.interrupted and not outcome.gate_failed:
        state.finished_utc = utc_now_iso()
    store.save_state(state)
    return outcome


def render(store: RunStore, access: str, shortenings: tuple[str, ...] = (), targets: Any = None) -> Rendered:
    """``targets``: the storage targets of the config as it is now (None: those recorded with the scan),
    so adding targets to cluster.toml and re-rendering judges the stored measurements against them."""
    state = store.load_state()
    rendered = render_report(view_of(store, state, access, load_records(store), shortenings, targets))
    for rel, data in rendered.files.items():  # plots drawn from the records: a re-render redraws them
        store.write_raw(rel, data)
    return rendered
