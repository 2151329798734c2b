"""Slurm's client commands (scontrol, squeue, sinfo, scancel): what the controller says about
jobs, nodes and partitions, each call bounded by ``CLIENT_TIMEOUT_S``."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable

from clustereval.errors import TransportError, UsageError
from clustereval.probes import slurm as probe
from clustereval.transport.slurm import hostlist

CLIENT_TIMEOUT_S = 30  # scontrol / squeue / sinfo / scancel


def client(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, errors="replace")
    except FileNotFoundError:
        raise no_slurm(argv[0]) from None
    except subprocess.TimeoutExpired:
        raise TransportError("slurm", f"`{' '.join(argv[:3])}` got no answer within {CLIENT_TIMEOUT_S} s",
                             "slurmctld may be down or overloaded: `scontrol ping`",
                             error_id="slurm-controller-timeout", transient=True) from None


def show_job(job_id: str) -> probe.SlurmJob | None:
    proc = client(["scontrol", "show", "job", job_id])
    if proc.returncode != 0:
        failure = probe.classify_srun(proc.stderr)
        if failure and failure.kind == "no-config":
            raise no_controller(failure.line)
        return None
    return probe.parse_job(proc.stdout)


def hostnames(node_list: str) -> list[str]:
    proc = client(["scontrol", "show", "hostnames", node_list])
    return probe.parse_hostnames(proc.stdout)


def node_states(*, partition: str | None = None, names: Iterable[str] = ()) -> list[probe.NodeState]:
    argv = ["sinfo", "-h", "-N", "-o", probe.SINFO_NODE_FORMAT]
    if partition:
        argv.append(f"--partition={partition}")
    names = list(names)
    listed = hostlist.compress(names)
    if names and len(listed) <= hostlist.NODELIST_INLINE_MAX:
        argv.append(f"--nodes={listed}")
    states = probe.parse_sinfo_nodes(client(argv).stdout)
    if names and len(listed) > hostlist.NODELIST_INLINE_MAX:  # sinfo reads no file: every node, then ours
        wanted = set(names)
        states = [s for s in states if s.name in wanted]
    return states


def partitions() -> list[str]:
    return [p for p in client(["sinfo", "-h", "-o", "%P"]).stdout.split() if p]


def default_partition() -> str:
    return next((p.rstrip("*") for p in partitions() if p.endswith("*")), "")


def pending_reason(job_id: str) -> str:
    return client(["squeue", "-h", "-j", job_id, "-o", "%r"]).stdout.strip()


def time_left(job_id: str) -> str:
    """squeue's time left of ``job_id`` (``%L``), as Slurm prints it."""
    return client(["squeue", "-h", "-j", job_id, "-o", "%L"]).stdout


def named_steps(job_id: str) -> list[tuple[str, str]]:
    """(step id, step name) of every step of ``job_id`` that is running."""
    proc = client(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"])
    steps = []
    for line in proc.stdout.splitlines():
        step, _, name = line.partition("|")
        steps.append((step.strip(), name.strip()))
    return steps


def cancel(job_id: str) -> None:
    """``scancel`` a job or a step; never raises (what is already gone is fine)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                       stdin=subprocess.DEVNULL)


def no_slurm(binary: str) -> UsageError:
    return UsageError(f"{binary}: command not found; access = \"slurm\" needs Slurm's client commands here",
                      "run clustereval on a Slurm login node (srun, salloc, scontrol on PATH)", error_id="slurm-missing")


def no_controller(line: str) -> UsageError:
    return UsageError(f"no Slurm controller is configured on this machine ({line})",
                      "run clustereval on a Slurm login node, or point SLURM_CONF at the cluster's slurm.conf",
                      error_id="slurm-no-controller")
