"""A real Slurm cluster on this one machine: slurmctld here, one slurmd per test-bed node.

The nodes are the network namespaces of ``tests.testbed.NetnsCluster`` (own address, own
hostname, and here also an own local disk: each slurmd's mount namespace has a per-node folder
bound over the test bed's ``local_scratch``, so node-local scratch is really per node). ``slurmctld`` and a private ``munged`` run in this machine's namespace and listen
on the bridge; each node runs its own ``slurmd`` inside its namespace, so ``srun hostname``
answers with the node's hostname and ``hostname -I`` with its address, as on a real cluster.
All of Slurm's files (config, munge key and socket, state and spool dirs, logs) sit in a temp
dir; nothing in /etc is touched. Client commands find the cluster through ``SLURM_CONF``
(``SlurmCluster.env``).

The config is the smallest that runs without systemd or cgroups: ``proctrack/linuxproc``,
``task/none``, ``select/cons_tres`` on CPUs, no GRES, no accounting, root as SlurmUser.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.testbed import REGISTRY, NetnsCluster, TestbedUnavailable

SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "srun", "salloc", "scontrol", "squeue", "scancel")
APT_HINT = "apt-get install slurm-wlm munge (scripts/test.sh installs them)"
PARTITION = "debug"
SLURM_REGISTRY = REGISTRY / "slurm"
# Bounds on waits that end with the event they wait for, so they cost nothing when the machine is
# idle; each holds at a load of 30 on 2 cores (the suite beside other work), where one Slurm RPC or
# daemon start can take seconds
START_TIMEOUT_S = 120  # munged's socket, slurmctld's ping, every slurmd idle in sinfo
CLIENT_TIMEOUT_S = 120  # one client command (scontrol, squeue, salloc --no-shell)
SETTLE_TIMEOUT_S = 60  # a cancelled job or a killed step leaving squeue (slurmstepd, then slurmctld)


def slurm_unavailable_reason() -> str:
    """Why a local Slurm cluster cannot run here ('' when it can)."""
    for binary in SLURM_BINARIES:
        if not shutil.which(binary) and not os.path.exists(f"/usr/sbin/{binary}"):
            return f"Slurm is not installed (`{binary}` not found): {APT_HINT}"
    return ""


def _which(binary: str) -> str:
    return shutil.which(binary) or f"/usr/sbin/{binary}"


class SlurmCluster:
    """slurmctld + munged on this machine and one slurmd per node of ``netns``.

    ``env`` is what a client (srun, salloc, clustereval) needs: ``SLURM_CONF`` pointing at the
    generated config. ``node_names`` are the Slurm node names (= the nodes' hostnames).
    """

    def __init__(self, netns: NetnsCluster, *, cpus_per_node: int = 1) -> None:
        self.netns = netns
        self.dir = netns.workdir / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.cluster_name = f"ce{netns.id}"
        self.ctld_port = random.randint(29000, 32000)
        self.slurmd_port = self.ctld_port + 1  # every slurmd has its own namespace: one port for all
        self.cpus_per_node = cpus_per_node
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {"SLURM_CONF": str(self.conf)}
        # slurmctld's prolog, run as every job starts: sleeps as long as ``set_allocation_delay`` says
        self.prolog_ctld = self.dir / "prolog-ctld.sh"
        self.prolog_delay_file = self.dir / "prolog-delay-s"
        self.prolog_delayed = False  # in the config only once a test asks: salloc then waits for it

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.netns.nodes]

    # ---- building ----------------------------------------------------------------------------
    @classmethod
    def create(cls, netns: NetnsCluster, **kw) -> SlurmCluster:
        reason = slurm_unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        sweep_stale_slurm()
        cluster = cls(netns, **kw)
        try:
            cluster._register()
            cluster._start()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def _start(self) -> None:
        for sub in ("munge", "ctld", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for node in self.netns.nodes:
            (self.dir / "spool" / node.name).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "munge", 0o700)
        self._start_munge()
        self.conf.write_text(self.config_text())
        # slurmd initialises a cgroup plugin even when nothing uses it; v1 with nothing mounted
        # is the one that starts without systemd (each node gets an empty tmpfs there)
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        self.prolog_ctld.write_text(f'#!/bin/sh\nsleep "$(cat {self.prolog_delay_file} 2>/dev/null || echo 0)"\n')
        self.prolog_ctld.chmod(0o755)
        self._start_ctld()
        for node in self.netns.nodes:
            self.start_slurmd(node.name, wait=False)
        self.wait_idle()

    def config_text(self) -> str:
        host = socket.gethostname().split(".")[0]
        names = ",".join(self.node_names)
        lines = [
            "# generated by the clustereval Slurm test bed",
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}({self.netns.gateway})",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.dir / 'ctld'}",
            f"SlurmdSpoolDir={self.dir / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.dir / 'ctld' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'spool' / '%n' / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.dir / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=1",  # a node set DOWN by hand stays down
            "SlurmdParameters=config_overrides",
            # Every limit below holds on a machine loaded far past its cores (the suite runs beside
            # other work: a load of 30 on 2 cores), where each daemon waits seconds for a CPU.
            # Slurm's defaults: a slurmd that misses slurmctld's pings for SlurmdTimeout is set DOWN
            # and its jobs end (NODE_FAIL), so a short one could end healthy jobs under load; no test
            # waits for it (a node is set down by hand, `set_node_state`; a killed slurmd fails the
            # next step to it)
            "SlurmdTimeout=300",
            "SlurmctldTimeout=120",
            "InactiveLimit=0",
            "KillWait=2",  # a cancelled or timed-out step: SIGTERM, then SIGKILL this much later
            # a job's record stays this long after it ended, so srun's "expired" is read against the
            # job's end (its state, its reason) and not against a record already purged
            "MinJobAge=300",
            "OverTimeLimit=0",
            # an RPC (srun, scontrol, slurmd to slurmctld) waits this long for its answer: a slurmctld
            # behind on a loaded machine answers late, not never
            "MessageTimeout=60",
            "TCPTimeout=10",
            "SchedulerParameters=sched_interval=1",
            f"NodeName=DEFAULT CPUs={self.cpus_per_node} RealMemory=512 State=UNKNOWN",
        ]
        if self.prolog_delayed:
            lines.append(f"PrologSlurmctld={self.prolog_ctld}")
        lines += [f"NodeName={n.name} NodeAddr={n.address} NodeHostname={n.name}" for n in self.netns.nodes]
        lines.append(f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _start_munge(self) -> None:
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        d = self.dir / "munge"
        self.procs["munged"] = self._spawn(
            "munged", [_which("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                       f"--key-file={key}", f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'seed'}",
                       f"--log-file={d / 'munged.log'}", "--num-threads=2"])
        self._wait(lambda: self.munge_socket.exists(), "munged", START_TIMEOUT_S)

    def _start_ctld(self) -> None:
        self.procs["slurmctld"] = self._spawn(
            "slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.client(["scontrol", "ping"]).returncode == 0, "slurmctld", START_TIMEOUT_S)

    def start_slurmd(self, name: str, *, wait: bool = True) -> None:
        node = self.netns.node(name)
        key = f"slurmd-{node.name}"
        old = self.procs.get(key)
        if old is not None and old.poll() is None:
            return
        # ip netns exec -> unshare --uts -> sh -> slurmd exec in place: the Popen pid is slurmd's
        local = self.local_dir(node.name)
        local.mkdir(parents=True, exist_ok=True)
        # the node's own namespaces: hostname, an empty cgroup dir (slurmd insists on one), and its
        # own disk at local_scratch (a bind mount only its slurmd and its jobs see)
        self.procs[key] = self._spawn(key, [
            "ip", "netns", "exec", node.netns, "unshare", "--uts", "sh", "-c",
            'hostname "$1" && mount -t tmpfs cgroup /sys/fs/cgroup && mount --bind "$4" "$5" && '
            'exec "$2" -D -N "$1" -f "$3"', "sh", node.name, _which("slurmd"), str(self.conf), str(local),
            str(self.netns.scratch_dir)])
        if wait:
            self.wait_idle([name])

    def set_allocation_delay(self, seconds: float) -> None:
        """Every job granted from now on waits ``seconds`` before its nodes are ready (slurmctld's
        prolog runs that long), as a loaded controller makes it wait: salloc prints "Granted job
        allocation" and asks until they are ready, and only then exits."""
        self.prolog_delay_file.write_text(f"{seconds}\n")
        if self.prolog_delayed:
            return
        self.prolog_delayed = True
        self.conf.write_text(self.config_text())
        # `scontrol reconfigure` shows the new PrologSlurmctld but jobs do not run it: a restart does
        ctld = self.procs["slurmctld"]
        ctld.send_signal(signal.SIGTERM)
        ctld.wait(timeout=START_TIMEOUT_S)
        self._start_ctld()
        self.wait_idle()

    def local_dir(self, name: str) -> Path:
        """What node ``name`` sees at the test bed's local_scratch: a disk of its own."""
        return self.dir / "local" / name

    def kill_slurmd(self, name: str) -> None:
        proc = self.procs.get(f"slurmd-{name}")
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.dir / "log" / f"{name}.console", "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ)
        env.update(self.env)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        log.close()
        self._note_pid(proc.pid)
        return proc

    def _wait(self, ready, what: str, timeout_s: float) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise TestbedUnavailable(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")
            time.sleep(0.2)
        raise TestbedUnavailable(f"{what} was not ready within {timeout_s:.0f} s: {self.log_tail(what)}")

    def log_tail(self, name: str, chars: int = 600) -> str:
        text = ""
        for path in sorted((self.dir / "log").glob(f"{name}*")) + sorted((self.dir / "munge").glob("*.log")):
            text += path.read_text(errors="replace")[-chars:]
        return text.strip()[-chars:]

    def wait_idle(self, names: list[str] | None = None, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every named node (default all) is idle in ``sinfo``."""
        wanted = set(names or self.node_names)

        def ready() -> bool:
            states = self.node_states()
            return all(states.get(n, "").startswith("idle") for n in wanted)
        self._wait(ready, "slurmd", timeout_s)

    # ---- the knobs tests turn ----------------------------------------------------------------
    def client(self, argv: list[str], timeout: float = CLIENT_TIMEOUT_S) -> subprocess.CompletedProcess:
        """A Slurm client command (scontrol, squeue, ...) against this cluster."""
        env = dict(os.environ)
        env.update(self.env)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)

    def node_states(self) -> dict[str, str]:
        proc = self.client(["sinfo", "-h", "-N", "-o", "%N %T"])
        return dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)

    def jobs(self) -> list[str]:
        """Job ids still in the queue (any state)."""
        proc = self.client(["squeue", "-h", "-o", "%i"])
        return proc.stdout.split()

    def jobs_after_settling(self, timeout_s: float = SETTLE_TIMEOUT_S) -> list[str]:
        """Job ids still queued once completing jobs had ``timeout_s`` to leave the queue."""
        return _settled(self.jobs, timeout_s)

    def steps(self, job_id: str) -> list[str]:
        """Step ids of ``job_id`` still listed by ``squeue -s`` (a step stays listed until every
        node's slurmstepd told slurmctld it ended)."""
        proc = self.client(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"])
        return proc.stdout.split()

    def steps_after_settling(self, job_id: str, timeout_s: float = SETTLE_TIMEOUT_S) -> list[str]:
        """Step ids of ``job_id`` still listed once ending steps had ``timeout_s`` to leave."""
        return _settled(lambda: self.steps(job_id), timeout_s)

    def set_node_state(self, name: str, state: str, reason: str = "test") -> None:
        argv = ["scontrol", "update", f"nodename={name}", f"state={state}"]
        if state.lower() in ("down", "drain"):
            argv.append(f"reason={reason}")
        proc = self.client(argv)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)

    def write_config(self, path: Path | None = None, *, slurm: dict | None = None, **fields) -> Path:
        """cluster.toml for ``access = "slurm"``: the test bed's paths plus a ``[slurm]`` table."""
        from tests.testbed import _toml_value

        path = Path(path or self.netns.workdir / "cluster-slurm.toml")
        top = {"name": f"slurm-{self.netns.id}", "access": "slurm", "gpus_per_node": 0,
               "local_scratch": str(self.netns.scratch_dir), "shared_paths": [str(self.netns.shared_dir)],
               "eval_python": _python(), "install_packages": False, "rdzv_port": random.randint(33000, 39000),
               "reports_dir": str(self.netns.workdir / "reports")}
        top.update(fields)
        table = {"partition": PARTITION, "nodes": len(self.netns.nodes), "time_limit": "10"}
        table.update(slurm or {})
        lines = ["# generated by the clustereval Slurm test bed"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in top.items() if v is not None]
        lines += ["", "[slurm]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None]
        path.write_text("\n".join(lines) + "\n")
        return path

    # ---- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        with contextlib.suppress(Exception):
            for job in self.jobs():
                self.client(["scancel", job], timeout=10)
        for name in sorted(self.procs, key=lambda n: (n == "munged", n == "slurmctld")):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._kill_leftovers()
        with contextlib.suppress(FileNotFoundError):
            (SLURM_REGISTRY / f"{self.netns.id}.json").unlink()

    def _kill_leftovers(self) -> None:
        """slurmstepd and job processes the daemons left behind in the nodes' namespaces."""
        for node in self.netns.nodes:
            proc = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True)
            for pid in proc.stdout.split():
                if node.sshd is not None and int(pid) == node.sshd.pid:
                    continue
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def _register(self) -> None:
        SLURM_REGISTRY.mkdir(parents=True, exist_ok=True)
        self._registry_file().write_text(json.dumps({"owner_pid": os.getpid(), "pids": []}))

    def _registry_file(self) -> Path:
        return SLURM_REGISTRY / f"{self.netns.id}.json"

    def _note_pid(self, pid: int) -> None:
        path = self._registry_file()
        with contextlib.suppress(OSError, ValueError):
            info = json.loads(path.read_text())
            info["pids"].append(pid)
            path.write_text(json.dumps(info))

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.close()


def _settled(listing: Callable[[], list[str]], timeout_s: float) -> list[str]:
    """What ``listing`` still lists once it was empty or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = listing()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


def _python() -> str:
    import sys

    return sys.executable


def sweep_stale_slurm() -> None:
    """Kill the daemons of Slurm test beds whose test session died without closing them."""
    if not SLURM_REGISTRY.exists():
        return
    for entry in SLURM_REGISTRY.glob("*.json"):
        try:
            info = json.loads(entry.read_text())
            os.kill(int(info["owner_pid"]), 0)
            continue  # owner alive
        except ProcessLookupError:
            pass
        except (OSError, ValueError, KeyError):
            continue
        for pid in info.get("pids", []):
            with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()
