"""Config -> transport and node list."""

from __future__ import annotations

import dataclasses

from clustereval.config import Config, HostEntry
from clustereval.errors import UsageError
from clustereval.transport.base import Node, Transport
from clustereval.transport.local import LocalTransport


def nodes_of(config: Config, transport: Transport | None = None) -> list[Node]:
    """Nodes in hostfile order (node<N> is this index); addresses from the hostfile when given.

    With access = "slurm" the nodes are the allocation's (``transport`` is the one
    ``make_transport`` returned): Slurm's order, or cluster.toml ``nodes`` when listed, with the
    address each node reports for itself."""
    if config.access in ("slurm", "kubectl"):
        listed = None
        if transport is not None:
            listed = transport.nodes(config.nodes) if config.access == "slurm" else transport.nodes()
        if listed is None:
            source = "allocation" if config.access == "slurm" else "pods"
            raise UsageError(f"access = \"{config.access}\": the node list comes from the {source}, so it needs "
                             f"the {config.access} transport", "call nodes_of(config, make_transport(config))")
        return listed
    if config.hosts:
        names = list(config.nodes) if len(config.nodes) == len(config.hosts) else [h.address for h in config.hosts]
        return [Node(name=n, address=h.address, index=i, slots=h.slots)
                for i, (n, h) in enumerate(zip(names, config.hosts, strict=True))]
    return [Node(name=n, address=n, index=i) for i, n in enumerate(config.nodes)]


def with_nodes(config: Config, nodes: list[Node], transport: Transport | None = None) -> Config:
    """With access = "slurm" or "kubectl", the config as if the user had written the platform's nodes
    into it: the node list and a hostfile equivalent (``scontrol show hostnames`` plus the IP each node
    reports; the pods plus their IPs or the platform hostfile), whose first address is the rendezvous
    endpoint. Other access methods: ``config`` unchanged."""
    if config.access not in ("slurm", "kubectl") or not nodes:
        return config
    if config.access == "kubectl":
        pod0 = nodes[0].name
        source = (f"{config.kubectl.hostfile} in pod {pod0} (the platform's)" if config.kubectl.hostfile
                  else "the pods' status.podIP (kubectl get pods)")
        return dataclasses.replace(
            config, nodes=tuple(n.name for n in nodes),
            hosts=tuple(HostEntry(address=n.address, slots=n.slots, line=n.index + 1) for n in nodes),
            hostfile=source)
    job = (transport.job_id if transport is not None else "") or "?"
    return dataclasses.replace(
        config, nodes=tuple(n.name for n in nodes),
        hosts=tuple(HostEntry(address=n.address, slots=n.slots, line=n.index + 1) for n in nodes),
        hostfile=f"Slurm job {job} (scontrol show hostnames, each node's own address)")


def make_transport(config: Config) -> Transport:
    if config.access == "local":
        return LocalTransport()
    if config.access == "ssh":
        from clustereval.transport.ssh import MULTIPLEX_FROM_NODES, SshTransport

        return SshTransport(config.ssh, multiplex=max(len(config.nodes), len(config.hosts)) >= MULTIPLEX_FROM_NODES)
    if config.access == "slurm":
        from clustereval.transport.slurm import SlurmTransport

        return SlurmTransport(config.slurm, job_name=f"clustereval-{config.name}")
    if config.access == "kubectl":
        from clustereval.transport.kubectl import KubectlTransport

        return KubectlTransport(config.kubectl)
    raise UsageError(f"access method {config.access!r} is not available in this version",
                     "use access = \"local\", \"ssh\", \"slurm\" or \"kubectl\" in cluster.toml")
