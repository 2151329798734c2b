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
    if config.access == "slurm":
        inner = getattr(transport, "inner", transport)  # a RetryingTransport wraps the real one
        nodes = getattr(inner, "nodes", None)
        if nodes is None:
            raise UsageError("access = \"slurm\": the node list comes from the allocation, so it needs the "
                             "Slurm transport", "call nodes_of(config, make_transport(config))")
        return nodes(config.nodes)
    if config.hosts:
        names = list(config.nodes) if len(config.nodes) == len(config.hosts) else [h.address for h in config.hosts]
        return [Node(name=n, address=h.address, index=i, slots=h.slots)
                for i, (n, h) in enumerate(zip(names, config.hosts, strict=True))]
    return [Node(name=n, address=n, index=i) for i, n in enumerate(config.nodes)]


def with_nodes(config: Config, nodes: list[Node], transport: Transport | None = None) -> Config:
    """With access = "slurm", the config as if the user had written the allocation into it: the
    node list and a hostfile equivalent (``scontrol show hostnames`` plus the IP each node reports),
    whose first address is the rendezvous endpoint. Other access methods: ``config`` unchanged."""
    if config.access != "slurm" or not nodes:
        return config
    inner = getattr(transport, "inner", transport)
    job = getattr(inner, "job_id", "") or "?"
    return dataclasses.replace(
        config, nodes=tuple(n.name for n in nodes),
        hosts=tuple(HostEntry(address=n.address, slots=n.slots, line=n.index + 1) for n in nodes),
        hostfile=f"Slurm job {job} (scontrol show hostnames, each node's own address)")


def make_transport(config: Config) -> Transport:
    if config.access == "local":
        return LocalTransport()
    if config.access == "ssh":
        from clustereval.transport.ssh import SshTransport

        return SshTransport(config.ssh)
    if config.access == "slurm":
        from clustereval.transport.slurm import SlurmTransport

        return SlurmTransport(config.slurm, job_name=f"clustereval-{config.name}")
    raise UsageError(f"access method {config.access!r} is not available in this version",
                     "use access = \"local\", \"ssh\" or \"slurm\" in cluster.toml")
