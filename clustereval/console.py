"""What a person watching a run sees: one progress display for the whole run, a line per phase
outcome with its reason, and the report path as the last line.

On a terminal the display is a live rich progress line: the phase, the node, the step, how long
the phase has run and, for steps whose duration is known (the matmul search, the all-reduce
sweep, fio, DCGM), the time left, counting down between updates. Elsewhere (a log file, CI, a
pipe) each update is one plain line, so a log keeps every step. Phases never print: they call
``RunConsole.progress``. The commands in ``app`` print nothing themselves either: every line they
have for the user goes through a ``RunConsole`` built on the consoles cli.py owns.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn
from rich.text import Text

from clustereval.report.gaps import say
from clustereval.report.preflight import across_nodes_line, tcp_coverage_line
from clustereval.report.units import fmt_duration


def phase_reason(record: Any) -> str:
    """One line saying why a phase did not end ok: its first Gap (and how many more), or what the
    gate found missing or unreachable."""
    if record is None:
        return ""
    missing = list(getattr(record, "missing", []) or [])
    if missing:
        return "missing: " + ", ".join(missing)
    failed = [p for p in getattr(record, "probes", []) or [] if getattr(p, "gating", False)
              and not getattr(p, "ok", True) and not getattr(p, "skipped", False)]
    gaps = list(getattr(record, "gaps", []) or [])
    if gaps:
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", say(gaps[0]).text.rstrip())  # a link's label: no URL on a console line
        more = len(gaps) - 1
        return text + (f" (and {more} more in the report)" if more > 0 else "")
    if failed:
        p = failed[0]
        return f"{p.kind} on {p.node} failed: {p.detail}".rstrip(": ")
    return ""


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _TimeLeft(ProgressColumn):
    """The time left of the current step, counting down from the phase's last estimate."""

    def render(self, task: Task) -> Text:
        until = task.fields.get("until")
        if until is None:
            return Text("")
        return Text(f"about {fmt_duration(max(0.0, until - time.monotonic()))} left", style="cyan")


class _Elapsed(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(fmt_duration(task.elapsed or 0.0), style="yellow")


class RunConsole:
    """The run's console. Use as a context manager around the phases; ``progress`` is the phases'
    ``ProgressFn`` and may be called from any thread."""

    def __init__(self, console: Console, out: Console | None = None, *, live: bool | None = None) -> None:
        self.console = console
        self.out = out or console
        self.live = (console.is_terminal and not console.is_dumb_terminal) if live is None else live
        self._lock = threading.RLock()
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}

    # -- the live display ---------------------------------------------------------------------
    def __enter__(self) -> RunConsole:
        if self.live and self._progress is None:
            self._progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[phase]}[/]"),
                                      TextColumn("{task.fields[node]}"), TextColumn("{task.description}"),
                                      _Elapsed(), _TimeLeft(), console=self.console, transient=True,
                                      refresh_per_second=4,
                                      # stdout joins the display only when it is the same terminal: a
                                      # redirected stdout (run > log) keeps its own lines
                                      redirect_stdout=_isatty(sys.stdout), redirect_stderr=_isatty(sys.stderr))
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
                self._tasks.clear()

    # -- what phases call ---------------------------------------------------------------------
    def progress(self, phase: str, node: str, message: str, eta_s: float | None) -> None:
        now = time.monotonic()
        with self._lock:
            started = self._started.setdefault(phase, now)
            if self._progress is not None:
                # a phase the runner started has its own line; a command's steps (debug fs, whose
                # scans report as "storage") share one
                key = phase if phase in self._tasks else "_steps"
                task = self._tasks.get(key)
                fields: dict[str, Any] = {"phase": phase, "node": node, "until": now + eta_s if eta_s else None}
                if task is None:
                    self._tasks[key] = self._progress.add_task(message, total=None, **fields)
                else:
                    self._progress.update(task, description=message, **fields)
                return
            spent = now - started
            timing = [f"{fmt_duration(spent)} in"] if spent >= 1 else []
            if eta_s:
                timing.append(f"about {fmt_duration(eta_s)} left")
            suffix = f" ({', '.join(timing)})" if timing else ""
            self.console.print(f"[{phase}] {node}: {message}{suffix}", markup=False)

    def note(self, text: str) -> None:
        """A line that stays (above the live display on a terminal)."""
        with self._lock:
            self.console.print(text, markup=False)

    def tell(self, text: str) -> None:
        """A line of the command's result, on ``out`` (stdout: what a pipe or a log keeps)."""
        with self._lock:
            self.out.print(text, markup=False)

    def show_preflight(self, record: Any) -> None:
        """The preflight checklist and probes as tables on ``out``, then what is missing or failed."""
        with self._lock:
            show_preflight(record, self.out)

    def show_closeout(self, text: str, saved: object) -> None:
        """The close-out after a blank line, and where it was saved."""
        with self._lock:
            self.out.print("", markup=False)
            self.out.print(text.rstrip("\n"), markup=False)
            self.out.print(f"(saved as {saved})", markup=False)

    def show_lint(self, problems: Iterable[object], report: object) -> None:
        """Every lint problem of the report just written, then the one-line error when there are any
        (they are clustereval's own rendering defect)."""
        problems = list(problems)
        with self._lock:
            for p in problems:
                self.console.print(str(p), markup=False)
            if problems:
                self.console.print(f"error[lint-failed]: {len(problems)} problem{'s' if len(problems) != 1 else ''} "
                                   f"in {report}; the report breaks the runbook's final-pass rules "
                                   "(a clustereval defect: please report it)", markup=False)

    def phase(self, name: str, status: str, record: Any = None) -> None:
        """A phase started or ended: ``start``, ``ok``, ``partial``, ``failed``, ``skipped``,
        ``interrupted``. An outcome other than ok carries its reason on the same line."""
        now = time.monotonic()
        with self._lock:
            if status == "start":
                self._started[name] = now
                if self._progress is not None:
                    self._tasks[name] = self._progress.add_task("starting", total=None, phase=name, node="",
                                                                until=None)
                else:
                    self.console.print(f"[{name}] start", markup=False)
                return
            task = self._tasks.pop(name, None)
            if task is not None and self._progress is not None:
                self._progress.remove_task(task)
            took = fmt_duration(now - self._started.pop(name, now))
            reason = phase_reason(record) if status != "ok" else ""
            if status == "ok" and record is not None and getattr(record, "passed", True) is False:
                status, reason = "failed", phase_reason(record)
            line = f"[{name}] {status}" + (f": {reason}" if reason else "") + f" ({took})"
            self.console.print(line, markup=False)

    def report_path(self, path: object, moved: object = None) -> None:
        """The last line a run prints: where the report is."""
        with self._lock:
            if moved:
                self.out.print(f"the previous rendering moved to {moved}", markup=False)
            self.out.print(f"report: {path}", markup=False)


def show_preflight(record: Any, out: Console) -> None:
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
    if getattr(record, "across_nodes_not_run", None) is not None:
        out.print(across_nodes_line(record.across_nodes_not_run), markup=False)
    untried = tcp_coverage_line(getattr(record, "tcp_coverage", None))
    if untried:
        out.print(untried, markup=False)
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
        for gap in map(say, record.gaps):  # what a node lacks (a configured path): named with the node and the fix
            if gap.node and gap.kind != "preflight.missing":  # a checklist item is listed above with its hint
                out.print(f"  - {gap.text} (fix: {gap.plan})" if gap.plan else f"  - {gap.text}", markup=False)
    for gap in map(say, record.gaps):
        if not record.missing:
            out.print(f"- {gap.text} (plan: {gap.plan})" if gap.plan else f"- {gap.text}", markup=False)
