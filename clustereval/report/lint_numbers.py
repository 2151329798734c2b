"""When a number in prose counts as carrying its unit: the ``number-unit`` rule's judgement.

A number needs a unit or a counted noun after it (``807 TFLOPS``, ``1,792 matmul shapes``,
``8× H200``). Identifiers (``gpu0``, ``NV18``, ``H200``), versions, dates, times, shapes
(``1024×4096×16384``), ranges (``1470–1560 MHz``), chains ending in a unit
(``701 / 698 / 704 TFLOPS``), formulas and enumerated values pass.
"""

from __future__ import annotations

import re

UNITS = {
    "b", "kib", "mib", "gib", "tib", "pib", "kb", "mb", "gb", "tb", "pb", "byte", "bit", "gbit", "gb/s", "gbps",
    "gb/sec", "gbit/s", "gib/s", "mib/s", "mibps", "mb/s", "tb/s", "kib/s", "gt/s", "tflops", "pflops", "gflops",
    "flops", "tops", "w", "kw", "watt", "mhz", "ghz", "hz", "s", "sec", "second", "ms", "msec", "millisecond", "us",
    "µs", "μs", "ns", "min", "minute", "h", "hr", "hour", "day", "week", "iops", "v", "°c", "c", "million", "billion",
    "thousand", "m", "k",
    # count nouns: a number of things is a quantity with its unit
    "node", "gpu", "cpu", "core", "thread", "socket", "numa", "rank", "link", "lane", "port", "adapter", "nic",
    "device", "disk", "drive", "nvme", "ssd", "shape", "run", "job", "pass", "iteration", "warm-up", "warmup",
    "payload", "size", "process", "worker", "file", "block", "mount", "volume", "share", "server", "ost", "target",
    "stripe", "plugin", "test", "sm", "cu", "element", "row", "column", "cell", "table", "item", "entry", "page",
    "error", "event", "bank", "instance", "slot", "member", "retry", "attempt", "round", "pair", "time", "digit",
    "decimal", "level", "generation", "kernel", "launch", "sample", "measurement", "reading", "collective",
    "all-reduce", "operation", "request", "client", "stack", "die", "chip", "board", "card", "module", "tray",
    "rack", "switch", "hop", "bond", "channel", "queue", "connection", "ring", "user", "line", "question", "gap",
    "finding", "subsystem", "heading", "plot", "step", "phase", "cycle", "wave", "tile", "cta", "bytes", "interface",
    "hca", "partition", "raid", "replica", "tenant", "domain", "superchip", "engine", "mme", "tpc", "xcd",
    "copy", "benchmark", "scan", "sweep", "writer", "reader", "shard", "layer", "pod", "namespace", "tool", "way",
    "call", "word", "character", "state", "value", "option", "variable", "flag", "argument",
}
_STOP = {"at", "in", "on", "for", "per", "with", "by", "to", "from", "and", "or", "than", "while", "when", "was",
         "were", "is", "are", "but", "after", "before", "over", "under", "against", "vs"}
_PHYSICAL = {"b", "kib", "mib", "gib", "tib", "w", "mhz", "ghz", "s", "ms", "min", "h", "tflops", "gb/s", "mib/s"}


def _is_unit(word: str) -> bool:
    word = word.lower()
    return word in UNITS or word.rstrip("s") in UNITS or (word.endswith("es") and word[:-2] in UNITS)


NUMBER = re.compile(r"\d[\d_,]*(?:\.\d+)?")
_IDENT_WORDS = {
    "gpu", "node", "rank", "link", "port", "gen", "numa", "version", "v", "python", "torch", "nccl", "cuda", "driver",
    "ubuntu", "debian", "rocky", "rhel", "centos", "sles", "kernel", "linux", "release", "nvlink", "pcie", "capability",
    "raid", "level", "gaudi", "connectx", "efa", "efav", "sm", "mig", "pass", "phase", "step", "item", "section",
    "table", "figure", "line", "round", "gpus", "nodes", "ranks", "ost", "index", "id", "pid", "mi", "hopper",
    "blackwell", "ampere", "bookworm", "jammy", "noble", "fedora", "amazon", "alma", "opensuse", "stripe", "count",
    "iodepth", "numjobs", "bs", "-r", "r", "jobs", "shape", "m", "n", "k", "group", "tier", "class", "model", "x86",
    "nvswitch", "infiniband", "hdr", "ndr", "xdr", "edr", "ddr", "gddr", "hbm", "lts", "rocm", "p5", "p4d", "slot",
    # a folder's owner and permission bits, as the scratch and the eval Python's cache refuse one: "owned by
    # uid 65534, not by the eval user (uid 0)", "writable by group or others (mode 775)"
    "uid", "gid", "mode",
}


def number_ok(text: str, m: re.Match) -> bool:
    start, end = m.span()
    token = m.group()
    before = text[:start]
    after = text[end:]
    # attached to letters or identifier punctuation on the left: gpu0, H200, NV18, x86_64, ConnectX-7, v2.1, #3
    if before and (before[-1].isalnum() or before[-1] in "_#=.@/\\:'^"):
        return True
    if re.search(r"[A-Za-z]-$", before):
        return True
    # formulas and enumerated values: 2(n−1)/n, "0 = force off, 1 = require"
    if re.search(r"[−+÷<>≤≥]\s?$", before) or re.match(r"\s?[=(]", after):
        return True
    # × or x before: a multiplier or a shape dimension (×16, 8× 2, 1024×4096)
    if re.search(r"[×x*]\s?$", before):
        return True
    # attached on the right to a letter that is not a unit: identifiers like 3rd, 2nd, 4x, 16k is the IEC rule's
    tail = re.match(r"[A-Za-zµμ°%×¹²³⁴⁵⁶⁷⁸⁹⁰⁻′\"]+", after)
    if tail:
        # a unit written without a space (700W, 10s), an ordinal, or an identifier (9a): not a bare number
        return True
    # dates, times, versions
    if re.match(r"\d{4}-\d{2}(-\d{2})?", text[start:start + 10]) or re.search(r"\d{4}-\d{2}-?$", before):
        return True
    if re.match(r":\d{2}", after) or re.search(r"\d:$", before):
        return True
    if re.search(r"\d[-–]$", before):  # the rest of a date or range, judged at its first number
        return True
    if re.fullmatch(r"\d+\.\d+\.\d+.*", token + re.split(r"[^\d.]", after, maxsplit=1)[0]) or after.startswith((".", "+")) and re.match(r"[.+]\w", after):
        return True
    if re.fullmatch(r"(19|20)\d{2}", token):
        return True
    # list numbering at the start of a line
    if re.fullmatch(r"\s*([-*]\s+)?", before) and after.startswith("."):
        return True
    # a preceding word that makes this an identifier (GPU 0, Python 3.12, NVLink 4, Gen 5, -r 2)
    prev = re.search(r"([A-Za-z][\w\-]*)\s*$", before)
    if prev and prev.group(1).lower() in _IDENT_WORDS:
        return True
    # shape chain start, range or chain to a unit: 1024×4096, 1470–1560 MHz, 3 to 5 GiB
    if re.match(r"\s?[×x*]\s?\d", after):
        return True
    rng = re.match(r"\s?(–|-|to)\s?(\d[\d_,]*(?:\.\d+)?)", after)
    if rng:
        after = after[rng.end():]
    # a chain "701 / 698 / 704 TFLOPS" (the runbook's own form) takes the unit after its last number;
    # a chain with no unit at its end is the lead-in habit the runbook forbids
    chain = re.match(r"(\s?/\s?\d[\d_,]*(?:\.\d+)?)+", after)
    if chain:
        after = after[chain.end():]
    unit = re.match(r"[\s\-]?([A-Za-zµμ°%×][\w/%°\-]*)", after)
    # a count whose noun comes a few words later: "1,792 matmul shapes", "1 of the fastest large shapes"
    if re.fullmatch(r"[\d,]+", token):
        for w in re.findall(r"[A-Za-z][\w\-]*", after[:60])[:5]:
            if w.lower() in _STOP:
                break
            if _is_unit(w) and w.lower() not in _PHYSICAL:
                return True
    if unit:
        word = unit.group(1).lower().rstrip(".,;:)")
        if word in UNITS or word.rstrip("s") in UNITS or (word.endswith("es") and word[:-2] in UNITS):
            return True
        if "-" in word and (word.split("-")[0] in UNITS or word.split("-")[0].rstrip("s") in UNITS):
            return True
    if re.match(r"\s?(%|×|°|³|x\b)", after):
        return True
    # a value inside parentheses or quotes right after a code span, e.g. `NCCL_NVLS_ENABLE` 2: leave it
    return False
