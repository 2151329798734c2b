"""A stand-in for ``python -m clustereval.workers.matmul`` that speaks its JSON-lines protocol.

Used only for faults a CPU machine cannot produce for real: a GPU that hangs or crashes, a sibling
whose matmul stops (seen through NVML), a GPU that is slow in every pass. Behaviour comes from
environment variables, state (per-GPU call counters) from files under ``FAKE_STATE``:

- ``FAKE_TFLOPS``: ``gpu:v1/v2/v3,...`` pinned TFLOPS per call (the last value repeats); default 100
- ``FAKE_IDLE``: ``gpu:n,...`` the first n pinned calls of that GPU report an idle sibling
- ``FAKE_LEMON``: ``gpu:ok|error|crash|hang,...`` (default ok)
- ``FAKE_TEMP``: ``gpu:°C,...`` the temperature a pinned (or the search's) MSMF reports; default 60
- ``FAKE_UNREAD``: ``gpu:sibling,...`` that GPU's pinned measurement could not read that sibling
- ``FAKE_PINNED_DEAD``: ``gpu:1,...`` every pinned measurement of that GPU fails (a CUDA error): a dead GPU;
  each attempt is counted in ``FAKE_STATE/pinned-<gpu>``
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def table(name):
    out = {}
    for part in filter(None, os.environ.get(name, "").split(",")):
        key, _, value = part.partition(":")
        out[int(key)] = value
    return out


def bump(kind, gpu):
    state = Path(os.environ["FAKE_STATE"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / f"{kind}-{gpu}"
    n = int(path.read_text()) if path.exists() else 0
    path.write_text(str(n + 1))
    return n


def timing(m, n, k, tflops, stage, idle=()):
    return {"m": m, "n": n, "k": k, "stage": stage, "mean_tflops": tflops, "median_tflops": tflops,
            "max_tflops": tflops, "iterations": 10, "kernel_s": 0.1, "wall_s": 0.2, "power_w": 699.0,
            "power_max_w": 701.0, "sm_mhz": 1500.0, "sm_mhz_low": 1480.0, "sm_mhz_high": 1520.0,
            "num_samples": 50, "label": "", "why": "", "idle_siblings": list(idle), "siblings_sampled": True,
            "temp_c": 60.0, "window_s": 10.0, "soak_s": 5.0, "settled": True}


def main(argv):
    if argv[:1] == ["-m"]:
        argv = argv[2:]
    mode, rest = argv[0], argv[1:]
    ap = argparse.ArgumentParser()
    for flag in ("--device", "--dtype", "--gpu", "--gpus", "--shape", "--stop-file", "--siblings", "--grid",
                 "--settle-s", "--sustain-s", "--coarse-budget", "--max-seconds", "--size"):
        ap.add_argument(flag, default="")
    args, _ = ap.parse_known_args(rest)
    emit("hello", mode=mode, pid=os.getpid(), executable=sys.executable, torch="fake", device="cpu")
    if mode == "load":
        emit("running", gpu=int(args.gpu), pid=os.getpid())
        while not os.path.exists(args.stop_file):
            time.sleep(0.05)
        emit("stopped", gpu=int(args.gpu), reason="stop file")
        return 0
    if mode == "search":
        emit("gpu", gpu=int(args.gpu), name="Stand-in", sm_count=132, memory_gib=140.4, power_limit_w=700.0,
             boost_mhz=1980.0)
        t = timing(64, 64, 64, value(int(args.gpu)), "sustained")
        t["temp_c"] = float(table("FAKE_TEMP").get(int(args.gpu), "60"))
        summary = {"mode": "search", "grid": "fake", "shapes_tried": 12, "num_screened": 12, "num_confirmed": 2,
                   "num_hot": 1, "num_sustained": 1, "mamf": timing(32, 64, 64, 120.0, "burst"), "msmf": t,
                   "sustained": [dict(t, stage="hot"), t]}
        emit("result", mode="search", gpu=int(args.gpu), summary=summary)
        return 0
    if mode == "pinned":
        gpu = int(args.gpu)
        bump("pinned", gpu)
        if table("FAKE_PINNED_DEAD").get(gpu):
            print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
            return 1
        n = bump("idle", gpu)
        idle = [int(args.siblings.split(",")[0])] if n < int(table("FAKE_IDLE").get(gpu, "0")) else []
        t = timing(64, 64, 64, value(gpu), "sustained", idle)
        t["temp_c"] = float(table("FAKE_TEMP").get(gpu, "60"))
        unread = table("FAKE_UNREAD").get(gpu)
        if unread:
            t.update(siblings_unread=[int(unread)], siblings_sampled=False,
                     sibling_error=f"gpu{unread}: NVMLError_GpuIsLost: GPU is lost")
        emit("result", mode="pinned", gpu=gpu, timing=t)
        return 0
    if mode == "lemon":
        plan = table("FAKE_LEMON")
        for gpu in [int(g) for g in args.gpus.split(",")]:
            emit("begin", gpu=gpu)
            what = plan.get(gpu, "ok")
            if what == "error":
                emit("error", gpu=gpu, error="RuntimeError: CUDA error: an illegal memory access was encountered")
            elif what == "crash":
                return 134
            elif what == "hang":
                time.sleep(600)
            else:
                emit("lemon", gpu=gpu, sm_count=132, timing=timing(64, 64, 64, value(gpu), "lemon"))
        return 0
    return 2


def value(gpu):
    seq = table("FAKE_TFLOPS").get(gpu, "100").split("/")
    n = bump("tflops", gpu)
    return float(seq[min(n, len(seq) - 1)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
