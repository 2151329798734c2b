from dataclasses import dataclass, field

from clustereval.records import CommandResult, Gap, PhaseRecord, dumps, loads
from clustereval.records.run import ChecklistItem, PreflightRecord, ProbeResult


@dataclass
class _Nested(PhaseRecord):
    tflops_by_gpu: dict[int, float] = field(default_factory=dict)
    shape: tuple[int, int, int] | None = None
    results: list[CommandResult] = field(default_factory=list)


def test_preflight_record_round_trips_unchanged():
    rec = PreflightRecord(phase="preflight", access="ssh", passed=True,
                          checklist=[ChecklistItem("GPUs per node", True, "8")],
                          probes=[ProbeResult("ssh", "node1", True, "node1", 0.12)],
                          gaps=[Gap("preflight", "x", "y")], platform_env={"NCCL_NVLS_ENABLE": "0"})
    assert loads(PreflightRecord, dumps(rec)) == rec


def test_nested_types_round_trip():
    rec = _Nested(tflops_by_gpu={0: 801.5, 1: 799.0}, shape=(1024, 4096, 16384),
                  results=[CommandResult("n0", ["hostname"], 0, "n0\n", "", 0.01)])
    back = loads(_Nested, dumps(rec))
    assert back == rec
    assert back.tflops_by_gpu[1] == 799.0 and back.shape == (1024, 4096, 16384)
