"""`clustereval preflight` and `clustereval run` with access = "kubectl": the real kubectl client,
the stand-in API server (tests/kubeapi/), three pods on the namespace test bed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clustereval.report.lint import lint_file
from tests.conftest import REPO, only_leftovers, run_cli
from tests.kubeapi.bed import KubeBed, kubectl_unavailable_reason

pytestmark = pytest.mark.netns


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error[")]


def _bed(num_pods: int) -> KubeBed:
    from tests.testbed import NetnsCluster, TestbedUnavailable, unavailable_reason

    reason = unavailable_reason() or kubectl_unavailable_reason()
    if reason:
        pytest.skip(reason)
    try:
        return KubeBed(NetnsCluster.create(num_pods))
    except TestbedUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def kube3():
    bed = _bed(3)
    try:
        yield bed
    finally:
        bed.close()
        bed.cluster.close()


@pytest.fixture(scope="module")
def smoke_run():
    """One `clustereval run --profile smoke` over three pods, shared by the tests that read it; one
    gloo rank per pod (the SSH bed's 4-node run covers two per node), so the report takes the
    one-rank-per-node path (no intra-node sweep)."""
    bed = _bed(3)
    try:
        config = bed.write_config(cpu_ranks_per_node=1)
        proc = run_cli("run", "--config", str(config), "--profile", "smoke", timeout=1500)
        reports = sorted((Path(bed.cluster.workdir) / "reports").glob("*.md"))
        texts = {p: p.read_text() for p in reports}
        raw = {p.name: p.read_text() for p in next((Path(bed.cluster.workdir) / "reports").glob("raw-*"),
                                                    Path("/nonexistent")).glob("*.record.json")}
        lint = lint_file(reports[0]) if reports else ["no report written"]
        yield bed, proc, texts, raw, lint
    finally:
        bed.close()
        bed.cluster.close()


def test_preflight_passes_with_gloo_across_the_pods(kube3):
    config = kube3.write_config()
    proc = run_cli("preflight", "--config", str(config), timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "preflight passed: 3 nodes ready" in proc.stdout
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 5 and cells[0]:
            rows[(cells[0], cells[1])] = cells
    for pod in kube3.pods:
        assert rows[("kubectl", pod)][2:4] == ["ok", pod]  # the hostname inside the pod
        # every pod reached every pod's ports: 29500 (the rendezvous, at pod 0's IP) through 29500 + 3
        # the TCP check's plan (every pair at 3 nodes): each pod reached the first pod's rendezvous port
        assert rows[("tcp", pod)][2] == "ok" and rows[("tcp", pod)][3].startswith("reached port 29500 on ")
        assert rows[("gloo", pod)][2] == "ok"
    assert "rendezvous at " + f"{kube3.cluster.nodes[0].address}:29500" in proc.stderr
    # every pod got its own exec (not only the first)
    execs = {r.split("/")[6] for r in kube3.api.requests if r.endswith("/exec")}
    assert execs == set(kube3.pods)


@pytest.mark.timeout(1800)  # the whole smoke pipeline over three pods, run once for this module
def test_smoke_run_report_names_the_namespace_and_every_pod(smoke_run):
    bed, proc, texts, raw, _ = smoke_run
    assert len(texts) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = next(iter(texts.values()))
    assert ("- Access: `kubectl exec` into every pod (context `standin`, namespace `trial`, pods with label "
            "`app=trial`, ordered by completion index)") in text
    for pod in bed.pods:
        assert f"`{pod}`" in text
    for phase in ("[preflight] ok", "[environment] ok", "[connectivity] ok", "[allreduce] ok", "[pairwise] ok",
                  "[storage] ok"):
        assert phase in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(1800)
def test_smoke_run_exits_0_with_a_lint_clean_report(smoke_run):
    """Exit 0, or 1 naming only what could not run in the bed's pods (a leftover Gap): nothing failed."""
    _, proc, _, _, lint = smoke_run
    assert lint == []
    assert only_leftovers(proc), proc.stderr[-3000:]


@pytest.fixture(scope="module")
def deleted_pod_run():
    """`clustereval run` over three pods, the third deleted through the API once preflight passed."""
    bed = _bed(3)
    try:
        config = bed.write_config()
        gone = bed.pods[2]
        env = dict(__import__("os").environ)
        env["PYTHONPATH"] = str(REPO)
        proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(config), "--profile",
                                 "smoke", "--phases", "preflight,environment"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            seen = ""
            while "[preflight] ok" not in seen:
                line = proc.stderr.readline()
                assert line, seen + proc.communicate()[0]
                seen += line
            # a real client deletes the pod through the API, mid-run
            deleted = subprocess.run(["kubectl", f"--kubeconfig={bed.kubeconfig}", "delete", "pod", gone,
                                      "--wait=false"], capture_output=True, text=True, timeout=60)
            assert deleted.returncode == 0, deleted.stderr
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        yield bed, gone, proc.returncode, out, seen + err
    finally:
        bed.close()
        bed.cluster.close()


@pytest.mark.timeout(900)
def test_a_pod_deleted_mid_run_is_a_gap_and_the_others_are_kept(deleted_pod_run):
    bed, gone, _, out, err = deleted_pod_run
    reports = sorted((Path(bed.cluster.workdir) / "reports").glob("*.md"))
    assert len(reports) == 1, out + err
    text = reports[0].read_text()
    assert f"pod {gone} no longer exists in namespace trial" in text
    assert "[environment] partial" in err
    env_json = json.loads(next(reports[0].parent.glob("raw-*/environment.record.json")).read_text())
    kept = {n.get("hostname") or n.get("node") for n in env_json["nodes"] if n.get("cpu_model") or n.get("kernel")}
    assert set(bed.pods[:2]) <= kept
    assert "Traceback" not in err


@pytest.mark.timeout(900)
def test_a_pod_deleted_mid_run_exits_1(deleted_pod_run):
    _, _, returncode, _, err = deleted_pod_run
    assert returncode == 1, err[-3000:]


def test_rbac_forbidden_exec_is_one_line(kube3):
    token = kube3.api.add_user("alice", allowed={("list", "pods"), ("get", "pods")})
    kubeconfig = kube3.api.kubeconfig(Path(kube3.cluster.workdir) / "alice.kubeconfig", token=token)
    config = kube3.write_config(kubectl={"kubeconfig": str(kubeconfig)})
    proc = run_cli("preflight", "--config", str(config), timeout=120)
    assert proc.returncode == 1
    lines = _error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("error[kubectl-forbidden]: ")
    assert lines[0].endswith("user alice may not create pods/exec in namespace trial (RBAC)")
    assert "Traceback" not in proc.stderr


def test_unknown_context_is_one_line(kube3):
    config = kube3.write_config(kubectl={"context": "nosuch"})
    proc = run_cli("preflight", "--config", str(config), timeout=120)
    assert proc.returncode == 2
    assert _error_lines(proc) == ["error[kubectl-context-unknown]: the kubeconfig has no context 'nosuch'"]


def test_missing_container_is_one_line(kube3):
    config = kube3.write_config(kubectl={"container": "sidecar"})
    proc = run_cli("preflight", "--config", str(config), timeout=120)
    assert proc.returncode == 2
    assert _error_lines(proc) == [f"error[container-not-found]: pod {kube3.pods[0]} has no container sidecar "
                                  "(its containers: main)"]


def test_exec_reset_is_one_line_naming_the_pod(kube3):
    flaky = kube3.pods[1]
    kube3.api.reset_exec(flaky, 1000)
    config = kube3.write_config()
    proc = run_cli("preflight", "--config", str(config), timeout=300)
    assert proc.returncode == 1
    expected = (f"- {flaky} (namespace trial): the exec stream was reset (connection reset by peer) twice, and a "
                "second probe failed too (connection reset by peer). (plan: `kubectl get pod ")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"- {flaky}")]
    assert len(lines) == 1 and lines[0].startswith(expected)
    assert "│ gloo" not in proc.stdout
