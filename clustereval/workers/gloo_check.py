"""CPU-only rendezvous check: one process per node, ``init_process_group("gloo")`` and an
all-reduce whose result is checked. Isolates rendezvous and TCP from NCCL and GPUs.

Started on every node by torchrun (``python -m torch.distributed.run``), one rank a node;
prints one JSON line: ``{"event": "gloo", "rank": ..., "ok": true, ...}``.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import os
import socket
import struct
import sys

from clustereval.workers.distcommon import emit, run_main

SIOCGIFADDR = 0x8915


def interface_of(address: str) -> str:
    """The network interface holding ``address`` on this machine ('' when none does)."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == address:
                return name
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--local-addr", default="", help="this node's routable address (gloo binds there)")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.local_addr and "GLOO_SOCKET_IFNAME" not in os.environ:
        # gloo binds to whatever the hostname resolves to; with 127.0.1.1 peers could never connect
        iface = interface_of(args.local_addr)
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([float(rank + 1)], dtype=torch.float64)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    got = float(tensor.item())
    emit("gloo", rank=rank, world_size=world, hostname=socket.gethostname(), sum=got, expected=expected,
         ok=got == expected, gloo_ifname=os.environ.get("GLOO_SOCKET_IFNAME", ""), torch=torch.__version__,
         executable=sys.executable)
    dist.destroy_process_group()
    return 0 if got == expected else 1


if __name__ == "__main__":
    run_main(main)
