"""The torchrun c10d rendezvous quirks of the runbook, as pure decisions.

``plan_rendezvous``: whether ``--rdzv_conf is_host=1`` (on the endpoint node) and ``--local_addr``
(on every node) are needed, from what each node answered. ``classify_failure``: which of the
runbook's three problems a failed launch shows, checked in its order: (1) nobody hosts the store,
(2) the port cannot be reached, (3) workers cannot resolve the advertised master.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from clustereval.analysis.quoting import quoted_line
from clustereval.probes._text import last_line
from clustereval.records.network import RendezvousPlan, RendezvousProbe

STORE_NOT_LISTENING = "store-not-listening"
UNREACHABLE_PORT = "unreachable-port"
UNRESOLVABLE_MASTER = "unresolvable-master"
LOOPBACK_PEER = "loopback-peer"  # ranks advertised 127.x to their peers (gloo / NCCL bound to loopback)
OTHER = "other"


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr)
        return True
    except ValueError:
        return False


def plan_rendezvous(probes: list[RendezvousProbe], endpoint_host: str, addresses: Mapping[str, str] | None = None,
                    fixed_ifnames: Mapping[str, str] | None = None) -> RendezvousPlan:
    """``probes[0]`` is the endpoint node (the first hostfile node). Only for >= 2 nodes.

    ``is_host`` / ``--local_addr`` are added, together as the runbook does, when a hostname resolves
    only to loopback (or not at all) on its own node, when a peer cannot resolve it to a routable
    address (the advertised master would be unreachable), or when torch on the endpoint node does
    not recognise the endpoint as itself (nobody would host the store). ``--local_addr`` is the
    node's hostfile address (``addresses``) when that is an IP, else its route to the endpoint.
    The socket interface for gloo and NCCL is the one holding each node's route to the endpoint,
    unless the node (or ``fixed_ifnames``: cluster.toml) already sets GLOO_/NCCL_SOCKET_IFNAME.
    """
    plan = RendezvousPlan(nodes=[p.node for p in probes], endpoint_host=endpoint_host)
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
        blind = sorted(q.node for q in probes if q is not p and p.hostname and p.hostname in q.peer_names
                       and not [a for a in q.peer_names[p.hostname] if not is_loopback(a)])
        if blind:
            plan.reasons.append(f"{', '.join(blind)} cannot resolve the hostname of {p.node} ({p.hostname}), so "
                                "workers there could not reach the master address it would advertise")
    fixed = dict(fixed_ifnames or {})
    for p in probes:
        platform = p.env_ifnames.get("GLOO_SOCKET_IFNAME") or p.env_ifnames.get("NCCL_SOCKET_IFNAME") or ""
        if platform or fixed.get("NCCL_SOCKET_IFNAME"):
            plan.ifname_source[p.node] = "platform"
        elif p.route_ifname:
            plan.socket_ifnames[p.node] = p.route_ifname
            plan.ifname_source[p.node] = f"route to {endpoint_host}"
    if not plan.reasons:
        return plan
    plan.is_host_node = owner.node
    for p in probes:
        given = (addresses or {}).get(p.node, "")
        addr = given if is_ip(given) else (p.route_addr or (endpoint_host if p is owner else ""))
        if addr:
            plan.local_addrs[p.node] = addr
    return plan


def subplan(plan: RendezvousPlan, nodes: list[str], endpoint_host: str) -> RendezvousPlan:
    """The plan for a job on ``nodes`` (endpoint: the first of them), per-node choices unchanged."""
    return RendezvousPlan(nodes=list(nodes), endpoint_host=endpoint_host,
                          is_host_node=nodes[0] if plan.is_host_node and nodes else "",
                          local_addrs={n: a for n, a in plan.local_addrs.items() if n in nodes},
                          socket_ifnames={n: i for n, i in plan.socket_ifnames.items() if n in nodes},
                          ifname_source={n: i for n, i in plan.ifname_source.items() if n in nodes},
                          reasons=list(plan.reasons), proven=plan.proven)


def socket_env(plan: RendezvousPlan, node: str, backend: str) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME for NCCL) for one node, from the plan."""
    iface = plan.socket_ifnames.get(node, "")
    if not iface:
        return {}
    env = {"GLOO_SOCKET_IFNAME": iface}
    if backend == "nccl":
        env["NCCL_SOCKET_IFNAME"] = iface
    return env


_RDZV_TROUBLE = re.compile(r"Rendezvous(Connection|Timeout)Error|DistStoreError|TCPStore|c10d store|"
                           r"rendezvous.*time|Connection refused|timed out", re.IGNORECASE)
_GAI = re.compile(r"gai error|Name or service not known|cannot be retrieved|Temporary failure in name resolution")
_LOOPBACK_REFUSED = re.compile(r"(?:Connection refused|ECONNREFUSED).{0,80}?remote=\[?(127\.[0-9.]+)\]?"
                               r"|remote=\[?(127\.[0-9.]+)\]?.{0,80}?(?:Connection refused|ECONNREFUSED)")
_ADDR_IN_USE = re.compile(r"Address already in use|EADDRINUSE")
_HOSTING = "hosts the TCP store"


def last_error_line(text: str) -> str:
    """The most telling error line of a log (an exception or NCCL WARN), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|NCCL WARN|error:|failed)", ln) and not ln.startswith("File "):
            return ln[:400]
    return last_line(text)[:400]


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
        return OTHER, f"the launch failed after the rendezvous on {culprit}: {_quoted(outputs.get(culprit, ''))}"
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
    # 2b. a peer was told to connect to a loopback address (the process bound to 127.0.1.1)
    for node, text in outputs.items():
        m = _LOOPBACK_REFUSED.search(text)
        if m:
            addr = m.group(1) or m.group(2)
            applied = f" although {', '.join(sorted(plan.socket_ifnames))} had GLOO_SOCKET_IFNAME set" \
                if plan.socket_ifnames else ""
            return LOOPBACK_PEER, (f"ranks on {node} were refused by a peer at {addr}: a rank advertised a loopback "
                                   f"address, because its hostname resolves to loopback{applied}")
    # 3. the advertised master does not resolve
    for node, text in outputs.items():
        if _GAI.search(text):
            fix = ("even with `--local_addr` on every node" if plan.local_addrs
                   else "a hostname instead of an IP; `--local_addr <ip>` on every node fixes it")
            return UNRESOLVABLE_MASTER, (f"workers on {node} could not resolve the master address the rendezvous "
                                         f"advertised ({fix})")
    return OTHER, f"the rendezvous at {endpoint} did not complete: {_quoted(owner_text)}"


def _quoted(text: str) -> str:
    """The telling error line of a launcher's output as the report quotes it, or "no output"."""
    line = last_error_line(text)
    return quoted_line(line) if line else "no output"


RESUME = "then run `clustereval run --resume RUN_DIR`"


def fix_for(diagnosis: str, plan: RendezvousPlan) -> str:
    """The Gap's plan for a failed launch: never a fix the launch already had."""
    if diagnosis == STORE_NOT_LISTENING:
        if plan.is_host_node:
            return ("free the rendezvous port on the first node (`ss -ltnp | grep PORT` shows who holds it) or set "
                    f"`rdzv_port` in cluster.toml to an unused port, {RESUME}")
        return ("make the first node's hostname resolve to its hostfile address in /etc/hosts (then torch hosts "
                f"the store itself), or free / change `rdzv_port`, {RESUME}")
    if diagnosis == UNREACHABLE_PORT:
        return f"open the rendezvous TCP port (`rdzv_port` in cluster.toml) between the nodes, {RESUME}"
    if diagnosis == UNRESOLVABLE_MASTER:
        if plan.local_addrs:
            return ("`--local_addr` was already given on every node, so a worker still resolved a hostname: add "
                    f"every node's hostname with its hostfile address to /etc/hosts on all nodes, {RESUME}")
        return f"make each node's hostname resolve to its routable IP on every node, {RESUME}"
    if diagnosis == LOOPBACK_PEER:
        if plan.socket_ifnames:
            return ("map each node's hostname to its hostfile address in /etc/hosts (not 127.0.1.1); the socket "
                    f"interface was already pinned with GLOO_SOCKET_IFNAME, {RESUME}")
        return (f"set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface of the hostfile address, {RESUME}")
    if diagnosis == "timeout":
        return ("check the nodes for a hung GPU or a stalled collective (NCCL_DEBUG=INFO log in the raw folder), "
                f"{RESUME}")
    if diagnosis == "not-joined":
        return f"check the named nodes are up and their launcher starts (its log in the raw folder), {RESUME}"
    return f"read the launch log in the raw folder, fix the cause, {RESUME}"
