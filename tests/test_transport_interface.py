"""What every transport answers without the caller asking which one it holds: the defaults of
the interface on a transport they fit (local), and the node list that only a platform gives."""

from __future__ import annotations

import sys

import pytest

from clustereval.config import Config
from clustereval.errors import UsageError
from clustereval.transport.base import Node
from clustereval.transport.factory import nodes_of, with_nodes
from clustereval.transport.local import LocalTransport

HERE = Node("here", "here")


def test_local_transport_has_no_platform_facts():
    t = LocalTransport()
    assert t.nodes() is None and t.nodes(["here"]) is None
    assert t.job_id == ""
    assert t.access_detail() == ""
    assert t.allocation_check([HERE]) is None


def test_a_failed_local_command_is_the_command_s_own_failure():
    t = LocalTransport()
    proc = t.popen(HERE, [sys.executable, "-c", "import sys; print('boom'); sys.exit(255)"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 255
    assert t.error_for(HERE, proc.returncode, out, seconds=0.1, during="python") is None


@pytest.mark.parametrize("access, source", [("slurm", "allocation"), ("kubectl", "pods")])
def test_a_platform_node_list_needs_the_platform_s_transport(access, source):
    config = Config(access=access)
    for transport in (None, LocalTransport()):
        with pytest.raises(UsageError, match=f"the node list comes from the {source}"):
            nodes_of(config, transport)


def test_with_nodes_names_no_job_when_the_transport_has_none():
    config = Config(access="slurm")
    listed = with_nodes(config, [Node("a", "10.0.0.1", 0)], LocalTransport())
    assert listed.nodes == ("a",) and listed.hosts[0].address == "10.0.0.1"
    assert listed.hostfile == "Slurm job ? (scontrol show hostnames, each node's own address)"

