"""Connectivity: every rank joins the process group and completes one checked all-reduce.

Run under torchrun, one process per GPU (NCCL) or N processes per node (gloo on CPU). Prints a
``hello`` line per rank (host, local rank, device, NUMA affinity, interpreter, torch, NCCL), then an
``allreduce`` line per rank with the checked result. ``--extra-bytes`` adds a few larger all-reduces
so an ``NCCL_DEBUG=INFO`` pass also shows the connections bigger payloads use.
"""

from __future__ import annotations

import argparse
import time

from clustereval.workers.distcommon import emit, finish, init_group, run_main, start_rank


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clustereval.workers.connectivity")
    ap.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    ap.add_argument("--extra-bytes", type=int, action="append", default=[],
                    help="also all-reduce this many bytes (repeatable)")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    env, backend, device = start_rank(args.backend)
    t0 = time.perf_counter()
    init_group(backend, device, args.timeout_s)
    n = dist.get_world_size()
    value = torch.full((1024,), float(dist.get_rank() + 1), dtype=torch.float32, device=device)
    dist.all_reduce(value)
    expected = n * (n + 1) / 2
    lo, hi = torch.aminmax(value)
    ok = float(lo) == expected and float(hi) == expected
    for nbytes in args.extra_bytes:
        extra = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        dist.all_reduce(extra)
        lo, hi = torch.aminmax(extra)
        ok = ok and float(lo) == n and float(hi) == n
        del extra
    if device.type == "cuda":
        torch.cuda.synchronize()
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    emit("allreduce", rank=env.rank, ok=ok, all_ok=bool(int(flag.item())), expected=expected,
         got=float(value[0]), world_size=n, seconds=round(time.perf_counter() - t0, 3))
    finish()
    return 0 if ok else 3


if __name__ == "__main__":
    run_main(main)
