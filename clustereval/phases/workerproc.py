"""A worker process on a node, started through the transport, its JSON lines read as they come.

Long measurements, sibling loads and the lemon pass all need to see a worker's output while it
runs (to know a load is computing, which GPU a hung pass was on, how far a search got), so every
GPU worker runs through ``transport.popen`` and a reader thread.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from clustereval.phases.base import RunContext
from clustereval.transport.base import Node

Event = dict[str, Any]


class WorkerProc:
    """One running worker; ``events`` are its JSON lines in order, ``lines`` everything it printed."""

    def __init__(self, ctx: RunContext, node: Node, argv: list[str], env: dict[str, str], log_rel: str) -> None:
        self.ctx, self.node, self.argv, self.log_rel = ctx, node, argv, log_rel
        self.lines: list[str] = []
        self.events: list[Event] = []
        self.eof = False
        self.started = time.monotonic()
        self.last_output = self.started
        self._cond = threading.Condition()
        self.proc: subprocess.Popen = ctx.transport.popen(node, argv, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.proc.stdout
        if stream is not None:
            for raw in stream:
                line = raw.rstrip("\n")
                event = _parse(line)
                with self._cond:
                    self.lines.append(line)
                    self.last_output = time.monotonic()
                    if event is not None:
                        self.events.append(event)
                    self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()

    def wait_event(self, match: Callable[[Event], bool], timeout_s: float, *,
                   idle_timeout_s: float | None = None) -> Event | None:
        """The first event (from the start) that ``match``es; None on exit, timeout or silence."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for event in self.events:
                    if match(event):
                        return event
                now = time.monotonic()
                if self.eof or now >= deadline or self.ctx.stop.is_set():
                    return None
                if idle_timeout_s is not None and now - self.last_output >= idle_timeout_s:
                    return None
                self._cond.wait(min(1.0, deadline - now))

    def finish(self, timeout_s: float, *, idle_timeout_s: float | None = None) -> int | None:
        """Wait for the exit (rc); on timeout or silence kill it and return None."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.eof:
                now = time.monotonic()
                if now >= deadline or self.ctx.stop.is_set() or (
                        idle_timeout_s is not None and now - self.last_output >= idle_timeout_s):
                    break
                self._cond.wait(min(1.0, deadline - now))
            done = self.eof
        if not done:
            self.kill()
            return None
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def last(self, name: str) -> Event | None:
        with self._cond:
            return next((e for e in reversed(self.events) if e.get("event") == name), None)

    def of(self, name: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.get("event") == name]

    def error_text(self) -> str:
        """Why it failed, in one line: its error event, else its last line of output."""
        err = self.last("error")
        if err:
            return str(err.get("error", ""))
        with self._cond:
            tail = [ln.strip() for ln in self.lines if ln.strip() and not ln.startswith("{")]
        return tail[-1][:300] if tail else f"exit {self.proc.poll()} with no output"

    def save_log(self) -> None:
        with self._cond:
            text = "\n".join(self.lines) + "\n"
        self.ctx.raw(self.log_rel, text)


def _parse(line: str) -> Event | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "event" in value else None


def is_event(*names: str, **fields: Any) -> Callable[[Event], bool]:
    """Matches an event named any of ``names`` whose ``fields`` hold the values given."""
    def match(event: Event) -> bool:
        return event.get("event") in names and all(event.get(k) == v for k, v in fields.items())
    return match
