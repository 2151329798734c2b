"""srun as a local process: run a step to completion with a timeout, or stop one, so that the
step on the nodes ends with it. srun cancels its step on SIGTERM; a SIGKILLed srun leaves the step
running, so an srun still there after ``KILL_GRACE_S`` (a loaded controller is slow to answer it)
first has its step cancelled through slurmctld, by the step's own name, and only then is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from clustereval.errors import TransportError, UsageError
from clustereval.transport.slurm import client

KILL_GRACE_S = 5  # srun gets SIGTERM (it cancels the step on every node); then scancel; then SIGKILL


@dataclass(frozen=True)
class Step:
    """One job step by the name only it has in its job (``srun --job-name``)."""

    job_id: str
    name: str

    def cancel(self) -> None:
        """``scancel`` the step through slurmctld (what is already gone is fine; never raises)."""
        with contextlib.suppress(TransportError, UsageError):
            for step_id, name in client.named_steps(self.job_id):
                if name == self.name:
                    client.cancel(step_id)


def communicate(argv: list[str], data: bytes | None, timeout_s: float,
                step: Step) -> tuple[int, bytes, bytes, float, bool]:
    """Run srun to completion: (rc, stdout, stderr, seconds, timed_out). On timeout srun gets SIGTERM
    (it cancels the step on the nodes); still there after ``KILL_GRACE_S``, ``step`` is cancelled
    through slurmctld, and srun gets SIGKILL a grace period after that."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise client.no_slurm(argv[0]) from None
    try:
        out, err = proc.communicate(input=data, timeout=timeout_s)
        return proc.returncode, out, err, round(time.monotonic() - start, 3), False
    except subprocess.TimeoutExpired:
        _signal(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            step.cancel()
            try:
                out, err = proc.communicate(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
        return 124, out or b"", err or b"", round(time.monotonic() - start, 3), True
    except BaseException:
        stop_step(proc.pid, step)
        proc.wait()
        raise


def stop_step(pid: int, step: Step) -> None:
    """SIGTERM to an srun (it cancels its step); if it is still there after a grace period, ``step``
    is cancelled through slurmctld, and srun gets SIGKILL a grace period after that. Returns at once.

    By pid, not by the Popen handle: it also runs when the handle was lost (``weakref.finalize``)."""
    if not _signal(pid, signal.SIGTERM):
        return

    def later() -> None:
        for last_resort in (step.cancel, lambda: _signal(pid, signal.SIGKILL)):
            deadline = time.monotonic() + KILL_GRACE_S
            while _signal(pid, 0):  # signal 0: only whether the process group is still there
                if time.monotonic() > deadline:
                    last_resort()
                    break
                time.sleep(0.1)
            else:
                return
    threading.Thread(target=later, daemon=True).start()


def _signal(pid: int, signo: int) -> bool:
    """``signo`` to srun's process group (its own session); False when it is gone."""
    try:
        os.killpg(pid, signo)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class SrunProcess(subprocess.Popen):
    """An srun whose ``kill()`` first lets srun cancel the step (a SIGKILLed srun leaves it running)."""

    def __init__(self, argv: list[str], *, step: Step, **kwargs) -> None:  # noqa: ANN003 - Popen's
        super().__init__(argv, **kwargs)
        self.step = step

    def kill(self) -> None:
        if self.poll() is None:
            stop_step(self.pid, self.step)

    def terminate(self) -> None:
        self.kill()
