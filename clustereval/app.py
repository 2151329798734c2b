"""What the `run`, `report`, `preflight`, `cleanup` and `pairwise` commands do, between the CLI
and the runner: make the transport, run the phases, clear scratch, render and lint the report,
and say which exit status that makes.

Nothing here prints: every line for the user goes through a ``console.RunConsole`` built on the
consoles cli.py owns, and cli.py exits with the status returned.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from clustereval.analysis.fleet import policy_from
from clustereval.compare import save_summary
from clustereval.config import Config
from clustereval.console import RunConsole
from clustereval.errors import (
    EXIT_DEFECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    StoreError,
    UsageError,
)
from clustereval.phases.base import RunContext
from clustereval.phases.scratch import Scratch, scratch_for
from clustereval.phases.settings import PROFILES, PairwiseSettings
from clustereval.records import Finding
from clustereval.records.network import PairwiseRecord
from clustereval.report.cleanup import cleanup_lines
from clustereval.report.closeout import closeout_text
from clustereval.report.gaps import say
from clustereval.report.lint import lint_text
from clustereval.report.render import Rendered, underperforming_lines
from clustereval.runner import Interrupts, clear_scratch, execute, phase_names, render, unfinished
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp
from clustereval.transport.base import Transport
from clustereval.transport.factory import make_transport, nodes_of, with_nodes


def select_phases(phase_list: str | None, skip: tuple[str, ...] = ()) -> list[str]:
    """The phases to run, in run order with preflight first: ``--phases`` (else every one), less those
    cluster.toml's ``skip`` names; a bad name is bad input, and asking for a skipped one on the command
    line is a contradiction the operator resolves, not one we guess at."""
    every = phase_names()
    if not phase_list:
        return [p for p in every if p not in skip]
    wanted = [p.strip() for p in phase_list.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in every]
    if unknown:
        raise UsageError(f"unknown phase{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                         f"choose from: {', '.join(every)}")
    both = [p for p in wanted if p in skip]
    if both:
        raise UsageError(f"--phases names {', '.join(both)}, which cluster.toml's skip list leaves out",
                         "remove it from skip in cluster.toml, or from --phases", error_id="phase-skipped")
    return [p for p in every if p == "preflight" or p in wanted]


def run_eval(config: Config, *, profile: str | None, phase_list: str | None, resume_dir: Path | None,
             reports_dir: Path | None, console: Console, out: Console, debug: bool = False,
             junit_path: Path | None = None) -> int:
    """``profile`` None: the default (standard), or on --resume the profile the run started with."""
    phases = select_phases(phase_list, config.skip)
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
            RunConsole(console, out, live=False).tell(
                f"{resume_dir}: this run already finished with every phase ok; nothing to resume "
                f"(re-render with `clustereval report {resume_dir}`)")
            return EXIT_OK
    transport = make_transport(config)
    try:
        return _run_with(transport, config, phases, profile=profile, resume_dir=resume_dir,
                         reports_dir=reports_dir, console=console, out=out, debug=debug, junit_path=junit_path)
    finally:
        transport.close()  # gives back a Slurm allocation this run asked for, also on Ctrl-C or an error


def _run_with(transport: Transport, config: Config, phases: list[str], *, profile: str | None, resume_dir: Path | None,
              reports_dir: Path | None, console: Console, out: Console, debug: bool,
              junit_path: Path | None = None) -> int:
    nodes = nodes_of(config, transport)
    config = with_nodes(config, nodes, transport)  # Slurm: the allocation's nodes and addresses
    ui = RunConsole(console, out)  # the one progress display of the run (console.py)
    if resume_dir:
        store = RunStore.open(resume_dir)
        state = store.load_state()
        profile = state.profile
        todo = unfinished(state, phases)
        if state.phases_planned and set(phases) - set(state.phases_planned):
            # `--resume --phases` with a phase the run did not plan: it is asked for now, and the report
            # must not list it among the passes the operator left out
            state.phases_planned = [p for p in phase_names() if p in state.phases_planned or p in phases]
            store.save_state(state)
        ui.note(f"resuming: preflight again, then {', '.join(todo) if todo else 'nothing else'}")
    else:
        profile = profile or "standard"
        store = RunStore.create(Path(reports_dir or config.reports_dir), config.name)
        state = RunState(name=config.name, stamp=utc_stamp(), profile=profile, phases_planned=phases,
                         started_utc=utc_now_iso(), config_path=str(Path(config.source).resolve()) if config.source else "")
        store.save_state(state)
    prof = PROFILES[profile]
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store, progress=ui.progress,
                     debug=debug)
    ui.note(f"run folder: {store.raw_dir}")

    def on_phase(name: str, status: str) -> None:
        ui.phase(name, status, ctx.records.get(name) if status != "start" else None)
        if name == "preflight" and status != "start" and "preflight" in ctx.records:
            ui.show_preflight(ctx.records["preflight"])

    left: list[str] = []
    try:
        interrupts = Interrupts(ctx.stop, ui.note)
        with interrupts, ui:
            try:
                outcome = execute(ctx, phases, prof, on_phase=on_phase)
            finally:
                # success, failure, Ctrl-C, a lost node or a full disk here: the scratch goes to trash
                # before anything else, and what happened to it is printed before it is saved
                moves = clear_scratch(ctx, save=False, notify=ui.note)
                lines = cleanup_lines(moves, str(store.raw_dir))
                left = [ln for ln in lines if ln.startswith("scratch: NOT cleared")]
                for line in lines:
                    ui.tell(line)
                scratch_for(ctx).save_moves(moves)
        policy = policy_from(config.verdicts)
        rendered = render(store, config.access, config.targets.storage, policy)
        moved = store.write_report(rendered.markdown)
        store.write_raw("report.md.copy", rendered.markdown)
        save_summary(store, rendered, config.access, config.targets.storage, junit_path, policy=policy)
        lint_ok = finish_report(store, rendered, ui, left=left, lost=ctx.lost_nodes)
    except StoreError as exc:
        for line in exc.lines():
            ui.note(line)
        return EXIT_FAILED
    code = exit_status(outcome, ctx, lint_ok, console, out)
    code = findings_status(code, rendered.findings, console, out)
    if code == EXIT_INTERRUPTED and interrupts.terminated:
        code = EXIT_TERMINATED
    ui.report_path(store.report_path, moved)  # the last line printed, whatever happened above
    return code


def exit_status(outcome, ctx: RunContext, lint_ok: bool, console: Console,  # noqa: ANN001 - a RunOutcome
                out: Console) -> int:
    """130 interrupted; 2 the gate found missing input (nothing slow started); 3 clustereval's own
    defect (the report failed its lint, a phase hit an internal error); 1 a check, phase or node
    failed, or a pass did not run for want of a tool; 0 every phase ok (or skipped: it does not apply to this
    cluster; a pass the operator left out was never planned). The line that says why
    goes to ``console`` (stderr), the resume command of an interrupted run to ``out``."""
    ui = RunConsole(console, out, live=False)
    store = outcome.store
    if outcome.interrupted:
        ui.tell(f"interrupted: resume with `clustereval run --resume {store.raw_dir}`")
        return EXIT_INTERRUPTED
    if outcome.gate_failed:
        pre = ctx.records.get("preflight")
        return EXIT_USAGE if pre is not None and pre.missing else EXIT_FAILED
    if not lint_ok or outcome.defects:
        if outcome.defects:
            ui.note(f"error[internal]: clustereval failed inside {', '.join(outcome.defects)} (a clustereval "
                    f"defect: the tracebacks are in {store.raw_dir / 'errors'})")
        return EXIT_DEFECT
    if outcome.failed or outcome.not_run:
        state = store.load_state()
        parts = []
        for name in outcome.failed + outcome.not_run:
            ended = state.outcomes.get(name)
            who = f" ({', '.join(ended.failed_nodes)})" if ended and ended.failed_nodes else ""
            parts.append(f"{name} {(ended.status if ended else 'failed').replace('-', ' ')}{who}")
        ui.note(f"not every phase is ok: {'; '.join(parts)}; the report's Gaps say why, then "
                f"`clustereval run --resume {store.raw_dir}` runs again what is not ok")
        if outcome.not_run:
            names = ", ".join(f'"{n}"' for n in outcome.not_run)
            ui.note(f"a pass that did not run leaves the eval incomplete; to accept that, name it in cluster.toml "
                    f"(skip = [{names}]) or leave it out of --phases")
        return EXIT_FAILED
    return EXIT_OK


def findings_status(code: int, findings: list[Finding], console: Console, out: Console) -> int:
    """A run whose phases were all ok still fails (1) when its Findings hold an Underperforming bullet: a
    figure missed its rule, a check failed, or a pass left its subsystem unjudged. Each bullet's subsystem
    and units are named on ``console``."""
    lines = underperforming_lines(findings)
    if not lines or code not in (EXIT_OK, EXIT_FAILED):
        return code
    ui = RunConsole(console, out, live=False)
    for line in lines:
        ui.note(line)
    return EXIT_FAILED


def finish_report(store: RunStore, rendered: Rendered, ui: RunConsole, *,
                  left: list[str] | None = None, lost: dict[str, str] | None = None) -> bool:
    """Save and show the close-out, then lint the report just written; False when lint found problems.

    ``left``: the cleanup lines of scratch that could not be cleared (a lost node), each with the
    command that clears it later; ``lost``: the nodes that stopped answering, and how.
    A lint problem is a defect in clustereval's own rendering: the report stays on disk, every
    problem is printed with its line, and the command exits 3."""
    title = next((ln[2:] for ln in rendered.markdown.splitlines() if ln.startswith("# ")), "")
    closeout = closeout_text(rendered, title)
    if lost or left:
        closeout = closeout.rstrip("\n") + "\n\n" + "\n".join(_left_behind(lost or {}, left or [])) + "\n"
    store.write_raw("closeout.md", closeout)
    ui.show_closeout(closeout, store.raw_dir / "closeout.md")
    problems = lint_text(rendered.markdown, path=str(store.report_path))
    ui.show_lint(problems, store.report_path)
    return not problems


def _left_behind(lost: dict[str, str], left: list[str]) -> list[str]:
    """The close-out's last block: nodes lost mid-run and the scratch still on them."""
    lines = ["Left behind on nodes that stopped answering:"]
    lines += [f"- {node}: {why}" for node, why in lost.items()]
    lines += [f"- {ln.removeprefix('scratch: ')}" for ln in left]
    return lines


def cleanup_run(config: Config, run_dir: Path, *, console: Console, out: Console) -> int:
    """``clustereval cleanup RUN_DIR``: move whatever scratch the run left (it recorded every folder)."""
    ui = RunConsole(console, out, live=False)
    store = RunStore.open(run_dir)
    transport = make_transport(config)
    try:
        scratch = Scratch(config, transport, store)
        if not scratch.areas():
            ui.tell(f"{store.raw_dir}: this run recorded no scratch folders")
            return EXIT_OK
        moves = scratch.cleanup(nodes_of(config, transport), save=False)
    finally:
        transport.close()
    for line in cleanup_lines(moves, str(store.raw_dir)):
        ui.tell(line)
    try:
        scratch.save_moves(moves)
    except StoreError as exc:
        for line in exc.lines():
            ui.note(line)
        return EXIT_FAILED
    if all(m.action == "absent" for m in moves):
        ui.tell("every scratch folder of this run is already cleared")
    return EXIT_FAILED if any(m.action in ("failed", "refused") for m in moves) else EXIT_OK


def cleanup_venvs(config: Config, *, console: Console, out: Console) -> int:
    """``clustereval cleanup --venvs``: move the eval venvs this user's earlier runs cached on the nodes
    into ``<mount>/<user>/trash/<stamp>/`` (``phases/venvcache.py``; a rename, nothing deleted); every
    other folder is left alone and named with why. Exit 1 when a folder of ours could not be moved."""
    from clustereval.phases.venvcache import cache_place, clear_cache
    from clustereval.report.units import iec

    ui = RunConsole(console, out, live=False)
    transport = make_transport(config)
    try:
        place = cache_place(config)
        found = clear_cache(transport, nodes_of(config, transport), config, utc_stamp())
    finally:
        transport.close()
    for item in found:
        if item.moved:
            ui.tell(f"venvs: {item.node}: moved {item.path} ({iec(item.size_bytes)}) to {item.moved_to}")
        else:
            ui.tell(f"venvs: {item.node}: left {item.path} alone: {item.why}")
    moved = [item for item in found if item.moved]
    if moved:
        ui.tell("venvs: a move to trash does not free the space; once nothing runs from it, delete the trash "
                "folders named above yourself")
    else:
        ui.tell(f"venvs: no cached eval venv of this user under {place.root}")
    return EXIT_FAILED if any(item.failed for item in found) else EXIT_OK


def preflight_only(config: Config, *, reports_dir: Path | None = None, console: Console, out: Console) -> int:
    """`clustereval preflight`: the gate alone, in its own run folder ``raw-<name>-preflight-<stamp>/``
    (its record and the gloo check's logs, where its Gaps point); no report. What it ships to the nodes
    (the package copy for the gloo check) is removed again."""
    transport = make_transport(config)
    try:
        return _preflight_with(transport, config, reports_dir=Path(reports_dir or config.reports_dir),
                               console=console, out=out)
    finally:
        transport.close()  # gives back a Slurm allocation preflight asked for


def _preflight_with(transport: Transport, config: Config, *, reports_dir: Path, console: Console,
                    out: Console) -> int:
    from clustereval.phases.preflight import PreflightPhase

    ui = RunConsole(console, out, live=False)
    nodes = nodes_of(config, transport)
    config = with_nodes(config, nodes, transport)  # Slurm: the allocation's nodes and addresses
    name = f"{config.name}-preflight"
    store = RunStore.create(reports_dir, name)
    store.save_state(RunState(name=name, stamp=utc_stamp(), profile="standard", phases_planned=["preflight"],
                              started_utc=utc_now_iso(),
                              config_path=str(Path(config.source).resolve()) if config.source else ""))
    ctx = RunContext(config=config, transport=transport, nodes=nodes, store=store, progress=ui.progress)
    try:
        record = PreflightPhase().run(ctx)
        store.save_record("preflight", record)
    finally:
        # the package copy for the gloo check: cleared by the same checks as a run's scratch
        moves = clear_scratch(ctx)
    for line in cleanup_lines(moves, str(store.raw_dir)):
        ui.tell(line)
    ui.show_preflight(record)
    ui.note(f"run folder: {store.raw_dir}")
    if record.passed:
        ui.tell(f"preflight passed: {len(nodes)} node{'s' if len(nodes) != 1 else ''} ready")
        return EXIT_OK
    ui.note("preflight failed: nothing slow was started")
    return EXIT_USAGE if record.missing else EXIT_FAILED


def stored_config_path(run_dir: Path) -> str | None:
    """The cluster.toml an earlier run of RUN_DIR used (None: it ran on the built-in default)."""
    return RunStore.open(run_dir).load_state().config_path or None


def rerender(run_dir: Path, *, console: Console, out: Console, config: Config | None = None,
             junit_path: Path | None = None) -> int:
    """``config``: the cluster.toml as it is now, so targets added since the run judge its figures."""
    store = RunStore.open(run_dir)
    access = ""
    pre = store.record_raw("preflight")
    if pre:
        access = pre.get("access", "")
    policy = policy_from(config.verdicts if config else None)
    rendered = render(store, access, config.targets.storage if config else None, policy)
    moved = store.write_report(rendered.markdown)
    save_summary(store, rendered, access, config.targets.storage if config else None, junit_path, policy=policy)
    ui = RunConsole(console, out, live=False)
    lint_ok = finish_report(store, rendered, ui)
    code = findings_status(EXIT_OK if lint_ok else EXIT_DEFECT, rendered.findings, console, out)
    ui.report_path(store.report_path, moved)  # the last line printed
    return code


def pairwise_only(config: Config, *, payload_bytes: int | None, reports_dir: Path | None, console: Console,
                  out: Console) -> int:
    """`clustereval pairwise`: the straggler hunt alone, in its own run folder."""
    from clustereval.phases.pairwise import run_pairwise
    from clustereval.report.pairwise_nodes import pairwise_lines

    ui = RunConsole(console, out, live=False)
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
                         progress=ui.progress)
        try:
            record = run_pairwise(ctx, nodes, settings)
            store.save_record("pairwise", record)
            store.mark_finished("pairwise")
        finally:
            # the package and torchrun's folders went under the run's scratch: to trash, as after a run
            for line in cleanup_lines(clear_scratch(ctx), str(store.raw_dir)):
                ui.tell(line)
    finally:
        transport.close()
    for line in pairwise_lines(record):
        ui.tell(line)
    for gap in map(say, record.gaps):
        ui.note(f"gap: {gap.text}")
    ui.note(f"run folder: {store.raw_dir}")
    return pairwise_exit(record)


def pairwise_exit(record: PairwiseRecord) -> int:
    """`clustereval pairwise`'s exit status: a named straggler is a finding that fails the check, as an
    Underperforming verdict fails a run; so is a failing node (one that completed no pair, or none
    from a round on while its partners went on), and a hunt in which no pair completed."""
    failed = record.stragglers or record.failing or not any(p.busbw_gb_s is not None for p in record.pairs)
    return EXIT_FAILED if failed else EXIT_OK
