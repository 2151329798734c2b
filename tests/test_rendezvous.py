"""The runbook's rendezvous rules as pure decisions: when is_host / local_addr apply, and the diagnosis order."""

from clustereval.analysis.rendezvous import (
    OTHER,
    STORE_NOT_LISTENING,
    UNREACHABLE_PORT,
    UNRESOLVABLE_MASTER,
    RendezvousPlan,
    classify_failure,
    plan_rendezvous,
)
from clustereval.records.network import RendezvousProbe


def _probe(node, addrs, route, matches=True):
    return RendezvousProbe(node=node, hostname=f"h-{node}", hostname_addrs=addrs, route_addr=route,
                           matches_endpoint=matches)


def test_routable_hostnames_need_no_fix():
    plan = plan_rendezvous([_probe("n0", ["10.0.0.1"], "10.0.0.1"), _probe("n1", ["10.0.0.2"], "10.0.0.2", False)],
                           "10.0.0.1")
    assert not plan.needed and plan.reasons == []


def test_hostname_on_127_0_1_1_gets_is_host_and_local_addr_everywhere():
    probes = [_probe("n0", ["127.0.1.1"], "10.0.0.1", matches=False), _probe("n1", ["10.0.0.2"], "10.0.0.2", False)]
    plan = plan_rendezvous(probes, "10.0.0.1")
    assert plan.is_host_node == "n0"
    assert plan.local_addrs == {"n0": "10.0.0.1", "n1": "10.0.0.2"}
    assert any("127.0.1.1" in r for r in plan.reasons)
    assert any("would host the store" in r for r in plan.reasons)


def test_peer_with_loopback_hostname_alone_triggers_the_fix():
    probes = [_probe("n0", ["10.0.0.1"], "10.0.0.1"), _probe("n1", ["127.0.1.1"], "10.0.0.2", False)]
    plan = plan_rendezvous(probes, "10.0.0.1")
    assert plan.needed and plan.local_addrs["n1"] == "10.0.0.2"


def test_one_node_never_needs_the_fix():
    assert not plan_rendezvous([_probe("n0", ["127.0.1.1"], "127.0.0.1", False)], "127.0.0.1").needed


STORE_FAIL = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
              "has failed. See inner exception for details.\n")
GAI = "[W] [c10d] The IPv6 network addresses of (h-n0, 41235) cannot be retrieved (gai error: -2 - Name or service not known).\n"


def test_nobody_hosting_the_store_is_diagnosed_first():
    probes = [_probe("n0", ["127.0.1.1"], "10.0.0.1", matches=False), _probe("n1", ["10.0.0.2"], "10.0.0.2", False)]
    diag, text = classify_failure({"n0": STORE_FAIL, "n1": STORE_FAIL + GAI}, probes, RendezvousPlan(),
                                  "10.0.0.1:29500", port_check={"n1": False})
    assert diag == STORE_NOT_LISTENING and "is_host=1" in text


def test_port_in_use_on_the_endpoint_means_the_store_cannot_listen():
    diag, text = classify_failure({"n0": STORE_FAIL, "n1": STORE_FAIL}, [], RendezvousPlan(), "10.0.0.1:29500",
                                  port_check={"n1": False}, port_bind_error="[Errno 98] Address already in use")
    assert diag == STORE_NOT_LISTENING and "Address already in use" in text


def test_blocked_port_is_diagnosed_before_name_resolution():
    probes = [_probe("n0", ["10.0.0.1"], "10.0.0.1"), _probe("n1", ["10.0.0.2"], "10.0.0.2", False)]
    diag, text = classify_failure({"n0": "Process 1 hosts the TCP store for the C10d rendezvous backend.\n" + STORE_FAIL,
                                   "n1": STORE_FAIL + GAI}, probes, RendezvousPlan(), "10.0.0.1:29500",
                                  port_check={"n1": False, "n2": True})
    assert diag == UNREACHABLE_PORT and text.startswith("n1 could not")


def test_unresolvable_master_when_the_port_is_open():
    probes = [_probe("n0", ["10.0.0.1"], "10.0.0.1"), _probe("n1", ["10.0.0.2"], "10.0.0.2", False)]
    diag, text = classify_failure({"n0": STORE_FAIL, "n1": GAI}, probes, RendezvousPlan(), "10.0.0.1:29500",
                                  port_check={"n1": True})
    assert diag == UNRESOLVABLE_MASTER and "n1" in text and "--local_addr" in text


def test_a_worker_crash_after_rendezvous_is_not_a_rendezvous_problem():
    out = {"n0": "RuntimeError: CUDA error: an illegal memory access was encountered\n", "n1": ""}
    diag, text = classify_failure(out, [], RendezvousPlan(), "10.0.0.1:29500")
    assert diag == OTHER and "illegal memory access" in text
