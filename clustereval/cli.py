"""The command line: the only place that prints for the user or exits."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path
from typing import IO, cast

import click
from rich.console import Console

from clustereval import __version__
from clustereval.errors import EXIT_DEFECT, EXIT_INTERRUPTED, EXIT_USAGE, ClusterEvalError, UsageError
from clustereval.redact import scrub
from clustereval.runner import PHASES


class _Scrubbed:
    """A console stream that blanks credentials (``redact.scrub``) in every line it prints."""

    def __init__(self, stream_name: str) -> None:
        self._name = stream_name

    @property
    def _stream(self):  # noqa: ANN202 - resolved at write time, so pytest's capture keeps working
        return getattr(sys, self._name)

    def write(self, text: str) -> int:
        return self._stream.write(scrub(text))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8")


# rich types ``file`` as IO[str]; it writes, flushes and asks isatty, fileno and encoding, which _Scrubbed answers
console = Console(file=cast(IO[str], _Scrubbed("stderr")), highlight=False, soft_wrap=True)
out = Console(file=cast(IO[str], _Scrubbed("stdout")), highlight=False, soft_wrap=True)


def _fail(exc: ClusterEvalError, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    for line in exc.lines():
        console.print(line, markup=False)
    sys.exit(exc.exit_code)


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # type: ignore[override]
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except ClusterEvalError as exc:
            _fail(exc, debug)
        except KeyboardInterrupt:
            console.print("interrupted", markup=False)
            sys.exit(EXIT_INTERRUPTED)  # main() makes it 143 when a SIGTERM raised it


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clustereval")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Evaluate an ML GPU cluster: GPUs, NVLink and network fabric, local and shared storage.

    With no cluster.toml, `clustereval run` evaluates this machine as a 1-node cluster.
    """
    ctx.obj = {"debug": debug}


def load_config_or_default(path: str | None):
    """cluster.toml when given (or present in the working directory), else this machine alone."""
    from clustereval import config as cfg

    if path is None and Path("cluster.toml").exists():
        path = "cluster.toml"
    if path is None:
        return cfg.default_local_config()
    if not path.strip():
        raise UsageError("--config is an empty path", "give the file, e.g. --config cluster.toml",
                         error_id="empty-path")
    if Path(path).is_dir():
        raise UsageError(f"{path}: is a directory, not a cluster.toml file",
                         f"give the file inside it, e.g. --config {Path(path) / 'cluster.toml'}",
                         error_id="not-a-file")
    if not Path(path).exists():
        raise UsageError(f"{path}: no such file", "run `clustereval init` to write a commented template",
                         error_id="file-not-found")
    return cfg.load_config(Path(path))


def reports_dir_or_fail(option: str | None, config) -> Path:  # noqa: ANN001 - a Config
    """The folder reports go to, created and writable, before anything slow starts."""
    from clustereval.inputs import writable_dir

    if option is not None:
        return writable_dir(option, option="--reports-dir")
    return writable_dir(config.reports_dir, option=f"reports_dir in {config.source}" if config.source
                        else "the default reports folder")


def run_dir_or_fail(path: str) -> Path:
    """A run folder an earlier run wrote (or its report), for report / cleanup / --resume."""
    run_dir = Path(path)
    hint = "give the raw folder of a run: reports/raw-<name>-<YYYY-MM-DD-HHMMZ>"
    if not path.strip():
        raise UsageError("the run folder is an empty path", hint, error_id="empty-path")
    if not run_dir.exists():
        raise UsageError(f"{path}: no such folder", hint, error_id="file-not-found")
    from clustereval.store import RunStore

    RunStore.open(run_dir)  # a raw-… folder with its state.json, or the report beside one
    return run_dir


@cli.command()
@click.argument("report")
def lint(report: str) -> None:
    """Check a report against the runbook's final-pass rules.

    \b
    Exit status:
      0    clean
      1    one or more problems (each printed with its line)
    """
    from clustereval.report.lint import lint_file

    problems = lint_file(Path(report))
    for p in problems:
        out.print(str(p), markup=False)
    if problems:
        console.print(f"{len(problems)} lint problem{'s' if len(problems) != 1 else ''} in {report}",
                      markup=False)
        sys.exit(1)
    out.print(f"{report}: clean", markup=False)


@cli.command()
@click.option("--config", "config_path", help="cluster.toml (default: ./cluster.toml, else this machine alone).")
@click.option("--profile", type=click.Choice(["quick", "standard", "smoke"]), default=None,
              help="standard (the default) = the published recipe; quick shortens it and the report says how; "
                   "smoke rehearses the whole pipeline with tiny measurements (figures too small to judge by; "
                   "DCGM's diag and the eval Python's torch download are not shortened). "
                   "A resumed run keeps the profile it started with.")
@click.option("--phases", "phase_list",
              help=f"Comma-separated subset of phases to run (preflight always runs): {', '.join(PHASES)}.")
@click.option("--resume", "resume_dir",
              help="Continue RUN_DIR: preflight again, then every phase that is not ok (storage keeps its "
                   "finished fio runs); a run that finished with every phase ok says so and does nothing.")
@click.option("--reports-dir",
              help="The folder that receives <name>-<stamp>.md and raw-<name>-<stamp>/, relative to the current "
                   "directory (default: reports_dir of the config, else reports); not used with --resume.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
              help="Also write the verdicts and Gaps as JUnit XML to this file (for CI).")
@click.pass_context
def run(ctx: click.Context, config_path: str | None, profile: str, phase_list: str | None,
        resume_dir: str | None, reports_dir: str | None, junit_path: str | None) -> None:
    """Preflight, then every phase; render, lint, clear scratch, print the close-out.

    \b
    Exit status:
      0    every phase ok (or skipped: it does not apply to this cluster, or skip in
           cluster.toml names it)
      1    a check, phase or node failed, or a pass did not run for want of a tool
           (DCGM, fio) (the report's Gaps say which)
      2    bad input: nothing slow was started
      3    clustereval's own defect, e.g. the report fails its lint (the report is still written)
      130  interrupted by Ctrl-C (resume with --resume RUN_DIR)
      143  stopped by SIGTERM (a closed terminal, a scheduler): cleaned up like Ctrl-C
    """
    from clustereval.app import run_eval, select_phases, stored_config_path

    select_phases(phase_list)  # a bad name is bad input before anything, reports/ included, is made

    if resume_dir:
        run_dir_or_fail(resume_dir)
    if resume_dir and not config_path:
        config_path = stored_config_path(Path(resume_dir))  # the config the interrupted run used
    config = load_config_or_default(config_path)
    reports = None if resume_dir else reports_dir_or_fail(reports_dir, config)
    code = run_eval(config, profile=profile, phase_list=phase_list,
                    resume_dir=Path(resume_dir) if resume_dir else None,
                    reports_dir=reports if reports_dir else None,
                    console=console, out=out, debug=ctx.obj["debug"],
                    junit_path=Path(junit_path) if junit_path else None)
    sys.exit(code)


@cli.command()
@click.argument("run_dir")
@click.option("--config", "config_path",
              help="cluster.toml whose [[targets.storage]] judge the stored storage figures (default: the one the "
                   "run used); the GPU and bandwidth targets are the ones the run recorded.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
              help="Also write the verdicts and Gaps as JUnit XML to this file (for CI).")
def report(run_dir: str, config_path: str | None, junit_path: str | None) -> None:
    """Re-render the report of RUN_DIR from its saved records (no cluster needed).

    \b
    Exit status:
      0    the report was written and passes its lint
      3    it fails its lint (a clustereval defect; the report is still written)
    """
    from clustereval.app import rerender, stored_config_path

    run_dir_or_fail(run_dir)
    config_path = config_path or stored_config_path(Path(run_dir))
    config = load_config_or_default(config_path) if config_path and Path(config_path).exists() else None
    sys.exit(rerender(Path(run_dir), console=console, out=out, config=config,
                      junit_path=Path(junit_path) if junit_path else None))


@cli.command()
@click.argument("old", type=click.Path(exists=True))
@click.argument("new", type=click.Path(exists=True))
@click.option("--fio-tolerance", type=click.FloatRange(0, 100, min_open=True), default=5.0, show_default=True,
              help="Percent by which a fio cell or a concurrent write may move and still be within noise.")
@click.option("--output", type=click.Path(dir_okay=False),
              help="Markdown path (the JSON goes beside it; default: diff-<old>-vs-<new>.md beside NEW's report).")
@click.option("--fail-on-change", is_flag=True, help="Exit 1 when any figure changed beyond noise.")
def diff(old: str, new: str, fio_tolerance: float, output: str | None, fail_on_change: bool) -> None:
    """Compare two runs (run folders, reports or summary.json): what changed beyond noise, drift, verdicts.

    \b
    Exit status:
      0    compared (with --fail-on-change: and nothing changed beyond noise)
      1    --fail-on-change and a figure changed beyond noise
      2    bad input (not a run, a report or a summary.json)
      3    the diff markdown fails its lint (a clustereval defect)
    """
    from clustereval.compare import diff_runs

    rec, md_path, json_path = diff_runs(Path(old), Path(new), fio_tolerance=fio_tolerance / 100,
                                        output=Path(output) if output else None)
    if not rec.same_cluster:
        out.print(f"different clusters ({', '.join(rec.old.hostnames)} vs {', '.join(rec.new.hostnames)}): "
                  "compared by node order and GPU index", markup=False)
    for c in rec.beyond:
        change = f"{c.change_frac * 100:+.1f}%" if c.change_frac is not None else f"{c.old_state} -> {c.new_state}"
        noise = f" (noise {c.noise_frac * 100:.1f}%)" if c.noise_frac is not None else ""
        out.print(f"changed beyond noise: {c.subject}: {change}{noise}", markup=False)
    for d in rec.drift:
        out.print(f"drift: {d.item}: {d.old or 'not set'} -> {d.new or 'not set'}", markup=False)
    out.print(f"{len(rec.beyond)} changed beyond noise, {len(rec.within)} within noise"
              + (f", {len(rec.not_judged)} not judged (one value, no repeat noise)" if rec.not_judged else ""),
              markup=False)
    out.print(f"diff: {md_path}", markup=False)
    out.print(f"json: {json_path}", markup=False)
    problems = lint_text_of(md_path)
    for p in problems:
        console.print(str(p), markup=False)
    if problems:
        console.print(f"error[lint-failed]: {len(problems)} problem(s) in {md_path} (a clustereval defect: please "
                      "report it)", markup=False)
        sys.exit(3)
    sys.exit(1 if fail_on_change and rec.beyond else 0)


def lint_text_of(path: Path) -> list:
    from clustereval.report.lint import lint_file

    return lint_file(path)


@cli.command()
@click.argument("run_dir", required=False)
@click.option("--config", "config_path",
              help="cluster.toml to reach the nodes (default: the one the run used; with --venvs ./cluster.toml, "
                   "else this machine alone).")
@click.option("--venvs", is_flag=True,
              help="Move the eval venvs your earlier runs cached on the nodes (<mount>/<user>/clustereval-venvs/, "
                   "on the first shared path, else local_scratch) to <mount>/<user>/trash/<stamp>/; nothing is "
                   "deleted and nothing else there is touched. The next run builds a fresh one.")
def cleanup(run_dir: str | None, config_path: str | None, venvs: bool) -> None:
    """Clear the scratch RUN_DIR left on the nodes (moved to trash on the same mount; a node-local /tmp
    folder is deleted); print paths and sizes. With --venvs, move your cached eval venvs to trash
    (RUN_DIR not needed).

    \b
    Exit status:
      0    every folder is cleared (or was already)
      1    a folder could not be cleared, or was refused (the line says why)
      2    neither RUN_DIR nor --venvs, or RUN_DIR is not a run folder
    """
    from clustereval.app import cleanup_run, cleanup_venvs, stored_config_path

    if venvs and not run_dir:
        sys.exit(cleanup_venvs(load_config_or_default(config_path), console=console, out=out))
    if not run_dir:
        raise UsageError("cleanup needs RUN_DIR (the run folder whose scratch to clear) or --venvs",
                         "e.g. clustereval cleanup reports/raw-NAME-STAMP, or clustereval cleanup --venvs",
                         error_id="missing-argument")
    run_dir_or_fail(run_dir)
    config = load_config_or_default(config_path or stored_config_path(Path(run_dir)))
    code = cleanup_run(config, Path(run_dir), console=console, out=out)
    if venvs:
        code = max(code, cleanup_venvs(config, console=console, out=out))
    sys.exit(code)


@cli.command()
@click.option("--config", "config_path",
              help="cluster.toml (default: ./cluster.toml, else this machine alone).")
@click.option("--node", "node_name", help="Snapshot this node (name, address or node<N>).")
@click.option("--all", "all_nodes", is_flag=True, help="Snapshot every node in parallel.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with the same content as the lines.")
@click.option("--sample-seconds", type=click.FloatRange(0.2, 60), default=3.0, show_default=True,
              help="How long host iowait is sampled from /proc/stat.")
@click.option("--evidence", "evidence_dir", type=click.Path(file_okay=False),
              help="Also write one evidence folder (and .tar.gz) per node with a CONCERN under this folder.")
def snapshot(config_path: str | None, node_name: str | None, all_nodes: bool, as_json: bool,
             sample_seconds: float, evidence_dir: str | None) -> None:
    """Read-only host snapshot: [OK] / [CONCERN] / [INFO] lines, each CONCERN with a → next step.

    Writes nothing but its own output (and the evidence folders when asked for).

    \b
    Exit status:
      0    every node snapshotted answered
      1    a node did not answer
    """
    from clustereval.debug import snapshot as snap
    from clustereval.transport.factory import make_transport, nodes_of

    config = load_config_or_default(config_path)
    transport = make_transport(config)
    try:
        every = nodes_of(config, transport)
        nodes = snap.select_nodes(every, node_name, all_nodes)
        record = snap.collect(config, transport, nodes, sample_s=sample_seconds)
    finally:
        transport.close()
    if as_json:
        click.echo(snap.snapshot_json(record))
    else:
        for line in snap.snapshot_lines(record):
            out.print(line, markup=False)
    if evidence_dir:
        from clustereval.debug.evidence import write_snapshot_evidence

        for path in write_snapshot_evidence(Path(evidence_dir), record):
            console.print(f"evidence: {path}", markup=False)
    console.print(snap.summary(record), markup=False)
    if not all_nodes and node_name is None and len(every) > 1:
        console.print(f"(snapshot of {nodes[0].name} only: --all for every node)", markup=False)
    sys.exit(0 if all(n.reachable for n in record.nodes) else 1)


@cli.command()
@click.argument("path", required=False, default="cluster.toml")
def init(path: str) -> None:
    """Write a commented cluster.toml template to PATH (default: ./cluster.toml).

    \b
    Exit status:
      0    written
      2    PATH exists (never overwritten) or cannot be written
    """
    from clustereval.configload import template_text
    from clustereval.inputs import file_to_write, write_new_file

    example = "clustereval init cluster.toml"
    target = file_to_write(path, example=example)
    write_new_file(target, template_text(), example=example)
    out.print(f"wrote {path}: fill it in, then run `clustereval preflight`", markup=False)
    out.print("a pass you do not want (e.g. the hardware health pass on nodes without DCGM) goes in its "
              "skip list: skip = [\"health\"]", markup=False)


@cli.command()
@click.option("--config", "config_path",
              help="cluster.toml (default: ./cluster.toml, else this machine alone).")
@click.option("--reports-dir", help="Where its run folder goes (default from the config: reports).")
def preflight(config_path: str | None, reports_dir: str | None) -> None:
    """The hard gate: the checklist, SSH reachability of every node, the run's TCP ports on every
    node (rdzv_port through rdzv_port + the node count), NCCL env, CPU gloo check (skipped, with a
    gap, when the nodes' Python has no torch yet).

    Keeps its record and the gloo check's logs in <reports_dir>/raw-<name>-preflight-<stamp>/.

    \b
    Exit status:
      0    every check passed
      1    a node cannot be reached, a port is blocked or taken, or the gloo check failed
      2    something required is missing (the exact list); nothing slow starts either way
    """
    from clustereval.app import preflight_only

    config = load_config_or_default(config_path)
    sys.exit(preflight_only(config, reports_dir=reports_dir_or_fail(reports_dir, config), console=console,
                            out=out))


@cli.group()
def debug() -> None:
    """Performance debugger workflows: uneven NCCL across nodes, a slow filesystem."""


@debug.command("nccl")
@click.option("--config", "config_path",
              help="cluster.toml (default: ./cluster.toml, else this machine alone, which is too few nodes).")
@click.option("--pairs", "pairs_file", type=click.Path(exists=True, dir_okay=False),
              help="Use a saved pairwise record (RUN_DIR/pairwise.record.json) instead of measuring.")
@click.option("--snapshot-all", is_flag=True, help="Snapshot every node, not only the ones the hunt names.")
@click.option("--reports-dir", help="Where the run folder goes (default from the config).")
@click.option("--sample-seconds", type=click.FloatRange(0.2, 60), default=3.0, show_default=True,
              help="How long host iowait is sampled in each snapshot.")
def debug_nccl_cmd(config_path: str | None, pairs_file: str | None, snapshot_all: bool, reports_dir: str | None,
                   sample_seconds: float) -> None:
    """Uneven NCCL: pairwise hunt, snapshot of the named nodes, ranked suspects with evidence.

    Needs torch in eval_python (or the nodes' python3): it builds no venv. Its run folder is
    <reports_dir>/raw-<name>-debug-nccl-<stamp>/.

    \b
    Exit status:
      0    the hunt completed and named no straggler
      1    the hunt named a straggler, or no pair completed
      2    bad input (fewer than 2 nodes, an unreadable --pairs file)
    """
    from clustereval.analysis.nccl_debug import report_lines
    from clustereval.console import RunConsole
    from clustereval.debug.nccl import debug_nccl
    from clustereval.report.cleanup import cleanup_lines

    config = load_config_or_default(config_path)
    reports = reports_dir_or_fail(reports_dir, config)
    with RunConsole(console) as ui:
        rec, store = debug_nccl(config, pairs_file=Path(pairs_file) if pairs_file else None,
                                snapshot_all=snapshot_all, reports_dir=reports, sample_s=sample_seconds,
                                progress=ui.progress)
    for line in report_lines(rec):
        out.print(line, markup=False)
    for line in cleanup_lines(rec.scratch, str(store.raw_dir)):
        out.print(line, markup=False)
    from clustereval.report.gaps import say

    for gap in map(say, rec.gaps):
        console.print(f"gap: {gap.text}", markup=False)
    console.print(f"run folder: {store.raw_dir}", markup=False)
    if rec.evidence_dir:
        console.print(f"evidence: {rec.evidence_dir}", markup=False)
    completed = [p for p in rec.pairs if p.busbw_gb_s is not None]
    sys.exit(1 if rec.stragglers or rec.failing or not completed else 0)


@debug.command("fs")
@click.argument("mount")
@click.option("--config", "config_path",
              help="cluster.toml (default: ./cluster.toml, else this machine alone).")
@click.option("--node", "node_name", help="Run on this node (default: the first).")
@click.option("--runtime-seconds", type=click.IntRange(1, 180), default=5, show_default=True,
              help="Timed IO per fio run of the quick scan.")
@click.option("--reports-dir", help="Where the run folder goes (default from the config).")
@click.option("--sample-seconds", type=click.FloatRange(0.2, 60), default=3.0, show_default=True,
              help="How long host iowait is sampled.")
def debug_fs_cmd(mount: str, config_path: str | None, node_name: str | None, runtime_seconds: int,
                 reports_dir: str | None, sample_seconds: float) -> None:
    """Slow filesystem: storage signals, layout, a quick fio scan against the local disk, guidance.

    \b
    Exit status:
      0    the quick scan of MOUNT completed
      1    it did not (the gaps say why)
      2    bad input
    """
    from clustereval.analysis.fs_debug import report_lines
    from clustereval.console import RunConsole
    from clustereval.debug.fs import debug_fs

    config = load_config_or_default(config_path)
    reports = reports_dir_or_fail(reports_dir, config)
    with RunConsole(console) as ui:
        rec, store = debug_fs(config, mount, node_name=node_name, runtime_s=runtime_seconds, reports_dir=reports,
                              sample_s=sample_seconds, progress=ui.progress)
    for line in report_lines(rec):
        out.print(line, markup=False)
    from clustereval.report.gaps import say

    for gap in map(say, rec.gaps):
        console.print(f"gap: {gap.text}", markup=False)
    console.print(f"run folder: {store.raw_dir}", markup=False)
    sys.exit(0 if rec.shared is not None and rec.shared.complete else 1)


@cli.command()
@click.option("--config", "config_path",
              help="cluster.toml (default: ./cluster.toml, else this machine alone, which is too few nodes).")
@click.option("--payload-mib", type=click.IntRange(1, 16384), default=None,
              help="All-reduce payload per pair in MiB (default: 1024 on GPUs, 2 with gloo on CPUs).")
@click.option("--reports-dir", help="Where the run folder goes (default from the config).")
def pairwise(config_path: str | None, payload_mib: int | None, reports_dir: str | None) -> None:
    """All-reduce busbw for node pairs in parallel rounds, several samples each; names a node only when
    every sample of its pairs, the fastest included, is more than 5% below the slowest sample of the
    healthy pairs (above 4 nodes: both members of a pair 5% below the round's upper quartile are
    suspects, and a suspect is named only when its pairs with two trusted partners are slow too).

    Needs torch in eval_python (or the nodes' python3): it builds no venv.

    \b
    Exit status:
      0    the hunt completed and named no straggler
      1    it named a straggler, or no pair completed
      2    bad input (fewer than 2 nodes)
    """
    from clustereval.app import pairwise_only

    config = load_config_or_default(config_path)
    sys.exit(pairwise_only(config, payload_bytes=payload_mib * 2**20 if payload_mib else None,
                           reports_dir=reports_dir_or_fail(reports_dir, config), console=console, out=out))


def main() -> None:
    # SIGPIPE stays ignored (Python's default): with the default action, a node's ssh that exits before
    # reading the script written to its stdin would kill the whole run. A closed stdout (clustereval ...
    # | head) is handled below instead.
    # SIGTERM (a closed terminal, a job scheduler) is an interrupt: during a run it is a Ctrl-C (the run
    # stops after the current measurement, writes its partial report and clears the scratch; a second
    # one stops now); elsewhere it stops the command at once. `finally` blocks and atexit run, so a
    # Slurm allocation this run asked for is cancelled. The exit status is 143 (128 + SIGTERM), not 130
    terminated: list[int] = []

    def on_sigterm(signum: int, frame: object) -> None:
        if not terminated:
            terminated.append(signum)
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = cli.main(standalone_mode=False)
    except SystemExit as exc:
        if terminated:
            sys.exit(128 + terminated[0])
        raise exc from None
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:  # Ctrl-C (or SIGTERM) at a prompt, while click parses, or uncaught in a command
        console.print("terminated" if terminated else "interrupted", markup=False)
        sys.exit(128 + terminated[0] if terminated else EXIT_INTERRUPTED)
    except BrokenPipeError:  # the reader of our output went away (| head): stop quietly, as if interrupted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:  # an unknown option, a bad choice: one line, a hint, exit 2
        _fail(_click_error(exc), "--debug" in sys.argv)
    except ClusterEvalError as exc:  # raised outside a command (rare)
        _fail(exc, "--debug" in sys.argv)
    except Exception:  # noqa: BLE001 - last resort: one line, the traceback only with --debug
        if "--debug" in sys.argv:
            raise
        err = sys.exc_info()[1]
        console.print(f"error[internal]: {type(err).__name__}: {err} (re-run with --debug for the traceback)",
                      markup=False)
        sys.exit(EXIT_USAGE if isinstance(err, (ValueError, OSError)) else EXIT_DEFECT)
    sys.exit(code if isinstance(code, int) else 0)


def _click_error(exc: click.ClickException) -> UsageError:
    """click's own parse errors in the form of every other bad input."""
    ctx = getattr(exc, "ctx", None)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:  # the subcommands, not how the program was started
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    command = " ".join(["clustereval", *names])
    error_id = {"NoSuchOption": "unknown-option", "BadParameter": "bad-argument", "MissingParameter":
                "missing-argument", "BadOptionUsage": "bad-option", "BadArgumentUsage": "bad-argument"}.get(
        type(exc).__name__, "bad-usage")
    return UsageError(exc.format_message(), f"`{command} --help` lists what it takes", error_id=error_id)


if __name__ == "__main__":
    main()
