"""Parse ``NCCL_DEBUG=INFO`` output: NCCL's version, the transports its channels use, the network
plugin, and whether NVLS (NVLink SHARP) was available and set up.

Lines look like ``host:pid:tid [dev] NCCL INFO <message>``, possibly behind a launcher prefix.
"""

from __future__ import annotations

import re

from clustereval.records.network import NcclDebugInfo

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+(?:\+\S+)?)")
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_CHANNEL_VIA = re.compile(r"NCCL INFO Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\](?: \[\w+\])? via (\S+)")
_NVLS_AVAIL = re.compile(r"NVLS multicast support is (not )?available")
_NVLS_ENV = re.compile(r"NCCL_NVLS_ENABLE set by environment to (\S+?)\.?\s*$")
# NVLS buffers or connections being set up: only happens when NCCL uses the NVLS algorithm
_NVLS_SETUP = re.compile(r"NVLS comm 0x|Connected NVLS|NVLS (?:Head|head)|via NVLS|nvlsRanks|"
                         r"Algo NVLS|algorithm NVLS|NVLS channels?: [1-9]")
_NVLS_ZERO = re.compile(r"(?:NVLS_NCHANNELS|nvlsChannels|NVLS channels?:?) 0\b")


def _transport_name(via: str) -> str:
    """``P2P/CUMEM/read`` -> ``P2P/CUMEM``; ``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``SHM/direct/direct`` -> ``SHM``."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    if parts[0] == "P2P" and len(parts) > 1:
        return f"P2P/{parts[1]}"
    return parts[0]


def parse_nccl_info(text: str, scope: str = "") -> NcclDebugInfo:
    info = NcclDebugInfo(scope=scope)
    transports: list[str] = []
    available: bool | None = None
    used = False
    for line in text.splitlines():
        if not info.version:
            m = _VERSION.search(line)
            if m:
                info.version = m.group(1)
        if "NCCL INFO" not in line:
            continue
        m = _CHANNEL_VIA.search(line)
        if m:
            name = _transport_name(m.group(1))
            if name not in transports:
                transports.append(name)
            continue
        m = _NETWORK.search(line)
        if m and not info.network:
            info.network = m.group(1).strip()
            continue
        m = _NVLS_AVAIL.search(line)
        if m:
            here = m.group(1) is None
            available = here if available is None else (available or here)
            continue
        m = _NVLS_ENV.search(line)
        if m:
            info.nvls_env = m.group(1)
            continue
        if _NVLS_SETUP.search(line) and not _NVLS_ZERO.search(line):
            used = True
    info.transports = transports
    info.nvls_available = available
    if used:
        info.nvls_used = True
    elif available is False or info.nvls_env == "0":
        info.nvls_used = False
    elif transports:
        info.nvls_used = False  # channels connected and no NVLS buffer was set up
    return info


def describe_path(info: NcclDebugInfo) -> str:
    """Plain words for the report: ``NVLink peer-to-peer (P2P/CUMEM)``, ``InfiniBand (NET/IB)``, ..."""
    words = {"P2P": "NVLink or PCIe peer-to-peer", "SHM": "shared host memory", "NET/IB": "InfiniBand or RoCE verbs",
             "NET/Socket": "TCP sockets", "NET/Libfabric": "libfabric (OFI)", "NET/OFI": "libfabric (OFI)",
             "NET/AWS Libfabric": "libfabric (OFI)", "NET/IBext_v8": "InfiniBand (NCCL RDMA plugin)"}
    out = []
    for t in info.transports:
        key = t if t in words else t.split("/")[0]
        out.append(f"{words.get(key, t)} (`{t}`)")
    return ", ".join(out)
