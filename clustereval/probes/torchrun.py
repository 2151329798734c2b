"""Parse what a torchrun launch printed: worker JSON lines behind ``[<node>:<local rank>]:`` prefixes."""

from __future__ import annotations

import json
import re

_PREFIX = re.compile(r"^\[(?P<role>.*?):(?P<local_rank>\d+)\]:(?P<rest>.*)$")


def parse_worker_events(text: str) -> list[dict]:
    """Every JSON object a worker printed, with ``_role`` and ``_local_rank`` from the tee prefix."""
    events = []
    for line in text.splitlines():
        m = _PREFIX.match(line)
        role, local_rank, rest = (m.group("role"), int(m.group("local_rank")), m.group("rest")) if m else ("", -1, line)
        rest = rest.strip()
        if not rest.startswith("{") or '"event"' not in rest:
            continue
        try:
            obj = json.loads(rest)
        except ValueError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            obj["_role"] = role
            obj["_local_rank"] = local_rank
            events.append(obj)
    return events


def prefix_log(node: str, text: str) -> str:
    """Every line carries its node: worker lines already say ``[node:rank]:``, launcher lines get ``[node]:``."""
    out = []
    for line in text.splitlines():
        out.append(line if _PREFIX.match(line) else f"[{node}]: {line}")
    return "\n".join(out) + ("\n" if out else "")
