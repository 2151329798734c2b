"""Xid and SXid lines from the kernel log (``dmesg`` / ``journalctl -k``). Pure.

A kernel line looks like ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen
off the bus.``; NVSwitch errors print ``SXid`` instead. What each number means lives in
``analysis/xid.py``.
"""

from __future__ import annotations

import re

from clustereval.probes.snapshot_gpu import normalize_bus_id
from clustereval.records.snapshot import XidEvent

_XID = re.compile(r"\b(S?Xid)\b[^(]*\((PCI:[0-9A-Fa-f:.]+|[^)]*)\):?\s*(\d+)\s*,?\s*(.*)$")


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Every Xid / SXid line, in log order; other lines are ignored."""
    events: list[XidEvent] = []
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        kind, where, number, rest = m.groups()
        bus = normalize_bus_id(where) if where.lower().startswith("pci:") else where.strip()
        events.append(XidEvent(xid=int(number), bus_id=bus, detail=rest.strip(),
                               nvswitch=kind.startswith("S"), line=line.strip()))
    return events
