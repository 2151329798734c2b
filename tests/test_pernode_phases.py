"""Every per-node phase keeps the other nodes' results when one node's transport fails mid-phase.

The 4-node SSH bed; the fault is real: after a given number of commands to node2 (or node0), that
node's sshd is killed, so its next command is refused by the kernel exactly as on a dead node.
The GPU passes run their CPU path (stand-in GPUs, the real worker); the health check, which has
no CPU path, runs the stand-in DCGM tools on this machine for the healthy nodes and the dead node
over SSH.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from clustereval.config import Config
from clustereval.phases.base import RunContext
from clustereval.phases.environment import EnvironmentPhase
from clustereval.phases.evalpython import EvalPythonPhase
from clustereval.phases.health import HealthPhase
from clustereval.phases.lemon import LemonPhase
from clustereval.phases.matmul import MatmulPhase
from clustereval.phases.packages import PackagesPhase
from clustereval.phases.scratch import scratch_for
from clustereval.phases.settings import PROFILES, GpuSettings, storage_settings
from clustereval.phases.storage import StoragePhase
from clustereval.records import Gap
from clustereval.report.gaps import say
from clustereval.store import RunState, RunStore
from clustereval.transport.base import Node, Transport
from clustereval.transport.local import LocalTransport
from clustereval.transport.ssh import SshTransport
from tests.conftest import FIXTURES

# a loaded machine: one ssh round trip can take seconds, and the CPU passes run on four nodes
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def bed():
    from tests.testbed import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster.create(4)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(bed):
    for i in range(4):
        bed.start_sshd(i)
    return bed


class DiesMidPhase(SshTransport):
    """The real SSH transport; after ``after`` commands to the victim, the victim's sshd is killed."""

    def __init__(self, cluster, victim: int, after: int) -> None:
        super().__init__(cluster.ssh_settings())
        self.cluster, self.victim, self.after = cluster, cluster.nodes[victim].name, after
        self.seen = 0
        self._count_lock = threading.Lock()

    def _count(self, node: Node) -> None:
        if node.name != self.victim:
            return
        with self._count_lock:
            if self.seen == self.after:
                self.cluster.kill_sshd(self.victim)
            self.seen += 1

    def run(self, node, argv, **kw):  # noqa: ANN001, ANN003
        self._count(node)
        return super().run(node, argv, **kw)

    def popen(self, node, argv, **kw):  # noqa: ANN001, ANN003
        self._count(node)
        return super().popen(node, argv, **kw)


def make_ctx(cluster, tmp_path: Path, transport: Transport) -> RunContext:
    store = RunStore.create(tmp_path / "reports", "t")
    store.save_state(RunState(name="t", stamp="s"))
    config = Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes), ssh=cluster.ssh_settings(),
                    local_scratch=str(cluster.scratch_dir), shared_paths=(str(cluster.shared_dir),),
                    eval_python=sys.executable, install_packages=False)
    ctx = RunContext(config=config, transport=transport, nodes=cluster.cluster_nodes(), store=store,
                     eval_python=sys.executable)
    return ctx


SMOKE_STORAGE = storage_settings(PROFILES["smoke"])


def clear(cluster, ctx: RunContext) -> None:
    """The node answers again: the test's scratch goes to trash like a run's would."""
    cluster.start_sshd(2)
    cluster.start_sshd(0)
    moves = scratch_for(ctx).cleanup(ctx.nodes)
    assert not [m for m in moves if m.action == "failed"]


def only_gap(gaps: list[Gap], node: str) -> Gap:
    [gap] = [g for g in gaps if g.node == node]
    return say(gap)  # in the words the report gives it


def assert_lost(ctx: RunContext, gap: Gap, index: int, phase: str) -> None:
    node = ctx.nodes[index]
    gap = say(gap)
    assert f"`{node.name}(node{index})`" in gap.text and gap.phase == phase
    # refused, or (a connection being set up at the kill) closed during setup: both a node gone
    assert "error[ssh-unreachable]" in gap.text or "error[connection-lost]" in gap.text
    assert node.name in ctx.lost_nodes and node.name in ctx.node_failures[phase]
    assert [n for n in ctx.lost_nodes] == [node.name]


def test_packages(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=0))
    rec = PackagesPhase().run(ctx)
    names = [n.name for n in cluster.nodes]
    assert [n.node for n in rec.nodes] == names and rec.status == "partial"
    for n in rec.nodes:
        assert bool(n.present) == (n.node != names[2]), n
    assert_lost(ctx, only_gap(rec.gaps, names[2]), 2, "packages")
    clear(cluster, ctx)


def test_evalpython(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=0))
    rec = EvalPythonPhase().run(ctx)
    names = [n.name for n in cluster.nodes]
    assert rec.status == "partial" and rec.torch and rec.interpreter == sys.executable
    assert [bool(rec.executables[n]) for n in names] == [True, True, False, True]
    assert_lost(ctx, only_gap(rec.gaps, names[2]), 2, "evalpython")
    assert "cannot import torch" not in " ".join(say(g).text for g in rec.gaps)  # lost, not broken


def test_environment(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=2))  # the first batch and the scratch folder, then the software batch
    rec = EnvironmentPhase().run(ctx)
    assert rec.status == "partial"
    assert [n.hostname for n in rec.nodes] == [n.name if n.index != 2 else "" for n in cluster.nodes]
    assert all(n.os_pretty and n.mem_total_bytes for n in rec.nodes if n.index != 2)
    assert_lost(ctx, only_gap(rec.gaps, cluster.nodes[2].name), 2, "environment")
    clear(cluster, ctx)


def test_storage_concurrent_write_keeps_the_other_writers(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=0))
    rec = StoragePhase(SMOKE_STORAGE).run(ctx)
    writes = {w.node: w for w in rec.concurrent.nodes}
    node2 = cluster.nodes[2].name
    assert writes[node2].error and all(w.bytes_written > 0 for n, w in writes.items() if n != node2)
    assert rec.local.complete and rec.shared[0].complete and rec.status == "partial"
    assert_lost(ctx, only_gap(rec.gaps, node2), 2, "storage")
    clear(cluster, ctx)


def test_storage_scanning_node_lost_mid_scan_is_left_out_of_the_concurrent_write(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 0, after=12))
    rec = StoragePhase(SMOKE_STORAGE).run(ctx)
    node0 = cluster.nodes[0].name
    gaps = [say(g) for g in rec.gaps if g.node == node0]
    assert any("stopped answering in the IO benchmark" in g.text for g in gaps), [say(g).text for g in rec.gaps]
    assert any("left out of the concurrent write" in g.text for g in gaps)
    writes = {w.node: w for w in rec.concurrent.nodes}
    assert writes[node0].error and all(w.bytes_written > 0 for n, w in writes.items() if n != node0)
    assert list(ctx.lost_nodes) == [node0]
    clear(cluster, ctx)


CPU_GPUS = GpuSettings(device="cpu", cpu_gpus=1, settle_s=0.02, sustain_s=0.05, grid="M=32|64,N=32|64,K=64",
                       lemon_size=64, start_timeout_s=120)


def test_matmul_cpu_path(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=0))
    rec = MatmulPhase(CPU_GPUS).run(ctx)
    by_node = {n.node: n for n in rec.nodes}
    node2 = cluster.nodes[2].name
    assert list(by_node) == [n.name for n in cluster.nodes]
    assert all(by_node[n.name].search.msmf for n in cluster.nodes if n.index != 2)
    assert by_node[node2].error and rec.status == "partial"
    assert node2 in only_gap(rec.gaps, node2).text
    clear(cluster, ctx)


def test_lemon_cpu_path(cluster, tmp_path):
    ctx = make_ctx(cluster, tmp_path, DiesMidPhase(cluster, 2, after=0))
    rec = LemonPhase(CPU_GPUS).run(ctx)
    by_node = {n.node: n for n in rec.nodes}
    assert all(by_node[n.name].gpus[0].tflops[0] for n in cluster.nodes if n.index != 2)
    node2 = cluster.nodes[2].name
    assert not any(t for g in by_node[node2].gpus for t in g.tflops) and rec.status == "partial"
    assert [g for g in map(say, rec.gaps) if g.node == node2 or node2 in g.text]
    clear(cluster, ctx)


class Split(Transport):
    """This machine for the healthy nodes (where the stand-in DCGM tools are on PATH), the dead
    node over real SSH."""

    method = "ssh"

    def __init__(self, ssh: SshTransport, remote: str) -> None:
        self.ssh, self.local, self.remote = ssh, LocalTransport(), remote

    def _pick(self, node: Node) -> Transport:
        return self.ssh if node.name == self.remote else self.local

    def run(self, node, argv, **kw):  # noqa: ANN001, ANN003
        return self._pick(node).run(node, argv, **kw)

    def put(self, node, local, remote, **kw):  # noqa: ANN001, ANN003
        return self._pick(node).put(node, local, remote, **kw)

    def get(self, node, remote, local, **kw):  # noqa: ANN001, ANN003
        return self._pick(node).get(node, remote, local, **kw)


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_health_keeps_the_diag_of_every_node_that_answered(cluster, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _script(bin_dir / "nvidia-smi", f'cat "{FIXTURES}/h200x2/nvidia-smi.txt" | tail -n +2\n')
    _script(bin_dir / "dcgmi", f"""case "$1" in
  discovery) echo "2 GPUs found." ;;
  diag) cat "{FIXTURES}/dcgmi/handwritten-diag-r2-pass-dcgm4.txt" ;;
esac
""")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    node2 = cluster.nodes[2].name
    ctx = make_ctx(cluster, tmp_path, Split(DiesMidPhase(cluster, 2, after=0), node2))
    rec = HealthPhase().run(ctx)
    by_node = {n.node: n for n in rec.nodes}
    assert list(by_node) == [n.name for n in cluster.nodes]
    assert all(by_node[n.name].ran and by_node[n.name].passed for n in cluster.nodes if n.index != 2)
    assert not by_node[node2].ran and by_node[node2].errors and rec.status == "partial"
    assert_lost(ctx, only_gap(rec.gaps, node2), 2, "health")
