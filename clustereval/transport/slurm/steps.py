"""srun as a local process: run a step to completion with a timeout, or stop one, so that the
step on the nodes ends with it (srun cancels its step on SIGTERM; a SIGKILLed srun leaves it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from clustereval.transport.slurm.client import no_slurm

KILL_GRACE_S = 5  # srun gets SIGTERM (it cancels the step on every node), then SIGKILL this much later


def communicate(argv: list[str], data: bytes | None, timeout_s: float) -> tuple[int, bytes, bytes, float, bool]:
    """Run srun to completion: (rc, stdout, stderr, seconds, timed_out). On timeout srun gets SIGTERM
    (it cancels the step on the nodes) and SIGKILL after ``KILL_GRACE_S``."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise no_slurm(argv[0]) from None
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
        stop_step(proc.pid)
        proc.wait()
        raise


def stop_step(pid: int) -> None:
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


class SrunProcess(subprocess.Popen):
    """An srun whose ``kill()`` first lets srun cancel the step (a SIGKILLed srun leaves it running)."""

    def kill(self) -> None:
        if self.poll() is None:
            stop_step(self.pid)

    def terminate(self) -> None:
        self.kill()
