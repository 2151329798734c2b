"""What the README promises about reaching the nodes, on the namespace bed (real sshd per node).

- A node is reached by its name when the user's ssh configuration has a ``Host`` block for it (its
  own Port and User here), while the rendezvous still uses the hostfile's addresses.
- Preflight opens every port the run's jobs meet at (``rdzv_port`` .. ``rdzv_port + N``) on every
  node: one taken on one node is named with the node and the port.
- ``clustereval preflight`` keeps the gloo logs its Gaps point to.
- ``clustereval pairwise`` exits 1 when it names a straggler (a rate-limited node), 0 when it names none.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from clustereval.config import load_config
from clustereval.transport.factory import make_transport, nodes_of
from tests.conftest import run_cli


def _rdzv_port(cluster) -> int:
    return 20000 + cluster.ssh_port % 9000  # a port no other bed of this machine picks at the same time


@pytest.mark.timeout(900)
def test_four_nodes_reached_by_host_aliases_with_their_own_port_and_user(netns_cluster, tmp_path):
    cluster = netns_cluster(4)
    blocks = []
    for n in cluster.nodes:
        port, user = cluster.ssh_port + 100 + n.index, f"op{n.index}"
        cluster.give_login(n.index, port=port, user=user)  # the common port no longer answers on this node
        blocks.append(f"Host {n.name}\n  HostName {n.address}\n  Port {port}\n  User {user}\n"
                      f"  IdentityFile {cluster.key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {cluster.known_hosts}\n")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("".join(blocks))
    names = ", ".join(f'"{n.name}"' for n in cluster.nodes)
    config_path = tmp_path / "cluster.toml"
    config_path.write_text(
        f'name = "alias"\naccess = "ssh"\nnodes = [{names}]\nhostfile = "{cluster.hostfile}"\n'
        f'local_scratch = "{cluster.scratch_dir}"\nshared_paths = []\neval_python = "{sys.executable}"\n'
        f'install_packages = false\nrdzv_port = {_rdzv_port(cluster)}\nreports_dir = "{tmp_path / "reports"}"\n'
        f'\n[ssh]\nconfig_file = "{ssh_config}"\nconnect_timeout_s = 5\n')  # no port, no user: the Host blocks'

    config = load_config(str(config_path))
    transport = make_transport(config)
    nodes = nodes_of(config, transport)
    assert [n.address for n in nodes] == [n.address for n in cluster.nodes]  # the hostfile's peer IPs
    for node, n in zip(nodes, cluster.nodes, strict=True):
        res = transport.run(node, ["sh", "-c", 'echo "$LOGNAME $SSH_CONNECTION"'])
        login, *conn = res.stdout.split()
        assert res.ok and login == f"op{n.index}", res.stderr
        assert conn[-1] == str(cluster.ssh_port + 100 + n.index)  # the server port of this connection
    transport.close()

    proc = run_cli("preflight", "--config", str(config_path), cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "preflight passed: 4 nodes ready" in proc.stdout
    first = cluster.nodes[0]
    (raw,) = (tmp_path / "reports").glob("raw-alias-preflight-*")
    record = json.loads((raw / "preflight.record.json").read_text())
    assert record["rendezvous"] == f"{first.address}:{_rdzv_port(cluster)}"
    for n in cluster.nodes:
        assert re.search(rf"│ gloo\s+│ {re.escape(n.name)}\s+│ ok", proc.stdout), proc.stdout


@pytest.mark.timeout(600)
def test_a_taken_rdzv_port_plus_one_is_named_with_its_node(cluster3, tmp_path):
    port = _rdzv_port(cluster3)
    taken = cluster3.nodes[2]
    path = cluster3.write_config(tmp_path / "cluster.toml", rdzv_port=port, reports_dir=str(tmp_path / "reports"))
    transport = cluster3.transport()
    blocker = transport.popen(cluster3.cluster_nodes()[2], [
        "python3", "-c", "import socket, sys, time; s = socket.socket(); s.bind(('', int(sys.argv[1]))); s.listen(); "
        "print('up', flush=True); time.sleep(120)", str(port + 1)])
    try:
        assert blocker.stdout is not None and blocker.stdout.readline().strip() == "up"
        proc = run_cli("preflight", "--config", str(path), cwd=tmp_path, timeout=240)
    finally:
        blocker.kill()
        blocker.wait()
    assert proc.returncode == 1, proc.stdout[-3000:]
    out = " ".join(proc.stdout.split())  # the table and the Gap lines wrap at the console's width
    assert f"Port {port + 1}, one of the ports the run's jobs meet at, could not be opened on {taken.name}" in out
    assert "│ gloo" not in proc.stdout  # nothing slow after a failed port check
    for other in cluster3.nodes[:2]:
        assert f"could not be opened on {other.name}" not in out


@pytest.mark.timeout(600)
def test_preflight_keeps_the_gloo_logs_its_gaps_point_to(netns_cluster, tmp_path):
    cluster = netns_cluster(2)
    broken = cluster.nodes[1].name
    # node1's launcher cannot start (a real process exiting with an error); node0's waits for it
    wrapper = cluster.shared_dir / "python-launch"
    wrapper.write_text(f'#!/bin/sh\nif [ "$(hostname)" = "{broken}" ] && [ "$3" = torch.distributed.run ]; then\n'
                       '  echo "launcher refused on this node" >&2; exit 3\nfi\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    reports = tmp_path / "reports"
    path = cluster.write_config(tmp_path / "cluster.toml", rdzv_port=_rdzv_port(cluster), eval_python=str(wrapper),
                                reports_dir=str(reports))
    proc = run_cli("preflight", "--config", str(path), cwd=tmp_path, timeout=400)
    assert proc.returncode == 1, proc.stdout[-3000:]
    out = " ".join((proc.stdout + proc.stderr).split())
    logs = re.findall(r"the log is (raw-\S+?/preflight/gloo-\S+?\.log)", out)
    assert logs, out[-3000:]
    for rel in logs:
        assert (reports / rel).is_file(), rel  # relative to the reports folder, as in a run's report
    assert any(broken in rel for rel in logs)
    (raw,) = reports.glob("raw-*-preflight-*")
    assert f"run folder: {reports / raw.name}" in out or f"run folder: {raw}" in out
    record = json.loads((raw / "preflight.record.json").read_text())
    assert record["passed"] is False
    assert "launcher refused on this node" in (raw / "preflight" / f"gloo-{broken}.log").read_text()


@pytest.mark.timeout(1800)
def test_pairwise_exits_1_naming_a_rate_limited_node_and_0_without_it(four_node_pairwise):
    bed = four_node_pairwise
    even, slow = bed.commands["even"], bed.commands["slow"]  # the second with node2's link rate-limited
    assert even.result.returncode == 0, even.result.stdout[-3000:] + even.result.stderr[-2000:]
    assert slow.result.returncode == 1, slow.result.stdout[-3000:] + slow.result.stderr[-2000:]
    records = sorted(bed.reports.glob("raw-*-pairwise-*/pairwise.record.json"))
    assert len(records) == 2 and {even.raw, slow.raw} == {p.parent for p in records}
    first, second = (json.loads((c.raw / "pairwise.record.json").read_text()) for c in (even, slow))
    assert first["stragglers"] == [] and second["stragglers"] == [bed.slow]
