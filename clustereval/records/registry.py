"""Which record class each phase writes: the store and the report read records through this."""

from __future__ import annotations

from typing import Any

from clustereval.records.compute import HealthRecord, LemonRecord, MatmulRecord
from clustereval.records.environment import EnvironmentRecord
from clustereval.records.gpupass import GpuPassRecord
from clustereval.records.network import AllreduceRecord, ConnectivityRecord, PairwiseRecord
from clustereval.records.run import EvalPythonRecord, PackagesRecord, PreflightRecord
from clustereval.records.storage import StorageRecord

# phase name -> record class. A phase module's record class lives in records/<area>.py.
RECORD_TYPES: dict[str, type[Any]] = {
    "preflight": PreflightRecord,
    "packages": PackagesRecord,
    "evalpython": EvalPythonRecord,
    "environment": EnvironmentRecord,
    "connectivity": ConnectivityRecord,
    "health": HealthRecord,
    "gpupass": GpuPassRecord,
    "matmul": MatmulRecord,
    "lemon": LemonRecord,
    "allreduce": AllreduceRecord,
    "pairwise": PairwiseRecord,
    "storage": StorageRecord,
}


def record_type(phase: str) -> type[Any]:
    return RECORD_TYPES[phase]
