"""Several read-only commands in one round trip to a node, each with its own timeout, exit status,
stdout and stderr kept apart.

A fleet's inventory is some twenty small commands per node; one transport call each costs the
controller a process and a session per command (a connection each without multiplexing), which at
a thousand nodes is most of the phase. ``build_argv`` runs them all at once on the node, each under
``timeout``, its stdout, stderr and exit status in files of a temporary folder, then prints
them framed by a token no output can contain by chance; ``parse`` takes them apart again.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass

KILL_GRACE_S = 5  # a command past its timeout gets SIGTERM, then SIGKILL this much later
NO_FOLDER_RC = 97  # the batch could not make its folder: nothing ran


@dataclass(frozen=True)
class BatchCommand:
    name: str
    argv: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class BatchResult:
    name: str
    rc: int
    stdout: str
    stderr: str


def new_token() -> str:
    return f"@@ce-batch-{secrets.token_hex(8)}"


def build_argv(commands: list[BatchCommand], token: str) -> list[str]:
    """``sh -c SCRIPT``: every command at once, their outputs in a folder of the node's temporary
    directory (``mktemp -d``: ``$TMPDIR``, else ``/tmp``) that is removed again when the script ends
    or is stopped, then each one's exit status, stdout and stderr between ``token`` lines, in order.
    The batch needs nothing of the run on the node, so it is as safe to run twice as its commands."""
    # the traps come first: a stop that lands while the folder is being made still removes it
    lines = ["d=", "trap '[ -z \"$d\" ] || rm -rf \"$d\"' EXIT", "trap 'exit 143' HUP INT TERM",
             f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/clustereval-batch.XXXXXX") || exit {NO_FOLDER_RC}']
    for i, cmd in enumerate(commands):
        run = " ".join(shlex.quote(w) for w in ["timeout", "-k", str(KILL_GRACE_S), str(max(1, round(cmd.timeout_s))),
                                                 *cmd.argv])
        lines.append(f'( {run} >"$d/{i}.out" 2>"$d/{i}.err" </dev/null; echo $? >"$d/{i}.rc" ) &')
    lines.append("wait")
    for i in range(len(commands)):
        lines.append(f'printf "%s %s %s\\n" {token} {i} "$(cat "$d/{i}.rc" 2>/dev/null)"; cat "$d/{i}.out"; '
                     f'printf "\\n%s stderr\\n" {token}; cat "$d/{i}.err"; printf "\\n%s end\\n" {token}')
    return ["sh", "-c", "\n".join(lines)]


def parse(commands: list[BatchCommand], stdout: str, token: str) -> dict[str, BatchResult]:
    """Each command's result by name; a command whose frame is missing or cut short is left out."""
    results: dict[str, BatchResult] = {}
    rest = stdout
    for i, cmd in enumerate(commands):
        head = f"{token} {i} "
        start = rest.find(head)
        if start < 0:
            break
        line_end = rest.find("\n", start)
        err_mark = rest.find(f"\n{token} stderr\n", line_end)
        end_mark = rest.find(f"\n{token} end\n", err_mark + 1)
        if line_end < 0 or err_mark < 0 or end_mark < 0:
            break
        rc_text = rest[start + len(head):line_end].strip()
        rc = int(rc_text) if rc_text.isdigit() else -1
        out = rest[line_end + 1:err_mark]
        err = rest[err_mark + len(f"\n{token} stderr\n"):end_mark]
        results[cmd.name] = BatchResult(cmd.name, rc, out, err)
        rest = rest[end_mark + len(f"\n{token} end\n"):]
    return results
