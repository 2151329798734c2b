"""Slurm's view of where nodes sit: ``scontrol show topology`` (switches or blocks) and
``scontrol show node -o`` (features). Pure: text in, mappings out."""

from __future__ import annotations

import re


def expand_hostlist(text: str) -> list[str]:
    """``gpu[01-03,7],login`` -> ``gpu01 gpu02 gpu03 gpu7 login`` (zero padding kept, several
    bracket groups per name allowed)."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        names += _expand_one(item)
    return names


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    out: list[str] = []
    for rng in m.group(1).split(","):
        lo, _, hi = rng.partition("-")
        if hi and lo.isdigit() and hi.isdigit():
            width = len(lo) if lo.startswith("0") else 0
            values = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        else:
            values = [lo]
        for v in values:
            out += _expand_one(head + v + tail)
    return out


def _fields(line: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", line)}


def parse_topology(text: str) -> dict[str, str]:
    """node -> its lowest-level switch (tree topology) or block (block topology)."""
    leaf: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        f = _fields(line)
        name = f.get("SwitchName") or f.get("BlockName")
        if not name or not f.get("Nodes"):
            continue
        level = int(f["Level"]) if f.get("Level", "").isdigit() else 0
        for node in expand_hostlist(f["Nodes"]):
            if node not in leaf or level < leaf[node][0]:
                leaf[node] = (level, name)
    return {node: name for node, (_, name) in leaf.items()}


def parse_node_features(text: str) -> dict[str, str]:
    """``scontrol show node -o``: node -> its active features (comma list), where it has any."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        f = _fields(line)
        name = f.get("NodeName")
        feats = f.get("ActiveFeatures") or f.get("AvailableFeatures") or ""
        if name and feats and feats != "(null)":
            out[name] = feats
    return out
