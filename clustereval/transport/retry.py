"""Retry what looks transient (connection reset, connect timeout) before calling a node lost.

A transient failure is retried with backoff; a node counts as failed only once a second,
independent probe (``true`` on the node) fails as well.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from clustereval.errors import CommandTimeout, TransportError
from clustereval.records import CommandResult
from clustereval.transport.base import DEFAULT_TIMEOUT_S, Node, Transport

PROBE_ARGV = ["true"]


class RetryingTransport(Transport):
    """Wraps a transport; ``run``/``put``/``get`` retry transient ``TransportError`` with backoff."""

    def __init__(self, inner: Transport, attempts: int = 3, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.method = inner.method
        self.fanout = inner.fanout
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self._sleep = sleep
        self.retries: list[str] = []  # the error of every retried failure ("node2 (10.0.0.12:22): connection reset")

    def _with_retry(self, node: Node, what: Callable[[], object]):
        last: TransportError | None = None
        for attempt in range(self.attempts):
            try:
                return what()
            except TransportError as exc:
                # a command that ran out its whole time is not a blip: repeating it would wait that
                # long again (a hung pip install: an hour a try); the caller's second look decides
                if not exc.transient or isinstance(exc, CommandTimeout):
                    raise
                last = exc
                self.retries.append(exc.message)  # it names the node as the user knows it
                self._sleep(self.backoff_s * (2 ** attempt))
        # out of attempts: confirm with a second probe before the failure counts
        try:
            probe = self.inner.run(node, PROBE_ARGV, timeout_s=15)
        except TransportError:
            probe = None
        if probe is not None and probe.ok:
            return what()  # the node answers again: one last try, whose error (if any) is final
        assert last is not None
        raise TransportError(node.name, f"{last.message.split(': ', 1)[-1]} "
                             f"({self.attempts} attempts and a second probe failed)",
                             last.hint, error_id=last.error_id)

    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        return self._with_retry(node, lambda: self.inner.run(node, argv, timeout_s=timeout_s, env=env,
                                                             cwd=cwd, stdin=stdin))

    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        self._with_retry(node, lambda: self.inner.put(node, local, remote, timeout_s=timeout_s))

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        self._with_retry(node, lambda: self.inner.get(node, remote, local, timeout_s=timeout_s))

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        return self.inner.popen(node, argv, env=env, cwd=cwd)

    def prepare_cleanup(self) -> None:
        self.inner.prepare_cleanup()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()

    # the rest of the interface is the wrapped transport's own
    @property
    def job_id(self) -> str:
        return self.inner.job_id

    def nodes(self, wanted: Sequence[str] = ()) -> list[Node] | None:
        return self.inner.nodes(wanted)

    def access_detail(self) -> str:
        return self.inner.access_detail()

    def allocation_check(self, nodes: Iterable[Node]) -> tuple[bool, str] | None:
        return self.inner.allocation_check(nodes)

    def error_for(self, node: Node, rc: int, output: str, *, seconds: float | None = None,
                  during: str = "") -> TransportError | None:
        return self.inner.error_for(node, rc, output, seconds=seconds, during=during)
