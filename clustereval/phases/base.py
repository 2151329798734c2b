"""What every phase gets (``RunContext``) and what it must provide (``Phase``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from clustereval.config import Config
from clustereval.store import RunStore
from clustereval.transport.base import Node, Transport


@dataclass(frozen=True)
class Profile:
    """How long the measurements run. ``standard`` is the published recipe; ``quick`` shortens it,
    and the report says what was shortened."""

    name: str = "standard"
    fio_runtime_s: int = 180  # published fio-scan: 3 min per run
    fio_ramp_s: int = 2
    allreduce_max_bytes: int = 16 * 2**30
    matmul_seconds_per_shape: float = 0.0  # 0: the worker's default
    fio_file_sizes: tuple[int, ...] = ()  # (): the published 16 KiB / 1 MiB / 1 GiB
    concurrent_write_bytes: int = 0  # 0: the published 1 GiB per node
    shortenings: tuple[str, ...] = ()  # one sentence per shortening, for the report


PROFILES = {
    "standard": Profile(),
    "quick": Profile(
        name="quick",
        fio_runtime_s=10,
        allreduce_max_bytes=1 * 2**30,
        shortenings=(
            "each `fio` run lasted 10 s of timed IO instead of the published 3 min",
            "the all-reduce sweep stopped at 1 GiB instead of 16 GiB",
        ),
    ),
    # A rehearsal of the whole pipeline in about a minute (and what the test suite runs): every
    # measurement is far too small to judge hardware by, and the report says so.
    "smoke": Profile(
        name="smoke",
        fio_runtime_s=1,
        fio_ramp_s=0,
        allreduce_max_bytes=1 * 2**20,
        matmul_seconds_per_shape=0.5,
        fio_file_sizes=(16 * 2**10, 256 * 2**10, 4 * 2**20),
        concurrent_write_bytes=4 * 2**20,
        shortenings=(
            "this was a smoke run, a rehearsal of the pipeline whose figures are too small to judge the "
            "hardware by: each `fio` run lasted 1 s over files of 16 KiB, 256 KiB and 4 MiB instead of 3 min "
            "over 16 KiB, 1 MiB and 1 GiB",
            "the all-reduce sweep stopped at 1 MiB instead of 16 GiB",
            "the concurrent write wrote 4 MiB per node instead of 1 GiB",
        ),
    ),
}


ProgressFn = Callable[[str, str, str, float | None], None]  # phase, node, message, seconds left


def _no_progress(phase: str, node: str, message: str, eta_s: float | None) -> None:
    return None


@dataclass
class RunContext:
    """Everything a phase may use. Phases never print: they call ``progress``."""

    config: Config
    transport: Transport
    nodes: list[Node]
    store: RunStore
    profile: Profile = field(default_factory=Profile)
    progress: ProgressFn = _no_progress
    records: dict[str, Any] = field(default_factory=dict)  # finished phases' records by name
    eval_python: str = "python3"  # the interpreter on the nodes every worker runs with
    nccl_env: dict[str, str] = field(default_factory=dict)  # final NCCL env for GPU collectives
    stop: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C
    debug: bool = False
    # nodes that stopped answering during this run (name -> what happened): later steps skip them
    lost_nodes: dict[str, str] = field(default_factory=dict)
    # per phase, the nodes whose step failed (name -> why): state.json's "partial" names them
    node_failures: dict[str, dict[str, str]] = field(default_factory=dict)
    # on --resume: per phase, the only nodes to run again (None: every node)
    resume_nodes: dict[str, list[str]] = field(default_factory=dict)

    def raw(self, rel: str, text: str | bytes) -> None:
        self.store.write_raw(rel, text)


class Phase(Protocol):
    name: str  # record file name and --phases key
    title: str  # what the progress display shows

    def applies(self, ctx: RunContext) -> bool:
        """Whether this phase runs on this cluster (pairwise needs >= 2 nodes)."""

    def run(self, ctx: RunContext) -> Any:
        """Do the work and return the phase's record; failures go into the record's gaps."""
