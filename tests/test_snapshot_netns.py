"""The snapshot on the 3-node namespace cluster over the SSH transport: every node answers in
parallel, nothing is written on the nodes, and a dead node is a CONCERN, not a crash."""

from __future__ import annotations

from clustereval.config import Config
from clustereval.debug.snapshot import collect, snapshot_lines
from tests.test_snapshot_cli import tree_state


def _config(cluster) -> Config:
    return Config(name="t", access="ssh", nodes=tuple(n.name for n in cluster.nodes),
                  ssh=cluster.ssh_settings(), shared_paths=(str(cluster.shared_dir),),
                  eval_python="python3")


def test_snapshot_all_nodes_over_ssh(cluster3):
    (cluster3.shared_dir / "data.bin").write_bytes(b"x" * 4096)
    before = tree_state(cluster3.shared_dir), tree_state(cluster3.scratch_dir)
    record = collect(_config(cluster3), cluster3.transport(), cluster3.cluster_nodes(), sample_s=0.5)
    assert [n.node for n in record.nodes] == [n.name for n in cluster3.nodes]
    for snap, node in zip(record.nodes, cluster3.nodes, strict=True):
        assert snap.reachable, snap.error
        assert snap.hostname == node.name  # read on that node (its own UTS namespace)
        keys = {s.key for s in snap.signals}
        assert {"cpu.iowait", "storage.root", "storage.shared", "xid"} <= keys
        shared = [s for s in snap.signals if s.key == "storage.shared"]
        assert any(s.text.startswith(f"{cluster3.shared_dir} (on /") for s in shared)
    lines = snapshot_lines(record)
    for node in cluster3.nodes:
        assert any(ln.startswith(("[OK] " + node.name, "[INFO] " + node.name)) for ln in lines)
    # the same machine underneath: versions agree
    assert [s.level for s in record.drift] == ["OK"]
    assert (tree_state(cluster3.shared_dir), tree_state(cluster3.scratch_dir)) == before


def test_a_dead_node_is_a_concern_and_the_rest_go_on(cluster3):
    cluster3.kill_sshd(1)
    record = collect(_config(cluster3), cluster3.transport(), cluster3.cluster_nodes(), sample_s=0.2)
    dead = record.nodes[1]
    assert not dead.reachable and record.status == "partial"
    (sig,) = dead.signals
    assert sig.level == "CONCERN" and "not snapshotted" in sig.text and "clustereval preflight" in sig.pointer
    assert record.nodes[0].reachable and record.nodes[2].reachable


def test_snapshot_all_nodes_through_slurm(slurm_cluster):
    from clustereval.config import SlurmConfig
    from clustereval.transport.slurm import SlurmTransport

    t = SlurmTransport(SlurmConfig(partition="debug", nodes=3, time_limit="10", wait_s=120))
    try:
        nodes = t.nodes()
        record = collect(Config(name="t", access="slurm", nodes=tuple(n.name for n in nodes)), t, nodes,
                         sample_s=0.3)
    finally:
        t.close()
    assert [n.node for n in record.nodes] == slurm_cluster.node_names
    for snap in record.nodes:
        assert snap.reachable, snap.error
        assert snap.hostname == snap.node  # srun ran the script on that node
        assert {"cpu.iowait", "storage.root", "xid"} <= {s.key for s in snap.signals}
    assert [s.level for s in record.drift] == ["OK"]


def test_cli_snapshot_all_prints_every_node(cluster3, tmp_path):
    import json

    from tests.conftest import run_cli

    before = tree_state(cluster3.shared_dir), tree_state(cluster3.scratch_dir)
    proc = run_cli("snapshot", "--all", "--config", str(cluster3.config_path), "--sample-seconds", "0.5",
                   cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(ln.startswith(("[OK] ", "[INFO] ", "[CONCERN] ")) for ln in lines)
    for node in cluster3.nodes:
        assert any(ln.startswith(f"[OK] {node.name}: host iowait") for ln in lines)
        assert any(ln.startswith(f"[INFO] {node.name}: host {node.name},") for ln in lines)
    assert lines[-1].startswith("[OK] cluster: the same on all 3 nodes")
    proc = run_cli("snapshot", "--all", "--json", "--config", str(cluster3.config_path), "--sample-seconds", "0.5",
                   cwd=tmp_path, timeout=180)
    data = json.loads(proc.stdout)
    assert [n["node"] for n in data["nodes"]] == [n.name for n in cluster3.nodes]
    assert (tree_state(cluster3.shared_dir), tree_state(cluster3.scratch_dir)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written in the working directory
