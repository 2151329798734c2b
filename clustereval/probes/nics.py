"""RDMA adapters from three sources: ``ibstat``, ``rdma link`` and ``/sys/class/infiniband``. Pure.

On AWS EFA ``ibstat`` often prints nothing; ``rdma link`` and sysfs still list the ``rdmap*``
devices, so the three are merged by device name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustereval.probes._text import body
from clustereval.records.environment import NicInfo

# -- ibstat ------------------------------------------------------------------------------


@dataclass
class IbPort:
    port: int
    state: str = ""
    physical_state: str = ""
    rate_gb_s: float = 0.0
    link_layer: str = ""


@dataclass
class IbCa:
    name: str
    ca_type: str = ""
    firmware: str = ""
    ports: list[IbPort] = field(default_factory=list)


def ibstat_argv() -> list[str]:
    return ["ibstat"]


def parse_ibstat(text: str) -> list[IbCa]:
    cas: list[IbCa] = []
    port: IbPort | None = None
    for line in body(text).splitlines():
        m = re.match(r"^CA '([^']+)'", line.strip())
        if m:
            cas.append(IbCa(name=m.group(1)))
            port = None
            continue
        if not cas:
            continue
        m = re.match(r"^Port (\d+):\s*$", line.strip())
        if m:
            port = IbPort(port=int(m.group(1)))
            cas[-1].ports.append(port)
            continue
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if port is None:
            if key == "CA type":
                cas[-1].ca_type = value
            elif key == "Firmware version":
                cas[-1].firmware = value
        elif key == "State":
            port.state = value
        elif key == "Physical state":
            port.physical_state = value
        elif key == "Rate":
            port.rate_gb_s = float(m.group()) if (m := re.match(r"[\d.]+", value)) else 0.0
        elif key == "Link layer":
            port.link_layer = value
    return cas


# -- rdma link ---------------------------------------------------------------------------


@dataclass
class RdmaLink:
    device: str
    port: int
    state: str = ""
    physical_state: str = ""
    netdev: str = ""


def rdma_argv() -> list[str]:
    return ["rdma", "link"]


def parse_rdma_link(text: str) -> list[RdmaLink]:
    out = []
    for line in body(text).splitlines():
        m = re.match(r"^(?:link\s+)?(\S+)/(\d+)\s+(.*)$", line.strip())
        if not m:
            continue
        words = m.group(3).split()
        attrs = dict(zip(words[::2], words[1::2], strict=False))
        out.append(RdmaLink(device=m.group(1), port=int(m.group(2)), state=attrs.get("state", ""),
                            physical_state=attrs.get("physical_state", ""), netdev=attrs.get("netdev", "")))
    return out


# -- /sys/class/infiniband/*/ports/*/{rate,state,link_layer} ----------------------------

SYSFS_SCRIPT = ("for f in /sys/class/infiniband/*/ports/*/rate /sys/class/infiniband/*/ports/*/state "
                "/sys/class/infiniband/*/ports/*/link_layer; do [ -r \"$f\" ] && printf '%s:%s\\n' \"$f\" \"$(cat \"$f\")\"; "
                "done; true")


def sysfs_argv() -> list[str]:
    return ["sh", "-c", SYSFS_SCRIPT]


@dataclass
class SysfsPort:
    device: str
    port: int
    rate_gb_s: float = 0.0
    rate_text: str = ""  # "400 Gb/sec (4X NDR)"
    state: str = ""
    link_layer: str = ""


def parse_sysfs(text: str) -> list[SysfsPort]:
    ports: dict[tuple[str, int], SysfsPort] = {}
    for line in body(text).splitlines():
        m = re.match(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/(rate|state|link_layer):\s*(.*)$", line.strip())
        if not m:
            continue
        key = (m.group(1), int(m.group(2)))
        p = ports.setdefault(key, SysfsPort(device=key[0], port=key[1]))
        value = m.group(4).strip()
        if m.group(3) == "rate":
            p.rate_text = value
            r = re.match(r"([\d.]+)\s*Gb/sec", value)
            p.rate_gb_s = float(r.group(1)) if r else 0.0
        elif m.group(3) == "state":
            p.state = value.split(":", 1)[-1].strip()  # "4: ACTIVE"
        else:
            p.link_layer = value
    return list(ports.values())


# -- merged ------------------------------------------------------------------------------


def _kind(device: str, link_layer: str) -> str:
    if device.startswith(("rdmap", "efa")):
        return "efa"
    if link_layer.lower() == "ethernet":
        return "roce"
    if link_layer.lower() == "infiniband" or device.startswith(("mlx", "ib")):
        return "infiniband"
    return "ethernet" if link_layer else "infiniband"


def merge(ibstat: list[IbCa], rdma: list[RdmaLink], sysfs: list[SysfsPort]) -> list[NicInfo]:
    """One ``NicInfo`` per (device, port), facts from whichever source has them."""
    nics: dict[tuple[str, int], NicInfo] = {}

    def get(device: str, port: int) -> NicInfo:
        return nics.setdefault((device, port), NicInfo(name=device, kind="", port=port))

    for ca in ibstat:
        for p in ca.ports:
            nic = get(ca.name, p.port)
            nic.ca_type = ca.ca_type
            nic.state = nic.state or p.state.upper()
            nic.rate_gb_s = nic.rate_gb_s or p.rate_gb_s
            nic.kind = _kind(ca.name, p.link_layer)
    for s in sysfs:
        nic = get(s.device, s.port)
        nic.rate_gb_s = s.rate_gb_s or nic.rate_gb_s
        nic.state = s.state.upper() or nic.state
        nic.kind = nic.kind or _kind(s.device, s.link_layer)
    for r in rdma:
        nic = get(r.device, r.port)
        nic.state = nic.state or r.state.upper()
        nic.netdev = r.netdev
        nic.kind = nic.kind or _kind(r.device, "")
    return sorted(nics.values(), key=lambda n: (_natural(n.name), n.port))


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
