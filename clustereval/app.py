"""What the `run` and `report` commands do, between the CLI and the runner.

Lives apart from cli.py so the command functions stay short; it may print through the
consoles the CLI hands it (cli.py owns them).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from clustereval.compare import save_summary
from clustereval.config import Config
from clustereval.console import RunConsole, progress_printer
from clustereval.errors import (
    EXIT_DEFECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    StoreError,
    UsageError,
)
from clustereval.phases.base import RunContext
from clustereval.phases.scratch import Scratch, scratch_for
from clustereval.phases.settings import PROFILES, PairwiseSettings
from clustereval.records.scratch import ScratchMove
from clustereval.report.cleanup import cleanup_lines
from clustereval.report.closeout import closeout_text
from clustereval.report.lint import lint_text
from clustereval.report.render import Rendered
from clustereval.runner import execute, phase_names, render, unfinished
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Transport
from clustereval.transport.factory import make_transport, nodes_of, with_nodes


def _select_phases(phase_list: str | None) -> list[str]:
    every = phase_names()
    if not phase_list:
        return every
    wanted = [p.strip() for p in phase_list.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in every]
    if unknown:
        raise UsageError(f"unknown phase{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                         f"choose from: {', '.join(every)}")
    return [p for p in every if p == "preflight" or p in wanted]


class _Interrupts:
    """First Ctrl-C: finish the current measurement, then stop. Second: stop now."""

    def __init__(self, stop: threading.Event, console: Console) -> None:
        self.stop = stop
        self.console = console
        self._old = None

    def __enter__(self) -> _Interrupts:
        self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:  # noqa: ANN001
        if self.stop.is_set():
            self.console.print("interrupt: stopping now", markup=False)
            raise KeyboardInterrupt
        self.stop.set()
        self.console.print("interrupt: stopping after the current step (a running fio run is stopped and "
                           "discarded; it runs again on --resume), then writing a partial report "
                           "(Ctrl-C again to stop now)", markup=False)

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        signal.signal(signal.SIGINT, self._old or signal.SIG_DFL)


def run_eval(config: Config, *, profile: str | None, phase_list: str | None, resume_dir: Path | None,
             reports_dir: Path | None, console: Console, out: Console, debug: bool = False,
             junit_path: Path | None = None) -> int:
    """``profile`` None: the default (standard), or on --resume the profile the run started with."""
    phases = _select_phases(phase_list)
    if resume_dir:
        state = RunStore.open(resume_dir).load_state()
        if profile is not None and profile != state.profile:
            raise UsageError(f"{resume_dir} ran with --profile {state.profile}; a resumed run keeps its profile, "
                             f"so --profile {profile} cannot apply",
                             f"drop --profile (or pass --profile {state.profile}), or start a new run with "
                             f"--profile {profile}")
        if state.phases_planned and not phase_list:  # the phases the run was started with
            phases = [p for p in phase_names() if p in state.phases_planned or p == "preflight"]
        planned = phases
        if state.finished_utc and not state.interrupted and state.outcomes and not unfinished(state, planned):
            out.print(f"{resume_dir}: this run already finished with every phase ok; nothing to resume "
                      f"(re-render with `clustereval report {resume_dir}`)", markup=False)
            return EXIT_OK
    transport = make_transport(config)
    try:
        return _run_with(transport, config, phases, profile=profile, resume_dir=resume_dir,
                         reports_dir=reports_dir, console=console, out=out, debug=debug, junit_path=junit_path)
    finally:
        transport.close()  # gives back a Slurm allocation this run asked for, also on Ctrl-C or an error


def _run_with(transport: Transport, config: Config, phases: list[str], *, profile: str, resume_dir: Path | None,
              reports_dir: Path | None, console: Console, out: Console, debug: bool,
              junit_path: Path | None = None) -> int:
    nodes = nodes_of(config, transport)
    config = with_nodes(config, nodes, transport)  # Slurm: the allocation's nodes and addresses
    if resume_dir:
        store = RunStore.open(resume_dir)
        state = store.load_state()
        profile = state.profile
        todo = unfinished(state, phases)
        console.print(f"resuming: preflight again, then {', '.join(todo) if todo else 'nothing else'}", markup=False)
    else:
        profile = profile or "standard"
        store = RunStore.create(Path(reports_dir or config.reports_dir), config.name)
        state = RunState(name=config.name, stamp=utc_stamp(), profile=profile, phases_planned=phases,
                         started_utc=utc_now_iso(), config_path=str(Path(config.source).resolve()) if config.source else "")
        store.save_state(state)
    prof = PROFILES[profile]
    ui = RunConsole(console, out)  # the one progress display of the run (console.py)
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store, progress=ui.progress,
                     debug=debug)
    ui.note(f"run folder: {store.raw_dir}")

    def on_phase(name: str, status: str) -> None:
        ui.phase(name, status, ctx.records.get(name) if status != "start" else None)
        if name == "preflight" and status != "start" and "preflight" in ctx.records:
            show_preflight(ctx.records["preflight"], out)

    left: list[str] = []
    try:
        with _Interrupts(ctx.stop, console), ui:
            try:
                outcome = execute(ctx, phases, prof, on_phase=on_phase)
            finally:
                # success, failure, Ctrl-C, a lost node or a full disk here: the scratch goes to trash
                # before anything else, and what happened to it is printed before it is saved
                moves = clear_scratch(ctx, save=False, notify=lambda line: console.print(line, markup=False))
                lines = cleanup_lines(moves, str(store.raw_dir))
                left = [ln for ln in lines if ln.startswith("scratch: NOT cleared")]
                for line in lines:
                    out.print(line, markup=False)
                scratch_for(ctx).save_moves(moves)
        rendered = render(store, config.access, prof.shortenings, config.targets.storage)
        moved = store.write_report(rendered.markdown)
        store.write_raw("report.md.copy", rendered.markdown)
        save_summary(store, rendered, config.access, config.targets.storage, junit_path)
        lint_ok = finish_report(store, rendered, console=console, out=out, left=left, lost=ctx.lost_nodes)
    except StoreError as exc:
        for line in exc.lines():
            console.print(line, markup=False)
        return EXIT_FAILED
    code = exit_status(outcome, ctx, lint_ok, console, out)
    ui.report_path(store.report_path, moved)  # the last line printed, whatever happened above
    return code


def exit_status(outcome, ctx: RunContext, lint_ok: bool, console: Console,  # noqa: ANN001 - a RunOutcome
                out: Console) -> int:
    """130 interrupted; 2 the gate found missing input (nothing slow started); 3 clustereval's own
    defect (the report failed its lint, a phase hit an internal error); 1 a check, phase or node
    failed; 0 every phase ok (or skipped: it does not apply to this cluster)."""
    store = outcome.store
    if outcome.interrupted:
        out.print(f"interrupted: resume with `clustereval run --resume {store.raw_dir}`", markup=False)
        return EXIT_INTERRUPTED
    if outcome.gate_failed:
        pre = ctx.records.get("preflight")
        return EXIT_USAGE if pre is not None and pre.missing else EXIT_FAILED
    if not lint_ok or outcome.defects:
        if outcome.defects:
            console.print(f"error[internal]: clustereval failed inside {', '.join(outcome.defects)} (a clustereval "
                          f"defect: the tracebacks are in {store.raw_dir / 'errors'})", markup=False)
        return EXIT_DEFECT
    if outcome.failed:
        state = store.load_state()
        parts = []
        for name in outcome.failed:
            ended = state.outcomes.get(name)
            who = f" ({', '.join(ended.failed_nodes)})" if ended and ended.failed_nodes else ""
            parts.append(f"{name} {ended.status if ended else 'failed'}{who}")
        console.print(f"not every phase is ok: {'; '.join(parts)}; the report's Gaps say why, then "
                      f"`clustereval run --resume {store.raw_dir}` runs again what is not ok", markup=False)
        return EXIT_FAILED
    return EXIT_OK


def finish_report(store: RunStore, rendered: Rendered, *, console: Console, out: Console,
                  left: list[str] | None = None, lost: dict[str, str] | None = None) -> bool:
    """Print and save the close-out, then lint the report just written; False when lint found problems.

    ``left``: the cleanup lines of scratch that could not be cleared (a lost node), each with the
    command that clears it later; ``lost``: the nodes that stopped answering, and how.
    A lint problem is a defect in clustereval's own rendering: the report stays on disk, every
    problem is printed with its line, and the command exits 3."""
    title = next((ln[2:] for ln in rendered.markdown.splitlines() if ln.startswith("# ")), "")
    closeout = closeout_text(rendered, title)
    if lost or left:
        closeout = closeout.rstrip("\n") + "\n\n" + "\n".join(_left_behind(lost or {}, left or [])) + "\n"
    store.write_raw("closeout.md", closeout)
    out.print("", markup=False)
    out.print(closeout.rstrip("\n"), markup=False)
    out.print(f"(saved as {store.raw_dir / 'closeout.md'})", markup=False)
    problems = lint_text(rendered.markdown, path=str(store.report_path))
    for p in problems:
        console.print(str(p), markup=False)
    if problems:
        console.print(f"error[lint-failed]: {len(problems)} problem{'s' if len(problems) != 1 else ''} in "
                      f"{store.report_path}; the report breaks the runbook's final-pass rules "
                      "(a clustereval defect: please report it)", markup=False)
    return not problems


def _left_behind(lost: dict[str, str], left: list[str]) -> list[str]:
    """The close-out's last block: nodes lost mid-run and the scratch still on them."""
    lines = ["Left behind on nodes that stopped answering:"]
    lines += [f"- {node}: {why}" for node, why in lost.items()]
    lines += [f"- {ln.removeprefix('scratch: ')}" for ln in left]
    return lines


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


def cleanup_run(config: Config, run_dir: Path, *, console: Console, out: Console) -> int:
    """``clustereval cleanup RUN_DIR``: move whatever scratch the run left (it recorded every folder)."""
    store = RunStore.open(run_dir)
    transport = make_transport(config)
    try:
        scratch = Scratch(config, transport, store)
        if not scratch.areas():
            out.print(f"{store.raw_dir}: this run recorded no scratch folders", markup=False)
            return EXIT_OK
        moves = scratch.cleanup(nodes_of(config, transport), save=False)
    finally:
        transport.close()
    for line in cleanup_lines(moves, str(store.raw_dir)):
        out.print(line, markup=False)
    try:
        scratch.save_moves(moves)
    except StoreError as exc:
        for line in exc.lines():
            console.print(line, markup=False)
        return EXIT_FAILED
    if all(m.action == "absent" for m in moves):
        out.print("every scratch folder of this run is already cleared", markup=False)
    return EXIT_FAILED if any(m.action in ("failed", "refused") for m in moves) else EXIT_OK


# ---- preflight ------------------------------------------------------------------------------------


def show_preflight(record, out: Console) -> None:  # noqa: ANN001 - a PreflightRecord
    """The checklist and the probes as tables, then what is missing or failed, one line each."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Preflight checklist", title_justify="left", show_lines=False)
    table.add_column("need")
    table.add_column("status")
    table.add_column("value / what to supply")
    for item in record.checklist:
        status = "known" if item.known else ("missing" if item.required else "optional, not given")
        style = "" if item.known else ("bold red" if item.required else "yellow")
        table.add_row(escape(item.need), f"[{style}]{status}[/]" if style else status,
                      escape(item.value if item.known or not item.hint else (item.value or item.hint)))
    out.print(table)
    if record.probes:
        probes = Table(title="Reachability", title_justify="left")
        for col in ("probe", "node", "result", "detail", "seconds"):
            probes.add_column(col, justify="right" if col == "seconds" else "left")
        for p in record.probes:
            result = "skipped" if p.skipped else ("ok" if p.ok else ("FAILED" if p.gating else "not working"))
            style = "" if p.ok or p.skipped else ("bold red" if p.gating else "yellow")
            probes.add_row(p.kind, escape(p.node), f"[{style}]{result}[/]" if style else result, escape(p.detail),
                           f"{p.seconds:.2f}")
        out.print(probes)
    if record.rendezvous_fixes:
        for fix in record.rendezvous_fixes:
            out.print(f"rendezvous fix: {fix}", markup=False)
    if record.final_env:
        sources = ", ".join(f"{k}={v} ({record.env_source.get(k, '')})" for k, v in record.final_env.items())
        out.print(f"NCCL environment: {sources}", markup=False)
    if record.missing:
        out.print("missing before the eval can start:", markup=False)
        for item in record.checklist:
            if item.need in record.missing:
                out.print(f"  - {item.need}: {item.hint}", markup=False)
        needs = {item.need for item in record.checklist}
        for gap in record.gaps:  # what a node lacks (a configured path): named with the node and the fix
            if gap.node and not any(gap.text.startswith(f"Missing before the eval can start: {n}") for n in needs):
                out.print(f"  - {gap.text} (fix: {gap.plan})" if gap.plan else f"  - {gap.text}", markup=False)
    for gap in record.gaps:
        if not record.missing:
            out.print(f"- {gap.text} (plan: {gap.plan})" if gap.plan else f"- {gap.text}", markup=False)


def preflight_only(config: Config, *, console: Console, out: Console) -> int:
    """`clustereval preflight`: the gate alone. Writes nothing under reports/; what it ships to the
    nodes (the package copy for the gloo check) is removed again."""


    transport = make_transport(config)
    try:
        return _preflight_with(transport, config, console=console, out=out)
    finally:
        transport.close()  # gives back a Slurm allocation preflight asked for


def _preflight_with(transport: Transport, config: Config, *, console: Console, out: Console) -> int:
    import tempfile

    from clustereval.phases.preflight import PreflightPhase

    nodes = nodes_of(config, transport)
    config = with_nodes(config, nodes, transport)  # Slurm: the allocation's nodes and addresses
    with tempfile.TemporaryDirectory(prefix="clustereval-preflight-") as tmp:
        store = RunStore.create(Path(tmp), config.name)
        store.save_state(RunState(name=config.name, stamp=utc_stamp(), profile="standard"))
        ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store,
                         progress=_progress_printer(console))
        record = PreflightPhase().run(ctx)
        # the package copy for the gloo check: cleared by the same checks as a run's scratch
        moves = clear_scratch(ctx)
    for line in cleanup_lines(moves, ""):
        out.print(line, markup=False)
    show_preflight(record, out)
    if record.passed:
        out.print(f"preflight passed: {len(nodes)} node{'s' if len(nodes) != 1 else ''} ready", markup=False)
        return EXIT_OK
    console.print("preflight failed: nothing slow was started", markup=False)
    return EXIT_USAGE if record.missing else EXIT_FAILED


def _progress_printer(console: Console):
    """Phase, node, step, time spent and left: one plain line per update (see console.py)."""
    return progress_printer(console).progress


def stored_config_path(run_dir: Path) -> str | None:
    """The cluster.toml an earlier run of RUN_DIR used (None: it ran on the built-in default)."""
    return RunStore.open(run_dir).load_state().config_path or None


def rerender(run_dir: Path, *, console: Console, out: Console, config: Config | None = None,
             junit_path: Path | None = None) -> int:
    """``config``: the cluster.toml as it is now, so targets added since the run judge its figures."""
    store = RunStore.open(run_dir)
    state = store.load_state()
    access = ""
    pre = store.record_raw("preflight")
    if pre:
        access = pre.get("access", "")
    prof = PROFILES.get(state.profile, PROFILES["standard"])
    rendered = render(store, access, prof.shortenings, config.targets.storage if config else None)
    moved = store.write_report(rendered.markdown)
    save_summary(store, rendered, access, config.targets.storage if config else None, junit_path)
    lint_ok = finish_report(store, rendered, console=console, out=out)
    RunConsole(console, out, live=False).report_path(store.report_path, moved)  # the last line printed
    return EXIT_OK if lint_ok else EXIT_DEFECT


def pairwise_only(config: Config, *, payload_bytes: int | None, reports_dir: Path | None, console: Console,
                  out: Console) -> int:
    """`clustereval pairwise`: the straggler hunt alone, in its own run folder."""
    from clustereval.phases.pairwise import run_pairwise
    from clustereval.report.network import pairwise_lines

    settings = PairwiseSettings(payload_bytes=payload_bytes or 0)  # a wrong --payload-mib stops here
    transport = make_transport(config)
    try:
        nodes = nodes_of(config, transport)
        config = with_nodes(config, nodes, transport)
        if len(nodes) < 2:
            raise UsageError("the pairwise hunt needs at least 2 nodes in the cluster config",
                             "list every node (and the hostfile) in cluster.toml")
        name = f"{config.name}-pairwise"
        store = RunStore.create(Path(reports_dir or config.reports_dir), name)
        store.save_state(RunState(name=name, stamp=utc_stamp(), profile="standard", phases_planned=["pairwise"],
                                  started_utc=utc_now_iso(),
                                  config_path=str(Path(config.source).resolve()) if config.source else ""))
        ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store,
                         progress=_progress_printer(console), eval_python=config.eval_python or "python3")
        try:
            record = run_pairwise(ctx, nodes, settings)
            store.save_record("pairwise", record)
            store.mark_finished("pairwise")
        finally:
            # the package and torchrun's folders went under the run's scratch: to trash, as after a run
            for line in cleanup_lines(clear_scratch(ctx), str(store.raw_dir)):
                out.print(line, markup=False)
    finally:
        close = getattr(transport, "close", None)
        if close:
            close()
    for line in pairwise_lines(record):
        out.print(line, markup=False)
    for gap in record.gaps:
        console.print(f"gap: {gap.text}", markup=False)
    console.print(f"run folder: {store.raw_dir}", markup=False)
    return EXIT_OK if any(p.busbw_gb_s is not None for p in record.pairs) else EXIT_FAILED
