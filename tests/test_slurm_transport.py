"""SlurmTransport against a real slurmctld + one slurmd per network-namespace node."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from clustereval.config import SlurmConfig
from clustereval.errors import TransportError, UsageError
from clustereval.transport.slurm import SlurmTransport

# a request the bed can grant is granted within seconds even at a load of 30 on 2 cores; wait_s only
# bounds a request that hangs
WAIT_S = 120


def _transport(cluster, **kw) -> SlurmTransport:
    settings = {"partition": "debug", "nodes": 3, "time_limit": "10", "wait_s": WAIT_S}
    settings.update(kw)
    return SlurmTransport(SlurmConfig(**settings))


def test_requested_allocation_runs_everywhere_and_is_released(slurm_cluster, tmp_path):
    t = _transport(slurm_cluster)
    try:
        nodes = t.nodes()
        assert [n.name for n in nodes] == slurm_cluster.node_names
        # addresses come from the nodes themselves: the namespaces' own IPs
        assert [n.address for n in nodes] == [n.address for n in slurm_cluster.netns.nodes]
        assert [n.extra["hostname"] for n in nodes] == slurm_cluster.node_names
        assert slurm_cluster.jobs() == [t.job_id]
        ok, line = t.allocation_check(nodes)
        assert ok, line
        assert line.startswith(f"Slurm job {t.job_id} (requested by this run): partition debug, 3 nodes ")
        assert line.endswith("of 00:10:00 left")

        one = t.run(nodes[1], ["sh", "-c", "hostname; echo err >&2; exit 3"])
        assert (one.rc, one.stdout, one.stderr) == (3, f"{nodes[1].name}\n", "err\n")

        # one step over every node; a long line survives intact, each node keeps its own rc
        long_line = "x" * 5000
        script = f'echo {long_line}; echo "$SLURMD_NODENAME" >&2; [ "$SLURMD_NODENAME" != {nodes[2].name} ]'
        results = t.run_all(nodes, ["sh", "-c", script], env={"CE_TEST": "1"})
        assert [r.node for r in results] == [n.name for n in nodes]
        assert all(r.stdout == long_line + "\n" for r in results)
        assert [r.stderr for r in results] == [n.name + "\n" for n in nodes]
        assert [r.rc for r in results] == [0, 0, 1]

        missing = t.run(nodes[0], ["no-such-command-x"])
        assert missing.rc == 127

        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "a.txt").write_text("hello\n")
        remote = str(slurm_cluster.netns.scratch_dir / "put-test")
        t.put(nodes[2], src, remote)
        back = tmp_path / "back"
        t.get(nodes[2], remote, back)
        assert (back / "sub" / "a.txt").read_text() == "hello\n"

        timed = t.run(nodes[0], ["sleep", "30"], timeout_s=1)
        assert timed.timed_out and timed.rc == 124
    finally:
        t.close()
    assert slurm_cluster.jobs_after_settling() == []


def test_popen_step_stops_with_its_handle(slurm_cluster):
    t = _transport(slurm_cluster, nodes=1)
    try:
        node = t.nodes()[0]
        proc = t.popen(node, ["sh", "-c", "echo started; sleep 300"])
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        proc.kill()
        # srun ends once the step's task ended (or, when srun is slow to, once slurmctld cancelled the
        # step by its name: two grace periods); the step leaves squeue when its slurmstepd reports
        proc.wait(timeout=60)
        assert slurm_cluster.steps_after_settling(t.job_id) == []
    finally:
        t.close()


def test_a_granted_allocation_is_kept_while_its_nodes_are_made_ready(slurm_cluster):
    """salloc --no-shell prints "Granted job allocation" and then asks slurmctld until the nodes are
    ready; a signal in that window makes it give the job back. On a loaded machine the window lasted
    seconds and the first command found its fresh job CANCELLED ("has expired"); here slurmctld's
    prolog holds it open for 4 s."""
    slurm_cluster.set_allocation_delay(4)
    t = _transport(slurm_cluster, nodes=1)
    try:
        node = t.nodes()[0]  # its first command: `hostname` on the node
        assert node.extra["hostname"] == node.name
        job = slurm_cluster.client(["scontrol", "show", "job", t.job_id]).stdout
        assert "JobState=RUNNING" in job, job
        assert t.run(node, ["hostname"]).stdout.strip() == node.name
    finally:
        t.close()
    assert slurm_cluster.jobs_after_settling() == []


def test_a_step_whose_srun_does_not_stop_is_cancelled_through_slurmctld(slurm_cluster):
    """An srun that does not act on SIGTERM in time (stopped here; on a loaded controller, slow) has
    its step cancelled by name through slurmctld before it is killed: a SIGKILLed srun leaves its step."""
    import signal

    t = _transport(slurm_cluster, nodes=1)
    try:
        node = t.nodes()[0]
        proc = t.popen(node, ["sh", "-c", "echo started; sleep 300"])
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        os.kill(proc.pid, signal.SIGSTOP)
        proc.kill()
        proc.wait(timeout=60)
        assert slurm_cluster.steps_after_settling(t.job_id) == []
    finally:
        t.close()


def test_existing_allocation_is_used_and_left_running(slurm_cluster, monkeypatch):
    proc = slurm_cluster.client(["salloc", "--no-shell", "-N2", "-t", "5"])
    job = proc.stderr.split()[-1]
    monkeypatch.setenv("SLURM_JOB_ID", job)
    t = SlurmTransport(SlurmConfig())
    nodes = t.nodes()
    assert [n.name for n in nodes] == slurm_cluster.node_names[:2]
    assert t.run(nodes[1], ["hostname"]).stdout.strip() == nodes[1].name
    t.close()
    assert slurm_cluster.jobs() == [job]


def test_invalid_partition_names_the_setting(slurm_cluster):
    t = _transport(slurm_cluster, partition="nosuchpart")
    with pytest.raises(UsageError) as err:
        t.nodes()
    assert err.value.error_id == "slurm-invalid-partition"
    assert "[slurm] partition 'nosuchpart' does not exist" in err.value.message
    assert "debug" in err.value.hint
    assert slurm_cluster.jobs_after_settling() == []


def test_node_down_before_the_request_names_the_node(slurm_cluster):
    down = slurm_cluster.node_names[2]
    slurm_cluster.set_node_state(down, "down", "test")
    t = _transport(slurm_cluster, wait_s=600)
    start = time.monotonic()
    with pytest.raises(TransportError) as err:
        t.nodes()
    # not the 600 s wait_s: a down node will not come back by waiting (seconds, or a minute at a load of 30)
    assert time.monotonic() - start < 120
    assert err.value.error_id == "slurm-node-down"
    assert err.value.message == f"{down}: is down (reason: test), so partition debug cannot give [slurm] nodes = 3"
    assert slurm_cluster.jobs_after_settling() == []  # the pending request was withdrawn


def test_node_down_during_the_run_names_the_node(slurm_cluster):
    t = _transport(slurm_cluster)
    try:
        nodes = t.nodes()
        down = nodes[1].name
        slurm_cluster.set_node_state(down, "down", "test")
        with pytest.raises(TransportError) as err:
            t.run(nodes[0], ["hostname"])
        assert err.value.error_id == "slurm-node-down"
        assert err.value.node == down, (err.value.node, err.value.message)
        assert "(reason: test)" in err.value.message and "\n" not in err.value.message
    finally:
        t.close()
    assert slurm_cluster.jobs_after_settling() == []


def test_time_limit_reached_is_one_line_and_cleanup_still_reaches_the_nodes(slurm_cluster):
    # ten minutes, cut to zero below: a one-minute allocation could run out first on a loaded machine
    t = _transport(slurm_cluster, nodes=2, time_limit="10")
    try:
        nodes = t.nodes()
        scratch = slurm_cluster.netns.shared_dir / "run-scratch"
        assert t.run(nodes[0], ["mkdir", "-p", str(scratch)]).ok
        first_job = t.job_id
        # the ten-minute limit cut to zero: from now on slurmctld refuses new steps (and its next
        # limit check, within 30 s, ends the job); a running step's "DUE TO TIME LIMIT" is the
        # captured srun-time-limit-during-step fixture
        slurm_cluster.client(["scontrol", "update", f"jobid={first_job}", "timelimit=-10"])
        with pytest.raises(TransportError) as err:
            t.run(nodes[1], ["hostname"])
        assert err.value.error_id == "slurm-time-limit", err.value.message
        assert err.value.message == (f"{nodes[1].name}: Slurm job {first_job} reached its time limit (00:00:00) "
                                     "and was stopped")
        assert "[slurm] time_limit" in err.value.hint

        t.prepare_cleanup()  # a short allocation on the same nodes, only to clear scratch
        assert t.job_id and t.job_id != first_job
        assert t.run(nodes[1], ["rmdir", str(scratch)]).ok
        assert not scratch.exists()
    finally:
        t.close()
    assert slurm_cluster.jobs_after_settling() == []


def test_no_allocation_and_nothing_to_request():
    t = SlurmTransport(SlurmConfig())
    if os.environ.get("SLURM_JOB_ID"):
        pytest.skip("running inside a Slurm allocation")
    with pytest.raises(UsageError) as err:
        t.allocation()
    assert err.value.error_id == "slurm-no-allocation"


def test_no_controller_is_a_usage_error(tmp_path, monkeypatch):
    if subprocess.run(["which", "scontrol"], capture_output=True).returncode != 0:
        pytest.skip("Slurm client commands are not installed")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    with pytest.raises(UsageError) as err:
        SlurmTransport(SlurmConfig(job_id="5")).allocation()
    assert err.value.error_id == "slurm-no-controller"
    assert "SLURM_CONF" in err.value.message
    monkeypatch.delenv("SLURM_CONF")
    if os.path.exists("/etc/slurm/slurm.conf") or os.path.exists("/etc/slurm-llnl/slurm.conf"):
        return  # this machine has a Slurm config of its own
    with pytest.raises(UsageError) as err:
        SlurmTransport(SlurmConfig(job_id="5")).allocation()
    assert err.value.error_id == "slurm-no-controller"
    assert "Could not establish a configuration source" in err.value.message
