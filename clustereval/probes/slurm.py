"""Slurm's command-line output, parsed: srun/salloc stderr, ``scontrol show job``, ``sinfo``.

Pure functions: text in, records out. The transport runs the commands and turns what these
functions find into one-line errors naming the node or the ``[slurm]`` setting at fault.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

# ---- scontrol / sinfo / squeue ---------------------------------------------------------------


def parse_hostnames(text: str) -> list[str]:
    """``scontrol show hostnames LIST``: one node name per line, in Slurm's order."""
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass
class SlurmJob:
    """The fields of ``scontrol show job`` that clustereval uses."""

    job_id: str
    state: str = ""  # RUNNING | PENDING | TIMEOUT | NODE_FAIL | CANCELLED | COMPLETED | ...
    reason: str = ""  # TimeLimit | NodeDown | Resources | None | ...
    node_list: str = ""  # compressed hostlist, e.g. "n[0-2]"
    num_nodes: int = 0
    partition: str = ""
    time_limit: str = ""  # [days-]hh:mm:ss or UNLIMITED
    run_time: str = ""
    fields: dict[str, str] = field(default_factory=dict)  # every key=value of the record

    @property
    def alive(self) -> bool:
        return self.state in ("RUNNING", "CONFIGURING", "SUSPENDED")

    @property
    def time_limit_reached(self) -> bool:
        """TIMEOUT, or still RUNNING past its limit (slurmctld ends it at its next check, while
        already refusing new steps)."""
        if self.state == "TIMEOUT" or self.reason == "TimeLimit":
            return True
        limit, ran = parse_duration_s(self.time_limit), parse_duration_s(self.run_time)
        return limit is not None and ran is not None and ran >= limit


_KV = re.compile(r"(\S+?)=(\S*)")


def parse_job(text: str) -> SlurmJob | None:
    """``scontrol show job ID`` (the first record); None when the text holds no job."""
    fields: dict[str, str] = {}
    for key, value in _KV.findall(text):
        if key == "JobId" and "JobId" in fields:
            break  # a second record (a job array): the first one is ours
        fields.setdefault(key, value)
    if "JobId" not in fields:
        return None
    return SlurmJob(job_id=fields["JobId"], state=fields.get("JobState", ""), reason=fields.get("Reason", ""),
                    node_list=fields.get("NodeList", ""), num_nodes=_int(fields.get("NumNodes", "")),
                    partition=fields.get("Partition", ""), time_limit=fields.get("TimeLimit", ""),
                    run_time=fields.get("RunTime", ""), fields=fields)


def _int(text: str) -> int:
    m = re.match(r"\d+", text)
    return int(m.group(0)) if m else 0


@dataclass
class NodeState:
    """One line of ``sinfo -h -N -o '%N|%T|%E'``."""

    name: str
    state: str  # idle | allocated | down | drained | down* (not responding) | ...
    reason: str = ""  # "none" from sinfo becomes ""

    @property
    def usable(self) -> bool:
        bad = ("down", "drain", "fail", "maint", "reboot", "unknown", "power", "inval")
        return not any(self.state.lower().startswith(b) for b in bad) and not self.state.endswith("*")


SINFO_NODE_FORMAT = "%N|%T|%E"


def parse_sinfo_nodes(text: str) -> list[NodeState]:
    """``sinfo -h -N -o '%N|%T|%E'`` (a node listed in several partitions appears once)."""
    seen: dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) < 2 or not parts[0]:
            continue
        reason = parts[2].strip() if len(parts) > 2 else ""
        seen.setdefault(parts[0], NodeState(parts[0], parts[1].strip(), "" if reason == "none" else reason))
    return list(seen.values())


def parse_duration_s(text: str) -> int | None:
    """A Slurm duration (squeue ``%L``/``%l``, ``TimeLimit=``, ``RunTime=``) in seconds:
    ``[days-][hours:]minutes:seconds``; None for UNLIMITED / NOT_SET / INVALID."""
    text = text.strip()
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# ---- salloc ----------------------------------------------------------------------------------


@dataclass
class SallocOutcome:
    """What salloc's stderr says so far."""

    job_id: str = ""  # known from "Granted" or "Pending job allocation N"
    granted: bool = False
    pending: bool = False
    notice: str = ""  # why it is pending, e.g. "Required node not available (down, drained or reserved)"
    error: str = ""  # the most specific "salloc: error:" line, without the prefix


_NOT_NOTICES = ("Pending job allocation", "Granted job allocation", "queued and waiting", "has been allocated",
                "Job aborted due to signal", "Nodes ", "Waiting for resource configuration", "error:")


def parse_salloc(stderr: str) -> SallocOutcome:
    out = SallocOutcome()
    errors: list[str] = []
    for raw in stderr.splitlines():
        line = raw.strip()
        if not line.startswith("salloc:"):
            continue
        body = line[len("salloc:"):].strip()
        if m := re.match(r"Granted job allocation (\d+)", body):
            out.job_id, out.granted, out.pending = m.group(1), True, False
        elif m := re.match(r"Pending job allocation (\d+)", body):
            out.job_id, out.pending = m.group(1), True
        elif body.startswith("error:"):
            errors.append(body[len("error:"):].strip())
        elif not body.startswith(_NOT_NOTICES) and not out.notice:
            out.notice = body
    if errors:
        # "invalid partition specified: X" says more than "Job submit/allocate failed: ..." after it
        specific = [e for e in errors if not e.startswith(("Job submit/allocate failed", "Unable to allocate"))]
        out.error = (specific or errors)[0]
    return out


# ---- srun ------------------------------------------------------------------------------------


@dataclass
class SrunFailure:
    """srun's own failure (not the command's): what kind, on which node, srun's line."""

    kind: str  # no-config | job-gone | invalid-job | time-limit | node-unreachable | node-config | step-failed
    line: str  # srun's most telling stderr line, verbatim
    node: str = ""  # the node the failure names, when it names one
    job_id: str = ""


# srun's bookkeeping about the command's own exit: the command ran, its stderr is the rest
_TASK_EXIT = re.compile(r"^srun: error: (\S+): tasks? [\d,\-]+: (Exited with exit code \d+|Killed|Terminated|"
                        r"Segmentation fault|Aborted|.*core dumped.*)$")
_SRUN_CHATTER = re.compile(r"^srun: (Force Terminated|Job step aborted|forcing job termination|"
                           r"Job step \d+\.\d+ aborted|launch/slurm: )")
_STEPD_CHDIR = re.compile(r"^slurmstepd(-\S+)?: error: couldn't chdir to ")


def command_stderr(stderr: str) -> str:
    """The command's own stderr: srun's task-exit notices and step chatter removed."""
    kept = [ln for ln in stderr.splitlines(keepends=True)
            if not _TASK_EXIT.match(ln.rstrip("\n")) and not _SRUN_CHATTER.match(ln)
            and not _STEPD_CHDIR.match(ln)]
    return "".join(kept)


_FAILURES: list[tuple[str, str]] = [
    # (regex on one stderr line, kind); the first line that matches any pattern, in this order, wins
    (r"Could not establish a configuration source", "no-config"),
    (r"s_p_parse_file: cannot stat file|"
     r"Unable to contact slurm controller|fetch_config: DNS SRV lookup failed", "no-config"),
    (r"\*\*\* (?:STEP|JOB) \S+ ON (?P<node>\S+) CANCELLED AT \S+ DUE TO TIME LIMIT", "time-limit"),
    (r"Slurm job (?P<job>\d+) has expired|Job/step already completing or completed|"
     r"Job has already finished|job (?P<job2>\d+) has (?:already )?(?:completed|been cancelled)", "job-gone"),
    (r"Unable to confirm allocation for job (?P<job>\d+): Invalid job id specified|"
     r"Invalid job id specified", "invalid-job"),
    (r"Task launch for StepId=\S+ failed on node (?P<node>\S+):", "node-unreachable"),
    (r"Node failure on (?P<node>\S+)|Communication connection failure", "node-unreachable"),
    (r"Requested node configuration is not available|Invalid node name specified|"
     r"Required node not available", "node-config"),
    (r"\*\*\* (?:STEP|JOB) \S+ ON (?P<node>\S+) CANCELLED AT", "cancelled"),
    (r"Unable to create step for job (?P<job>\d+)", "step-failed"),
]


_SLURM_LINE = re.compile(r"^(srun|salloc|sbatch|scontrol|squeue|sinfo|scancel|sbcast|slurmstepd\S*|"
                         r"slurm_load_jobs error)[: ]")


def classify_srun(stderr: str) -> SrunFailure | None:
    """srun's own failure in ``stderr``; None when srun launched the command (whatever its exit)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for pattern, kind in _FAILURES:
        rx = re.compile(pattern)
        for line in lines:
            if not _SLURM_LINE.match(line):
                continue  # the command's own stderr never decides
            m = rx.search(line)
            if m:
                groups = m.groupdict()
                job = groups.get("job") or groups.get("job2") or ""
                return SrunFailure(kind=kind, line=line, node=groups.get("node") or "", job_id=job)
    return None


def command_not_found(stderr: str) -> bool:
    """slurmstepd could not exec the command (srun then reports exit code 2)."""
    return bool(re.search(r"^slurmstepd(-\S+)?: error: execve\(\): .*: No such file or directory$", stderr,
                          re.MULTILINE))


# ---- one srun on every node: the framed output ------------------------------------------------

FRAME_SCRIPT = r"""
d=$(mktemp -d 2>/dev/null) || { echo "rc 97 ${SLURMD_NODENAME:-$(hostname)}"; exit 0; }
"$@" >"$d/o" 2>"$d/e" </dev/null
rc=$?
for s in o e; do base64 "$d/$s" | sed "s/^/$s /"; done
echo "rc $rc ${SLURMD_NODENAME:-$(hostname)}"
rm -rf "$d"
"""
# Why framing: srun --label splits lines longer than 1 KiB and interleaves tasks, so a JSON line
# from a worker could come back cut. Each task instead writes its output to files on its node and
# prints them as base64 lines ("o ..."/"e ...", 76 characters) and then "rc N NODENAME".


@dataclass
class FramedResult:
    node: str
    rc: int
    stdout: str
    stderr: str


_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")


def parse_framed(stdout: str) -> dict[str, FramedResult]:
    """srun ``--label`` output of ``FRAME_SCRIPT`` on every node -> node name -> its result.

    A task that printed no ``rc`` line (killed, node lost) is absent from the result."""
    chunks: dict[str, dict[str, list[str]]] = {}
    done: dict[str, tuple[int, str]] = {}
    for line in stdout.splitlines():
        m = _LABEL.match(line)
        if not m:
            continue
        task, body = m.group(1), m.group(2)
        kind, _, rest = body.partition(" ")
        if kind in ("o", "e"):
            chunks.setdefault(task, {"o": [], "e": []})[kind].append(rest.strip())
        elif kind == "rc":
            code, _, node = rest.partition(" ")
            if code.lstrip("-").isdigit():
                done[task] = (int(code), node.strip())
    out: dict[str, FramedResult] = {}
    for task, (rc, node) in done.items():
        parts = chunks.get(task, {"o": [], "e": []})
        out[node] = FramedResult(node=node, rc=rc, stdout=_b64(parts["o"]), stderr=_b64(parts["e"]))
    return out


def _b64(lines: list[str]) -> str:
    try:
        return base64.b64decode("".join(lines)).decode(errors="replace")
    except (binascii.Error, ValueError):
        return ""


# ---- addresses -------------------------------------------------------------------------------


def routable_address(hostname_i: str) -> str:
    """The first IPv4 address of ``hostname -I`` that another node can reach (not loopback or
    link-local); '' when there is none."""
    for token in hostname_i.split():
        if ":" in token:
            continue
        if token.startswith(("127.", "169.254.")):
            continue
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", token):
            return token
    return ""
