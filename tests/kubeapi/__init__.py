"""A stand-in Kubernetes API server for the real ``kubectl`` client (see ``server.py``)."""

from tests.kubeapi.server import ALL, KubeApiServer, Pod

__all__ = ["ALL", "KubeApiServer", "Pod"]
