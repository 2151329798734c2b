"""From ``MULTIPLEX_FROM_NODES`` nodes on, a node's commands share one SSH connection (ControlMaster):
real sshd servers in network namespaces, the shared connections counted in /proc and closed again."""

from __future__ import annotations

import time
from pathlib import Path

from clustereval.config import Config
from clustereval.transport.base import DEFAULT_FANOUT, run_parallel
from clustereval.transport.factory import make_transport
from clustereval.transport.ssh import MULTIPLEX_FANOUT, MULTIPLEX_FROM_NODES, SshTransport


def masters(folder: str) -> list[int]:
    """The pids of the shared connections whose sockets live in ``folder``."""
    found = []
    for pid in (p for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            cmd = (pid / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if folder and folder in cmd and "[mux]" in cmd:
            found.append(int(pid.name))
    return found


def test_a_fleet_shares_connections_and_a_small_cluster_does_not():
    def transport(num_nodes: int) -> SshTransport:
        t = make_transport(Config(name="f", access="ssh", nodes=tuple(f"n{i}" for i in range(num_nodes))))
        assert isinstance(t, SshTransport)
        return t

    small, fleet = transport(MULTIPLEX_FROM_NODES - 1), transport(MULTIPLEX_FROM_NODES)
    assert (small.multiplex, small.fanout) == (False, DEFAULT_FANOUT)
    assert (fleet.multiplex, fleet.fanout) == (True, MULTIPLEX_FANOUT)
    node = Config(name="f", access="ssh", nodes=("n0",))
    assert "ControlMaster=auto" not in " ".join(small.ssh_argv(make_node(node), "true"))
    argv = fleet.ssh_argv(make_node(node), "true")
    assert "ControlMaster=auto" in argv and argv.index("ControlMaster=auto") < argv.index("--")
    assert "ControlPath=none" in fleet.ssh_argv(make_node(node), "true", fresh=True)
    fleet.close()


def make_node(config: Config):  # noqa: ANN201
    from clustereval.transport.factory import nodes_of

    return nodes_of(config)[0]


def test_commands_files_and_background_jobs_ride_one_connection_per_node(netns_cluster, tmp_path):
    cluster = netns_cluster(2)
    t = SshTransport(cluster.ssh_settings(), multiplex=True)
    nodes = cluster.cluster_nodes()
    try:
        work = [(n, i) for n in nodes for i in range(6)]
        results = run_parallel(work, lambda w: t.run(w[0], ["sh", "-c", f"echo {w[1]}; hostname"], timeout_s=60), 12)
        assert [r.stdout.split() for r in results] == [[str(i), n.name] for n, i in work]
        folder = t._control_dir
        assert len(masters(folder)) == 2  # one shared connection per node, whatever ran at once
        src = tmp_path / "payload.txt"
        src.write_text("through the shared connection\n")
        t.put(nodes[0], src, f"{cluster.shared_dir}/mux/payload.txt")
        t.get(nodes[1], f"{cluster.shared_dir}/mux/payload.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == src.read_text()
        proc = t.popen(nodes[1], ["sh", "-c", "echo started; sleep 30"])
        assert proc.stdout.readline().strip() == "started"
        proc.kill()
        proc.wait(timeout=30)
        assert t._answers(nodes[0])  # the fresh check of a node opens a connection of its own
        assert len(masters(folder)) == 2
    finally:
        t.close()
    deadline = time.monotonic() + 20
    while masters(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert masters(folder) == [] and not Path(folder).exists()
    t.close()  # idempotent
