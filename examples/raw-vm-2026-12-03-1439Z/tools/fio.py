"""The fio runs of a storage scan: the exact command line of each run, and what its JSON says.

Six runs per directory: file sizes 16 KiB, 1 MiB and 1 GiB, each read and write, every run
with 16 parallel jobs of 4 KiB blocks at queue depth 64 through ``libaio`` with ``O_DIRECT``.
Each job reads or writes its own file of that size for the whole timed window (``--time_based``
loops over it), and ``--unlink=1`` deletes the files when the run ends.

Pure: argv in, text out; no process is started here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from clustereval.records.storage import (  # noqa: F401 - the scan's shape, re-exported
    BLOCK_BYTES,
    BLOCK_SIZE,
    FILE_SIZES,
    IODEPTH,
    NUM_JOBS,
    OPS,
    PUBLISHED_RUNTIME_S,
    RAMP_S,
)


def runtime_arg(seconds: int) -> str:
    """fio's duration spelling: the published 180 s is ``3m``."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def fio_size_arg(num_bytes: int) -> str:
    """fio's size spelling (``16k``, ``1m``, ``1g``) for a whole number of KiB."""
    for suffix, unit in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def fio_argv(directory: str, file_size_bytes: int, rw: str, runtime_s: int, *, fio: str = "fio",
             ramp_s: int = RAMP_S) -> list[str]:
    """One run: global options first, then the job (``--name``), as fio groups them in its JSON."""
    if rw not in OPS:
        raise ValueError(f"rw must be one of {OPS}, not {rw!r}")
    return [
        fio,
        "--ioengine=libaio",
        f"--filesize={fio_size_arg(file_size_bytes)}",
        f"--ramp_time={ramp_s}s",
        "--time_based",
        f"--runtime={runtime_arg(runtime_s)}",
        f"--numjobs={NUM_JOBS}",
        "--direct=1",
        "--verify=0",
        "--randrepeat=0",
        "--group_reporting",
        "--unlink=1",
        f"--directory={directory}",
        f"--name={rw}",
        f"--blocksize={BLOCK_SIZE}",
        f"--iodepth={IODEPTH}",
        f"--readwrite={rw}",
        "--output-format=json",
    ]


def bytes_written_at_once(file_size_bytes: int) -> int:
    """What one run holds on disk while it runs: one file per job."""
    return NUM_JOBS * file_size_bytes


FIO_URL = "https://github.com/axboe/fio"  # where a report links `fio` at its first mention
SLOWEST_LAYOUT_BYTES_S = 4 * 2**20  # the slowest file creation still called working (a slow network FS)
RUN_MARGIN_S = 120  # process start, fio's own setup and unlink, a loaded node


def run_timeout_s(file_size_bytes: int, runtime_s: float, ramp_s: float, *, write_bytes_s: float = 0.0,
                  layout_seen_s: float | None = None) -> float:
    """How long one fio run may take before its mount counts as hung: the timed window, plus laying
    out its files. The layout is bounded by the files' size at the slowest rate still called working
    (or a quarter of the write rate measured, when that is slower to reach); once a run of this size
    has been seen, four times the layout it took (never below the margin)."""
    data = bytes_written_at_once(file_size_bytes)
    rate = max(write_bytes_s / 4, SLOWEST_LAYOUT_BYTES_S) if write_bytes_s > 0 else SLOWEST_LAYOUT_BYTES_S
    layout = data / rate
    if layout_seen_s is not None:
        layout = min(layout, max(4 * layout_seen_s, RUN_MARGIN_S))
    return runtime_s + ramp_s + RUN_MARGIN_S + layout


@dataclass
class FioSummary:
    """One run's figures, as the report's tables use them."""

    rw: str
    latency_msec: float  # mean of lat_ns (submission to completion), in ms
    bw_mib_s: float  # bw_bytes / 2**20
    iops: float
    runtime_ms: int  # timed IO fio counted
    total_ios: int
    fio_version: str = ""
    file_size: str = ""  # as the run's options spell it
    error: int = 0  # fio's per-job error code


class FioOutputError(ValueError):
    """fio printed something that is not a usable result."""


def _json_part(text: str) -> dict:
    # fio prints warnings ("fio: ...") before the JSON document on some systems
    start = text.find("{")
    if start < 0:
        raise FioOutputError("no JSON document in fio's output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise FioOutputError(f"fio's JSON does not parse: {exc}") from exc
    if not isinstance(doc, dict):
        raise FioOutputError("fio's JSON is not an object")
    return doc


def parse_fio_json(text: str) -> FioSummary:
    """The figures of a ``--group_reporting`` run (one job entry for all 16 jobs)."""
    doc = _json_part(text)
    jobs = doc.get("jobs") or []
    if not jobs:
        raise FioOutputError("fio's JSON has no jobs")
    job = jobs[0]
    options = job.get("job options", {})
    rw = options.get("rw") or options.get("readwrite") or ""
    if rw not in OPS:
        rw = "read" if job.get("read", {}).get("total_ios") else "write"
    side = job.get(rw) or {}
    if "lat_ns" not in side or "bw_bytes" not in side:
        raise FioOutputError(f"fio's JSON has no {rw} figures")
    file_size = doc.get("global options", {}).get("filesize", options.get("filesize", ""))
    return FioSummary(
        rw=rw,
        latency_msec=float(side["lat_ns"].get("mean", 0.0)) / 1e6,
        bw_mib_s=float(side["bw_bytes"]) / 2**20,
        iops=float(side.get("iops", 0.0)),
        runtime_ms=int(side.get("runtime", 0)),
        total_ios=int(side.get("total_ios", 0)),
        fio_version=str(doc.get("fio version", "")),
        file_size=str(file_size),
        error=int(job.get("error", 0) or 0),
    )
