"""The torchrun c10d rendezvous quirks of the runbook, as pure decisions.

``plan_rendezvous``: whether ``--rdzv_conf is_host=1`` (on the endpoint node) and ``--local_addr``
(on every node) are needed, from what each node answered. ``classify_failure``: which of the
runbook's three problems a failed launch shows, checked in its order: (1) nobody hosts the store,
(2) the port cannot be reached, (3) workers cannot resolve the advertised master.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from clustereval.records.network import RendezvousProbe

STORE_NOT_LISTENING = "store-not-listening"
UNREACHABLE_PORT = "unreachable-port"
UNRESOLVABLE_MASTER = "unresolvable-master"
OTHER = "other"


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


@dataclass
class RendezvousPlan:
    is_host_node: str = ""  # node that must host the store explicitly ("" = let torch decide)
    local_addrs: dict[str, str] = field(default_factory=dict)  # node -> --local_addr
    reasons: list[str] = field(default_factory=list)

    @property
    def needed(self) -> bool:
        return bool(self.is_host_node or self.local_addrs)


def plan_rendezvous(probes: list[RendezvousProbe], endpoint_host: str) -> RendezvousPlan:
    """``probes[0]`` is the endpoint node (the first hostfile node). Only for >= 2 nodes.

    The fix is needed when a hostname resolves to a loopback address (the advertised master would
    be unreachable) or when torch on the endpoint node does not recognise the endpoint as itself
    (nobody would host the store). When needed, both parts are applied together, as the runbook does.
    """
    plan = RendezvousPlan()
    if len(probes) < 2:
        return plan
    owner = probes[0]
    if owner.matches_endpoint is False:
        plan.reasons.append(f"torch on {owner.node} does not recognise the endpoint {endpoint_host} as its own "
                            f"address (its hostname {owner.hostname or '?'} resolves to "
                            f"{', '.join(owner.hostname_addrs) or 'nothing'}), so no node would host the store")
    for p in probes:
        addrs = p.hostname_addrs
        if not addrs:
            plan.reasons.append(f"the hostname of {p.node} ({p.hostname or '?'}) does not resolve, so the address "
                                "it advertises cannot be reached")
        elif all(is_loopback(a) for a in addrs):
            plan.reasons.append(f"the hostname of {p.node} ({p.hostname}) resolves to {', '.join(addrs)}, a loopback "
                                "address other nodes cannot reach")
    if not plan.reasons:
        return plan
    plan.is_host_node = owner.node
    for p in probes:
        addr = p.route_addr or (endpoint_host if p is owner else "")
        if addr:
            plan.local_addrs[p.node] = addr
    return plan


_RDZV_TROUBLE = re.compile(r"Rendezvous(Connection|Timeout)Error|DistStoreError|TCPStore|c10d store|"
                           r"rendezvous.*time|Connection refused|timed out", re.IGNORECASE)
_GAI = re.compile(r"gai error|Name or service not known|cannot be retrieved|Temporary failure in name resolution")
_ADDR_IN_USE = re.compile(r"Address already in use|EADDRINUSE")
_HOSTING = "hosts the TCP store"


def last_error_line(text: str) -> str:
    """The most telling error line of a log (an exception or NCCL WARN), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|NCCL WARN|error:|failed)", ln) and not ln.startswith("File "):
            return ln[:400]
    return lines[-1][:400] if lines else ""


def rendezvous_trouble(outputs: dict[str, str]) -> bool:
    return any(_RDZV_TROUBLE.search(t) or _GAI.search(t) for t in outputs.values())


def classify_failure(outputs: dict[str, str], probes: list[RendezvousProbe], plan: RendezvousPlan,
                     endpoint: str, port_check: dict[str, bool] | None = None,
                     port_bind_error: str = "") -> tuple[str, str]:
    """(diagnosis id, sentence) for a launch that failed.

    ``outputs``: node -> its launcher output, the endpoint node first. ``port_check``: node ->
    whether it could open a TCP connection to the endpoint port while a listener held it (None
    when not checked). ``port_bind_error``: why the listener could not bind, if it could not.
    """
    nodes = list(outputs)
    owner = nodes[0] if nodes else ""
    owner_text = outputs.get(owner, "")
    owner_probe = probes[0] if probes else None
    if not rendezvous_trouble(outputs):
        culprit = next((n for n, t in outputs.items() if last_error_line(t)), owner)
        return OTHER, (f"the launch failed after the rendezvous on {culprit}: "
                       f"{last_error_line(outputs.get(culprit, '')) or 'no output'}")
    # 1. nobody hosts the store
    if _ADDR_IN_USE.search(owner_text) or port_bind_error:
        why = port_bind_error or "address already in use"
        return STORE_NOT_LISTENING, (f"the rendezvous store could not listen on {endpoint} on {owner} ({why}); "
                                     "another process holds the port")
    if (owner_probe and owner_probe.matches_endpoint is False and not plan.is_host_node
            and _HOSTING not in owner_text):
        return STORE_NOT_LISTENING, (f"nobody hosted the rendezvous store: torch on {owner} does not recognise "
                                     f"{endpoint} as its own address, so every node started as a client "
                                     "(`--rdzv_conf is_host=1` on the endpoint node fixes it)")
    # 2. the port cannot be reached
    if port_check:
        blocked = sorted(n for n, ok in port_check.items() if not ok)
        if blocked:
            return UNREACHABLE_PORT, (f"{', '.join(blocked)} could not open a TCP connection to the rendezvous "
                                      f"port {endpoint} while it was listening (a firewall or security group "
                                      "rule blocks it)")
    # 3. the advertised master does not resolve
    for node, text in outputs.items():
        if _GAI.search(text):
            return UNRESOLVABLE_MASTER, (f"workers on {node} could not resolve the master address the rendezvous "
                                         "advertised (a hostname instead of an IP; `--local_addr <ip>` on every "
                                         "node fixes it)")
    return OTHER, f"the rendezvous at {endpoint} did not complete: {last_error_line(owner_text) or 'no output'}"
