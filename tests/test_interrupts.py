"""Ctrl-C at run level: once (finish the step, then stop) and twice (stop now). Either way the run
exits 130, writes a partial report that passes its own lint, leaves no fio behind and clears its
scratch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.storagehelpers import files_outside_trash, processes_naming
from tests.test_storage_phase import start_storage_run


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_fio_exits_130_with_a_lint_clean_partial_report_and_nothing_left(tmp_path, presses):
    proc, users = start_storage_run(tmp_path)
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if any(name == "fio" for name, _ in processes_naming(tmp_path / "local")):
            break
    else:
        proc.kill()
        pytest.fail("fio never started: " + proc.communicate()[1][-2000:])
    proc.send_signal(signal.SIGINT)
    err_lines = []
    assert proc.stderr is not None
    pressed = 1
    if presses == 2:  # the second press once the run said what the first did ("Ctrl-C again to stop now")
        for line in proc.stderr:
            err_lines.append(line)
            if line.startswith("interrupt: stopping after the current step"):
                proc.send_signal(signal.SIGINT)
                pressed += 1
                break
    out, err = proc.communicate(timeout=300)
    err = "".join(err_lines) + err
    assert pressed == presses and proc.returncode == 130, (out + err)[-3000:]
    assert "interrupted: resume with" in out
    reports = sorted((tmp_path / "reports").glob("*.md"))
    assert len(reports) == 1
    assert "interrupted" in reports[0].read_text()
    lint = run_cli("lint", str(reports[0]))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert processes_naming(tmp_path) == []
    assert files_outside_trash(tmp_path / "local", tmp_path / "shared") == []
    assert users.exists()


def _node_processes(cluster, index: int) -> list[str]:
    """Command lines of torchrun and worker processes still running in node ``index``'s namespace."""
    pids = subprocess.run(["ip", "netns", "pids", cluster.nodes[index].netns], capture_output=True, text=True,
                          timeout=30).stdout.split()
    left = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "torch.distributed.run" in cmdline or "clustereval.workers" in cmdline:
            left.append(cmdline.strip())
    return left


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_the_inter_node_sweep_leaves_no_launch_behind(netns_cluster, presses):
    from tests.test_e2e import _leftover_files, _report

    cluster = netns_cluster(2, cpu_ranks_per_node=1)
    port = 20000 + cluster.ssh_port % 9000
    config = cluster.write_config(rdzv_port=port)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "clustereval", "run", "--config", str(config), "--profile",
                             "smoke", "--phases", "allreduce"], cwd=cluster.workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    pressed = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if pressed == 0 and line.startswith("[allreduce]") and "inter-node" in line.lower():
            proc.send_signal(signal.SIGINT)
            pressed = 1
            if presses == 1:
                break
        elif pressed == 1 and line.startswith("interrupt: stopping after the current step"):
            proc.send_signal(signal.SIGINT)  # the second press: stop now
            pressed = 2
            break
    out = "".join(lines) + proc.communicate(timeout=600)[0]
    assert pressed == presses and proc.returncode == 130, out[-3000:]
    report = _report(cluster.workdir)
    assert "interrupted" in report.read_text()
    lint = run_cli("lint", str(report))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for i in range(len(cluster.nodes)):
        assert _node_processes(cluster, i) == [], i
    # the rendezvous port is free again on the node that hosted it: nothing listens there, and a new
    # rendezvous store can take it (SO_REUSEADDR, as torch's store binds: closed connections still in
    # TIME_WAIT do not count)
    listening = cluster.exec(0, ["ss", "-Hltn", f"sport = :{port}"])
    assert listening.returncode == 0 and listening.stdout.strip() == "", listening.stdout
    bind = cluster.exec(0, ["python3", "-c", "import socket; s = socket.socket(); "
                            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                            f"s.bind(('', {port})); s.listen(); print('free')"])
    assert bind.stdout.strip() == "free", bind.stderr
    roots = [cluster.node_scratch_dir(i) for i in range(len(cluster.nodes))] + [cluster.shared_dir]
    assert _leftover_files(*roots) == []


def _under(roots: list[Path], command) -> list[tuple[Path, Path, tuple[str, ...]]]:  # noqa: ANN001
    """(root, path, its parts below the root) for every path under ``roots`` right after ``command``
    (a ``conftest.PairwiseCommand``)."""
    out = []
    for path in command.scratch_paths:
        for root in roots:
            if str(path).startswith(f"{root}/"):
                out.append((root, path, path.relative_to(root).parts))
    return out


@pytest.mark.timeout(1800)
def test_pairwise_and_debug_nccl_leave_no_scratch_on_any_node(four_node_pairwise):
    bed = four_node_pairwise
    roots = [*bed.scratch_roots, bed.shared_root]
    trashed_before: set[tuple[Path, Path]] = set()
    for key in ("even", "slow", "debug"):  # pairwise, pairwise with a rate-limited node, debug nccl
        command = bed.commands[key]
        proc = command.result
        # 1 when the hunt names a node (the rate-limited one, or one a loaded machine slowed): scratch is
        # cleared either way
        assert proc.returncode in (0, 1) and "error[" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
        under = _under(roots, command)
        # what a scratch root held besides the user's folder and its trash: what the command left
        left = [str(p) for _, p, parts in under
                if "trash" not in parts and not (len(parts) == 1 and p in command.scratch_dirs)]
        assert left == [], command.argv
        # the command did write scratch on every node (the package, torchrun's folders): all of it went to trash
        trashed = {(root, p) for root, p, parts in under
                   if len(parts) == 4 and parts[1] == "trash" and p.name.startswith("cluster-eval-")}
        assert set(bed.scratch_roots) <= {root for root, _ in trashed - trashed_before}, command.argv
        trashed_before = trashed
