"""clustereval: evaluate an ML GPU cluster and write a report an operator can act on."""

__version__ = "0.1.0"
