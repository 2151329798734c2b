"""One node's step at a time, every node at once: a node that fails is that node's problem.

``each_node`` runs a function per node in parallel. A node whose transport fails (refused, timed
out, connection lost) or whose step raises a clustereval error gets that error and a Gap naming
``<hostname>(node<N>)``, the phase and what was running; every other node's result is kept. A node
that stopped answering is remembered in the run's context (``ctx.lost_nodes``), so later phases
skip it at once with a Gap instead of waiting out their timeouts on a dead node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from clustereval.errors import NODE_GONE_IDS, ClusterEvalError, TransportError
from clustereval.phases.base import RunContext
from clustereval.records import Gap
from clustereval.transport.base import Node, run_each

T = TypeVar("T")

PROBE_TIMEOUT_S = 15.0  # the second look at a node after a transient failure
_LOCK = threading.Lock()


@dataclass
class NodeStep(Generic[T]):
    """What one node's step gave: its value, or its error and the Gap that reports it."""

    node: Node
    value: T | None = None
    error: ClusterEvalError | None = None
    gap: Gap | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def hostname_of(ctx: RunContext, node: Node) -> str:
    """The node's own hostname as the environment inventory (or preflight) saw it, else its name."""
    env = ctx.records.get("environment")
    for n in getattr(env, "nodes", []) or []:
        if getattr(n, "node", "") == node.name and getattr(n, "hostname", ""):
            return n.hostname
    pre = ctx.records.get("preflight")
    for n in getattr(pre, "nodes", []) or []:
        if getattr(n, "name", "") == node.name and getattr(n, "hostname", ""):
            return n.hostname
    return node.name


def node_label(ctx: RunContext, node: Node) -> str:
    """``<hostname>(node<N>)``: how the report names a node."""
    return f"{hostname_of(ctx, node)}(node{node.index})"


def note_failure(ctx: RunContext, phase: str, node: Node, why: str) -> None:
    """Record that ``node``'s step in ``phase`` failed (state.json's ``partial`` lists it)."""
    with _LOCK:
        ctx.node_failures.setdefault(phase, {})[node.name] = why


def note_error(ctx: RunContext, phase: str, node: Node, exc: ClusterEvalError, what: str) -> None:
    """A node's error: a failure of this phase, and a lost node for the rest of the run when the
    node stopped answering. A transient failure (a slow banner on a loaded node, a connection
    closed during setup) counts only when a fresh ``true`` on the node fails as well."""
    note_failure(ctx, phase, node, exc.message)
    if gone(exc) or (isinstance(exc, TransportError) and exc.transient and not _answers(ctx, node)):
        with _LOCK:
            ctx.lost_nodes.setdefault(node.name, f"{exc.message} (phase {phase}, {what})")


def _answers(ctx: RunContext, node: Node) -> bool:
    try:
        return ctx.transport.run(node, ["true"], timeout_s=PROBE_TIMEOUT_S).ok
    except TransportError:
        return False


def gone(exc: ClusterEvalError) -> bool:
    """Whether ``exc`` says the node stopped answering (refused, connection lost, unreachable)."""
    return isinstance(exc, TransportError) and exc.error_id in NODE_GONE_IDS and not exc.transient


def is_lost(ctx: RunContext, node: Node) -> bool:
    return node.name in ctx.lost_nodes


def live(ctx: RunContext, nodes: list[Node]) -> list[Node]:
    """``nodes`` less the ones that stopped answering earlier in the run."""
    return [n for n in nodes if n.name not in ctx.lost_nodes]


def lost_gap(ctx: RunContext, phase: str, title: str, node: Node) -> Gap:
    return Gap(phase=phase, node=node.name, kind="node.lost",
               facts={"label": node_label(ctx, node), "title": title, "address": node.address,
                      "why": ctx.lost_nodes.get(node.name, "")})


def error_gap(ctx: RunContext, phase: str, title: str, node: Node, exc: ClusterEvalError, what: str) -> Gap:
    return Gap(phase=phase, node=node.name, kind="node.error",
               facts={"label": node_label(ctx, node), "title": title, "address": node.address,
                      "during": f"`{during}`" if (during := getattr(exc, "during", "")) else what, "lost": gone(exc),
                      "error_id": exc.error_id, "message": exc.message, "hint": exc.hint or ""})


def each_node(ctx: RunContext, phase: str, title: str, nodes: list[Node], fn: Callable[[Node], T], *,
              what: str | Callable[[Node], str]) -> list[NodeStep[T]]:
    """``fn`` on every node at once (the transport's fan-out), one ``NodeStep`` per node in order.

    ``what``: what the step runs, as the Gap says it ("`dcgmi diag -r 2`"). Nodes lost earlier are
    not contacted. An error that is not clustereval's own (a defect) is raised once every node ended.
    """
    steps: list[NodeStep[T]] = [NodeStep(node=n) for n in nodes]
    todo = [s for s in steps if not is_lost(ctx, s.node)]
    for s in steps:
        if is_lost(ctx, s.node):
            s.error = TransportError(s.node.name, ctx.lost_nodes[s.node.name], error_id="node-lost")
            s.gap = lost_gap(ctx, phase, title, s.node)
            note_failure(ctx, phase, s.node, "lost earlier in the run")
    attempts = run_each([s.node for s in todo], fn, ctx.transport.fanout)
    defect: BaseException | None = None
    for s, a in zip(todo, attempts, strict=True):
        if a.error is None:
            s.value = a.value
            continue
        if not isinstance(a.error, ClusterEvalError):
            defect = defect or a.error
            continue
        doing = what(s.node) if callable(what) else what
        s.error = a.error
        s.gap = error_gap(ctx, phase, title, s.node, a.error, doing)
        note_error(ctx, phase, s.node, a.error, doing)
    if defect is not None:
        raise defect
    return steps
