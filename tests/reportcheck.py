"""Checks a rendered report's sentences against the records it was rendered from.

Lint checks the runbook's form; this checks that the text says only what happened: no pass
described that did not run, no counts that are not the tables', no interpreter path.
``problems(markdown, records)`` returns one line per contradiction ([] when consistent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
FORBIDDEN = (r"\b0 ranks?\b", r"\bno rank count\b", r"\b0 B to 0 B\b", r"\b0 nodes?\b", r"\bfrom 0 B\b",
             r"\bno figure\b", r"\b0 runs?\b", r"\*\*0\.00 GBps\*\*")
ENV_TABLES = ("Host", "GPU", "Fabric", "Filesystems", "Software")
# Introduction item -> the heading its results sit under (Network's connectivity item holds its own result)
ITEM_HEADINGS = {
    "Compute": ((r"`dcgmi diag", "Hardware health"), (r"our GPU memory and links pass", "GPU memory and links"),
                (r"our matmul worker", "GPU performance benchmarks"),
                (r"^Lemon GEMM", "Find underperforming GPUs")),
    "Network": ((r"our all-reduce benchmark", "all-reduce benchmark"),
                (r"pairwise straggler hunt", "Pairwise all-reduce benchmark")),
    "Storage": ((r"local disk scan", "Local disk IO benchmark"), (r"shared scan on", "Shared"),
                (r"concurrent write on", "Concurrent write shared fs benchmark")),
}


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    subs: dict[str, list[str]] = field(default_factory=dict)  # ### title -> its lines (first one wins)
    order: list[str] = field(default_factory=list)


def sections(md: str) -> dict[str, Section]:
    out: dict[str, Section] = {}
    cur: Section | None = None
    sub: list[str] | None = None
    for line in md.splitlines():
        if line.startswith("## "):
            cur = out.setdefault(line[3:].strip(), Section(line[3:].strip()))
            sub = None
            continue
        if cur is None:
            continue
        if line.startswith("### "):
            title = line[4:].strip()
            cur.order.append(title)
            sub = cur.subs.setdefault(title, [])
            continue
        cur.lines.append(line)
        if sub is not None:
            sub.append(line)
    return out


def to_bytes(label: str) -> int:
    num, unit = label.split()
    return int(float(num) * UNITS[unit])


def tables(lines: list[str]) -> list[list[list[str]]]:
    """Every markdown table in ``lines``: its body rows as cells (header and rule dropped)."""
    found, cur = [], []
    for line in lines + [""]:
        if line.startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            found.append(cur[2:])
            cur = []
    return found


def numbered(lines: list[str]) -> list[str]:
    return [re.sub(r"^\d+\.\s+", "", ln) for ln in lines if re.match(r"^\d+\.\s", ln)]


def problems(md: str, records: dict) -> list[str]:
    out: list[str] = []
    for pat in FORBIDDEN:
        for m in re.finditer(pat, md):
            out.append(f"`{m.group()}` in the report: {md[max(0, m.start() - 60):m.end() + 20]!r}")
    secs = sections(md)
    out += _environment(secs)
    out += _introductions(secs)
    out += _network(secs, records)
    out += _storage(secs)
    out += _paths(md, records)
    return out


def _environment(secs: dict[str, Section]) -> list[str]:
    env = secs.get("Environment")
    if env is None:
        return []
    out = []
    if [t for t in env.order if t in ENV_TABLES] != list(ENV_TABLES):
        out.append(f"Environment tables are {env.order}, not the five {ENV_TABLES}")
    if "Gaps" in env.order:
        out.append("Environment has a `### Gaps`: its problems belong to the section they affect")
    return out


def _introductions(secs: dict[str, Section]) -> list[str]:
    """A pass listed in an Introduction has its section, or a Gap in that section saying why not."""
    out = []
    for title, pairs in ITEM_HEADINGS.items():
        sec = secs.get(title)
        if sec is None:
            continue
        items = numbered(sec.subs.get("Introduction", []))
        gaps = " ".join(sec.subs.get("Gaps", []))
        for item in items:
            for pattern, heading in pairs:
                if re.search(pattern, item) and not any(heading in h for h in sec.order):
                    out.append(f"{title} Introduction lists a pass with no `{heading}` section: {item[:100]!r}"
                               + (" (its Gap exists, so the item should not)" if gaps else ""))
    return out


def _network(secs: dict[str, Section], records: dict) -> list[str]:
    sec = secs.get("Network")
    if sec is None:
        return []
    out = []
    intro = " ".join(sec.subs.get("Introduction", []))
    payloads = sorted({to_bytes(row[0]) for h, lines in sec.subs.items() if "all-reduce benchmark" in h
                       and "Pairwise" not in h for t in tables(lines) for row in t if row and re.match(r"[\d.]+ \w+B$", row[0])})
    m = re.search(r"over payloads from ([\d.]+ \w?i?B) to ([\d.]+ \w?i?B)", intro)
    if m:
        if not payloads:
            out.append(f"the Introduction describes a sweep {m.group(1)}–{m.group(2)} but no sweep table follows")
        elif (to_bytes(m.group(1)), to_bytes(m.group(2))) != (payloads[0], payloads[-1]):
            out.append(f"sweep range {m.group(1)}–{m.group(2)} is not the tables' payloads "
                       f"({payloads[0]}–{payloads[-1]} bytes)")
    if "the bandwidths below" in intro and not payloads:
        out.append("'the bandwidths below' with no bandwidth table below")
    conn = records.get("connectivity")
    if conn is not None and getattr(conn, "num_ranks", 0) > 0 and "our connectivity test" in intro:
        want = f"{conn.num_ranks} rank{'s' if conn.num_ranks != 1 else ''} on {conn.num_nodes} node"
        if want not in intro:
            out.append(f"connectivity item does not say `{want}` (the record's ranks)")
        if ("**pass**" in intro) != bool(conn.allreduce_ok):
            out.append("connectivity verdict in the Introduction is not the record's")
        if not conn.allreduce_ok and "completed one all-reduce" in intro:
            out.append("a failed connectivity check described as having completed its all-reduce")
    pw = records.get("pairwise")
    pair_text = " ".join(sec.subs.get("Pairwise all-reduce benchmark", []))
    m = re.search(r"Mean busbw over the (\d+) pairs?", pair_text)
    if pw is not None and m:
        done = sum(1 for p in pw.pairs if p.busbw_gb_s is not None)
        if int(m.group(1)) != done:
            out.append(f"a mean 'over the {m.group(1)} pairs' when {done} pairs completed")
    ar = records.get("allreduce")
    if ar is not None and "our all-reduce benchmark" in intro:
        ranks = [s.num_ranks for s in list(ar.intra) + ([ar.inter] if ar.inter else []) if s.rows]
        said = [int(x) for x in re.findall(r"(\d+) ranks? \((?:intra|inter)-node", intro)]
        if sorted(said) != sorted(set(ranks)) and sorted(said) != sorted(ranks[:1] + ranks[len(ar.intra):]):
            out.append(f"all-reduce rank counts {said} are not the measured sweeps' {ranks}")
    return out


def _storage(secs: dict[str, Section]) -> list[str]:
    sec = secs.get("Storage")
    if sec is None:
        return []
    out = []
    fio_tables = {h: t for h, lines in sec.subs.items() if "IO benchmark" in h for t in tables(lines)[:1]}
    rows = {h: len(t) for h, t in fio_tables.items()}
    for item in numbered(sec.subs.get("Introduction", [])):
        for n in re.findall(r"(\d+) runs?\b", item):
            if int(n) not in rows.values():
                out.append(f"Storage Introduction says {n} runs; the fio tables have {sorted(rows.values())} rows")
        if re.search(r"each read and write", item):
            sizes = re.search(r"file sizes? ([^(:.]+?)(?: \(| ,|, each)", item)
            if sizes:
                named = len(re.findall(r"[\d.]+ [KMG]iB", sizes.group(1)))
                if named and all(named * 2 != r for r in rows.values()):
                    out.append(f"Storage Introduction names {named} sizes, each read and write, but the tables have "
                               f"{sorted(rows.values())} rows")
    for h, t in fio_tables.items():
        lines = " ".join(sec.subs[h])
        m = re.search(r"across the (\d+) file sizes", lines)
        distinct = len({row[0] for row in t})
        if m and int(m.group(1)) != distinct:
            out.append(f"`{h}` says {m.group(1)} file sizes; its table has {distinct}")
    return out


def _paths(md: str, records: dict) -> list[str]:
    out = []
    ev = records.get("evalpython")
    paths = set()
    if ev is not None:
        paths |= {p for p in [getattr(ev, "interpreter", ""), *getattr(ev, "executables", {}).values()] if "/" in p}
    for p in sorted(paths):
        if p in md:
            out.append(f"the interpreter path `{p}` is in the report")
    if re.search(r"(^|[\s`/])\.?venv(/|\b)|site-packages", md):
        out.append("a venv path is in the report")
    return out
