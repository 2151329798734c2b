"""``SlurmTransport``: every command a job step inside the allocation, files as tar streams."""

from __future__ import annotations

import subprocess
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from clustereval.transport.slurm import hostlist
from clustereval.transport.slurm.allocation import Allocation
from clustereval.transport.slurm.client import no_slurm
from clustereval.transport.slurm.failures import raise_for
from clustereval.transport.slurm.steps import SrunProcess, Step, communicate, stop_step

DEFAULT_CHDIR = "/tmp"  # srun's default is the caller's cwd, which need not exist on a node


class SlurmTransport(Transport):
    """``Transport`` over srun inside one allocation."""

    method = "slurm"

    def __init__(self, cfg: SlurmConfig, *, job_name: str = "clustereval") -> None:
        self.cfg = cfg
        self.job_name = job_name
        self.alloc = Allocation(cfg, job_name)
        self._nodes: list[Node] | None = None

    def describe(self) -> str:
        if not self.job_id:
            return "slurm"
        return f"slurm, job {self.job_id}" + (" (requested by this run)" if self.alloc.owned else "")

    # ---- the allocation (allocation.py) --------------------------------------------------------
    @property
    def job_id(self) -> str:
        return self.alloc.job_id

    def allocation(self) -> str:
        """The job id of the allocation every step runs in (asked for on first use)."""
        return self.alloc.acquire()

    def allocation_check(self, nodes: Iterable[Node]) -> tuple[bool, str]:
        """Preflight: the allocation exists, runs, and covers every node. (passed, one line)."""
        return self.alloc.check(nodes)

    def time_left_s(self) -> int | None:
        """Seconds until the allocation's time limit (None: unlimited or unknown)."""
        return self.alloc.time_left_s()

    def prepare_cleanup(self) -> None:
        """When the allocation ended under the run (time limit, a node down, cancelled), ask for a
        short one on its nodes that are still up, so the scratch on them can be cleared."""
        self.alloc.renew_for_cleanup()

    def close(self) -> None:
        """Cancel the allocation this transport asked for; stop our steps in a borrowed one."""
        self.alloc.release()

    @property
    def released(self) -> bool:
        return self.alloc.released

    # ---- nodes ---------------------------------------------------------------------------------
    def nodes(self, wanted: Sequence[str] = ()) -> list[Node]:
        """The allocation's nodes in Slurm's order (or ``wanted``, which must all be in it), each
        with the routable address it reports (``hostname -I`` run on it)."""
        if self._nodes is not None:
            return self._nodes
        job = self.allocation()
        wanted = list(wanted)
        names = wanted or list(self.alloc.node_names)
        outside = [n for n in wanted if n not in self.alloc.node_names]
        if outside:
            raise UsageError(f"{', '.join(outside)} not in Slurm job {job} (its nodes: "
                             f"{', '.join(self.alloc.node_names)})",
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
    def srun_argv(self, nodes: list[str], step: Step, *, cwd: str | None = None, label: bool = False,
                  stdin: bool = False) -> list[str]:
        """Every srun option clustereval sets, in one place."""
        argv = [
            "srun",
            f"--jobid={self.allocation()}",
            # steps share the allocation's CPUs: a probe may run beside a long torchrun step
            "--overlap",
            f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            # a compressed hostlist (gpu[0001-4096]), or a file when even that is long: never the names joined
            f"--nodelist={hostlist.argument(nodes)}",
            # the caller's cwd need not exist on a node; a missing one only warns and falls back
            f"--chdir={cwd or DEFAULT_CHDIR}",
            # no "job step created" chatter in stderr; errors still print
            "--quiet",
            # srun forwards its stdin to the task only when there is something to send
            f"--input={'all' if stdin else 'none'}",
            # the step's own name: cancelled by it when its srun does not end (steps.stop_step)
            f"--job-name={step.name}",
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
        step = self.alloc.step()
        full = self.srun_argv([node.name], step, cwd=cwd, stdin=stdin is not None) + env_prefix(env) + list(argv)
        rc, out, err, seconds, timed_out = communicate(full, stdin.encode() if stdin is not None else None,
                                                       timeout_s, step)
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        if timed_out:
            return CommandResult(node=node.name, argv=list(argv), rc=124, stdout=stdout,
                                 stderr=probe.command_stderr(stderr) + f"\ntimed out after {timeout_s:.0f} s",
                                 seconds=seconds, timed_out=True)
        if rc != 0:
            raise_for(self.alloc, node.name, stderr)
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
        step = self.alloc.step()
        full = (self.srun_argv([n.name for n in nodes], step, cwd=cwd, label=True)
                + ["sh", "-c", probe.FRAME_SCRIPT, "sh"] + env_prefix(env) + list(argv))
        rc, out, err, seconds, timed_out = communicate(full, None, timeout_s, step)
        stderr = err.decode(errors="replace")
        framed = probe.parse_framed(out.decode(errors="replace"))
        missing = [n for n in nodes if n.name not in framed]
        if missing and not timed_out:
            raise_for(self.alloc, missing[0].name, stderr)
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
        gets SIGTERM, which cancels the step there; an srun still there after a grace period has
        its step cancelled through slurmctld, and gets SIGKILL only after that (``steps.stop_step``)."""
        step = self.alloc.step()
        full = self.srun_argv([node.name], step, cwd=cwd) + env_prefix(env) + list(argv)
        try:
            proc = SrunProcess(full, step=step, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        except FileNotFoundError:
            raise no_slurm("srun") from None
        weakref.finalize(proc, stop_step, proc.pid, step)
        return proc

    # ---- files ---------------------------------------------------------------------------------
    def put(self, node: Node, local: Path, remote: str, *, timeout_s: float = 300.0) -> None:
        """``remote`` on the node becomes a copy of ``local`` (a directory is merged into it)."""
        local = Path(local)
        script, args, data = copy_payload(node, local, remote)
        step = self.alloc.step()
        full = self.srun_argv([node.name], step, stdin=True) + ["sh", "-c", script, "sh", *args]
        rc, _, err, _, timed_out = communicate(full, data, timeout_s, step)
        self._copy_outcome(node, rc, err, timed_out, f"copy {local} -> {remote}", timeout_s)

    def get(self, node: Node, remote: str, local: Path, *, timeout_s: float = 300.0) -> None:
        """``local`` becomes a copy of ``remote`` (a file, or a directory merged into ``local``)."""
        local = Path(local)
        step = self.alloc.step()
        full = self.srun_argv([node.name], step) + ["sh", "-c", GET_SCRIPT, "sh", remote]
        rc, out, err, _, timed_out = communicate(full, None, timeout_s, step)
        self._copy_outcome(node, rc, err, timed_out, f"copy {remote} -> {local}", timeout_s)
        unpack_copy(node, remote, local, out)

    def _copy_outcome(self, node: Node, rc: int, err: bytes, timed_out: bool, what: str, timeout_s: float) -> None:
        stderr = err.decode(errors="replace")
        if timed_out:
            raise CommandTimeout(node.name, f"{what} did not finish within {timeout_s:.0f} s",
                                 "a large copy needs a larger timeout")
        if rc != 0:
            raise_for(self.alloc, node.name, stderr)
            why = (probe.command_stderr(stderr).strip() or f"exit {rc}").splitlines()[-1]
            raise TransportError(node.name, f"{what} failed: {why}", "check the path and the space on the node",
                                 error_id="copy-failed")
