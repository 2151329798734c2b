"""The run folder: ``reports/<name>-<YYYY-MM-DD-HHMMZ>.md`` with ``reports/raw-<name>-<stamp>/`` beside it.

Only this module writes results. Every record lands atomically (write a temp file, rename)
the moment its phase ends, and ``state.json`` says which phases finished so a run resumes.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from clustereval.errors import StoreError, UsageError
from clustereval.records import dumps, from_dict, to_dict
from clustereval.redact import scrub, scrub_bytes

T = TypeVar("T")

STATE_FILE = "state.json"
RECORD_SUFFIX = ".record.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def utc_stamp(now: dt.datetime | None = None) -> str:
    """``2026-09-17-1938Z``: the run folder's time stamp."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%d-%H%MZ")


def utc_now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def save_failed(path: Path, exc: OSError) -> StoreError:
    """Where and why a save failed, and what frees it (the controller's disk, not a node's)."""
    why = exc.strerror or str(exc)
    hint = (f"free space on the disk holding {path.parent}" if exc.errno == errno.ENOSPC else
            f"{path.parent} is on a read-only filesystem" if exc.errno == errno.EROFS else
            f"check that {path.parent} is writable")
    return StoreError(f"could not save {path}: {why}",
                      f"{hint}, or set reports_dir in cluster.toml to a writable folder; the nodes' scratch "
                      "was cleared whatever was saved")


def atomic_write(path: Path, text: str | bytes, *, verbatim: bool = False) -> None:
    """Write ``path`` whole or not at all; credentials in the text are blanked first (``redact``)
    unless ``verbatim`` (our own source code, published as the exact code that ran)."""
    if not verbatim:
        text = scrub_bytes(text) if isinstance(text, bytes) else scrub(text)
    tmp = ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = "wb" if isinstance(text, bytes) else "w"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, mode) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise save_failed(path, exc) from exc
        raise


TOOLS_DIR = "tools"  # raw-<name>/tools/: the source of every worker and runner that ran
# not-run: a pass this cluster could run was not run, for want of a tool the operator can install (DCGM):
# not a failure, but the eval is incomplete until it runs or the operator names it as not wanted
OUTCOMES = ("ok", "partial", "failed", "skipped", "not-run")
DONE = ("ok", "skipped")  # nothing left to do for a phase with this outcome


@dataclass
class PhaseOutcome:
    """How one phase ended: ``ok``, ``partial`` (with the nodes or cells that failed), ``failed``,
    ``skipped`` (it does not apply here, e.g. no GPU) or ``not-run`` (a tool it needs is not installed).
    ``interrupted``: Ctrl-C stopped it."""

    status: str = "ok"
    failed_nodes: list[str] = field(default_factory=list)
    failed_cells: list[str] = field(default_factory=list)  # "<mount> <size> <read|write>" for storage
    interrupted: bool = False
    finished_utc: str = ""
    seconds: float = 0.0
    defect: str = ""  # clustereval's own error that ended the phase (exit 3)

    @property
    def done(self) -> bool:
        return self.status in DONE and not self.interrupted


@dataclass
class RunState:
    """What the run was asked to do and how each phase ended (``outcomes``); ``phases_finished``
    lists, in order, the phases with nothing left to do (ok or skipped)."""

    name: str
    stamp: str
    profile: str = "quick"
    phases_planned: list[str] = field(default_factory=list)
    phases_finished: list[str] = field(default_factory=list)
    started_utc: str = ""
    finished_utc: str = ""
    interrupted: bool = False
    config_path: str = ""
    outcomes: dict[str, PhaseOutcome] = field(default_factory=dict)

    def done(self, phase: str) -> bool:
        """Whether ``phase`` has nothing left to do (a state from before outcomes: it finished)."""
        if phase in self.outcomes:
            return self.outcomes[phase].done
        return phase in self.phases_finished


class RunStore:
    """One run's folder on the controller's disk."""

    def __init__(self, report_path: Path, raw_dir: Path) -> None:
        self.report_path = report_path
        self.raw_dir = raw_dir

    # -- creation / opening ------------------------------------------------------------
    @classmethod
    def create(cls, reports_dir: Path, name: str, now: dt.datetime | None = None) -> RunStore:
        """A new run folder; never reuses (or overwrites) another run's folder."""
        if not _NAME_RE.match(name):
            raise UsageError(f"run name {name!r} may only hold letters, digits, '.', '_' and '-'",
                             "set name = \"h200\" (a plain word) at the top of cluster.toml")
        stamp = utc_stamp(now)
        base = f"{name}-{stamp}"
        n = 1
        while True:
            candidate = base if n == 1 else f"{base}-{n}"
            n += 1
            if (reports_dir / f"{candidate}.md").exists():
                continue
            raw = reports_dir / f"raw-{candidate}"
            try:  # mkdir is the claim: two runs started in the same minute never share a folder
                reports_dir.mkdir(parents=True, exist_ok=True)
                raw.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise save_failed(raw, exc) from exc
            return cls(reports_dir / f"{candidate}.md", raw)

    @classmethod
    def open(cls, run_dir: Path) -> RunStore:
        """Open an existing run from its raw folder or its report path."""
        run_dir = Path(run_dir)
        if run_dir.suffix == ".md":
            raw = run_dir.parent / f"raw-{run_dir.stem}"
            report = run_dir
        else:
            raw = run_dir
            if not raw.name.startswith("raw-"):
                raise UsageError(f"{run_dir} is not a run folder (expected reports/raw-<name>-<stamp>/)",
                                 "pass the raw-… folder or the report .md that a run wrote")
            report = raw.parent / f"{raw.name[4:]}.md"
        if not (raw / STATE_FILE).exists():
            raise UsageError(f"{raw}: no {STATE_FILE}; this is not a clustereval run folder",
                             "pass the raw-… folder a `clustereval run` created")
        return cls(report, raw)

    @property
    def run_id(self) -> str:
        return self.raw_dir.name[4:]

    @property
    def raw_rel(self) -> str:
        """The raw folder as the report links it (relative to the report)."""
        return self.raw_dir.name

    # -- state -------------------------------------------------------------------------
    def load_state(self) -> RunState:
        return from_dict(RunState, json.loads((self.raw_dir / STATE_FILE).read_text()))

    def save_state(self, state: RunState) -> None:
        atomic_write(self.raw_dir / STATE_FILE, dumps(state))

    def mark_finished(self, phase: str) -> None:
        state = self.load_state()
        if phase not in state.phases_finished:
            state.phases_finished.append(phase)
        self.save_state(state)

    def save_outcome(self, phase: str, outcome: PhaseOutcome) -> None:
        """Record how ``phase`` ended; an ``ok``/``skipped`` one also counts as finished."""
        state = self.load_state()
        state.outcomes[phase] = outcome
        if outcome.done and phase not in state.phases_finished:
            state.phases_finished.append(phase)
        if not outcome.done and phase in state.phases_finished:
            state.phases_finished.remove(phase)
        self.save_state(state)

    # -- records -----------------------------------------------------------------------
    def record_path(self, phase: str) -> Path:
        return self.raw_dir / f"{phase}{RECORD_SUFFIX}"

    def save_record(self, phase: str, record: Any) -> Path:
        path = self.record_path(phase)
        atomic_write(path, dumps(record))
        return path

    def has_record(self, phase: str) -> bool:
        return self.record_path(phase).exists()

    def load_record(self, phase: str, cls: type[T]) -> T | None:
        path = self.record_path(phase)
        if not path.exists():
            return None
        try:
            return from_dict(cls, json.loads(path.read_text()))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}: cannot read the {phase} record ({exc})",
                             "the file was edited or truncated; re-run that phase with --resume") from exc

    def record_raw(self, phase: str) -> dict[str, Any] | None:
        path = self.record_path(phase)
        return json.loads(path.read_text()) if path.exists() else None

    # -- raw artifacts -----------------------------------------------------------------
    def raw_path(self, *parts: str) -> Path:
        path = self.raw_dir.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise save_failed(path, exc) from exc
        return path

    def write_raw(self, rel: str, text: str | bytes) -> Path:
        path = self.raw_path(*rel.split("/"))
        # tools/ holds clustereval's own code that produced the numbers: it must stay byte-exact
        # (a scrub would turn `key=lambda t: ...` into `key=***`), and it carries no user data
        atomic_write(path, text, verbatim=rel.startswith(f"{TOOLS_DIR}/") and rel.endswith(".py"))
        return path

    def append_log(self, rel: str, text: str) -> None:
        path = self.raw_path(*rel.split("/"))
        text = scrub(text)
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text if text.endswith("\n") else text + "\n")
        except OSError as exc:
            raise save_failed(path, exc) from exc

    # -- report ------------------------------------------------------------------------
    def write_report(self, text: str) -> Path | None:
        """Write the report; an earlier rendering moves to ``trash/`` beside it, never deleted.

        Returns where the superseded file went, if there was one."""
        try:
            return self._write_report(text)
        except OSError as exc:
            raise save_failed(self.report_path, exc) from exc

    def _write_report(self, text: str) -> Path | None:
        moved = None
        if self.report_path.exists():
            if self.report_path.read_text() == text:
                return None
            trash = self.report_path.parent / "trash" / f"{self.report_path.stem}-{utc_stamp()}"
            trash.mkdir(parents=True, exist_ok=True)
            moved = trash / self.report_path.name
            n = 1
            while moved.exists():
                n += 1
                moved = trash / f"{self.report_path.stem}.{n}.md"
            os.replace(self.report_path, moved)
        atomic_write(self.report_path, text)
        return moved


def record_to_json(record: Any) -> dict[str, Any]:
    return to_dict(record)
