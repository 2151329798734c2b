"""The transport interface: run an argv on a node with a timeout, put and get files."""

from __future__ import annotations

import abc
import os
import shlex
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from clustereval.errors import TransportError
from clustereval.records import CommandResult

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_FANOUT = 32
# What one command may take on a command line, wherever it is exec'd (here: ssh, srun, kubectl; on a
# node: what the remote shell or the container runtime runs). Linux refuses a single argument of
# MAX_ARG_STRLEN bytes or more (32 pages), and a command whose arguments and environment together pass
# ARG_MAX, which is a quarter of the stack limit but never less than 32 pages: so every command we
# build stays within half of that floor, COMMAND_MAX_BYTES, the other half left to the environment.
# Data that grows with the fleet (targets, node lists, peers) goes on stdin or in a file instead.
MAX_ARG_STRLEN = 131072
COMMAND_MAX_BYTES = 65536


@dataclass(frozen=True)
class Node:
    """One node of the cluster."""

    name: str  # identity as the user gave it (hostname, pod, IP)
    address: str  # where the transport connects (ssh host / IP); equal to name when local
    index: int = 0  # 0-based position in the hostfile: the "node<N>" in GPU names
    slots: int | None = None  # GPUs per node from a DeepSpeed-style hostfile
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Attempt(Generic[R]):
    """One item of ``run_each``: its value, or the error it raised."""

    value: R | None = None
    error: BaseException | None = None


def shell_join(argv: Iterable[str]) -> str:
    """One shell word per argument: what a remote shell sees cannot run user data."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def command_bytes(argv: Sequence[str]) -> int:
    """What ``argv`` takes of ARG_MAX when exec'd: each argument with its NUL, and a pointer to each
    (with the list's closing NULL pointer)."""
    return sum(len(str(a).encode()) + 1 for a in argv) + 8 * (len(argv) + 1)


def env_prefix(env: Mapping[str, str] | None) -> list[str]:
    """``env K=V ...`` as argv, so environment reaches a remote command without a shell."""
    if not env:
        return []
    return ["env"] + [f"{k}={v}" for k, v in env.items()]


def run_subprocess(node: str, argv: list[str], timeout_s: float, *, stdin: str | None = None,
                   cwd: str | None = None, env: Mapping[str, str] | None = None,
                   display_argv: list[str] | None = None) -> CommandResult:
    """Run a local process to completion with a timeout; never raises for a non-zero exit."""
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s,
                              cwd=cwd, env=dict(env) if env is not None else None,
                              errors="replace")
        return CommandResult(node=node, argv=display_argv or argv, rc=proc.returncode,
                             stdout=proc.stdout, stderr=proc.stderr,
                             seconds=round(time.monotonic() - start, 3))
    except subprocess.TimeoutExpired as exc:
        def _text(b: bytes | str | None) -> str:
            if b is None:
                return ""
            return b.decode(errors="replace") if isinstance(b, bytes) else b
        return CommandResult(node=node, argv=display_argv or argv, rc=124, stdout=_text(exc.stdout),
                             stderr=_text(exc.stderr) + f"\ntimed out after {timeout_s:.0f} s",
                             seconds=round(time.monotonic() - start, 3), timed_out=True)
    except FileNotFoundError as exc:
        return CommandResult(node=node, argv=display_argv or argv, rc=127, stdout="",
                             stderr=f"{exc.filename or argv[0]}: command not found",
                             seconds=round(time.monotonic() - start, 3))


def popen_held_stdin(argv: list[str], first_bytes: bytes = b"") -> subprocess.Popen:
    """Start ``argv`` (stdout and stderr merged on ``proc.stdout``, in a session of its own) with a
    stdin pipe only this process holds the write end of. Not ``proc.stdin``, which ``communicate()``
    would close: this pipe reaches EOF exactly when the returned ``Popen`` is garbage collected or
    this process goes away, and the watchdog at the far end stops the command then.
    ``first_bytes`` is written before the start and is the only thing ever written to it."""
    keep_r, keep_w = os.pipe()
    try:
        if first_bytes:
            os.write(keep_w, first_bytes)
        proc = subprocess.Popen(argv, stdin=keep_r, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
    except BaseException:
        os.close(keep_w)
        raise
    finally:
        os.close(keep_r)
    weakref.finalize(proc, os.close, keep_w)
    return proc


def run_each(items: Iterable[T], fn: Callable[[T], R], max_workers: int = DEFAULT_FANOUT) -> list[Attempt[R]]:
    """Apply ``fn`` to every item with bounded parallelism; every item's value or error, in input order.

    One item raising never cancels or discards the others: each ends with its own ``Attempt``.
    The workers are daemon threads and the caller waits in short slices, so a second Ctrl-C reaches
    the main thread at once instead of waiting for every remote command to end."""
    items = list(items)
    attempts: list[Attempt[R]] = [Attempt() for _ in items]
    if not items:
        return []
    order = iter(range(len(items)))
    lock = threading.Lock()
    left = [len(items)]
    all_done = threading.Event()

    def worker() -> None:
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            try:
                attempts[i].value = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 - kept per item, re-raised by the caller's choice
                attempts[i].error = exc
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    all_done.set()

    for _ in range(max(1, min(max_workers, len(items)))):
        threading.Thread(target=worker, name="run-each", daemon=True).start()
    while not all_done.wait(0.25):
        pass
    return attempts


def run_parallel(items: Iterable[T], fn: Callable[[T], R], max_workers: int = DEFAULT_FANOUT) -> list[R]:
    """Apply ``fn`` to every item with bounded parallelism, results in input order.

    Every item runs to its end; then the first error (in input order) is raised. Callers that must
    keep the other items' results when one fails use ``run_each`` (or ``phases.pernode``)."""
    attempts = run_each(items, fn, max_workers)
    for a in attempts:
        if a.error is not None:
            raise a.error
    return [a.value for a in attempts]  # type: ignore[misc]


class Transport(abc.ABC):
    """Runs argv lists on nodes. Implementations: local, ssh, slurm (srun in an allocation), kubectl
    (exec in pods). Everything a caller needs is a method here, with a default that fits a transport
    for which it does not apply, so no caller asks which transport it holds."""

    method = "abstract"
    fanout = DEFAULT_FANOUT

    @abc.abstractmethod
    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        """Run ``argv`` on ``node``. A command that runs and fails returns rc != 0;
        a node that cannot be reached raises ``TransportError``."""

    @abc.abstractmethod
    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        """Copy a local file or directory to ``remote`` on the node."""

    @abc.abstractmethod
    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        """Copy ``remote`` (file or directory) from the node to ``local``."""

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        """Start a long-running command (torchrun, a sibling load) and return the local handle."""
        raise NotImplementedError(f"{self.method} transport cannot start background commands")

    def run_all(self, nodes: Iterable[Node], argv: list[str] | Callable[[Node], list[str]], *,
                timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None,
                cwd: str | None = None) -> list[CommandResult]:
        """The same command on every node at once (bounded fan-out), results in node order."""
        def one(node: Node) -> CommandResult:
            args = argv(node) if callable(argv) else argv
            return self.run(node, args, timeout_s=timeout_s, env=env, cwd=cwd)
        return run_parallel(nodes, one, self.fanout)

    @property
    def job_id(self) -> str:
        """The platform's allocation every command runs in (a Slurm job id); "" (the default) where
        there is none, or none yet."""
        return ""

    def nodes(self, wanted: Sequence[str] = ()) -> list[Node] | None:
        """The nodes as the platform lists them (a Slurm allocation's, the selected pods), in node
        order, each with the address it reports. ``wanted``: names from cluster.toml that must all be
        among them (Slurm). None (the default): the platform does not name the nodes, cluster.toml
        and its hostfile do."""
        return None

    def access_detail(self) -> str:
        """What the report's Access line says beyond ``method`` (kubectl: context, namespace, how
        the pods were chosen); "" (the default) when the method says it all."""
        return ""

    def allocation_check(self, nodes: Iterable[Node]) -> tuple[bool, str] | None:
        """Preflight's first look where commands run inside an allocation: (passed, one line) on
        whether it exists, still runs and holds every node. None (the default): there is no
        allocation to check."""
        return None

    def error_for(self, node: Node, rc: int, output: str, *, seconds: float | None = None,
                  during: str = "") -> TransportError | None:
        """For a finished ``popen``: the error when ``rc``/``output`` are the transport's own failure
        (ssh could not connect, kubectl's stream broke) rather than the command's; None when the
        command ran, whatever its exit code. ``seconds``: how long it ran; ``during``: what it was,
        for the message. The default (None) fits a transport that adds no failure of its own to a
        command's output (local: the process is the command)."""
        return None

    def prepare_cleanup(self) -> None:
        """Make sure scratch cleanup can still reach the nodes (Slurm: when the run's allocation
        ended early, a short fresh one on the nodes still up). Never raises."""
        return None

    def close(self) -> None:
        """Give back what the transport holds (a Slurm allocation it asked for); idempotent."""
        return None

    def describe(self) -> str:
        return self.method


def pack_argv(local: Path) -> list[str]:
    """The local ``tar`` that streams a directory's contents (not the directory itself) to stdout."""
    return ["tar", "-C", str(local), "-cf", "-", "."]


def unpack_argv(local: Path) -> list[str]:
    """The local ``tar`` that unpacks such a stream from stdin into ``local``."""
    return ["tar", "-C", str(local), "-xf", "-"]


# what a copy onto a node runs there ("$1": the destination, "$2": a file's mode), fed on stdin
UNTAR_INTO = 'mkdir -p -- "$1" && tar -C "$1" -xf -'
WRITE_FILE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'


def copy_payload(node: Node, local: Path, remote: str) -> tuple[str, list[str], bytes]:
    """A copy of ``local`` to ``remote`` as one node-side ``sh -c`` script, its arguments and the
    bytes for its stdin (a tar of a directory, or the file itself) for transports that stream
    through one command (srun, kubectl exec)."""
    if local.is_dir():
        tar = subprocess.run(pack_argv(local), capture_output=True)
        if tar.returncode != 0:
            raise TransportError(node.name, f"cannot read {local}: {tar.stderr.decode(errors='replace').strip()}",
                                 error_id="copy-failed")
        return UNTAR_INTO, [remote], tar.stdout
    if local.is_file():
        return WRITE_FILE, [remote, f"{local.stat().st_mode & 0o777:o}"], local.read_bytes()
    raise TransportError(node.name, f"cannot copy {local}: no such file or directory", "check the local path",
                         error_id="copy-failed")


# a copy off a node in one stream: a type byte (D: a tar of a directory follows, F: the file's bytes)
GET_SCRIPT = ('if [ -d "$1" ]; then printf D && tar -C "$1" -cf - .; '
              'elif [ -f "$1" ]; then printf F && cat -- "$1"; '
              'else echo "$1: no such file or directory" >&2; exit 2; fi')


def unpack_copy(node: Node, remote: str, local: Path, out: bytes) -> None:
    """Write what ``GET_SCRIPT`` streamed back for ``remote`` to ``local``."""
    kind, body = out[:1], out[1:]
    if kind == b"D":
        local.mkdir(parents=True, exist_ok=True)
        untar = subprocess.run(unpack_argv(local), input=body, capture_output=True)
        if untar.returncode != 0:
            raise TransportError(node.name, f"copy {remote} -> {local} failed: "
                                 f"{untar.stderr.decode(errors='replace').strip()}", error_id="copy-failed")
    elif kind == b"F":
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(body)
