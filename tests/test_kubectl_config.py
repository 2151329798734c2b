"""access = "kubectl": the [kubectl] table loads, and every problem is listed with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clustereval.config import load_config
from clustereval.configload import template_text
from clustereval.errors import ConfigError


def write(tmp_path: Path, toml: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(textwrap.dedent(toml).lstrip("\n"))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    return [str(p) for p in exc.value.problems]


def test_a_namespace_selected_by_label_loads(tmp_path):
    (tmp_path / "kubeconfig").write_text("{}\n")
    cfg = load_config(write(tmp_path, """
        name = "eks-trial"
        access = "kubectl"
        shared_paths = ["/fsx"]

        [kubectl]
        context = "trial"
        namespace = "ml-trial"
        selector = "app=trial,role=worker"
        container = "trainer"
        kubeconfig = "kubeconfig"
        args = ["--as=alice"]
        hostfile = "/etc/mpi/hostfile"
        """))
    k = cfg.kubectl
    assert cfg.access == "kubectl" and cfg.nodes == () and cfg.hosts == ()
    assert (k.context, k.namespace, k.selector, k.container, k.args, k.hostfile, k.order_by) == (
        "trial", "ml-trial", "app=trial,role=worker", "trainer", ("--as=alice",), "/etc/mpi/hostfile",
        "completion-index")
    assert k.kubeconfig == str(tmp_path / "kubeconfig")  # relative to cluster.toml
    assert "kubectl.selector" in cfg.given


def test_an_explicit_pod_list_keeps_its_order(tmp_path):
    cfg = load_config(write(tmp_path, 'access = "kubectl"\n[kubectl]\npods = ["w-2", "w-0", "w-1"]\n'))
    assert cfg.kubectl.pods == ("w-2", "w-0", "w-1")


def test_every_kubectl_problem_is_listed_at_once_with_its_line(tmp_path):
    (tmp_path / "hostfile").write_text("10.0.0.1\n")
    path = write(tmp_path, """
        access = "kubectl"
        hostfile = "hostfile"

        [kubectl]
        namespace = "ML_Trial"
        selector = "app=trial"
        job = "trial"
        order_by = "age"
        kubeconfig = "missing.yaml"
        args = ["get"]
        hostfile = "etc/hostfile"
        colour = "blue"
        """)
    msgs = problems(path)
    assert msgs[0].startswith(f"{path}:2: with access = \"kubectl\" the addresses come from the platform")
    assert msgs[1].startswith(f"{path}:5: [kubectl] namespace 'ML_Trial' is not a Kubernetes name")
    assert msgs[2].startswith(f"{path}:7: [kubectl] names the pods twice (selector and job)")
    assert msgs[3].startswith(f"{path}:8: [kubectl] order_by 'age' is not known") and "completion-index" in msgs[3]
    assert msgs[4].startswith(f"{path}:9: [kubectl] kubeconfig missing.yaml does not exist")
    assert msgs[5].startswith(f"{path}:10: [kubectl] args must be kubectl options")
    assert msgs[6].startswith(f"{path}:11: [kubectl] hostfile 'etc/hostfile' must be an absolute path")
    assert msgs[7].startswith(f"{path}:12: unknown key `colour` in [kubectl]")
    assert len(msgs) == 8


def test_a_table_that_names_no_pods_says_how(tmp_path):
    path = write(tmp_path, 'access = "kubectl"\n\n[kubectl]\nnamespace = "trial"\n')
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:3: [kubectl] does not say which pods are the nodes") and "selector" in msg


def test_bad_pod_names_and_a_missing_kubeconfig_are_named(tmp_path):
    path = write(tmp_path, 'access = "kubectl"\n[kubectl]\npods = ["ok-0", "Bad;rm"]\n')
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:3: [kubectl] pods: 'Bad;rm' is not a pod name")
    path = write(tmp_path, 'access = "kubectl"\n[kubectl]\nselector = "app=x"\nkubeconfig = "nope.yaml"\n')
    (msg,) = problems(path)
    assert msg.startswith(f"{path}:4: [kubectl] kubeconfig nope.yaml does not exist")


def test_template_kubectl_example_is_valid_when_uncommented(tmp_path):
    lines = template_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# [kubectl]"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("# "))
    body = [ln[2:] for ln in lines[start:end] if "kubeconfig =" not in ln]
    path = tmp_path / "cluster.toml"
    path.write_text('access = "kubectl"\n' + "\n".join(body) + "\n")
    cfg = load_config(path)
    assert (cfg.kubectl.namespace, cfg.kubectl.selector, cfg.kubectl.container, cfg.kubectl.hostfile) == (
        "ml-trial", "app=trial", "trainer", "/etc/mpi/hostfile")
    assert 'access = "kubectl"' in template_text() or '"kubectl" (kubectl exec' in template_text()


@pytest.mark.parametrize("doc", ["README.md", "docs/kubernetes.md"])
def test_the_documented_kubectl_config_loads(tmp_path, doc):
    import re

    from tests.conftest import REPO

    blocks = re.findall(r"```toml\n(.*?)```", (REPO / doc).read_text(), re.S)
    toml = next(b for b in blocks if 'access = "kubectl"' in b)
    cfg = load_config(write(tmp_path, toml))
    assert cfg.access == "kubectl" and cfg.kubectl.namespace == "ml-trial"
    assert cfg.kubectl.selector and cfg.kubectl.selector.startswith("app=trial")
    assert cfg.kubectl.container == "trainer" and cfg.shared_paths == ("/fsx",)
