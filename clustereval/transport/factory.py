"""Config -> transport and node list."""

from __future__ import annotations

from clustereval.config import Config
from clustereval.errors import UsageError
from clustereval.transport.base import Node, Transport
from clustereval.transport.local import LocalTransport


def nodes_of(config: Config) -> list[Node]:
    """Nodes in hostfile order (node<N> is this index); addresses from the hostfile when given."""
    if config.hosts:
        names = list(config.nodes) if len(config.nodes) == len(config.hosts) else [h.address for h in config.hosts]
        return [Node(name=n, address=h.address, index=i, slots=h.slots)
                for i, (n, h) in enumerate(zip(names, config.hosts, strict=True))]
    return [Node(name=n, address=n, index=i) for i, n in enumerate(config.nodes)]


def make_transport(config: Config) -> Transport:
    if config.access == "local":
        return LocalTransport()
    if config.access == "ssh":
        from clustereval.transport.ssh import SshTransport

        return SshTransport(config.ssh)
    raise UsageError(f"access method {config.access!r} is not available in this version",
                     "use access = \"local\" or \"ssh\" in cluster.toml")
