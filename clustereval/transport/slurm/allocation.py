"""The Slurm allocation every step runs in, from asking for it to giving it back.

Either one that exists (``[slurm] job_id`` or ``SLURM_JOB_ID``; left running) or one asked for
with ``salloc --no-shell`` and cancelled with ``scancel`` on ``release()``, also at interpreter
exit (the registry at the end), so Ctrl-C and errors give it back too.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import secrets
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Iterable

from clustereval.config import SlurmConfig
from clustereval.errors import TransportError, UsageError
from clustereval.probes import slurm as probe
from clustereval.report.units import fmt_duration
from clustereval.transport.base import Node
from clustereval.transport.slurm import client, hostlist
from clustereval.transport.slurm.failures import blamed_first, job_ended_error, salloc_error
from clustereval.transport.slurm.steps import KILL_GRACE_S, Step

CLEANUP_TIME_LIMIT = "10"  # minutes: the short allocation that clears scratch after the run's own one ended
CLEANUP_WAIT_S = 120
# salloc --no-shell exits once slurmctld calls the granted job's nodes ready; its own bound is 300 s
# (PrologSlurmctld, booting nodes), this one covers that plus its last RPCs on a loaded controller
SALLOC_READY_WAIT_S = 360
# pending reasons that waiting will not fix: the request itself cannot be met
_HOPELESS = ("ReqNodeNotAvail", "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown",
             "PartitionInactive", "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
             "BadConstraints", "NodeDown", "Required node not available", "partition configuration not available")


class Allocation:
    """One Slurm job: its id, whether this process asked for it, its node names."""

    def __init__(self, cfg: SlurmConfig, job_name: str) -> None:
        self.cfg = cfg
        self.job_name = job_name
        self.job_id: str = ""
        self.owned = False  # True: this process asked for the allocation and cancels it
        self.node_names: list[str] = []
        self.step_tag = f"{job_name}-{secrets.token_hex(3)}"  # every step's name begins with it
        self._step_numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> str:
        """The job id of the allocation every step runs in (asked for on first use)."""
        with self._lock:
            if self.job_id:
                return self.job_id
            if self._closed:
                raise TransportError("slurm", "the Slurm allocation was already released", error_id="slurm-released")
            conf = os.environ.get("SLURM_CONF", "")
            if conf and not os.path.isfile(conf):
                # srun and friends would retry for a minute before saying so
                raise UsageError(f"SLURM_CONF={conf} does not exist", "point SLURM_CONF at the cluster's "
                                 "slurm.conf, or unset it on a login node that has one", error_id="slurm-no-controller")
            existing = self.cfg.job_id or os.environ.get("SLURM_JOB_ID", "").strip()
            if existing:
                self._adopt(existing)
            elif self.cfg.nodes:
                self._request()
            else:
                raise UsageError("access = \"slurm\" needs an allocation: none is set and SLURM_JOB_ID is unset",
                                 "run inside `salloc`, set [slurm] job_id, or set [slurm] nodes (with partition "
                                 "and time_limit) so clustereval asks for one", error_id="slurm-no-allocation")
            return self.job_id

    def _adopt(self, job_id: str) -> None:
        job = client.show_job(job_id)
        source = "[slurm] job_id" if self.cfg.job_id else "SLURM_JOB_ID"
        if job is None:
            raise UsageError(f"Slurm job {job_id} ({source}) does not exist",
                             "start an allocation with `salloc`, or check the id with `squeue --me`",
                             error_id="slurm-no-allocation")
        if not job.alive:
            raise job_ended_error(self.cfg, job, "slurm", owned=self.owned, source=source)
        self.job_id, self.owned = job.job_id, False
        self.node_names = client.hostnames(job.node_list)

    def renew_for_cleanup(self) -> None:
        """When the allocation ended under the run (time limit, a node down, cancelled), ask for a
        short one on its nodes that are still up, so the scratch on them can be cleared."""
        with contextlib.suppress(Exception):
            with self._lock:
                if not self.job_id or self._closed:
                    return
                job = client.show_job(self.job_id)
                if job is not None and job.alive and not job.time_limit_reached:
                    return
                old_nodes = list(self.node_names)
                partition = job.partition if job is not None else self.cfg.partition
                if self.owned:
                    client.cancel(self.job_id)
                _OWNED.discard(self)
                self.job_id, self.owned = "", False
                usable = {s.name for s in client.node_states(names=old_nodes) if s.usable}
                nodes = [n for n in old_nodes if n in usable]
                if not nodes:
                    return
                self._request(num_nodes=len(nodes), nodelist=nodes, time_limit=CLEANUP_TIME_LIMIT,
                              partition=partition, wait_s=min(self.cfg.wait_s, CLEANUP_WAIT_S),
                              job_name=f"{self.job_name}-cleanup")
                self.node_names = old_nodes  # steps name nodes; the ones not in the new job fail by name

    def _request(self, *, num_nodes: int | None = None, nodelist: list[str] | None = None,
                 time_limit: str | None = None, partition: str | None = None, wait_s: int | None = None,
                 job_name: str | None = None) -> None:
        num_nodes = num_nodes or self.cfg.nodes
        wait_s = wait_s or self.cfg.wait_s
        partition = partition or self.cfg.partition
        argv = ["salloc", "--no-shell", f"--nodes={num_nodes}", f"--time={time_limit or self.cfg.time_limit}",
                f"--job-name={job_name or self.job_name}"]
        if nodelist:
            argv.append(f"--nodelist={hostlist.argument(nodelist)}")  # gpu[0001-4096], not every name
        if partition:
            argv.append(f"--partition={partition}")
        if self.cfg.account:
            argv.append(f"--account={self.cfg.account}")
        if self.cfg.gpus_per_node:
            argv.append(f"--gpus-per-node={self.cfg.gpus_per_node}")
        argv += list(self.cfg.salloc_args)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
        except FileNotFoundError:
            raise client.no_slurm("salloc") from None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + max(1, wait_s)
        outcome = probe.SallocOutcome()
        try:
            while True:
                done = proc.poll() is not None
                if done:
                    reader.join(timeout=5)
                outcome = probe.parse_salloc("".join(lines))
                if outcome.granted:
                    self.job_id, self.owned = outcome.job_id, True  # cancelled on any failure below
                    self._await_salloc_exit(proc, reader, lines)
                    break
                if done:
                    raise salloc_error(self.cfg, outcome, "".join(lines))
                if outcome.pending and outcome.job_id:
                    self.job_id, self.owned = outcome.job_id, True  # cancelled on any failure below
                    self._check_pending(outcome)
                if time.monotonic() > deadline:
                    reason = client.pending_reason(outcome.job_id) if outcome.job_id else ""
                    raise TransportError("slurm", f"the allocation was still pending after {wait_s} s"
                                         + (f" (reason: {reason})" if reason else ""),
                                         "the cluster is busy: run again later, ask for fewer [slurm] nodes, or "
                                         "raise [slurm] wait_s", error_id="slurm-allocation-pending")
                time.sleep(0.2)
        except BaseException:
            self._stop_salloc(proc)
            if outcome.job_id or self.job_id:
                client.cancel(outcome.job_id or self.job_id)
            self.job_id, self.owned = "", False
            raise
        self.job_id, self.owned = outcome.job_id, True
        _OWNED.add(self)
        job = client.show_job(self.job_id)
        self.node_names = client.hostnames(job.node_list) if job else []

    def _await_salloc_exit(self, proc: subprocess.Popen, reader: threading.Thread, lines: list[str]) -> None:
        """After "Granted job allocation", salloc --no-shell asks slurmctld until the nodes are ready
        and only then exits 0; a signal in that window makes it give the job back (its handler
        completes the job: "cancelled by interactive user"). On a loaded controller the window lasts
        seconds, and a SIGTERM there left the first step a fresh job that was already CANCELLED
        ("Slurm job N has expired"); so a granted salloc is never signalled, only waited for."""
        try:
            rc = proc.wait(timeout=SALLOC_READY_WAIT_S)
        except subprocess.TimeoutExpired:
            # its own wait is bounded (5 min); past ours, SIGKILL, which it cannot catch: the job stays
            # granted and ours (cancelled on release), and a step on a node still not ready says so itself
            proc.kill()
            proc.wait()
            return
        if rc != 0:  # salloc gave the job back itself ("Something is wrong with the boot of the nodes")
            reader.join(timeout=5)
            raise salloc_error(self.cfg, probe.parse_salloc("".join(lines)), "".join(lines))

    @staticmethod
    def _stop_salloc(proc: subprocess.Popen) -> None:
        """Stop a salloc whose request is still pending (or failed), withdrawing the request."""
        if proc.poll() is None:
            # SIGTERM: salloc withdraws a pending request itself (a SIGKILL would leave it queued)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _check_pending(self, outcome: probe.SallocOutcome) -> None:
        """Raise now when the pending request can never be met (a node down, too many nodes)."""
        reason = client.pending_reason(outcome.job_id)
        text = f"{outcome.notice} {reason}"
        if not any(h in text for h in _HOPELESS):
            return
        part = self.cfg.partition or client.default_partition()
        where = f"partition {part}" if part else "the default partition"
        if "node" in text.lower() and ("not available" in text.lower() or "ReqNodeNotAvail" in text
                                       or "NodeDown" in text):
            down = blamed_first(client.node_states(partition=part))  # a down node before one missing pings
            if down:
                first = down[0]
                others = f" (and {len(down) - 1} more)" if len(down) > 1 else ""
                raise TransportError(first.name, f"is {first.state}"
                                     + (f" (reason: {first.reason})" if first.reason else "")
                                     + f"{others}, so {where} cannot give [slurm] nodes = {self.cfg.nodes}",
                                     f"ask for fewer nodes, or have an admin resume it (`scontrol update "
                                     f"nodename={first.name} state=resume`)", error_id="slurm-node-down")
        raise UsageError(f"{where} cannot give [slurm] nodes = {self.cfg.nodes}: "
                         f"{outcome.notice or reason}",
                         f"`sinfo -p {part}` lists its nodes; ask for fewer, or another partition"
                         if part else "`sinfo` lists the partitions and their nodes",
                         error_id="slurm-request-impossible")

    def release(self) -> None:
        """Cancel the allocation this process asked for; stop our steps in a borrowed one."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self.job_id:
                return
            if self.owned:
                client.cancel(self.job_id)
            else:
                self._cancel_our_steps()
            _OWNED.discard(self)

    @property
    def released(self) -> bool:
        return self._closed

    def step(self) -> Step:
        """A name for the next step, its own in the job: a step whose srun does not end can be
        cancelled through slurmctld by it (``steps.stop_step``), and our steps told from others'."""
        return Step(self.acquire(), f"{self.step_tag}-{next(self._step_numbers)}")

    def _cancel_our_steps(self) -> None:
        """Our steps still running, e.g. a popen step whose srun was killed (a borrowed allocation stays)."""
        for step, name in client.named_steps(self.job_id):
            if name.startswith(f"{self.step_tag}-"):
                client.cancel(step)

    def time_left_s(self) -> int | None:
        """Seconds until the allocation's time limit (None: unlimited or unknown)."""
        return probe.parse_duration_s(client.time_left(self.acquire()))

    def check(self, nodes: Iterable[Node]) -> tuple[bool, str]:
        """Preflight: the allocation exists, runs, and covers every node. (passed, one line)."""
        try:
            job = client.show_job(self.acquire())
            if job is None:
                return False, f"Slurm job {self.job_id} does not exist"
            if not job.alive or job.time_limit_reached:
                return False, job_ended_error(self.cfg, job, "slurm", owned=self.owned).message
            names = client.hostnames(job.node_list)
            missing = [n.name for n in nodes if n.name not in names]
            if missing:
                return False, f"{', '.join(missing)} not in Slurm job {job.job_id} ({job.node_list})"
            left = probe.parse_duration_s(job.time_limit)
            ran = probe.parse_duration_s(job.run_time) or 0
            when = f", {fmt_duration(left - ran)} of {job.time_limit} left" if left is not None else ", no time limit"
            who = "requested by this run" if self.owned else "an existing allocation"
            return True, (f"Slurm job {job.job_id} ({who}): partition {job.partition}, {len(names)} "
                          f"node{'s' if len(names) != 1 else ''} {job.node_list}{when}")
        except (TransportError, UsageError) as exc:
            return False, exc.message


# Allocations this process asked for: cancelled at interpreter exit if nobody released them.
_OWNED: weakref.WeakSet[Allocation] = weakref.WeakSet()


@atexit.register
def _release_all() -> None:
    for allocation in list(_OWNED):
        with contextlib.suppress(Exception):
            allocation.release()
