#!/usr/bin/env python3
"""Our matmul phase against the runbook author's finder (``mamf-finder.py``, benchmark version 4,
``--search auto``) on the same GPU, in one call.

    python3 benchmarks/matmul_vs_finder.py OUT_DIR --finder PATH/mamf-finder.py   # on the GPU machine (~6 min)
    python3 benchmarks/matmul_vs_finder.py OUT_DIR --smoke                         # on CPU: our side only, short holds

1. The matmul phase with the quick profile on GPU0 (the whole-wave search, ``clustereval.analysis.waves``),
   timed as a whole (``clustereval run`` would run exactly this).
2. The finder, ``--search auto --dtype bfloat16``, as published (not in this repository: give its path),
   timed as a whole; its MAMF (the peak iteration of its burst confirm) and MSMF lines are read from its log.
3. Our MSMF shape, in the layout our search chose, and the finder's MSMF shape, in the finder's layout
   (B stored N×K and read transposed: ``tn``), each held back to back by this script's own loop,
   alternated A B A B: ``--hold-s`` (60 s) each, then ``--hold2-s`` (45 s) each. A hold's figure is the
   median chunk rate of its last half.

Targets, per call: our MAMF ≥ the finder's (the same statistic: the peak iteration; our confirm mean
is printed beside it); our held shape ≥ the finder's held shape in both alternated pairs; our
reported MSMF within ±1% of our shape's first (60-s) hold; our phase wall ≤ the finder's wall.
Writes under OUT_DIR: ``vs_finder.md`` (the tables), ``vs_finder.json`` (every figure), ``search.json``
(GPU0's search summary, the test fixture), ``search.log`` (the worker's JSON lines), ``finder.txt``
(the finder's log) and ``held.json`` (every hold's chunks).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.matmul_msmf import HeldLoop, context, held_summary, smi  # noqa: E402
from clustereval.analysis.matmul import held_rate  # noqa: E402
from clustereval.phases.matmul import MatmulPhase  # noqa: E402
from clustereval.phases.settings import PROFILES, GpuSettings, gpu_settings  # noqa: E402
from clustereval.records import to_dict  # noqa: E402
from clustereval.records.compute import MatmulRecord  # noqa: E402

MSMF_TOLERANCE = 0.01
_HEADLINE = re.compile(r"^(MAMF|MSMF) \(max (?:achievable|sustainable),[^)]*\):\s+([\d.]+) TFLOPS @ (\d+)x(\d+)x(\d+)"
                       r" \(MxNxK\)(?:\s+(\d+)W)?(?:\s+(\d+)MHz)?")


@dataclass
class FinderFigure:
    tflops: float
    shape: tuple[int, int, int]
    power_w: float | None = None
    sm_mhz: float | None = None


@dataclass
class FinderResult:
    mamf: FinderFigure | None = None
    msmf: FinderFigure | None = None
    shapes_tried: int = 0
    elapsed_s: float = 0.0  # the finder's own "Elapsed time"
    version: str = ""


def parse_finder(text: str) -> FinderResult:
    """The finder's closing lines: its MAMF and MSMF headlines, the shape count and its own elapsed time."""
    out = FinderResult()
    for line in text.splitlines():
        m = _HEADLINE.match(line.strip())
        if m:
            fig = FinderFigure(float(m.group(2)), (int(m.group(3)), int(m.group(4)), int(m.group(5))),
                               float(m.group(6)) if m.group(6) else None, float(m.group(7)) if m.group(7) else None)
            if m.group(1) == "MAMF":
                out.mamf = fig
            else:
                out.msmf = fig
        elif line.startswith("Tried ") and " shapes" in line:
            out.shapes_tried = int(line.split()[1])
        elif line.startswith("Elapsed time:"):
            h, mi, s = (int(v) for v in line.split(":", 1)[1].strip().split(":"))
            out.elapsed_s = 3600.0 * h + 60.0 * mi + s
        elif line.strip().startswith("- benchmark version:"):
            out.version = line.split(":", 1)[1].strip()
    return out


def run_phase(out: Path, smoke: bool) -> tuple[MatmulRecord, float]:
    settings = (GpuSettings(device="cpu", cpu_gpus=1, settle_s=0.05, sustain_s=0.1) if smoke
                else gpu_settings(PROFILES["quick"]))
    scratch = Path(tempfile.mkdtemp(prefix="clustereval-vs-"))
    run_root = Path(tempfile.mkdtemp(prefix="clustereval-vs-run-"))
    try:
        ctx = context(run_root, scratch)
        t0 = time.monotonic()
        rec: MatmulRecord = MatmulPhase(settings).run(ctx)
        wall = round(time.monotonic() - t0, 1)
        logs = sorted(ctx.store.raw_dir.rglob("gpu*-search.log"))
        if logs:
            shutil.copyfile(logs[0], out / "search.log")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(run_root, ignore_errors=True)
    return rec, wall


def run_finder(out: Path, finder: Path) -> tuple[FinderResult, float, int]:
    log = out / "finder.txt"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(finder), "--search", "auto", "--dtype", "bfloat16",
                           "--output_file", str(log), "--no-verbose"], capture_output=True, text=True)
    wall = round(time.monotonic() - t0, 1)
    text = log.read_text() if log.exists() else ""
    if proc.returncode != 0:
        log.write_text(text + "\n--- stderr ---\n" + proc.stderr[-4000:])
    return parse_finder(text), wall, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--finder", type=Path, help="the finder's mamf-finder.py (benchmark version 4)")
    ap.add_argument("--smoke", action="store_true", help="CPU stand-in, our side only, short holds")
    ap.add_argument("--hold-s", type=float, default=60.0, help="the first hold of each shape")
    ap.add_argument("--hold2-s", type=float, default=45.0, help="the second hold of each shape")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    device = "cpu" if args.smoke else "cuda"
    holds_s = (min(args.hold_s, 0.5), min(args.hold2_s, 0.4)) if args.smoke else (args.hold_s, args.hold2_s)
    import torch

    report: dict[str, Any] = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                              "device": device, "torch": torch.__version__, "cuda": torch.version.cuda or "",
                              "gpu": smi("name"), "driver": smi("driver_version"), "power_limit": smi("power.limit"),
                              "holds_s": list(holds_s)}
    print("our matmul phase (quick profile)", flush=True)
    rec, report["phase_wall_s"] = run_phase(out, args.smoke)
    report["record"] = to_dict(rec)
    node = rec.nodes[0] if rec.nodes else None
    search = node.search if node else None
    if search is not None:
        (out / "search.json").write_text(json.dumps(to_dict(search), separators=(",", ":")) + "\n")
    finder = FinderResult()
    if args.finder:
        print("the finder, --search auto", flush=True)
        finder, report["finder_wall_s"], report["finder_rc"] = run_finder(out, args.finder)
        report["finder"] = to_dict(finder)
    held: list[dict[str, Any]] = []
    ours = (search.msmf.shape, search.msmf.layout) if search and search.msmf else None
    theirs = (finder.msmf.shape, "tn") if finder.msmf else None
    loop = HeldLoop(device)
    for seconds in holds_s:
        for who, v in (("ours", ours), ("finder", theirs)):
            if v is None:
                continue
            print(f"holding {who} {v[0]} {v[1]} for {seconds:g} s", flush=True)
            rows = loop.run(v[0], seconds, layout=v[1])
            held.append({"who": who, "shape": list(v[0]), "layout": v[1], "seconds": seconds,
                         "held": held_summary(rows, seconds), "rows": rows})
    (out / "held.json").write_text(json.dumps(held, separators=(",", ":")) + "\n")
    report["held"] = [{k: v for k, v in h.items() if k != "rows"} for h in held]
    report["total_wall_s"] = round(time.monotonic() - started, 1)
    md = render(report, rec, finder, held)
    (out / "vs_finder.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "vs_finder.md").write_text(md)
    print(md, flush=True)
    return 0


def _shape(shape: Any) -> str:
    return "×".join(str(v) for v in shape)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render(report: dict[str, Any], rec: MatmulRecord, finder: FinderResult, held: list[dict[str, Any]]) -> str:
    lines = [f"Date (UTC) {report['date_utc']}; {report['gpu'] or 'CPU'} ({report['power_limit']}); driver "
             f"{report['driver']}; torch {report['torch']} (CUDA {report['cuda']}); benchmark wall "
             f"{report['total_wall_s']:.0f} s.", ""]
    node = rec.nodes[0] if rec.nodes else None
    s = node.search if node else None
    if node is None or s is None or s.mamf is None:
        return "\n".join(lines + ["Our matmul phase produced no search: " + "; ".join(g.kind for g in rec.gaps)]) + "\n"
    lines += ["| our stage | timings | seconds |", "| --- | ---: | ---: |"]
    lines += [f"| {st.name} | {st.num_timings} | {st.seconds:.1f} |" for st in s.stages]
    lines += [f"| GPU0's worker, start-up included | | {node.search_wall_s:.1f} |",
              f"| the whole matmul phase | | {report['phase_wall_s']:.1f} |", ""]
    m = s.mamf
    rows = ["| figure | ours | finder |", "| --- | --- | --- |",
            f"| MAMF peak iteration | {m.max_tflops:.1f} @ {_shape(m.shape)} {m.layout}, {m.power_w or 0:.0f} W / "
            f"{m.sm_mhz or 0:.0f} MHz | " + (f"{finder.mamf.tflops:.1f} @ {_shape(finder.mamf.shape)} tn, "
                                            f"{finder.mamf.power_w or 0:.0f} W / {finder.mamf.sm_mhz or 0:.0f} MHz |"
                                            if finder.mamf else "— |"),
            f"| MAMF mean of the confirm | {m.mean_tflops:.1f} ({m.iterations} iterations) | — |"]
    if s.msmf is not None:
        x = s.msmf
        rows.append(f"| MSMF reported | {held_rate(x):.1f} @ {_shape(x.shape)} {x.layout}, {x.power_w or 0:.0f} W / "
                    f"{x.sm_mhz or 0:.0f} MHz / {x.temp_c or 0:.0f} °C, drift {100 * x.drift_frac:+.2f}% | "
                    + (f"{finder.msmf.tflops:.1f} @ {_shape(finder.msmf.shape)} tn |" if finder.msmf else "— |"))
    rows.append(f"| shapes timed | {s.shapes_tried} | {finder.shapes_tried or '—'} |")
    rows.append(f"| wall | {report['phase_wall_s']:.1f} s (the phase) | "
                + (f"{report['finder_wall_s']:.1f} s (the process; its own elapsed {finder.elapsed_s:.0f} s) |"
                   if "finder_wall_s" in report else "— |"))
    lines += rows + ["", "| hold | shape | s | median of the last half TFLOPS | W / MHz / °C |",
                     "| --- | --- | ---: | ---: | --- |"]
    for h in held:
        hs = h["held"]
        lines.append(f"| {h['who']} | {_shape(h['shape'])} {h['layout']} | {h['seconds']:g} | "
                     f"{hs['median_last_half_tflops']} | {hs['power_w']} / {hs['sm_mhz']} / {hs['temp_c']} |")
    checks = ["", "| check | measured | target | |", "| --- | --- | --- | --- |"]
    if finder.mamf:
        checks.append(f"| MAMF, peak iteration | {m.max_tflops:.1f} vs {finder.mamf.tflops:.1f} | ours ≥ finder's | "
                      f"{_verdict(m.max_tflops >= finder.mamf.tflops)} |")
    ours = [h for h in held if h["who"] == "ours"]
    theirs = [h for h in held if h["who"] == "finder"]
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        va, vb = a["held"]["median_last_half_tflops"], b["held"]["median_last_half_tflops"]
        if va and vb:
            checks.append(f"| held pair {i + 1} ({a['seconds']:g} s) | {va:.1f} vs {vb:.1f} ({100 * (va - vb) / vb:+.2f}%) "
                          f"| ours ≥ finder's | {_verdict(va >= vb)} |")
    if s.msmf is not None and ours and ours[0]["held"]["median_last_half_tflops"]:
        ref = ours[0]["held"]["median_last_half_tflops"]
        gap = (held_rate(s.msmf) - ref) / ref
        checks.append(f"| our MSMF vs its own {ours[0]['seconds']:g}-s hold | {held_rate(s.msmf):.1f} vs {ref:.1f} "
                      f"({100 * gap:+.2f}%) | within ±1% | {_verdict(abs(gap) <= MSMF_TOLERANCE)} |")
    if "finder_wall_s" in report:
        checks.append(f"| wall | {report['phase_wall_s']:.1f} s vs {report['finder_wall_s']:.1f} s | ours ≤ finder's | "
                      f"{_verdict(report['phase_wall_s'] <= report['finder_wall_s'])} |")
    lines += checks
    if rec.gaps:
        lines += ["", "Gaps: " + "; ".join(f"{g.kind} {g.facts}" for g in rec.gaps)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
