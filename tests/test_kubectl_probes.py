"""kubectl output parsing on outputs the real kubectl client printed (tests/fixtures/kubectl/)."""

from __future__ import annotations

import json

import pytest

from clustereval.probes import kubectl as probe


def text(fixtures, name: str) -> str:
    return (fixtures / "kubectl" / name).read_text()


def test_pod_list_gives_names_ips_containers_and_index(fixtures):
    pods = probe.parse_pods(text(fixtures, "pods-selector.json"))
    assert [p.name for p in pods] == ["trial-0", "trial-1"]
    assert [p.ip for p in pods] == ["10.0.0.2", "10.0.0.3"]
    assert all(p.phase == "Running" and p.containers == ["main"] and not p.not_running for p in pods)
    assert pods[1].annotations[probe.JOB_INDEX_KEY] == "1"
    assert pods[0].default_container() == "main"


def test_pods_are_ordered_by_completion_index_not_name():
    doc = {"kind": "List", "items": [
        {"metadata": {"name": name, "annotations": {probe.JOB_INDEX_KEY: str(index)}},
         "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
         "status": {"phase": "Running", "podIP": f"10.0.0.{index + 2}",
                    "containerStatuses": [{"name": "sidecar", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
        for name, index in (("job-a", 2), ("job-b", 0), ("job-c", 10), ("job-d", 1))]}
    pods = probe.parse_pods(json.dumps(doc))
    assert [p.name for p in probe.order_pods(pods, "completion-index")] == ["job-b", "job-d", "job-a", "job-c"]
    assert [p.name for p in probe.order_pods(pods, "name")] == ["job-a", "job-b", "job-c", "job-d"]
    assert pods[0].not_running == {"sidecar": "waiting: CrashLoopBackOff"}
    assert pods[0].default_container() is None  # two containers and no default annotation


def test_jobset_index_comes_before_the_job_index():
    doc = {"items": [{"metadata": {"name": f"js-{j}-{i}", "labels": {probe.JOBSET_INDEX_KEY: str(j)},
                                   "annotations": {probe.JOB_INDEX_KEY: str(i)}}, "spec": {}, "status": {}}
                     for j, i in ((1, 0), (0, 1), (0, 0), (1, 1))]}
    ordered = probe.order_pods(probe.parse_pods(json.dumps(doc)), "completion-index")
    assert [p.name for p in ordered] == ["js-0-0", "js-0-1", "js-1-0", "js-1-1"]


def test_exit_line_is_split_from_the_commands_stderr(fixtures):
    stderr, code = probe.split_exit_line(text(fixtures, "exit-code.txt"))
    assert (stderr, code) == ("some output\n", 3)
    assert probe.split_exit_line("plain error\n") == ("plain error\n", None)


@pytest.mark.parametrize(("name", "kind", "fields"), [
    ("exec-forbidden.txt", "forbidden", {"user": "alice", "verb": "create", "resource": "pods/exec",
                                         "namespace": "trial"}),
    ("list-forbidden.txt", "forbidden", {"user": "bob", "verb": "list", "resource": "pods"}),
    ("context-unknown.txt", "context-unknown", {"name": "nosuch"}),
    ("context-unknown-config-view.txt", "context-unknown", {"name": "nosuch"}),
    ("container-not-valid.txt", "container-not-found", {"name": "sidecar"}),
    ("container-not-running.txt", "container-not-running", {"name": "main"}),
    ("pod-not-found.txt", "pod-not-found", {"name": "trial-9"}),
    ("exec-reset.txt", "exec-reset", {}),
    ("unauthorized.txt", "unauthorized", {}),
    ("api-refused.txt", "api-unreachable", {}),
])
def test_kubectl_failures_are_classified(fixtures, name, kind, fields):
    failure = probe.classify(text(fixtures, name))
    assert failure is not None and failure.kind == kind
    for key, value in fields.items():
        assert getattr(failure, key) == value
    assert not failure.line.startswith("E1201")  # kubectl's verdict, not a klog line


def test_a_commands_own_output_is_not_a_kubectl_failure(fixtures):
    assert probe.classify(text(fixtures, "exit-code.txt")) is None
