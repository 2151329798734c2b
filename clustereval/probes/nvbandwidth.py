"""NVIDIA ``nvbandwidth`` (https://github.com/NVIDIA/nvbandwidth): argv and a pure parser of its
JSON output (``nvbandwidth -j``).

Its JSON is ``{"nvbandwidth": {"version": ..., "testcases": [{"name", "status", "bandwidth_matrix",
"sum", "error"?}]}}``; a matrix is rows of strings, GB/s or ``N/A``. Host↔device testcases have one
row with a column per GPU; device↔device ones a row per source GPU; ``device_local_copy`` one row
with a column per GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

URL = "https://github.com/NVIDIA/nvbandwidth"
WHICH_ARGV = ["sh", "-c", "command -v nvbandwidth"]
# the testcases this pass compares with its own figures (nvbandwidth's names)
TESTCASES = ("device_local_copy", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
             "host_to_device_bidirectional_memcpy_ce", "device_to_host_bidirectional_memcpy_ce",
             "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
             "device_to_device_bidirectional_memcpy_read_ce", "host_to_all_memcpy_ce", "all_to_host_memcpy_ce")


def run_argv(executable: str = "nvbandwidth", testcases: tuple[str, ...] = TESTCASES) -> list[str]:
    argv = [executable, "-j"]
    for name in testcases:
        argv += ["-t", name]
    return argv


@dataclass
class NvbTestcase:
    name: str
    status: str  # Passed | Waived | Not Found | Error
    matrix_gb_s: list[list[float | None]] = field(default_factory=list)
    sum_gb_s: float | None = None
    error: str = ""

    def per_gpu_gb_s(self) -> dict[int, float]:
        """GPU -> GB/s for a one-row testcase (host↔device, device-local)."""
        if len(self.matrix_gb_s) != 1:
            return {}
        return {i: v for i, v in enumerate(self.matrix_gb_s[0]) if v is not None}


@dataclass
class NvbRun:
    version: str = ""
    error: str = ""
    testcases: list[NvbTestcase] = field(default_factory=list)

    def testcase(self, name: str) -> NvbTestcase | None:
        return next((t for t in self.testcases if t.name == name and t.status == "Passed"), None)


def _value(text: object) -> float | None:
    try:
        return float(str(text))
    except ValueError:  # "N/A": that pair or GPU was not measured
        return None


def parse(text: str) -> NvbRun:
    """``nvbandwidth -j`` output; text before the JSON object (a warning line) is skipped."""
    start = text.find("{")
    if start < 0:
        return NvbRun(error=(text.strip().splitlines() or ["no output"])[-1][:200])
    try:
        root = json.loads(text[start:]).get("nvbandwidth", {})
    except (json.JSONDecodeError, AttributeError) as exc:
        return NvbRun(error=f"unreadable JSON: {exc}"[:200])
    run = NvbRun(version=str(root.get("version", "")), error=str(root.get("error", "")))
    for tc in root.get("testcases", []) or []:
        run.testcases.append(NvbTestcase(
            name=str(tc.get("name", "")), status=str(tc.get("status", "")),
            matrix_gb_s=[[_value(v) for v in row] for row in tc.get("bandwidth_matrix", []) or []],
            sum_gb_s=_value(tc["sum"]) if "sum" in tc else None, error=str(tc.get("error", ""))))
    return run
