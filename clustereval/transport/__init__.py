"""How a command reaches a node. ``Transport`` is the only process/network boundary."""

from clustereval.transport.base import Node, Transport, run_parallel
from clustereval.transport.local import LocalTransport

__all__ = ["Node", "Transport", "LocalTransport", "run_parallel"]
