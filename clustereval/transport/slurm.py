"""Run commands on the nodes of a Slurm allocation with ``srun``.

The allocation is either one that exists (``[slurm] job_id`` or ``SLURM_JOB_ID``; left running)
or one this transport asks for with ``salloc --no-shell`` and cancels with ``scancel`` in
``close()`` (also at interpreter exit, so Ctrl-C and errors release it too). Every command is a
job step: ``srun --jobid J --overlap --nodes 1 --nodelist NODE``; the same command on every node
is one step over all of them. Files travel as tar streams through a step's stdin/stdout, so
nothing assumes a shared filesystem.

Slurm's own failures (no controller, no allocation, a node down, the time limit reached, an
unknown partition) are read from srun/salloc stderr by ``probes.slurm`` and raised as one-line
errors that name the node or the ``[slurm]`` setting.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from clustereval.config import SlurmConfig
from clustereval.errors import CommandTimeout, TransportError, UsageError
from clustereval.probes import slurm as probe
from clustereval.records import CommandResult
from clustereval.transport.base import (
    DEFAULT_TIMEOUT_S,
    GET_SCRIPT,
    Node,
    Transport,
    copy_payload,
    env_prefix,
    unpack_copy,
)

KILL_GRACE_S = 5  # srun gets SIGTERM (it cancels the step on every node), then SIGKILL this much later
DEFAULT_CHDIR = "/tmp"  # srun's default is the caller's cwd, which need not exist on a node
CLIENT_TIMEOUT_S = 30  # scontrol / squeue / sinfo / scancel
CLEANUP_TIME_LIMIT = "10"  # minutes: the short allocation that clears scratch after the run's own one ended
CLEANUP_WAIT_S = 120
# pending reasons that waiting will not fix: the request itself cannot be met
_HOPELESS = ("ReqNodeNotAvail", "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown",
             "PartitionInactive", "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
             "BadConstraints", "NodeDown", "Required node not available", "partition configuration not available")


class SlurmTransport(Transport):
    """``Transport`` over srun inside one allocation."""

    method = "slurm"

    def __init__(self, cfg: SlurmConfig, *, job_name: str = "clustereval") -> None:
        self.cfg = cfg
        self.job_name = job_name
        self.job_id: str = ""
        self.owned = False  # True: this transport asked for the allocation and cancels it
        self.node_names: list[str] = []
        self._nodes: list[Node] | None = None
        self._lock = threading.Lock()
        self._step_tag = f"{job_name}-{secrets.token_hex(3)}"  # names our long-running steps
        self._closed = False

    def describe(self) -> str:
        if not self.job_id:
            return "slurm"
        return f"slurm, job {self.job_id}" + (" (requested by this run)" if self.owned else "")

    # ---- the allocation ------------------------------------------------------------------------
    def allocation(self) -> str:
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
        job = self.show_job(job_id)
        source = "[slurm] job_id" if self.cfg.job_id else "SLURM_JOB_ID"
        if job is None:
            raise UsageError(f"Slurm job {job_id} ({source}) does not exist",
                             "start an allocation with `salloc`, or check the id with `squeue --me`",
                             error_id="slurm-no-allocation")
        if not job.alive:
            raise self._job_ended_error(job, "slurm", source=source)
        self.job_id, self.owned = job.job_id, False
        self.node_names = self.hostnames(job.node_list)

    def prepare_cleanup(self) -> None:
        """When the allocation ended under the run (time limit, a node down, cancelled), ask for a
        short one on its nodes that are still up, so the scratch on them can be cleared."""
        with contextlib.suppress(Exception):
            with self._lock:
                if not self.job_id or self._closed:
                    return
                job = self.show_job(self.job_id)
                if job is not None and job.alive and not job.time_limit_reached:
                    return
                old_nodes = list(self.node_names)
                partition = job.partition if job is not None else self.cfg.partition
                if self.owned:
                    self._cancel(self.job_id)
                _OWNED.discard(self)
                self.job_id, self.owned = "", False
                usable = {s.name for s in self.node_states(names=old_nodes) if s.usable}
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
            argv.append(f"--nodelist={','.join(nodelist)}")
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
            raise _no_slurm("salloc") from None
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
                    break
                if done:
                    raise self._salloc_error(outcome, "".join(lines))
                if outcome.pending and outcome.job_id:
                    self.job_id, self.owned = outcome.job_id, True  # cancelled on any failure below
                    self._check_pending(outcome)
                if time.monotonic() > deadline:
                    reason = self._pending_reason(outcome.job_id) if outcome.job_id else ""
                    raise TransportError("slurm", f"the allocation was still pending after {wait_s} s"
                                         + (f" (reason: {reason})" if reason else ""),
                                         "the cluster is busy: run again later, ask for fewer [slurm] nodes, or "
                                         "raise [slurm] wait_s", error_id="slurm-allocation-pending")
                time.sleep(0.2)
        except BaseException:
            self._stop_salloc(proc)
            if outcome.job_id or self.job_id:
                self._cancel(outcome.job_id or self.job_id)
            self.job_id, self.owned = "", False
            raise
        self._stop_salloc(proc)
        self.job_id, self.owned = outcome.job_id, True
        _OWNED.add(self)
        job = self.show_job(self.job_id)
        self.node_names = self.hostnames(job.node_list) if job else []

    @staticmethod
    def _stop_salloc(proc: subprocess.Popen) -> None:
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
        reason = self._pending_reason(outcome.job_id)
        text = f"{outcome.notice} {reason}"
        if not any(h in text for h in _HOPELESS):
            return
        part = self.cfg.partition or self._default_partition()
        where = f"partition {part}" if part else "the default partition"
        if "node" in text.lower() and ("not available" in text.lower() or "ReqNodeNotAvail" in text
                                       or "NodeDown" in text):
            down = [n for n in self.node_states(partition=part) if not n.usable]
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

    def _salloc_error(self, outcome: probe.SallocOutcome, stderr: str) -> Exception:
        err = outcome.error or (stderr.strip().splitlines() or ["salloc failed"])[-1]
        low = err.lower()
        if "invalid partition" in low:
            parts = self.partitions()
            return UsageError(f"[slurm] partition {self.cfg.partition!r} does not exist on this cluster",
                              f"partitions here: {', '.join(parts)}" if parts else "`sinfo -s` lists the partitions",
                              error_id="slurm-invalid-partition")
        if "--time" in err or "time limit" in low:
            return UsageError(f"[slurm] time_limit {self.cfg.time_limit!r} was refused: {err}",
                              "use minutes or HH:MM:SS within the partition's MaxTime (`sinfo -o %l`)",
                              error_id="slurm-invalid-time")
        if "account" in low:
            return UsageError(f"[slurm] account {self.cfg.account!r} was refused: {err}",
                              "`sacctmgr show assoc user=$USER` lists your accounts", error_id="slurm-invalid-account")
        failure = probe.classify_srun(stderr)
        if failure and failure.kind == "no-config":
            return _no_controller(failure.line)
        return TransportError("slurm", f"salloc failed: {err}", "run the same salloc by hand to see the full "
                              "error: " + " ".join(self._salloc_summary()), error_id="slurm-allocation-failed")

    def _salloc_summary(self) -> list[str]:
        argv = ["salloc", f"--nodes={self.cfg.nodes}", f"--time={self.cfg.time_limit}"]
        if self.cfg.partition:
            argv.append(f"--partition={self.cfg.partition}")
        return argv

    def close(self) -> None:
        """Cancel the allocation this transport asked for; stop our steps in a borrowed one."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self.job_id:
                return
            if self.owned:
                self._cancel(self.job_id)
            else:
                self._cancel_our_steps()
            _OWNED.discard(self)

    @property
    def released(self) -> bool:
        return self._closed

    def _cancel(self, job_id: str) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)

    def _cancel_our_steps(self) -> None:
        """Steps we started with popen that may outlive a killed srun (a borrowed allocation stays)."""
        proc = self._client(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j"])
        for line in proc.stdout.splitlines():
            step, _, name = line.partition("|")
            if name.strip() == self._step_tag:
                self._cancel(step.strip())

    # ---- Slurm's client commands ---------------------------------------------------------------
    def _client(self, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, errors="replace")
        except FileNotFoundError:
            raise _no_slurm(argv[0]) from None
        except subprocess.TimeoutExpired:
            raise TransportError("slurm", f"`{' '.join(argv[:3])}` got no answer within {CLIENT_TIMEOUT_S} s",
                                 "slurmctld may be down or overloaded: `scontrol ping`",
                                 error_id="slurm-controller-timeout", transient=True) from None

    def show_job(self, job_id: str) -> probe.SlurmJob | None:
        proc = self._client(["scontrol", "show", "job", job_id])
        if proc.returncode != 0:
            failure = probe.classify_srun(proc.stderr)
            if failure and failure.kind == "no-config":
                raise _no_controller(failure.line)
            return None
        return probe.parse_job(proc.stdout)

    def hostnames(self, node_list: str) -> list[str]:
        proc = self._client(["scontrol", "show", "hostnames", node_list])
        return probe.parse_hostnames(proc.stdout)

    def node_states(self, *, partition: str | None = None, names: Iterable[str] = ()) -> list[probe.NodeState]:
        argv = ["sinfo", "-h", "-N", "-o", probe.SINFO_NODE_FORMAT]
        if partition:
            argv.append(f"--partition={partition}")
        names = list(names)
        if names:
            argv.append(f"--nodes={','.join(names)}")
        return probe.parse_sinfo_nodes(self._client(argv).stdout)

    def partitions(self) -> list[str]:
        return [p for p in self._client(["sinfo", "-h", "-o", "%P"]).stdout.split() if p]

    def _default_partition(self) -> str:
        return next((p.rstrip("*") for p in self.partitions() if p.endswith("*")), "")

    def _pending_reason(self, job_id: str) -> str:
        return self._client(["squeue", "-h", "-j", job_id, "-o", "%r"]).stdout.strip()

    def time_left_s(self) -> int | None:
        """Seconds until the allocation's time limit (None: unlimited or unknown)."""
        proc = self._client(["squeue", "-h", "-j", self.allocation(), "-o", "%L"])
        return probe.parse_duration_s(proc.stdout)

    def allocation_check(self, nodes: Iterable[Node]) -> tuple[bool, str]:
        """Preflight: the allocation exists, runs, and covers every node. (passed, one line)."""
        try:
            job = self.show_job(self.allocation())
            if job is None:
                return False, f"Slurm job {self.job_id} does not exist"
            if not job.alive or job.time_limit_reached:
                return False, self._job_ended_error(job, "slurm").message
            names = self.hostnames(job.node_list)
            missing = [n.name for n in nodes if n.name not in names]
            if missing:
                return False, f"{', '.join(missing)} not in Slurm job {job.job_id} ({job.node_list})"
            left = probe.parse_duration_s(job.time_limit)
            ran = probe.parse_duration_s(job.run_time) or 0
            when = f", {_fmt_duration(left - ran)} of {job.time_limit} left" if left is not None else ", no time limit"
            who = "requested by this run" if self.owned else "an existing allocation"
            return True, (f"Slurm job {job.job_id} ({who}): partition {job.partition}, {len(names)} "
                          f"node{'s' if len(names) != 1 else ''} {job.node_list}{when}")
        except (TransportError, UsageError) as exc:
            return False, exc.message

    # ---- nodes ---------------------------------------------------------------------------------
    def nodes(self, wanted: Iterable[str] = ()) -> list[Node]:
        """The allocation's nodes in Slurm's order (or ``wanted``, which must all be in it), each
        with the routable address it reports (``hostname -I`` run on it)."""
        if self._nodes is not None:
            return self._nodes
        job = self.allocation()
        wanted = list(wanted)
        names = wanted or list(self.node_names)
        outside = [n for n in wanted if n not in self.node_names]
        if outside:
            raise UsageError(f"{', '.join(outside)} not in Slurm job {job} (its nodes: "
                             f"{', '.join(self.node_names)})",
                             "list only the allocation's nodes in cluster.toml `nodes`, or leave `nodes` out",
                             error_id="slurm-node-not-allocated")
        bare = [Node(name=n, address=n, index=i) for i, n in enumerate(names)]
        results = self.run_all(bare, ["sh", "-c", "hostname; hostname -I"], timeout_s=60)
        nodes = []
        for node, res in zip(bare, results, strict=True):
            lines = res.stdout.splitlines()
            hostname = lines[0].strip() if lines else ""
            address = probe.routable_address(lines[1] if len(lines) > 1 else "") or node.name
            nodes.append(Node(name=node.name, address=address, index=node.index, slots=self.cfg.gpus_per_node,
                              extra={"hostname": hostname, "job_id": job}))
        self._nodes = nodes
        return nodes

    # ---- srun ----------------------------------------------------------------------------------
    def srun_argv(self, nodes: list[str], *, cwd: str | None = None, label: bool = False,
                  step_name: str | None = None, stdin: bool = False) -> list[str]:
        """Every srun option clustereval sets, in one place."""
        argv = [
            "srun",
            f"--jobid={self.allocation()}",
            # steps share the allocation's CPUs: a probe may run beside a long torchrun step
            "--overlap",
            f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}",
            # the caller's cwd need not exist on a node; a missing one only warns and falls back
            f"--chdir={cwd or DEFAULT_CHDIR}",
            # no "job step created" chatter in stderr; errors still print
            "--quiet",
            # srun forwards its stdin to the task only when there is something to send
            f"--input={'all' if stdin else 'none'}",
            f"--job-name={step_name or self.job_name}",
        ]
        if label:
            argv.append("--label")
        if len(nodes) > 1:
            # one task failing to start must not leave the others running with nobody reading them
            argv.append("--kill-on-bad-exit=0")
        return argv + list(self.cfg.srun_args) + ["--"]

    def run(self, node: Node, argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: str | None = None) -> CommandResult:
        full = self.srun_argv([node.name], cwd=cwd, stdin=stdin is not None) + env_prefix(env) + list(argv)
        rc, out, err, seconds, timed_out = _communicate(full, stdin.encode() if stdin is not None else None,
                                                        timeout_s)
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        if timed_out:
            return CommandResult(node=node.name, argv=list(argv), rc=124, stdout=stdout,
                                 stderr=probe.command_stderr(stderr) + f"\ntimed out after {timeout_s:.0f} s",
                                 seconds=seconds, timed_out=True)
        if rc != 0:
            self._raise_for(node.name, stderr)
            if probe.command_not_found(stderr):
                rc = 127
        return CommandResult(node=node.name, argv=list(argv), rc=rc, stdout=stdout,
                             stderr=probe.command_stderr(stderr), seconds=seconds)

    def run_all(self, nodes: Iterable[Node], argv: list[str] | Callable[[Node], list[str]], *,
                timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None,
                cwd: str | None = None) -> list[CommandResult]:
        """One srun step over every node at once (the same argv); results in node order."""
        nodes = list(nodes)
        if callable(argv) or len(nodes) <= 1:
            return super().run_all(nodes, argv, timeout_s=timeout_s, env=env, cwd=cwd)
        full = (self.srun_argv([n.name for n in nodes], cwd=cwd, label=True)
                + ["sh", "-c", probe.FRAME_SCRIPT, "sh"] + env_prefix(env) + list(argv))
        rc, out, err, seconds, timed_out = _communicate(full, None, timeout_s)
        stderr = err.decode(errors="replace")
        framed = probe.parse_framed(out.decode(errors="replace"))
        missing = [n for n in nodes if n.name not in framed]
        if missing and not timed_out:
            self._raise_for(missing[0].name, stderr)
            raise TransportError(missing[0].name, "returned no result from the srun step"
                                 + (f": {stderr.strip().splitlines()[-1]}" if stderr.strip() else ""),
                                 f"run `srun --jobid {self.job_id} --overlap -w {missing[0].name} hostname` "
                                 "by hand", error_id="slurm-step-failed")
        results = []
        for node in nodes:
            got = framed.get(node.name)
            if got is None:
                results.append(CommandResult(node=node.name, argv=list(argv), rc=124, stdout="",
                                             stderr=f"timed out after {timeout_s:.0f} s", seconds=seconds,
                                             timed_out=True))
                continue
            code = 127 if got.rc == 127 or probe.command_not_found(got.stderr) else got.rc
            results.append(CommandResult(node=node.name, argv=list(argv), rc=code, stdout=got.stdout,
                                         stderr=got.stderr, seconds=seconds))
        return results

    def popen(self, node: Node, argv: list[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.Popen:
        """Start a long-running step (torchrun) on ``node``; stdout and stderr merged.

        ``terminate()``/``kill()`` on the handle, or losing it, stops the step on the node: srun
        gets SIGTERM, which cancels the step there, and SIGKILL only after a grace period."""
        full = self.srun_argv([node.name], cwd=cwd, step_name=self._step_tag) + env_prefix(env) + list(argv)
        try:
            proc = _SrunProcess(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        except FileNotFoundError:
            raise _no_slurm("srun") from None
        weakref.finalize(proc, _stop_step, proc.pid)
        return proc

    # ---- files ---------------------------------------------------------------------------------
    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        """``remote`` on the node becomes a copy of ``local`` (a directory is merged into it)."""
        local = Path(local)
        script, args, data = copy_payload(node, local, remote)
        full = self.srun_argv([node.name], stdin=True) + ["sh", "-c", script, "sh", *args]
        rc, _, err, _, timed_out = _communicate(full, data, timeout_s)
        self._copy_outcome(node, rc, err, timed_out, f"copy {local} -> {remote}", timeout_s)

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        """``local`` becomes a copy of ``remote`` (a file, or a directory merged into ``local``)."""
        local = Path(local)
        full = self.srun_argv([node.name]) + ["sh", "-c", GET_SCRIPT, "sh", remote]
        rc, out, err, _, timed_out = _communicate(full, None, timeout_s)
        self._copy_outcome(node, rc, err, timed_out, f"copy {remote} -> {local}", timeout_s)
        unpack_copy(node, remote, local, out)

    def _copy_outcome(self, node: Node, rc: int, err: bytes, timed_out: bool, what: str, timeout_s: float) -> None:
        stderr = err.decode(errors="replace")
        if timed_out:
            raise CommandTimeout(node.name, f"{what} did not finish within {timeout_s:.0f} s",
                                 "a large copy needs a larger timeout")
        if rc != 0:
            self._raise_for(node.name, stderr)
            why = (probe.command_stderr(stderr).strip() or f"exit {rc}").splitlines()[-1]
            raise TransportError(node.name, f"{what} failed: {why}", "check the path and the space on the node",
                                 error_id="copy-failed")

    # ---- errors --------------------------------------------------------------------------------
    def _raise_for(self, node: str, stderr: str) -> None:
        """Raise the one-line error for srun's own failure in ``stderr``; return when the command ran."""
        failure = probe.classify_srun(stderr)
        if failure is None:
            return
        if failure.kind == "no-config":
            raise _no_controller(failure.line)
        if failure.kind in ("job-gone", "invalid-job", "time-limit"):
            job = self.show_job(self.job_id) if self.job_id else None
            if job is None:
                raise TransportError(node, f"Slurm job {self.job_id} no longer exists ({failure.line})",
                                     "the allocation ended; start a new one and run with --resume",
                                     error_id="slurm-no-allocation")
            if failure.kind == "time-limit":  # the job may still read COMPLETING for a moment
                job.state, job.reason = "TIMEOUT", "TimeLimit"
            raise self._job_ended_error(job, node)
        if failure.kind == "node-unreachable":
            who = failure.node or node
            raise TransportError(who, f"slurmd does not answer: {failure.line}",
                                 f"`scontrol show node {who}` shows its state; the node may be down",
                                 error_id="slurm-node-unreachable")
        if failure.kind == "node-config":
            states = {s.name: s for s in self.node_states(names=[node])}
            state = states.get(node)
            if state is not None and not state.usable:
                raise TransportError(node, f"is {state.state}" + (f" (reason: {state.reason})" if state.reason else ""),
                                     f"`scontrol show node {node}`", error_id="slurm-node-down")
            raise TransportError(node, f"is not a node of Slurm job {self.job_id}: {failure.line}",
                                 "use the allocation's nodes (`squeue -j JOB -o %N`)",
                                 error_id="slurm-node-not-allocated")
        raise TransportError(failure.node or node, f"srun failed: {failure.line}",
                             f"run `srun --jobid {self.job_id} --overlap -w {node} hostname` by hand",
                             error_id="slurm-step-failed")

    def _job_ended_error(self, job: probe.SlurmJob, node: str, *, source: str = "") -> TransportError:
        job_ref = f"Slurm job {job.job_id}" + (f" ({source})" if source else "")
        if job.time_limit_reached:
            hint = (f"raise [slurm] time_limit (now {self.cfg.time_limit}) in cluster.toml, or run fewer phases with "
                    "--phases" if self.owned else "ask for a longer allocation (salloc --time) or run fewer "
                    "phases with --phases")
            return TransportError(node, f"{job_ref} reached its time limit ({job.time_limit}) and was stopped",
                                  hint, error_id="slurm-time-limit")
        if job.state == "NODE_FAIL" or job.reason in ("NodeDown", "NodeFail"):
            names = self.hostnames(job.node_list) if job.node_list else []
            down = [s for s in self.node_states(names=names) if not s.usable] if names else []
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


# ---- process helpers ---------------------------------------------------------------------------


def _communicate(argv: list[str], data: bytes | None, timeout_s: float) -> tuple[int, bytes, bytes, float, bool]:
    """Run srun to completion: (rc, stdout, stderr, seconds, timed_out). On timeout srun gets SIGTERM
    (it cancels the step on the nodes) and SIGKILL after ``KILL_GRACE_S``."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise _no_slurm(argv[0]) from None
    try:
        out, err = proc.communicate(input=data, timeout=timeout_s)
        return proc.returncode, out, err, round(time.monotonic() - start, 3), False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return 124, out or b"", err or b"", round(time.monotonic() - start, 3), True
    except BaseException:
        _stop_step(proc.pid)
        proc.wait()
        raise


def _stop_step(pid: int) -> None:
    """SIGTERM to an srun (it cancels its step), SIGKILL after a grace period if it is still there."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return

    def later() -> None:
        time.sleep(KILL_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    threading.Thread(target=later, daemon=True).start()


class _SrunProcess(subprocess.Popen):
    """An srun whose ``kill()`` first lets srun cancel the step (a SIGKILLed srun leaves it running)."""

    def kill(self) -> None:
        if self.poll() is None:
            _stop_step(self.pid)

    def terminate(self) -> None:
        self.kill()


def _fmt_duration(seconds: int) -> str:
    seconds = max(0, seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _no_slurm(binary: str) -> UsageError:
    return UsageError(f"{binary}: command not found; access = \"slurm\" needs Slurm's client commands here",
                      "run clustereval on a Slurm login node (srun, salloc, scontrol on PATH)", error_id="slurm-missing")


def _no_controller(line: str) -> UsageError:
    return UsageError(f"no Slurm controller is configured on this machine ({line})",
                      "run clustereval on a Slurm login node, or point SLURM_CONF at the cluster's slurm.conf",
                      error_id="slurm-no-controller")


# Allocations this process asked for: cancelled at interpreter exit if nobody closed them.
_OWNED: weakref.WeakSet[SlurmTransport] = weakref.WeakSet()


@atexit.register
def _release_all() -> None:
    for transport in list(_OWNED):
        with contextlib.suppress(Exception):
            transport.close()
