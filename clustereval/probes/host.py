"""The small host facts: UTC date, short hostname, ``uname -a``, ``/etc/os-release``, ``/proc/meminfo``.

One tool per class-free section; each has ``build_argv`` and ``parse``. Pure.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from clustereval.probes._text import body

# -- date -u +%FT%TZ ---------------------------------------------------------------------


def date_argv() -> list[str]:
    return ["date", "-u", "+%FT%TZ"]


def parse_date(text: str) -> str:
    """``2026-11-30T16:43:23Z``; '' when the output holds no UTC timestamp."""
    m = re.search(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\b", body(text))
    return m.group() if m else ""


# -- hostname -s -------------------------------------------------------------------------


def hostname_argv() -> list[str]:
    return ["hostname", "-s"]


def parse_hostname(text: str) -> str:
    for line in body(text).splitlines():
        if line.strip():
            return line.strip().split()[0]
    return ""


# -- uname -a ----------------------------------------------------------------------------


@dataclass
class Uname:
    line: str = ""
    kernel: str = ""  # uname -r
    machine: str = ""  # x86_64 / aarch64


def uname_argv() -> list[str]:
    return ["uname", "-a"]


def parse_uname(text: str) -> Uname:
    for line in body(text).splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("Linux", "Darwin", "FreeBSD"):
            machine = next((p for p in parts if p in ("x86_64", "aarch64", "arm64", "ppc64le", "s390x")), "")
            return Uname(line=line.strip(), kernel=parts[2], machine=machine)
    return Uname()


# -- /etc/os-release ---------------------------------------------------------------------


def os_release_argv() -> list[str]:
    return ["cat", "/etc/os-release"]


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value pairs with shell quoting removed."""
    out: dict[str, str] = {}
    for line in body(text).splitlines():
        m = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if not m:
            continue
        try:
            words = shlex.split(m.group(2))
        except ValueError:
            words = [m.group(2).strip("\"'")]
        out[m.group(1)] = " ".join(words)
    return out


def pretty_name(text: str) -> str:
    info = parse_os_release(text)
    return info.get("PRETTY_NAME") or " ".join(x for x in (info.get("NAME", ""), info.get("VERSION", "")) if x)


# -- /proc/meminfo -----------------------------------------------------------------------


def meminfo_argv() -> list[str]:
    return ["cat", "/proc/meminfo"]


def parse_mem_total_bytes(text: str) -> int:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", body(text), re.MULTILINE)
    return int(m.group(1)) * 1024 if m else 0
