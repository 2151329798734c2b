"""KubectlTransport with the real kubectl client against the stand-in API server (tests/kubeapi/).

Each pod's commands run in a network namespace of the test bed, so pod IPs, files and processes
are real; the faults (RBAC, a deleted pod, a container that is not running, a reset stream, an API
server that is down) are produced for real on the server side.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from clustereval.errors import TransportError, UsageError
from tests.kubeapi.bed import KubeBed, kubectl_unavailable_reason


@pytest.fixture
def kube2(netns_cluster):
    reason = kubectl_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with KubeBed(netns_cluster(2)) as bed:
        yield bed


def _pids(bed: KubeBed, index: int, pattern: str) -> list[str]:
    return bed.cluster.exec(index, ["pgrep", "-f", pattern]).stdout.split()


def test_pods_become_nodes_with_hostname_and_pod_ip(kube2):
    transport = kube2.transport()
    nodes = transport.nodes()
    assert [n.name for n in nodes] == kube2.pods
    assert [n.address for n in nodes] == [n.address for n in kube2.cluster.nodes]
    assert [n.extra["hostname"] for n in nodes] == kube2.pods  # asked inside each pod
    assert transport.access_detail() == ("context `standin`, namespace `trial`, pods with label `app=trial`, "
                                         "ordered by completion index")


def test_run_passes_argv_env_cwd_and_stdin_and_keeps_the_exit_code(kube2):
    transport = kube2.transport()
    node = transport.nodes()[1]
    res = transport.run(node, ["sh", "-c", 'echo "$GREETING"; pwd; cat; echo oops >&2; exit 4', "x; rm -rf /"],
                        env={"GREETING": "hello world"}, cwd="/tmp", stdin="from stdin\n")
    assert (res.rc, res.stdout, res.stderr) == (4, "hello world\n/tmp\nfrom stdin\n", "oops\n")
    # an argument with shell syntax stays one inert word
    res = transport.run(node, ["printf", "%s|", "a b", "$(hostname)", ";"])
    assert res.ok and res.stdout == "a b|$(hostname)|;|"
    assert transport.run(node, ["no-such-command-here"]).rc == 127


def test_a_command_that_prints_at_once_keeps_its_output(kube2):
    """kubectl's WebSocket client drops what arrives before it has opened stdout and stderr; every
    command waits for the client's first line of input, so output printed the moment a command
    starts (dd's summary) is never lost, even with many execs at once, and a command given no
    input still sees the end of it at once."""
    from concurrent.futures import ThreadPoolExecutor

    transport = kube2.transport()
    nodes = transport.nodes()
    script = 'echo "out $0"; echo "err $0" >&2'
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: transport.run(nodes[i % 2], ["sh", "-c", script, str(i)]), range(24)))
    assert [(r.rc, r.stdout, r.stderr) for r in results] == [(0, f"out {i}\n", f"err {i}\n") for i in range(24)]
    t0 = time.monotonic()
    res = transport.run(nodes[0], ["cat"])  # no input: the ready line is the wait's, cat reads none of it
    assert (res.rc, res.stdout) == (0, "") and time.monotonic() - t0 < 20


def test_a_command_past_its_timeout_is_stopped_in_the_pod(kube2):
    transport = kube2.transport()
    node = transport.nodes()[0]
    t0 = time.monotonic()
    res = transport.run(node, ["sleep", "77"], timeout_s=2)
    assert res.timed_out and res.rc == 124 and time.monotonic() - t0 < 30
    assert _pids(kube2, 0, "sleep 77") == []


def test_put_and_get_stream_files_and_directories(kube2, tmp_path):
    transport = kube2.transport()
    node = transport.nodes()[1]
    src = tmp_path / "pkg"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    remote = str(kube2.cluster.node_scratch_dir(1).parent / "copied")
    transport.put(node, src, remote)
    transport.put(node, src / "run.sh", remote + "/one/run.sh")
    assert transport.run(node, [remote + "/one/run.sh"]).stdout == "ran\n"
    transport.get(node, remote, tmp_path / "back")
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "alpha\n"
    transport.get(node, remote + "/sub/a.txt", tmp_path / "single.txt")
    assert (tmp_path / "single.txt").read_text() == "alpha\n"
    with pytest.raises(TransportError) as exc:
        transport.get(node, "/no/such/path", tmp_path / "x")
    assert exc.value.error_id == "copy-failed"


def test_popen_stops_the_command_in_the_pod_when_the_handle_is_killed(kube2):
    transport = kube2.transport()
    node = transport.nodes()[0]
    proc = transport.popen(node, ["sh", "-c", "echo up; exec sleep 313"])
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    assert _pids(kube2, 0, "sleep 313")
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while _pids(kube2, 0, "sleep 313") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _pids(kube2, 0, "sleep 313") == []


def test_a_reset_stream_is_repeated_once_for_a_safe_command(kube2):
    transport = kube2.transport()
    node = transport.nodes()[1]
    kube2.api.reset_exec(node.name, 1)
    res = transport.run(node, ["hostname"])
    assert res.ok and res.stdout.strip() == node.name
    assert transport.retries == [f"{node.name}: `hostname` repeated after a reset stream"]


def test_a_reset_stream_is_not_repeated_for_a_command_that_may_not_be_safe(kube2, tmp_path):
    transport = kube2.transport()
    node = transport.nodes()[1]
    kube2.api.reset_exec(node.name, 1)
    marker = tmp_path / "appended"
    with pytest.raises(TransportError) as exc:
        transport.run(node, ["sh", "-c", f"echo once >> {marker}"])
    err = exc.value
    assert err.error_id == "kubectl-exec-reset"
    assert err.message == (f"{node.name} (namespace trial): the exec stream was reset (connection reset by peer) "
                           "and the command was not repeated (it may not be safe to run twice); the pod answered "
                           "a second probe")
    assert not marker.exists() and transport.retries == []


def test_a_pod_that_keeps_resetting_fails_after_the_second_probe(kube2):
    transport = kube2.transport()
    node = transport.nodes()[1]
    kube2.api.reset_exec(node.name, 100)
    with pytest.raises(TransportError) as exc:
        transport.run(node, ["hostname"])
    assert exc.value.error_id == "kubectl-exec-reset"
    assert exc.value.message.endswith("reset (connection reset by peer) twice, and a second probe failed too "
                                      "(connection reset by peer)")
    assert kube2.api.pods[("trial", node.name)].resets == 97  # two tries and one probe, nothing more


def test_a_deleted_pod_is_named(kube2):
    transport = kube2.transport()
    nodes = transport.nodes()
    assert kube2.api.delete_pod(nodes[1].name)
    with pytest.raises(TransportError) as exc:
        transport.run(nodes[1], ["hostname"])
    assert exc.value.error_id == "pod-not-found"
    assert exc.value.lines()[0] == (f"error[pod-not-found]: {nodes[1].name} (namespace trial): pod {nodes[1].name} "
                                    "no longer exists in namespace trial")
    assert transport.run(nodes[0], ["hostname"]).ok  # the other pod is untouched


def test_rbac_forbidden_exec_names_verb_and_resource(kube2):
    token = kube2.api.add_user("alice", allowed={("list", "pods"), ("get", "pods")})
    kubeconfig = kube2.api.kubeconfig(Path(kube2.cluster.workdir) / "alice.kubeconfig", token=token)
    transport = kube2.transport(kubeconfig=str(kubeconfig))
    with pytest.raises(TransportError) as exc:
        transport.nodes()
    assert exc.value.error_id == "kubectl-forbidden"
    assert exc.value.message.endswith("user alice may not create pods/exec in namespace trial (RBAC)")
    assert "kubectl auth can-i create pods/exec -n trial" in exc.value.hint


def test_rbac_forbidden_list_is_named(kube2):
    token = kube2.api.add_user("bob", allowed=set())
    kubeconfig = kube2.api.kubeconfig(Path(kube2.cluster.workdir) / "bob.kubeconfig", token=token)
    with pytest.raises(TransportError) as exc:
        kube2.transport(kubeconfig=str(kubeconfig)).nodes()
    assert exc.value.error_id == "kubectl-forbidden"
    assert exc.value.message.endswith("user bob may not list pods in namespace trial (RBAC)")


def test_unknown_context_is_a_usage_error(kube2):
    with pytest.raises(UsageError) as exc:
        kube2.transport(context="nosuch").nodes()
    assert exc.value.lines()[0] == "error[kubectl-context-unknown]: the kubeconfig has no context 'nosuch'"


def test_missing_container_is_named_before_any_exec(kube2):
    with pytest.raises(UsageError) as exc:
        kube2.transport(container="sidecar").nodes()
    assert exc.value.lines()[0] == (f"error[container-not-found]: pod {kube2.pods[0]} has no container sidecar "
                                    "(its containers: main)")


def test_exec_into_a_container_the_server_does_not_know_is_named(kube2):
    transport = kube2.transport()
    nodes = transport.nodes()
    kube2.api.pods[("trial", nodes[0].name)].containers = ["trainer"]  # the pod was recreated differently
    with pytest.raises(TransportError) as exc:
        transport.run(nodes[0], ["true"])
    assert exc.value.error_id == "container-not-found"
    assert f"container main is not valid for pod {nodes[0].name}" in exc.value.message


def test_a_container_that_is_not_running_is_named(kube2):
    transport = kube2.transport()
    nodes = transport.nodes()
    kube2.api.pods[("trial", nodes[1].name)].waiting["main"] = "CrashLoopBackOff"
    with pytest.raises(TransportError) as exc:
        transport.run(nodes[1], ["true"])
    assert exc.value.error_id == "container-not-running"
    assert exc.value.message.endswith('container main is not running (unable to upgrade connection: container not '
                                      'found ("main"))')


def test_an_unreachable_api_server_is_named(kube2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = kube2.api.kubeconfig(Path(kube2.cluster.workdir) / "down.kubeconfig", token=kube2.token,
                                      server=f"https://127.0.0.1:{port}")
    with pytest.raises(TransportError) as exc:
        kube2.transport(kubeconfig=str(kubeconfig)).nodes()
    assert exc.value.error_id == "kubectl-api-unreachable"
    assert f"127.0.0.1:{port} was refused" in exc.value.message


def test_explicit_pods_keep_their_order_and_a_missing_one_is_named(kube2):
    a, b = kube2.pods
    nodes = kube2.transport(selector=None, pods=(b, a)).nodes()
    assert [(n.name, n.index) for n in nodes] == [(b, 0), (a, 1)]
    with pytest.raises(UsageError) as exc:
        kube2.transport(selector=None, pods=(a, "trial-9")).nodes()
    assert exc.value.lines()[0] == "error[pod-not-found]: pod trial-9 not found in namespace trial"


def test_the_platform_hostfile_gives_the_addresses_unedited(kube2):
    hostfile = kube2.cluster.node_scratch_dir(0).parent / "platform-hostfile"
    addresses = [n.address for n in kube2.cluster.nodes]
    hostfile.write_text("# written by the platform\n" + "".join(f"{a} slots=8\n" for a in addresses))
    before = hostfile.read_text()
    nodes = kube2.transport(hostfile=str(hostfile)).nodes()
    assert [n.address for n in nodes] == addresses
    assert hostfile.read_text() == before
    hostfile.write_text(f"{addresses[0]}\n")
    with pytest.raises(UsageError) as exc:
        kube2.transport(hostfile=str(hostfile)).nodes()
    assert exc.value.error_id == "platform-hostfile" and "lists 1 addresses for 2 pods" in exc.value.message


def test_a_jobs_pods_are_ordered_by_completion_index(kube2):
    a, b = kube2.pods
    for name, index in ((a, "1"), (b, "0")):  # the Job indexed them against name order
        kube2.api.pods[("trial", name)].annotations["batch.kubernetes.io/job-completion-index"] = index
    transport = kube2.transport(selector=None, job="trial")
    assert [n.name for n in transport.nodes()] == [b, a]
    assert transport.access_detail().endswith("the pods of Job `trial`, ordered by completion index")
    assert [n.name for n in kube2.transport(selector=None, job="trial", order_by="name").nodes()] == [a, b]
    with pytest.raises(UsageError) as exc:
        kube2.transport(selector=None, job="other").nodes()
    assert exc.value.error_id == "pod-not-found" and "the pods of Job `other`" in exc.value.message
