"""What a person watching a run sees: one progress display for the whole run, a line per phase
outcome with its reason, and the report path as the last line.

On a terminal the display is a live rich progress line: the phase, the node, the step, how long
the phase has run and, for steps whose duration is known (the matmul search, the all-reduce
sweep, fio, DCGM), the time left, counting down between updates. Elsewhere (a log file, CI, a
pipe) each update is one plain line, so a log keeps every step. Phases never print: they call
``RunConsole.progress``; only the CLI and ``app`` (which the CLI hands its consoles) use this.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn
from rich.text import Text


def fmt_duration(seconds: float) -> str:
    """``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    total = max(0, int(round(seconds)))
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


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
        text = gaps[0].text.rstrip()
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
                fields = {"phase": phase, "node": node, "until": now + eta_s if eta_s else None}
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


def progress_printer(console: Console) -> RunConsole:
    """A plain-line ``RunConsole`` for commands without a live display (its ``progress`` is the
    phases' callback)."""
    return RunConsole(console, live=False)
