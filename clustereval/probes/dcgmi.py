"""``dcgmi diag -r 2``: argv and the parser of its result table (DCGM 3 and DCGM 4 layouts).

DCGM 3 prints one row per plugin with ``Pass - All`` / ``Pass - GPUs: 1, 2`` and a continuation
row ``Fail - GPU: 0``; DCGM 4 prints ``Pass`` on the plugin row and one ``GPU0: Pass`` row per GPU.
``Warning`` / ``Error`` / ``Info`` rows (wrapped over several lines) belong to the plugin above them;
an ``Error`` row before any plugin is a top-level error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.records.compute import DiagResult

DIAG_URL = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
RESULTS = ("Pass", "Fail", "Skip", "Warn")
MESSAGE_KINDS = ("Warning", "Error", "Info")

_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_ROW = re.compile(r"^\|(.*?)\|(.*)\|\s*$")
_RESULT_LIST = re.compile(r"^(Pass|Fail|Skip|Warn)\w*\s*(?:-\s*(All|GPUs?:\s*([\d,\s]+)))?\s*$", re.I)
_GPU_RESULT = re.compile(r"^GPU\s*(\d+)\s*:\s*(Pass|Fail|Skip|Warn)\w*", re.I)
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver", "GPU Device IDs Detected": "device_ids"}


def diag_argv(level: int = 2) -> list[str]:
    return ["dcgmi", "diag", "-r", str(level)]


@dataclass
class DiagReport:
    ran: bool = False  # a result table was printed
    version: str = ""
    driver: str = ""
    device_ids: str = ""
    results: list[DiagResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # Error rows outside any plugin, or the tool's own error


def _norm(result: str) -> str:
    r = result.strip().lower()
    for name in RESULTS:
        if r.startswith(name.lower()):
            return name
    return result.strip()


def _worst(results: list[str]) -> str:
    for name in ("Fail", "Warn", "Pass", "Skip"):
        if name in results:
            return name
    return ""


def parse_diag(text: str) -> DiagReport:
    report = DiagReport()
    category = ""
    current: DiagResult | None = None
    message: list[str] | None = None  # the message being continued, as its wrapped chunks
    message_target: list[str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        sec = _SECTION.match(line)
        if sec:
            category = sec.group(1).strip()
            message = None
            continue
        row = _ROW.match(line)
        if not row and line.startswith("Error"):  # the tool's own error, outside any table
            report.errors.append(line.strip())
            continue
        if not row or set(line) <= set("+=-| "):
            continue
        name, cell = row.group(1).strip(), row.group(2)
        value = cell.strip()
        if name == "Diagnostic" and value == "Result":
            report.ran = True
            continue
        if name in _METADATA:
            setattr(report, _METADATA[name], value)
            continue
        kind = next((k for k in MESSAGE_KINDS if name == k or name.startswith((k + ":", k + " "))), "")
        if kind:
            prefix = name[len(kind):].strip(" :")
            message = [f"{kind}: {prefix + ' ' if prefix else ''}", _chunk(cell)]
            target = current.messages if current is not None else (report.errors if kind == "Error" else None)
            if target is not None:
                target.append(_joined(message))
            message_target = target
            continue
        if not name:
            gpu = _GPU_RESULT.match(value)
            listed = _RESULT_LIST.match(value)
            if current is not None and gpu:
                current.gpus[int(gpu.group(1))] = _norm(gpu.group(2))
                message = None
            elif current is not None and listed:
                _apply_list(current, listed)
                message = None
            elif message is not None:
                message.append(_chunk(cell))
                if message_target:
                    message_target[-1] = _joined(message)
            continue
        current = DiagResult(plugin=name, category=category)
        listed = _RESULT_LIST.match(value)
        if listed:
            _apply_list(current, listed)
        else:
            current.result = _norm(value)
        report.results.append(current)
        message = None
    for r in report.results:
        if r.gpus:
            r.result = _worst([r.result, *r.gpus.values()]) if r.result else _worst(list(r.gpus.values()))
    return report


def _apply_list(result: DiagResult, m: re.Match[str]) -> None:
    outcome = _norm(m.group(1))
    if m.group(3):
        for g in re.findall(r"\d+", m.group(3)):
            result.gpus[int(g)] = outcome
    result.result = _worst([result.result, outcome]) if result.result else outcome


def _chunk(cell: str) -> str:
    # dcgmi wraps messages at a fixed 45-character width, mid-word: keep each chunk exact
    return cell[1:46] if cell.startswith(" ") else cell[:45]


def _joined(chunks: list[str]) -> str:
    return " ".join("".join(chunks).split())


def failed_gpus(report: DiagReport) -> list[int]:
    return sorted({g for r in report.results for g, v in r.gpus.items() if v == "Fail"})


def connection_error(text: str) -> bool:
    """dcgmi could not reach nv-hostengine (not running, or not reachable)."""
    low = text.lower()
    return "unable to connect to host engine" in low or "unable to establish a connection" in low \
        or "host engine connection invalid" in low


def cuda_major(nvidia_smi_text: str) -> str:
    m = re.search(r"CUDA Version:\s*(\d+)\.", nvidia_smi_text)
    return m.group(1) if m else ""
