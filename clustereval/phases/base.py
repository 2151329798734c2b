"""What every phase gets (``RunContext``) and what it must provide (``Phase``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from clustereval.config import Config
from clustereval.phases.scratch import Scratch
from clustereval.store import RunStore
from clustereval.transport.base import Node, Transport
from clustereval.transport.retry import RetryingTransport

ProgressFn = Callable[[str, str, str, float | None], None]  # phase, node, message, seconds left


def configured_python(config: Config) -> str:
    """The interpreter every process on a node starts with until the eval-Python phase decides:
    ``eval_python`` from cluster.toml, else the node's ``python3``. The one place this is decided."""
    return config.eval_python or "python3"


def _no_progress(phase: str, node: str, message: str, eta_s: float | None) -> None:
    return None


@dataclass(frozen=True)
class PhasesAhead:
    """What a run goes on to after preflight, decided by ``runner.execute`` from ``--phases``, ``skip``
    and, on ``--resume``, what is left to run: preflight runs its checks across nodes (the TCP port
    check and the CPU gloo all-reduce) only when one of these phases starts a job across nodes, or
    when there is none at all (a run of preflight alone does what ``clustereval preflight`` does)."""

    phases: tuple[str, ...]  # in run order, preflight not among them
    across_nodes: tuple[str, ...]  # those of ``phases`` that start a job across nodes
    every_across_nodes: tuple[str, ...]  # every phase that would (what the record names when none runs)
    resume: bool = False  # a --resume: ``phases`` are what it runs again

    @property
    def checks_across_nodes(self) -> bool:
        return bool(self.across_nodes) or not self.phases


@dataclass
class RunContext:
    """Everything a phase may use. Phases never print: they call ``progress``."""

    config: Config
    transport: Transport
    nodes: list[Node]
    store: RunStore
    progress: ProgressFn = _no_progress
    records: dict[str, Any] = field(default_factory=dict)  # finished phases' records by name
    # the interpreter on the nodes every process runs with: "" takes ``configured_python`` (the
    # eval-Python phase replaces it with the one it found or built)
    eval_python: str = ""
    nccl_env: dict[str, str] = field(default_factory=dict)  # final NCCL env for GPU collectives
    stop: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C
    debug: bool = False
    # nodes that stopped answering during this run (name -> what happened): later steps skip them
    lost_nodes: dict[str, str] = field(default_factory=dict)
    # per phase, the nodes whose step failed (name -> why): state.json's "partial" names them
    node_failures: dict[str, dict[str, str]] = field(default_factory=dict)
    # on --resume: per phase, the only nodes to run again (None: every node)
    resume_nodes: dict[str, list[str]] = field(default_factory=dict)
    # the run's scratch folders on every node, shared by every phase (``scratch.scratch_for``)
    scratch: Scratch | None = None
    # node -> the PYTHONPATH entry of the package shipped there (``remote.ensure_package``)
    shipped: dict[str, str] = field(default_factory=dict)
    # node -> the worker environment torchrun launches start from (``torchrun.launch``)
    launch_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # phase -> clustereval's own error that ended it this attempt (state.json's "defect")
    defects: dict[str, str] = field(default_factory=dict)
    # what the run goes on to after preflight (``runner.execute``); None outside a run (``clustereval
    # preflight``, a phase run on its own): preflight then runs every check it has
    ahead: PhasesAhead | None = None

    # ``repeatable``'s retrying wrapper over ``transport``, built on first use
    retrying: RetryingTransport | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.eval_python:
            self.eval_python = configured_python(self.config)

    @property
    def repeatable(self) -> Transport:
        """``transport`` for the commands that are safe to run twice: read-only probes, a package or
        pip install, a copy. A transient failure (a reset connection, a slow banner on a loaded node)
        is retried with backoff, and counts as the node's failure only when a second probe fails
        too; every retry is listed in ``retries``. Anything else (a ``mkdir`` that refuses an
        existing folder, a benchmark, a launch) goes through ``transport`` and is never repeated."""
        if self.retrying is None or self.retrying.inner is not self.transport:
            self.retrying = RetryingTransport(self.transport)
        return self.retrying

    @property
    def retries(self) -> list[str]:
        """The error (naming its node) of every command ``repeatable`` ran again."""
        return list(self.retrying.retries) if self.retrying is not None else []

    def raw(self, rel: str, text: str | bytes) -> None:
        self.store.write_raw(rel, text)


class Phase(Protocol):
    name: str  # record file name and --phases key
    title: str  # what the progress display shows
    # a phase that starts a job across nodes (a torchrun launch over several nodes) says so with a class
    # attribute ``across_nodes = True``: preflight's checks across nodes run only for a run that has one

    def applies(self, ctx: RunContext) -> bool:
        """Whether this phase runs on this cluster (pairwise needs >= 2 nodes)."""

    def run(self, ctx: RunContext) -> Any:
        """Do the work and return the phase's record; failures go into the record's gaps."""
