"""Slurm output parsers on stderr/stdout captured from the local Slurm cluster (tests/fixtures/slurm)."""

from __future__ import annotations

import base64

import pytest

from clustereval.probes import slurm as probe


@pytest.fixture
def slurm_fixture(fixtures):
    return lambda name: (fixtures / "slurm" / name).read_text()


@pytest.mark.parametrize("case, kind, node, job", [
    ("srun-no-config.stderr.txt", "no-config", "", ""),
    ("srun-invalid-job.stderr.txt", "invalid-job", "", "99999"),
    ("srun-job-expired-node-fail.stderr.txt", "job-gone", "", "1"),
    ("srun-job-expired-timeout.stderr.txt", "job-gone", "", "4"),
    ("srun-time-limit-during-step.stderr.txt", "time-limit", "cefd275c-n0", ""),
    ("srun-slurmd-dead.stderr.txt", "node-unreachable", "cee6e4c7-n2", ""),
    ("srun-bad-nodelist.stderr.txt", "node-config", "", ""),
    ("srun-terminated.stderr.txt", "cancelled", "cee6e4c7-n1", ""),
])
def test_srun_failures_are_classified(slurm_fixture, case, kind, node, job):
    failure = probe.classify_srun(slurm_fixture(case))
    assert failure is not None
    assert (failure.kind, failure.node, failure.job_id) == (kind, node, job)
    assert "\n" not in failure.line


@pytest.mark.parametrize("case", ["srun-exit-code.stderr.txt", "srun-command-not-found.stderr.txt",
                                  "srun-task-killed.stderr.txt", "srun-chdir-missing.stderr.txt"])
def test_a_command_that_ran_is_not_an_srun_failure(slurm_fixture, case):
    assert probe.classify_srun(slurm_fixture(case)) is None


def test_srun_bookkeeping_leaves_the_commands_stderr(slurm_fixture):
    assert probe.command_stderr(slurm_fixture("srun-exit-code.stderr.txt")) == "err\n"
    assert probe.command_stderr(slurm_fixture("srun-task-killed.stderr.txt")) == ""
    assert probe.command_stderr(slurm_fixture("srun-chdir-missing.stderr.txt")) == ""
    assert probe.command_not_found(slurm_fixture("srun-command-not-found.stderr.txt"))
    assert not probe.command_not_found(slurm_fixture("srun-exit-code.stderr.txt"))


def test_a_commands_own_srun_lookalike_line_never_decides():
    assert probe.classify_srun("my tool: Invalid job id specified\n") is None


@pytest.mark.parametrize("case, job_id, granted, pending, notice, error", [
    ("salloc-granted.stderr.txt", "1", True, False, "", ""),
    ("salloc-invalid-partition.stderr.txt", "", False, False, "", "invalid partition specified: nosuchpart"),
    ("salloc-invalid-time.stderr.txt", "", False, False, "", "Invalid --time specification"),
    ("salloc-pending-node-down.stderr.txt", "2", False, True,
     "Required node not available (down, drained or reserved)", ""),
    ("salloc-pending-too-many-nodes.stderr.txt", "2", False, True,
     "Requested partition configuration not available now", ""),
    ("salloc-node-down-immediate.stderr.txt", "1", False, True,
     "Required node not available (down, drained or reserved)", "Unable to allocate resources: Connection timed out"),
])
def test_salloc(slurm_fixture, case, job_id, granted, pending, notice, error):
    out = probe.parse_salloc(slurm_fixture(case))
    assert (out.job_id, out.granted, out.pending, out.notice, out.error) == (job_id, granted, pending, notice, error)


def test_scontrol_show_job(slurm_fixture):
    running = probe.parse_job(slurm_fixture("scontrol-show-job-running.txt"))
    assert running is not None
    assert (running.job_id, running.state, running.node_list, running.num_nodes, running.partition) == (
        "1", "RUNNING", "cee6e4c7-n[0-2]", 3, "debug")
    assert running.alive and not running.time_limit_reached
    timeout = probe.parse_job(slurm_fixture("scontrol-show-job-timeout.txt"))
    assert timeout is not None and timeout.state == "TIMEOUT" and timeout.reason == "TimeLimit"
    assert timeout.time_limit_reached and not timeout.alive
    node_fail = probe.parse_job(slurm_fixture("scontrol-show-job-node-fail.txt"))
    assert node_fail is not None and (node_fail.state, node_fail.reason) == ("NODE_FAIL", "NodeDown")
    assert not node_fail.time_limit_reached
    assert probe.parse_job(slurm_fixture("scontrol-show-job-invalid.stderr.txt")) is None


def test_job_past_its_limit_but_still_running_counts_as_timed_out():
    # hand-written: what scontrol shows between the limit and slurmctld's next check
    job = probe.parse_job("JobId=7 JobName=x\n   JobState=RUNNING Reason=None\n   RunTime=00:00:03 TimeLimit=00:00:00\n")
    assert job is not None and job.alive and job.time_limit_reached


def test_hostnames_sinfo_and_durations(slurm_fixture):
    assert probe.parse_hostnames(slurm_fixture("scontrol-show-hostnames.txt")) == [
        "ce751a04-n0", "ce751a04-n1", "ce751a04-n2"]
    states = probe.parse_sinfo_nodes(slurm_fixture("sinfo-node-down.txt"))
    assert [(s.name, s.state, s.reason, s.usable) for s in states] == [
        ("cefd275c-n0", "idle", "", True), ("cefd275c-n1", "idle", "", True), ("cefd275c-n2", "down", "test", False)]
    assert not probe.NodeState("n", "idle*").usable  # not responding
    assert not probe.NodeState("n", "drained").usable
    assert probe.NodeState("n", "mixed").usable
    left = slurm_fixture("squeue-job-left.txt").split("|")[2]
    assert probe.parse_duration_s(left) == 300
    assert probe.parse_duration_s("1-02:03:04") == 93784
    assert probe.parse_duration_s("UNLIMITED") is None


def test_framed_output_round_trips_long_lines_per_node():
    def frame(task: int, node: str, rc: int, out: bytes, err: bytes) -> list[str]:
        lines = []
        for kind, data in (("o", out), ("e", err)):
            enc = base64.encodebytes(data).decode().splitlines()
            lines += [f"{task}: {kind} {chunk}" for chunk in enc]
        return lines + [f"{task}: rc {rc} {node}"]
    a = frame(0, "n0", 0, b"x" * 3000 + b"\n", b"")
    b = frame(1, "n1", 3, b"", b"bad\n")
    interleaved = [line for pair in zip(a, b + [""] * len(a), strict=False) for line in pair if line]
    got = probe.parse_framed("\n".join(interleaved) + "\n")
    assert got["n0"].stdout == "x" * 3000 + "\n" and got["n0"].rc == 0
    assert (got["n1"].rc, got["n1"].stdout, got["n1"].stderr) == (3, "", "bad\n")
    assert "n2" not in got


def test_routable_address():
    assert probe.routable_address("127.0.1.1 10.1.2.3 fe80::1 ") == "10.1.2.3"
    assert probe.routable_address("169.254.0.2 192.168.0.5") == "192.168.0.5"
    assert probe.routable_address("") == ""


def test_the_node_blamed_for_a_failed_job_is_the_down_one_not_one_that_missed_a_ping(slurm_fixture):
    # the captured sinfo of a job whose n2 was set down, with n0 not answering slurmctld's pings for a
    # moment (as on a busy controller): n2, down with its reason, is named first, then n0
    from clustereval.transport.slurm.failures import blamed_first

    states = probe.parse_sinfo_nodes(slurm_fixture("sinfo-node-down.txt").replace("cefd275c-n0|idle|", "cefd275c-n0|allocated*|"))
    assert [s.name for s in blamed_first(states)] == ["cefd275c-n2", "cefd275c-n0"]
    assert blamed_first(probe.parse_sinfo_nodes(slurm_fixture("sinfo-node-down.txt")))[0].reason == "test"
