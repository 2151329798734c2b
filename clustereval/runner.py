"""Phase order, gating, persistence, resume, interruption, cleanup.

Each phase's record is on the controller's disk the moment the phase ends; ``state.json``
says how each ended (ok / partial / failed / skipped), so ``--resume`` re-checks the gate and
runs again every phase that is not ok.
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clustereval.errors import ClusterEvalError
from clustereval.phases.base import Phase, PhasesAhead, RunContext
from clustereval.phases.scratch import scratch_for
from clustereval.phases.settings import PROFILES, Profile, settings_for
from clustereval.records import Gap, PhaseRecord
from clustereval.records.registry import RECORD_TYPES
from clustereval.records.scratch import ScratchMove
from clustereval.report.render import Rendered, RunView, render_report
from clustereval.store import OUTCOMES, PhaseOutcome, RunState, RunStore, utc_now_iso
from clustereval.transport.base import Node

# The seed's loop, in order: name -> "module:Class". A phase module joins the run by adding a line.
PHASES: dict[str, str] = {
    "preflight": "clustereval.phases.preflight:PreflightPhase",
    "packages": "clustereval.phases.packages:PackagesPhase",
    "evalpython": "clustereval.phases.evalpython:EvalPythonPhase",
    "environment": "clustereval.phases.environment:EnvironmentPhase",
    "connectivity": "clustereval.phases.network:ConnectivityPhase",
    "health": "clustereval.phases.health:HealthPhase",
    "gpupass": "clustereval.phases.gpupass:GpuPassPhase",
    "matmul": "clustereval.phases.matmul:MatmulPhase",
    "lemon": "clustereval.phases.lemon:LemonPhase",
    "allreduce": "clustereval.phases.network:AllreducePhase",
    "pairwise": "clustereval.phases.pairwise:PairwisePhase",
    "storage": "clustereval.phases.storage:StoragePhase",
}


def _phase_class(name: str) -> Any:
    module, _, cls = PHASES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def load_phase(name: str, profile: Profile) -> Phase:
    """The phase, with its settings under ``profile`` (``phases/settings.py``) when it has any."""
    phase_cls = _phase_class(name)
    settings = settings_for(name, profile)
    return phase_cls() if settings is None else phase_cls(settings)


def across_nodes(names: list[str]) -> list[str]:
    """The phases among ``names`` that start a job across nodes (their class says ``across_nodes = True``)."""
    return [n for n in names if getattr(_phase_class(n), "across_nodes", False)]


def phases_ahead(phases: list[str], state: RunState, gate: str) -> PhasesAhead:
    """What this attempt goes on to after the gate: the planned phases it has left to run (on
    ``--resume``, those not done), and which of them start a job across nodes."""
    ahead = [p for p in phases if p != gate and not state.done(p)]
    return PhasesAhead(phases=tuple(ahead), across_nodes=tuple(across_nodes(ahead)),
                       every_across_nodes=tuple(across_nodes(list(PHASES))), resume=bool(state.outcomes))


def phase_names() -> list[str]:
    return list(PHASES)


@dataclass
class RunOutcome:
    store: RunStore
    rendered: Rendered | None = None
    finished: list[str] = field(default_factory=list)  # ran to their end (this attempt or an earlier one)
    failed: list[str] = field(default_factory=list)  # ended failed or partial: a check, phase or node failed
    not_run: list[str] = field(default_factory=list)  # ended not-run: a tool it needs is not installed
    defects: list[str] = field(default_factory=list)  # ended by clustereval's own error (exit 3)
    interrupted: bool = False
    gate_failed: bool = False
    ran: list[str] = field(default_factory=list)  # the phases this attempt ran (a resume: only what was missing)


def load_records(store: RunStore) -> dict[str, Any]:
    records: dict[str, Any] = {}
    for phase, cls in RECORD_TYPES.items():
        rec = store.load_record(phase, cls)
        if rec is not None:
            records[phase] = rec
    return records


def view_of(store: RunStore, state: RunState, access: str, records: dict[str, Any],
            shortenings: tuple[tuple[str, str], ...] = (), targets: Any = None, policy: Any = None) -> RunView:
    # the passes the operator left out (`skip` in cluster.toml, or --phases without them)
    not_asked = tuple(p for p in PHASES if p != "preflight" and state.phases_planned and p not in state.phases_planned)
    return RunView(name=state.name, stamp=state.stamp, raw_rel=store.raw_rel, access=access,
                   records=records, profile=state.profile, shortenings=shortenings,
                   interrupted=state.interrupted, targets=targets, not_asked=not_asked, policy=policy)


def run_phase(phase: Phase, ctx: RunContext) -> Any:
    """Run one phase; an error becomes a failed record with a Gap, never a crash of the run.

    A Python error inside a phase is clustereval's own defect: the phase fails with a Gap that says
    so, its traceback goes to ``errors/<phase>.txt`` in the raw folder, and the run goes on."""
    started = utc_now_iso()
    t0 = time.monotonic()
    try:
        record = phase.run(ctx)
    except ClusterEvalError as exc:
        record = _failed_record(phase, "phase.error", {"title": phase.title, "message": exc.message,
                                                       "hint": exc.hint or ""})
    except Exception as exc:  # noqa: BLE001 - a defect of ours must not lose the other phases' results
        rel = f"errors/{phase.name}.txt"
        ctx.raw(rel, traceback.format_exc())
        record = _failed_record(phase, "phase.defect", {"title": phase.title, "error": f"{type(exc).__name__}: {exc}",
                                                        "log": f"{ctx.store.raw_rel}/{rel}"})
        ctx.defects[phase.name] = f"{type(exc).__name__}: {exc}"
    if isinstance(record, PhaseRecord):
        record.phase = record.phase or phase.name
        record.started_utc = record.started_utc or started
        record.finished_utc = utc_now_iso()
        record.seconds = round(time.monotonic() - t0, 1)
    return record


def _failed_record(phase: Phase, kind: str, facts: dict[str, Any]) -> Any:
    cls = RECORD_TYPES.get(phase.name, PhaseRecord)
    record = cls()
    record.status = "failed"
    record.gaps = [Gap(phase=phase.name, kind=kind, facts=facts)]
    return record


def outcome_of(name: str, record: Any, ctx: RunContext) -> PhaseOutcome:
    """How the phase ended, from its record and the per-node failures the phase noted."""
    status = getattr(record, "status", "ok")
    if status not in OUTCOMES:
        status = "partial"
    if name == "preflight" and not getattr(record, "passed", True):
        status = "failed"
    failed = dict(ctx.node_failures.get(name, {}))
    if status in ("partial", "failed"):
        failed.update({g.node: g.kind or g.text for g in getattr(record, "gaps", []) if getattr(g, "node", "")})
    cells = []
    for scan in [getattr(record, "local", None), *getattr(record, "shared", [])]:
        for cell in getattr(scan, "cells", []) if scan is not None else []:
            if cell.error:
                cells.append(f"{scan.mount} {cell.file_size_bytes} {cell.rw}")
    if status == "ok" and (failed or cells):
        status = "partial"
    order = {n.name: n.index for n in ctx.nodes}
    return PhaseOutcome(status=status, failed_nodes=sorted(failed, key=lambda n: (order.get(n, 1 << 30), n)),
                        failed_cells=cells, finished_utc=getattr(record, "finished_utc", "") or utc_now_iso(),
                        seconds=getattr(record, "seconds", 0.0),
                        defect=ctx.defects.get(name, ""))


# phases whose record holds one entry per node (``.nodes[i].node``): on --resume after a partial
# outcome only the failed nodes run again, and their entries replace the old ones
PER_NODE = ("packages", "environment", "health", "gpupass", "matmul", "lemon")


def resume_subset(name: str, state: RunState, ctx: RunContext) -> list[Node] | None:
    """The nodes to run ``name`` on again (None: every node)."""
    prev = state.outcomes.get(name)
    if name not in PER_NODE or prev is None or prev.status != "partial" or prev.interrupted or prev.defect:
        return None
    old = ctx.records.get(name)
    if old is None or not getattr(old, "nodes", None):
        return None
    failed = set(prev.failed_nodes)
    subset = [n for n in ctx.nodes if n.name in failed]
    entries = {e.node for e in old.nodes}
    if not subset or len(subset) == len(ctx.nodes) or any(n.name not in entries for n in ctx.nodes if n not in subset):
        return None
    if any(not g.node for g in getattr(old, "gaps", [])):  # a phase-wide Gap: run it all again
        return None
    return subset


def merge_nodes(phase: Phase, ctx: RunContext, old: Any, new: Any, subset: list[Node]) -> Any:
    """``new`` (from ``subset``) with ``old``'s entries and Gaps for every other node."""
    names = {n.name for n in subset}
    order = {n.name: n.index for n in ctx.nodes}
    kept = [e for e in old.nodes if e.node not in names]
    new.nodes = sorted(kept + [e for e in new.nodes if e.node in names], key=lambda e: order.get(e.node, 1 << 30))
    new.gaps = [g for g in old.gaps if g.node and g.node not in names] + list(new.gaps)
    merged = getattr(phase, "merged", None)
    if merged is not None:
        merged(ctx, new)  # what the phase derives from every node (drift across nodes, the clock range)
    return new


def execute(ctx: RunContext, phases: list[str], profile: Profile = PROFILES["standard"], *,
            on_phase: Callable[[str, str], None] | None = None, gate: str | None = "preflight") -> RunOutcome:
    """Run ``phases`` in order, each with its settings under ``profile``, skipping the ones
    ``state.json`` says have nothing left to do.

    ``gate``: that phase always runs (a resumed run proves the cluster is still reachable), and
    when its record says it did not pass, nothing after it runs. Every other phase whose outcome
    is not ``ok`` (or ``skipped``) runs again; storage keeps the fio runs that finished.
    """
    store = ctx.store
    state = store.load_state()
    outcome = RunOutcome(store=store)
    ctx.records.update(load_records(store))
    if gate:
        ctx.ahead = phases_ahead(phases, state, gate)
    for name in phases:
        if ctx.stop.is_set():
            outcome.interrupted = True
            break
        if gate and _after_eval_python(name) and not gate_after_eval_python(ctx, profile, outcome, on_phase):
            break
        if name != gate and state.done(name):
            outcome.finished.append(name)
            restore = getattr(load_phase(name, profile), "restore", None)
            if restore and name in ctx.records:
                restore(ctx, ctx.records[name])  # e.g. the eval Python chosen before the interruption
            continue
        phase = load_phase(name, profile)
        if not phase.applies(ctx):
            continue
        if on_phase:
            on_phase(name, "start")
        outcome.ran.append(name)
        ctx.node_failures.pop(name, None)
        ctx.defects.pop(name, None)
        subset = resume_subset(name, state, ctx) if name != gate else None
        every = ctx.nodes
        seen = len(ctx.retries)
        try:
            if subset:
                ctx.nodes = subset
                ctx.progress(name, ", ".join(n.name for n in subset), "running again only on the node(s) that "
                             "failed before; the other nodes' results stand", None)
            try:
                record = run_phase(phase, ctx)
            finally:
                ctx.nodes = every
            if subset and isinstance(record, PhaseRecord) and hasattr(record, "nodes"):
                record = merge_nodes(phase, ctx, ctx.records[name], record, subset)
        except KeyboardInterrupt:
            ctx.stop.set()
            outcome.interrupted = True
            if on_phase:
                on_phase(name, "interrupted")
            break
        retried = ctx.retries[seen:]
        if retried:  # commands safe to repeat that a transient failure made run again
            ctx.raw(f"retries/{name}.txt", "".join(f"{line}\n" for line in retried))
        store.save_record(name, record)
        ctx.records[name] = record
        ended = outcome_of(name, record, ctx)
        if ctx.stop.is_set():
            # interrupted mid-phase: what finished is saved, the phase runs again on --resume. Its
            # status cannot tell: a phase that saw the stop skips the steps left and may still say
            # ok (an all-reduce stopped before its inter-node sweep had no failed sweep to report)
            ended.interrupted = True
            store.save_outcome(name, ended)
            outcome.interrupted = True
            if on_phase:
                on_phase(name, "interrupted")
            break
        store.save_outcome(name, ended)
        outcome.finished.append(name)
        if ended.defect:
            outcome.defects.append(name)
        elif ended.status in ("failed", "partial"):
            outcome.failed.append(name)
        elif ended.status == "not-run":
            outcome.not_run.append(name)
        if on_phase:
            on_phase(name, ended.status)
        if gate and name == gate and not getattr(record, "passed", True):
            outcome.gate_failed = True
            break
    if gate and not outcome.interrupted and not outcome.gate_failed:
        gate_after_eval_python(ctx, profile, outcome, on_phase)  # a plan that ends before any benchmark
    state = store.load_state()
    state.interrupted = outcome.interrupted
    if not outcome.interrupted and not outcome.gate_failed:
        state.finished_utc = utc_now_iso()
    store.save_state(state)
    # phases not ok from an earlier attempt that this one did not reach again still count
    for name in phases:
        prev = state.outcomes.get(name)
        if prev is not None and name not in outcome.ran and prev.status in ("failed", "partial"):
            outcome.failed.append(name)
        elif prev is not None and name not in outcome.ran and prev.status == "not-run":
            outcome.not_run.append(name)
    return outcome


def _after_eval_python(name: str) -> bool:
    """Whether ``name`` comes after the eval-Python phase in the run's order (a benchmark or inventory)."""
    order = list(PHASES)
    return name in order and order.index(name) > order.index("evalpython")


def gate_after_eval_python(ctx: RunContext, profile: Profile, outcome: RunOutcome,
                           on_phase: Callable[[str, str], None] | None = None) -> bool:
    """The part of the gate that needs torch on fresh nodes: when preflight deferred its CPU gloo
    check (the nodes' interpreter had no torch), it runs now on the eval Python, before anything
    after that phase; the preflight record is saved again with its result. False (and
    ``outcome.gate_failed``) when the check ran and failed: the run stops there, exit 1."""
    from clustereval.phases.preflight import deferred_gloo
    from clustereval.phases.settings import PreflightSettings

    pre = ctx.records.get("preflight")
    if pre is None or not getattr(pre, "gloo_deferred", False):
        return True
    if on_phase:
        on_phase("preflight", "start")
    try:
        settings = settings_for("preflight", profile)
        ok = deferred_gloo(ctx, pre, settings if isinstance(settings, PreflightSettings) else None)
    except KeyboardInterrupt:
        ctx.stop.set()
        outcome.interrupted = True
        return False
    ctx.store.save_record("preflight", pre)
    ended = outcome_of("preflight", pre, ctx)
    ctx.store.save_outcome("preflight", ended)
    if on_phase:
        on_phase("preflight", ended.status)
    if not ok:
        outcome.gate_failed = True
        if "preflight" not in outcome.failed:
            outcome.failed.append("preflight")
    return ok


def unfinished(state: RunState, phases: list[str]) -> list[str]:
    """The planned phases that still have something to do (the gate aside)."""
    return [p for p in phases if p != "preflight" and not state.done(p)]


def render(store: RunStore, access: str, targets: Any = None, policy: Any = None) -> Rendered:
    """``targets``: the storage targets of the config as it is now (None: those recorded with the scan),
    so adding targets to cluster.toml and re-rendering judges the stored measurements against them;
    ``policy`` likewise the fleet verdicts' ``[verdicts]`` (None: the defaults).
    What the run's profile shortened comes from the profile stored with the run, so a re-render says
    it as the run did."""
    state = store.load_state()
    shortenings = PROFILES.get(state.profile, PROFILES["standard"]).shortenings
    rendered = render_report(view_of(store, state, access, load_records(store), shortenings, targets, policy))
    for rel, data in rendered.files.items():  # plots drawn from the records: a re-render redraws them
        store.write_raw(rel, data)
    return rendered


class Interrupts:
    """First Ctrl-C or SIGTERM: finish the current measurement, then stop. Second: stop now.

    ``say``: where the line telling the user what happens goes (the run's console).
    ``terminated``: a SIGTERM came (the run then exits 143 instead of 130)."""

    def __init__(self, stop: threading.Event, say: Callable[[str], None]) -> None:
        self.stop = stop
        self.say = say
        self.terminated = False
        self._old: Callable[..., Any] | int | None = None  # what signal.signal gives back
        self._old_term: Callable[..., Any] | int | None = None

    def __enter__(self) -> Interrupts:
        self._old = signal.signal(signal.SIGINT, self._handle)
        self._old_term = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:  # noqa: ANN001
        if signum == signal.SIGTERM:
            self.terminated = True
        if self.stop.is_set():
            self.say("interrupt: stopping now")
            raise KeyboardInterrupt
        self.stop.set()
        self.say("interrupt: stopping after the current step (a running fio run is stopped and "
                 "discarded; it runs again on --resume), then writing a partial report "
                 "(Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        signal.signal(signal.SIGINT, self._old or signal.SIG_DFL)
        signal.signal(signal.SIGTERM, self._old_term or signal.SIG_DFL)


def clear_scratch(ctx: RunContext, *, save: bool = True,
                  notify: Callable[[str], None] | None = None) -> list[ScratchMove]:
    """Move every scratch folder the run created to trash (node-local /tmp ones are deleted).

    A first Ctrl-C only says that the cleanup is still running (an interrupted cleanup is what
    would leave other people's filesystems fuller than the eval found them); a second one stops it,
    and what is left is named for ``clustereval cleanup``."""
    scratch = scratch_for(ctx)
    if not scratch.areas():
        return []
    in_main = threading.current_thread() is threading.main_thread()
    asked = threading.Event()
    say = notify or (lambda _line: None)

    def on_sigint(signum, frame) -> None:  # noqa: ANN001
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        say("interrupt: still clearing the scratch on the nodes; Ctrl-C again to stop and leave it for "
            f"`clustereval cleanup {ctx.store.raw_dir}`")

    old = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    try:
        ctx.transport.prepare_cleanup()  # e.g. the Slurm allocation hit its time limit mid-run
        return scratch.cleanup(ctx.nodes, save=save)
    except KeyboardInterrupt:
        say(f"scratch: cleanup stopped; what is left is recorded: run `clustereval cleanup {ctx.store.raw_dir}`")
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGINT, old or signal.SIG_DFL)
