"""A node that drops mid-command is ``connection-lost``, told apart from a command that exits 255.

Real faults on the namespace bed: the node's sshd and its session processes killed by pid (the
remote end closes the connection), and the node's link taken down (silence: only ssh's keepalive
notices, and with LogLevel=ERROR it says nothing, so ssh exits 255 with an empty stderr).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from clustereval.errors import ConnectionLost, TransportError
from clustereval.transport.base import run_each, run_parallel


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_node_sessions(cluster, index: int) -> None:
    """The node's sshd and every process it runs for us, by pid (only those in its namespace)."""
    cluster.kill_sshd(index)
    for pid in _netns_pids(cluster.node(index).netns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_remote_end_closing_mid_command_is_connection_lost(netns_cluster):
    cluster = netns_cluster(1)
    transport = cluster.transport()
    [node] = cluster.cluster_nodes()
    threading.Timer(2.0, kill_node_sessions, (cluster, 0)).start()
    t0 = time.monotonic()
    with pytest.raises(ConnectionLost) as info:
        transport.run(node, ["sleep", "60"], timeout_s=120)
    assert time.monotonic() - t0 < 30
    err = info.value
    assert err.error_id == "connection-lost" and err.node == node.name
    assert err.during == "sleep 60" and 1.0 <= err.after_s < 30
    assert "lost after" in err.message and node.address in err.message


def test_silent_link_loss_with_an_empty_stderr_is_connection_lost(netns_cluster):
    cluster = netns_cluster(1)
    # keepalives every second: the drop is noticed in seconds (the default notices within a minute)
    transport = cluster.transport(options=(f"UserKnownHostsFile={cluster.known_hosts}", "ServerAliveInterval=1",
                                           "ServerAliveCountMax=2"), connect_timeout_s=3)
    [node] = cluster.cluster_nodes()
    veth = cluster.node(0).veth

    def drop() -> None:
        subprocess.run(["ip", "link", "set", veth, "down"], check=True, timeout=30)

    threading.Timer(2.0, drop).start()
    try:
        with pytest.raises(ConnectionLost) as info:
            transport.run(node, ["sleep", "60"], timeout_s=120)
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], timeout=30)
    assert info.value.during == "sleep 60" and info.value.after_s < 40


def test_a_command_that_exits_255_itself_is_not_a_lost_connection(netns_cluster):
    cluster = netns_cluster(1)
    [node] = cluster.cluster_nodes()
    res = cluster.transport().run(node, ["sh", "-c", "exit 255"], timeout_s=60)
    assert res.rc == 255


def test_run_parallel_lets_every_item_end_and_run_each_keeps_every_result():
    ended: list[int] = []

    def fn(i: int) -> int:
        if i == 0:
            raise TransportError("n0", "refused the connection", error_id="ssh-unreachable")
        time.sleep(0.3)
        ended.append(i)
        return i * 10

    attempts = run_each(range(4), fn, max_workers=4)
    assert [a.value for a in attempts] == [None, 10, 20, 30]
    assert isinstance(attempts[0].error, TransportError)
    ended.clear()
    with pytest.raises(TransportError):
        run_parallel(range(4), fn, max_workers=4)
    assert sorted(ended) == [1, 2, 3]  # the others were not thrown away half-way


def test_ctrl_c_reaches_the_main_thread_while_every_node_still_runs():
    """The second Ctrl-C must not wait for the nodes' commands (a pool's shutdown did)."""
    release = threading.Event()

    def slow(i: int) -> int:
        release.wait(60)
        return i

    # Python's own Ctrl-C handler, also when this suite was started in the background (a shell
    # starts a background job with SIGINT ignored, and Python keeps what it inherits)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_each(range(3), slow, max_workers=3)
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        signal.signal(signal.SIGINT, before)
