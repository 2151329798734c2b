"""Node addresses and the hostfile: what is an IP address or a host name, which one is this
machine, and the MPI / DeepSpeed hostfile read into ``HostEntry`` lines (every problem with its
``file:line``)."""

from __future__ import annotations

import ipaddress
import re

from clustereval.config import HostEntry
from clustereval.errors import Problem

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _bad_chars(text: str) -> str:
    """The unsafe characters in ``text``, described for a message ("';'", "a space")."""
    seen: list[str] = []
    for ch in text:
        if ch.isalnum() or ch in "._/+@%=,:~-":
            continue
        desc = {" ": "a space", "\t": "a tab", "\n": "a line break"}.get(ch, f"'{ch}'")
        if desc not in seen:
            seen.append(desc)
    return ", ".join(seen) if seen else "a leading character that is not a letter or digit"


def valid_address(text: str) -> bool:
    """An IP address or a host name (no shell metacharacters)."""
    return address_problem(text) is None


def address_problem(text: str) -> str | None:
    """Why ``text`` is neither an IP address nor a host name; None when it is one of them.

    Digits and dots alone are meant as an IPv4 address (no host name is all numbers), so
    ``999.1.1.1`` is refused instead of being looked up as a name."""
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", text):
        parts = text.split(".")
        if len(parts) != 4 or not all(parts):
            return f"{text} is not a valid IPv4 address: it has {len([p for p in parts if p])} numbers, not 4"
        big = next((p for p in parts if int(p) > 255), None)
        if big is not None:
            return f"{text} is not a valid IPv4 address: {int(big)} is more than 255"
        return f"{text} is not a valid IPv4 address"
    if ":" in text and re.fullmatch(r"[0-9A-Fa-f:.]+", text):
        return f"{text} is not a valid IPv6 address"
    if not _NODE_RE.match(text) or len(text) > 253:
        return f"{text!r} contains {_bad_chars(text)}"
    return None


_IP_HINT = "an IPv4 address is four numbers from 0 to 255, e.g. 10.0.0.1"


def parse_hostfile(text: str, display: str) -> tuple[list[HostEntry], list[Problem]]:
    """MPI (``10.0.0.1``) or DeepSpeed (``10.0.0.1 slots=8``) lines; ``#`` comments, blank lines."""
    hosts: list[HostEntry] = []
    problems: list[Problem] = []
    first_line: dict[str, int] = {}
    form = "one peer address per line: 10.0.0.1, or 10.0.0.1 slots=8"
    for num, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{display}:{num}"
        words = line.split()
        address, rest = words[0], words[1:]
        why = address_problem(address)
        if why is not None:
            if "contains" not in why:  # meant as an IP address
                problems.append(Problem(where, why, _IP_HINT))
            else:
                problems.append(Problem(where, f"cannot read {line!r} as a peer address ({why})", form))
            continue
        slots: int | None = None
        bad = False
        for word in rest:
            m = re.fullmatch(r"(slots|max_slots|max-slots)=(\d+)", word)
            if not m:
                problems.append(Problem(where, f"cannot read {line!r}: {word!r} is not slots=N", form))
                bad = True
                break
            if m.group(1) == "slots":
                slots = int(m.group(2))
                if slots < 1:
                    problems.append(Problem(where, f"slots={slots}: a node needs at least one slot",
                                            "slots is the number of GPUs on that node, e.g. slots=8"))
                    bad = True
        if bad:
            continue
        if address in first_line:
            problems.append(Problem(where, f"{address} is listed twice (first at line {first_line[address]})",
                                    "list each node once; the line order is the node order (node0, node1, ...)"))
            continue
        first_line[address] = num
        hosts.append(HostEntry(address=address, slots=slots, line=num))
    if not hosts and not problems:
        problems.append(Problem(f"{display}:1", "the hostfile has no peer addresses", form))
    return hosts, problems


def this_host() -> str:
    import socket

    return socket.gethostname().split(".")[0] or "localhost"


def is_this_host(name: str) -> bool:
    """Whether ``name`` (a host name or an IP address) is the machine clustereval runs on.

    Names are compared with this host's names (no DNS lookup, which can hang on an isolated
    machine); an address is this host's when a socket can be bound to it."""
    import socket

    names = {"localhost", this_host().lower(), socket.gethostname().lower()}
    if name.lower() in names:
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((str(ip), 0))
        return True
    except OSError:
        return False
