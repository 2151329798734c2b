"""The error tree. Every user-facing error has a short kebab-case id, a message and a hint.

Only ``cli.py`` turns these into output and exit codes; everything below raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_FAILED = 1  # a check or a phase failed; the report says which
EXIT_USAGE = 2  # bad config or bad input: nothing slow was started
EXIT_DEFECT = 3  # clustereval's own defect (e.g. the report it wrote fails its lint); the report is still written
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM (128 + 15): an interrupt too, told apart for the scheduler that sent it


@dataclass
class Problem:
    """One problem in a user-supplied file: where it is, what is wrong, what to do."""

    where: str  # "cluster.toml:12" or "hostfile:3" or a node name
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class ClusterEvalError(Exception):
    """Base of every error a user may see."""

    error_id = "clustereval-error"
    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str = "", *, error_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if error_id:
            self.error_id = error_id

    def lines(self) -> list[str]:
        out = [f"error[{self.error_id}]: {self.message}"]
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return out


@dataclass
class _ProblemList:
    problems: list[Problem] = field(default_factory=list)


class ConfigError(ClusterEvalError):
    """A config or hostfile with one or more problems; all of them are listed at once."""

    error_id = "bad-config"
    exit_code = EXIT_USAGE

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the cluster config")

    def lines(self) -> list[str]:
        return [f"error[{self.error_id}]: {self.message}"] + [f"  {p}" for p in self.problems]


class UsageError(ClusterEvalError):
    """Bad input on the command line or a file that is not what it should be."""

    error_id = "bad-input"
    exit_code = EXIT_USAGE


class TransportError(ClusterEvalError):
    """A command could not reach a node (not: the command ran and failed)."""

    error_id = "transport"

    def __init__(self, node: str, message: str, hint: str = "", *, error_id: str | None = None,
                 transient: bool = False, where: str = "") -> None:
        # where: how the user knows the node, e.g. "node2 (10.0.0.12:7878)"; defaults to the name
        super().__init__(f"{where or node}: {message}", hint, error_id=error_id)
        self.node = node
        self.transient = transient


class CommandTimeout(TransportError):
    error_id = "command-timeout"


class ConnectionLost(TransportError):
    """The connection to a node dropped while a command ran (ssh exited 255 with no error of its own,
    or with its keepalive or remote-close message): the node rebooted, lost its network or access."""

    error_id = "connection-lost"

    def __init__(self, node: str, message: str, hint: str = "", *, where: str = "", after_s: float = 0.0,
                 during: str = "") -> None:
        super().__init__(node, message, hint, where=where)
        self.after_s = after_s
        self.during = during


# errors after which a node counts as gone for the rest of the run: later steps skip it at once
NODE_GONE_IDS = ("connection-lost", "ssh-unreachable", "command-timeout", "pod-not-found")


class PreflightFailed(ClusterEvalError):
    """The hard gate did not pass; nothing slow was started."""

    error_id = "preflight-failed"
    exit_code = EXIT_FAILED


class ScratchError(ClusterEvalError):
    """Refused to write scratch: not enough space, read-only, or outside the declared mounts."""

    error_id = "scratch"
    exit_code = EXIT_FAILED


class StoreError(ClusterEvalError):
    """The controller could not save the report or a record (disk full, read-only, gone)."""

    error_id = "save-failed"
    exit_code = EXIT_FAILED


class LintFailed(ClusterEvalError):
    error_id = "lint-failed"
    exit_code = EXIT_DEFECT
