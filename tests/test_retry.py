"""Transient transport failures: retried with backoff, confirmed by a second probe.

A flaky transport cannot be produced for real on demand, so this is the one place a fake
transport stands in: it fails the way ssh does for the first calls, then answers.
"""

from pathlib import Path

import pytest

from clustereval.errors import CommandTimeout, TransportError
from clustereval.records import CommandResult
from clustereval.transport.base import Node, Transport
from clustereval.transport.local import LocalTransport
from clustereval.transport.retry import RetryingTransport

NODE = Node("n1", "10.9.0.2")


class Flaky(Transport):
    method = "fake"

    def __init__(self, failures: int, transient: bool = True, probe_ok: bool = True):
        self.failures = failures
        self.transient = transient
        self.probe_ok = probe_ok
        self.calls: list[list[str]] = []

    def run(self, node, argv, *, timeout_s=60, env=None, cwd=None, stdin=None):
        self.calls.append(argv)
        if argv == ["true"]:
            if self.probe_ok:
                return CommandResult(node.name, argv, 0, "", "", 0.0)
            raise TransportError(node.name, "connection reset by peer", transient=True)
        if self.failures > 0:
            self.failures -= 1
            raise TransportError(node.name, "connection reset by peer", transient=self.transient)
        return CommandResult(node.name, argv, 0, "ok\n", "", 0.0)

    def put(self, node, local, remote, *, timeout_s=300):
        raise NotImplementedError

    def get(self, node, remote, local, *, timeout_s=300):
        raise NotImplementedError


def test_transient_failure_is_retried_and_succeeds():
    inner = Flaky(failures=2)
    t = RetryingTransport(inner, attempts=3, sleep=lambda s: None)
    assert t.run(NODE, ["hostname"]).stdout == "ok\n"
    assert len(t.retries) == 2


def test_persistent_transient_failure_needs_a_failed_probe_to_count():
    inner = Flaky(failures=10, probe_ok=False)
    t = RetryingTransport(inner, attempts=2, sleep=lambda s: None)
    with pytest.raises(TransportError, match="second probe failed"):
        t.run(NODE, ["hostname"])
    assert ["true"] in inner.calls


def test_probe_success_gives_one_more_try():
    inner = Flaky(failures=2, probe_ok=True)
    t = RetryingTransport(inner, attempts=2, sleep=lambda s: None)
    assert t.run(NODE, ["hostname"]).ok


def test_non_transient_error_is_not_retried():
    inner = Flaky(failures=1, transient=False)
    t = RetryingTransport(inner, attempts=3, sleep=lambda s: None)
    with pytest.raises(TransportError):
        t.run(NODE, ["hostname"])
    assert inner.calls == [["hostname"]]


def test_wraps_a_real_transport(tmp_path: Path):
    t = RetryingTransport(LocalTransport())
    res = t.run(Node("here", "here"), ["sh", "-c", "echo $0", "x; echo injected"])
    assert res.stdout.strip() == "x; echo injected"


class ResetsTwice(LocalTransport):
    """This machine, over a link that resets the first two commands sent to it (as a flaky ssh
    hop does); everything after goes through."""

    def __init__(self) -> None:
        super().__init__()
        self.resets: list[list[str]] = []

    def run(self, node, argv, **kw):
        if len(self.resets) < 2 and argv != ["true"]:
            self.resets.append(list(argv))
            raise TransportError(node.name, "connection reset by peer", transient=True)
        return super().run(node, argv, **kw)


def test_a_phase_rides_out_a_reset_link_on_its_repeatable_commands(tmp_path):
    """The environment inventory's probes are read-only, so they go through ``ctx.repeatable``: two
    reset connections are retried, the node keeps its whole inventory and is not lost, and the run
    folder says what was run again."""
    from clustereval.runner import execute
    from tests.test_environment_phase import make_ctx

    flaky = ResetsTwice()
    ctx = make_ctx(tmp_path, transport=flaky)
    ctx.repeatable.backoff_s = 0.05  # the wrapper's own pacing is test_transient_failure_is_retried's
    outcome = execute(ctx, ["environment"], gate=None)
    assert len(flaky.resets) == 2 and outcome.failed == [] and not ctx.lost_nodes
    env = ctx.records["environment"]
    assert env.status == "ok" and env.nodes[0].hostname and not env.gaps
    assert ctx.retries == [f"{ctx.nodes[0].name}: connection reset by peer"] * 2
    logged = (ctx.store.raw_dir / "retries" / "environment.txt").read_text().splitlines()
    assert logged == ctx.retries


def test_a_command_that_is_not_safe_to_repeat_is_never_retried(tmp_path):
    from tests.test_environment_phase import make_ctx

    flaky = ResetsTwice()
    ctx = make_ctx(tmp_path, transport=flaky)
    with pytest.raises(TransportError, match="connection reset"):
        ctx.transport.run(ctx.nodes[0], ["mkdir", str(tmp_path / "once")])
    assert flaky.resets == [["mkdir", str(tmp_path / "once")]] and ctx.retries == []
    assert ctx.repeatable.run(ctx.nodes[0], ["true"]).ok  # the wrapper is over this very transport
    assert ctx.repeatable is ctx.repeatable


def test_a_command_that_ran_out_its_time_is_not_run_again():
    class Hangs(Flaky):
        def run(self, node, argv, *, timeout_s=60, env=None, cwd=None, stdin=None):
            self.calls.append(argv)
            raise CommandTimeout(node.name, f"no answer over SSH within {timeout_s + 30:.0f} s", transient=True)

    inner = Hangs(failures=0)
    t = RetryingTransport(inner, attempts=3, sleep=lambda s: None)
    with pytest.raises(CommandTimeout):
        t.run(NODE, ["pip", "install", "torch"], timeout_s=3600)
    assert inner.calls == [["pip", "install", "torch"]] and t.retries == []
