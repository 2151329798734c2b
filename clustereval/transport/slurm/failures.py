"""Slurm's own failures, read from srun/salloc stderr by ``probes.slurm``, as one-line errors that
name the node or the ``[slurm]`` setting (no controller, no allocation, a node down, the time
limit reached, an unknown partition)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustereval.config import SlurmConfig
from clustereval.errors import TransportError, UsageError
from clustereval.probes import slurm as probe
from clustereval.transport.slurm import client

if TYPE_CHECKING:
    from clustereval.transport.slurm.allocation import Allocation


def raise_for(alloc: Allocation, node: str, stderr: str) -> None:
    """Raise the one-line error for srun's own failure in ``stderr``; return when the command ran."""
    failure = probe.classify_srun(stderr)
    if failure is None:
        return
    if failure.kind == "no-config":
        raise client.no_controller(failure.line)
    if failure.kind in ("job-gone", "invalid-job", "time-limit"):
        job = client.show_job(alloc.job_id) if alloc.job_id else None
        if job is None:
            raise TransportError(node, f"Slurm job {alloc.job_id} no longer exists ({failure.line})",
                                 "the allocation ended; start a new one and run with --resume",
                                 error_id="slurm-no-allocation")
        if failure.kind == "time-limit":  # the job may still read COMPLETING for a moment
            job.state, job.reason = "TIMEOUT", "TimeLimit"
        raise job_ended_error(alloc.cfg, job, node, owned=alloc.owned)
    if failure.kind == "node-unreachable":
        who = failure.node or node
        raise TransportError(who, f"slurmd does not answer: {failure.line}",
                             f"`scontrol show node {who}` shows its state; the node may be down",
                             error_id="slurm-node-unreachable")
    if failure.kind == "node-config":
        states = {s.name: s for s in client.node_states(names=[node])}
        state = states.get(node)
        if state is not None and not state.usable:
            raise TransportError(node, f"is {state.state}" + (f" (reason: {state.reason})" if state.reason else ""),
                                 f"`scontrol show node {node}`", error_id="slurm-node-down")
        raise TransportError(node, f"is not a node of Slurm job {alloc.job_id}: {failure.line}",
                             "use the allocation's nodes (`squeue -j JOB -o %N`)",
                             error_id="slurm-node-not-allocated")
    raise TransportError(failure.node or node, f"srun failed: {failure.line}",
                         f"run `srun --jobid {alloc.job_id} --overlap -w {node} hostname` by hand",
                         error_id="slurm-step-failed")


def blamed_first(states: list[probe.NodeState]) -> list[probe.NodeState]:
    """The job's unusable nodes, the one that ended it first: a node that is down, failed or drained (a
    reason given first) before one that only misses slurmctld's pings (``allocated*``), which on a busy
    controller can be any node of the job for a moment."""
    hard = ("down", "drain", "fail")
    bad = [s for s in states if not s.usable]
    return sorted(bad, key=lambda s: (not s.state.lower().startswith(hard), not s.reason))


def job_ended_error(cfg: SlurmConfig, job: probe.SlurmJob, node: str, *, owned: bool,
                    source: str = "") -> TransportError:
    """Why the job no longer runs steps. ``owned``: this run asked for it (the hint names [slurm])."""
    job_ref = f"Slurm job {job.job_id}" + (f" ({source})" if source else "")
    if job.time_limit_reached:
        hint = (f"raise [slurm] time_limit (now {cfg.time_limit}) in cluster.toml, or run fewer phases with "
                "--phases" if owned else "ask for a longer allocation (salloc --time) or run fewer "
                "phases with --phases")
        return TransportError(node, f"{job_ref} reached its time limit ({job.time_limit}) and was stopped",
                              hint, error_id="slurm-time-limit")
    if job.state == "NODE_FAIL" or job.reason in ("NodeDown", "NodeFail"):
        names = client.hostnames(job.node_list) if job.node_list else []
        down = blamed_first(client.node_states(names=names)) if names else []
        if down:
            first = down[0]
            return TransportError(first.name, f"is {first.state}"
                                  + (f" (reason: {first.reason})" if first.reason else "")
                                  + f", and Slurm ended {job_ref} because of it",
                                  "leave that node out: start a new allocation without it (`--exclude`) and "
                                  "run with --resume", error_id="slurm-node-down")
        return TransportError(node, f"{job_ref} ended because a node failed ({job.reason})",
                              "`sinfo -R` lists the failed nodes and why", error_id="slurm-node-down")
    return TransportError(node, f"{job_ref} is {job.state or 'gone'}" + (
        f" ({job.reason})" if job.reason and job.reason != "None" else ""),
        "start a new allocation and run with --resume", error_id="slurm-job-ended")


def salloc_error(cfg: SlurmConfig, outcome: probe.SallocOutcome, stderr: str) -> Exception:
    """Why salloc gave no allocation: the [slurm] setting it refused, or its own last line."""
    err = outcome.error or (stderr.strip().splitlines() or ["salloc failed"])[-1]
    low = err.lower()
    if "invalid partition" in low:
        parts = client.partitions()
        return UsageError(f"[slurm] partition {cfg.partition!r} does not exist on this cluster",
                          f"partitions here: {', '.join(parts)}" if parts else "`sinfo -s` lists the partitions",
                          error_id="slurm-invalid-partition")
    if "--time" in err or "time limit" in low:
        return UsageError(f"[slurm] time_limit {cfg.time_limit!r} was refused: {err}",
                          "use minutes or HH:MM:SS within the partition's MaxTime (`sinfo -o %l`)",
                          error_id="slurm-invalid-time")
    if "account" in low:
        return UsageError(f"[slurm] account {cfg.account!r} was refused: {err}",
                          "`sacctmgr show assoc user=$USER` lists your accounts", error_id="slurm-invalid-account")
    failure = probe.classify_srun(stderr)
    if failure and failure.kind == "no-config":
        return client.no_controller(failure.line)
    return TransportError("slurm", f"salloc failed: {err}", "run the same salloc by hand to see the full "
                          "error: " + " ".join(_salloc_summary(cfg)), error_id="slurm-allocation-failed")


def _salloc_summary(cfg: SlurmConfig) -> list[str]:
    argv = ["salloc", f"--nodes={cfg.nodes}", f"--time={cfg.time_limit}"]
    if cfg.partition:
        argv.append(f"--partition={cfg.partition}")
    return argv
