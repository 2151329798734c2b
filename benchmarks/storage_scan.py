"""Our storage scan against plain fio, in one go, on this machine's local disk.

1. clustereval's storage phase scans PATH (default /tmp): six fio runs, 16 KiB / 1 MiB / 1 GiB x
   read / write, 16 jobs, 4 KiB blocks, libaio, O_DIRECT, with a short runtime (default 5 s of
   timed IO per run instead of the published 3 min, so the whole comparison stays under 3 minutes).
2. The same six runs as plain ``fio`` command lines written out here, not built by clustereval,
   into a folder beside the scan's, parsed with ``json`` directly.
3. A side-by-side table (bandwidth, IOPS, latency, the difference in %) and the scan's wall time,
   printed and written to OUT/storage-scan.md and OUT/storage-scan.json; the scan's run folder
   (records, raw fio JSON, layout) is OUT/reports/.

Everything written on PATH lives in the run's scratch folder and is cleared at the end.

    python benchmarks/storage_scan.py --out OUT [--path /tmp] [--runtime 5] [--fio /path/to/fio]
    python benchmarks/storage_scan.py --out OUT --smoke     # seconds: 1 s runs, files scaled down

``--fio`` names the fio binary (default: ``fio`` on PATH); a private build with its own
``libaio.so.1`` needs ``LD_LIBRARY_PATH`` pointing at that library's folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustereval.config import Config  # noqa: E402
from clustereval.phases.base import RunContext  # noqa: E402
from clustereval.phases.scratch import scratch_for  # noqa: E402
from clustereval.phases.settings import StorageSettings  # noqa: E402
from clustereval.phases.storage import StoragePhase  # noqa: E402
from clustereval.records import dumps  # noqa: E402
from clustereval.store import RunState, RunStore, utc_now_iso, utc_stamp  # noqa: E402
from clustereval.transport.base import Node  # noqa: E402
from clustereval.transport.local import LocalTransport  # noqa: E402

PUBLISHED = (("16k", 16 * 2**10), ("1m", 2**20), ("1g", 2**30))
SMOKE = (("16k", 16 * 2**10), ("64k", 64 * 2**10), ("256k", 256 * 2**10))


def label(num_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes // size} {unit}"
    return f"{num_bytes} B"


def plain_fio(fio: str, directory: str, spelled: str, rw: str, runtime_s: int, ramp_s: int) -> dict:
    """One run of the published parameters, spelled out by hand."""
    argv = [fio, "--ioengine=libaio", f"--filesize={spelled}", f"--ramp_time={ramp_s}s", "--time_based",
            f"--runtime={runtime_s}s", "--numjobs=16", "--direct=1", "--verify=0", "--randrepeat=0",
            "--group_reporting", "--unlink=1", f"--directory={directory}", f"--name={rw}", "--blocksize=4k",
            "--iodepth=64", f"--readwrite={rw}", "--output-format=json"]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=runtime_s + ramp_s + 1800)
    if proc.returncode != 0:
        raise SystemExit(f"plain fio failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    side = doc["jobs"][0][rw]
    return {"argv": argv, "seconds": round(time.monotonic() - t0, 1), "bw_mib_s": side["bw_bytes"] / 2**20,
            "iops": side["iops"], "latency_msec": side["lat_ns"]["mean"] / 1e6, "json": doc}


def pct(ours: float, plain: float) -> str:
    return f"{(ours - plain) / plain * 100:+.1f}%" if plain else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the results (created)")
    ap.add_argument("--path", default="/tmp", help="the local-disk folder to scan (default /tmp)")
    ap.add_argument("--runtime", type=int, default=5, help="seconds of timed IO per run (published: 180)")
    ap.add_argument("--ramp", type=int, default=2, help="seconds of ramp-up per run (published: 2)")
    ap.add_argument("--fio", default="fio", help="the fio binary (default: fio on PATH)")
    ap.add_argument("--smoke", action="store_true", help="1 s runs with the files scaled down: seconds, any machine")
    args = ap.parse_args(argv)
    sizes = SMOKE if args.smoke else PUBLISHED
    runtime, ramp = (1, 0) if args.smoke else (args.runtime, args.ramp)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    store = RunStore.create(out / "reports", "storage-scan")
    store.save_state(RunState(name="storage-scan", stamp=utc_stamp(), profile="benchmark", started_utc=utc_now_iso()))
    config = Config(name="storage-scan", nodes=("here",), local_scratch=args.path)
    node = Node("here", "here")
    progress_log = []

    def progress(phase: str, who: str, message: str, eta: float | None) -> None:
        line = f"[{phase}] {message}" + (f" ({eta:.0f} s left)" if eta else "")
        progress_log.append(line)
        print(line, flush=True)

    ctx = RunContext(config=config, transport=LocalTransport(), nodes=[node], store=store, progress=progress)
    phase = StoragePhase(StorageSettings(fio_runtime_s=runtime, fio_ramp_s=ramp,
                                         file_sizes=tuple(size for _, size in sizes), fio=args.fio))
    results: dict = {"path": args.path, "runtime_s": runtime, "ramp_s": ramp, "smoke": args.smoke}
    try:
        t0 = time.monotonic()
        rec = phase.run(ctx)
        results["scan_wall_s"] = round(time.monotonic() - t0, 1)
        store.save_record("storage", rec)
        if rec.local is None or not rec.local.complete:
            print("the scan did not complete:", *(g.text for g in rec.gaps), sep="\n  ")
            return 1
        results["fio_version"] = rec.fio_version
        area = scratch_for(ctx).ensure(node, args.path)
        plain_dir = os.path.join(area.path, "plain-fio")
        os.makedirs(plain_dir, exist_ok=True)
        rows = []
        t1 = time.monotonic()
        for spelled, size in sizes:
            for rw in ("read", "write"):
                print(f"[plain fio] {label(size)} {rw}", flush=True)
                plain = plain_fio(args.fio, plain_dir, spelled, rw, runtime, ramp)
                (out / f"plain-fio-{spelled}-{rw}.json").write_text(json.dumps(plain.pop("json"), indent=1))
                ours = rec.local.cell(size, rw)
                rows.append({"size": label(size), "rw": rw, "ours_bw_mib_s": ours.bw_mib_s,
                             "plain_bw_mib_s": plain["bw_mib_s"], "ours_iops": ours.iops, "plain_iops": plain["iops"],
                             "ours_latency_msec": ours.latency_msec, "plain_latency_msec": plain["latency_msec"],
                             "ours_run_s": ours.seconds, "plain_run_s": plain["seconds"]})
        results["plain_wall_s"] = round(time.monotonic() - t1, 1)
        results["rows"] = rows
    finally:
        moves = scratch_for(ctx).cleanup([node])
        results["scratch"] = [json.loads(dumps(m)) for m in moves]
    lines = [f"Local disk `{args.path}`, {results.get('fio_version', '')}, {runtime} s of timed IO per run after "
             f"{ramp} s ramp-up{' (smoke: files scaled down)' if args.smoke else ''}.", "",
             "| size | rw | ours bw (MiBps) | plain bw (MiBps) | Δ bw | ours IOPS (M) | plain IOPS (M) | "
             "ours latency (msec) | plain latency (msec) |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["rows"]:
        lines.append(f"| {r['size']} | {r['rw']} | {r['ours_bw_mib_s']:,.1f} | {r['plain_bw_mib_s']:,.1f} | "
                     f"{pct(r['ours_bw_mib_s'], r['plain_bw_mib_s'])} | {r['ours_iops'] / 1e6:.3f} | "
                     f"{r['plain_iops'] / 1e6:.3f} | {r['ours_latency_msec']:.2f} | {r['plain_latency_msec']:.2f} |"
                     .replace(",", "_"))
    lines += ["", f"Our scan (six runs, inventory, scratch checks) took {results['scan_wall_s']} s wall; the six "
                  f"plain fio runs took {results['plain_wall_s']} s."]
    text = "\n".join(lines) + "\n"
    print(text)
    (out / "storage-scan.md").write_text(text)
    (out / "storage-scan.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "progress.log").write_text("\n".join(progress_log) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
