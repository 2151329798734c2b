"""A node whose login shell is tcsh (common on HPC sites): every remote command still runs.

The login shell only ever sees ``sh -s``; the command reaches that ``sh`` on stdin."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import TCSH, only_leftovers


def _assert_tcsh_login(cluster) -> None:
    """Node0 really has tcsh as the login shell: a quoted multi-line command line breaks there."""
    raw = subprocess.run(cluster.ssh_argv(0, "sh -c 'echo one\necho two'"), capture_output=True, text=True,
                         timeout=60)
    assert raw.returncode != 0 and "Unmatched" in raw.stderr, (raw.stdout, raw.stderr)


def _tcsh_node(netns_cluster, num_nodes=1):
    if not Path(TCSH).exists():
        pytest.skip("tcsh is not installed")
    cluster = netns_cluster(num_nodes)
    cluster.set_login_shell(0, TCSH)
    _assert_tcsh_login(cluster)
    return cluster


def test_run_put_get_and_popen_through_a_tcsh_login_shell(netns_cluster, tmp_path):
    cluster = _tcsh_node(netns_cluster)
    transport = cluster.transport()
    (node,) = cluster.cluster_nodes()
    script = 'for w in "$@"; do\n  printf "<%s>\\n" "$w"\ndone\necho "bang!$HOME"'
    res = transport.run(node, ["sh", "-c", script, "sh", "a b", "it's", "new\nline", "!x"], timeout_s=30,
                        env={"V": "$HOME;ls"}, cwd="/tmp")
    assert res.ok, res.stderr
    assert res.stdout == "<a b>\n<it's>\n<new\nline>\n<!x>\nbang!/root\n"
    fed = transport.run(node, ["sh", "-c", 'cat; echo "[$V]"'], stdin="line 1\nline 2 !\n", env={"V": "v"},
                        timeout_s=30)
    assert fed.stdout == "line 1\nline 2 !\n[v]\n", fed.stderr
    src = tmp_path / "payload"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    remote = f"{cluster.shared_dir}/copied"
    transport.put(node, src, remote)
    back = tmp_path / "back"
    transport.get(node, remote, back)
    assert (back / "a.txt").read_text() == "hello\n"
    proc = transport.popen(node, ["sh", "-c", "echo started\nsleep 31.7"])
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the watchdog stops the remote command with its connection
        # the nodes share this machine's pid namespace; [s] keeps the pattern from matching itself
        left = subprocess.run(["pgrep", "-f", "[s]leep 31.7"], capture_output=True, text=True).stdout.strip()
        if not left:
            break
        time.sleep(0.5)
    assert not left


def _tcsh_smoke(four_node_smoke):
    """The session's 4-node smoke run, whose node0 logs in with tcsh."""
    if four_node_smoke.tcsh_node is None:
        pytest.skip("tcsh is not installed")
    _assert_tcsh_login(four_node_smoke.cluster)
    return four_node_smoke


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the session's 4-node smoke run may start here
def test_the_smoke_run_on_a_tcsh_node_completes_and_clears_its_scratch(four_node_smoke):
    run = _tcsh_smoke(four_node_smoke)
    cluster, res = run.cluster, run.result
    out = run.output
    assert only_leftovers(res), out[-4000:]
    assert "Unmatched" not in out
    left = _leftovers(cluster.node_scratch_dir(0), cluster.shared_dir)
    assert left == "", left
    assert "scratch:" in res.stdout and "moved" in res.stdout


def _leftovers(*roots) -> str:
    """Run folders, torchrun temp folders and pid files anywhere under ``roots`` but inside trash."""
    res = subprocess.run(["find", *map(str, roots), "-path", "*/trash", "-prune", "-o", "(", "-name", "cluster-eval-*",
                          "-o", "-name", "torchelastic_*", "-o", "-name", "*.pid", ")", "-print"],
                         capture_output=True, text=True, check=True)
    return res.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the session's 4-node smoke run may start here
def test_after_the_4_node_smoke_run_nothing_is_left_outside_trash(four_node_smoke):
    """One node logs in with tcsh; every node's scratch and the shared mount are searched with find."""
    run = _tcsh_smoke(four_node_smoke)
    cluster, res = run.cluster, run.result
    out = run.output
    assert "report: " in out, out[-4000:]  # the run went through to its report
    assert "Unmatched" not in out and "REFUSED" not in out and "NOT cleared" not in out, out[-4000:]
    roots = [cluster.node_scratch_dir(i) for i in range(4)] + [cluster.shared_dir]
    assert _leftovers(*roots) == ""
    assert "scratch: " in res.stdout
