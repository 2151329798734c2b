"""The lint rules: the runbook's "Final pass" table and the template rules a program can check.

Each rule is a function of the parsed ``Doc`` yielding ``(line, message)``; ``@rule`` gives it its
id. Prose rules read ``prose(line)``: tables, code blocks, URLs and (unless said) code spans are
not prose. Every rule has a violating and a passing sample in tests/test_lint.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from clustereval.report.lint import Doc, Line, Table, code_spans, images, links, prose, rule
from clustereval.report.lint_numbers import NUMBER, number_ok

FINDINGS = ("Healthy subsystems", "Underperforming subsystems", "Needs operator input")
ENV_TABLES = ("Host", "GPU", "Fabric", "Filesystems", "Software")
STORAGE_COLUMNS = ["size", "rw", "latency (msec)", "bw (MiBps)", "IOPS (M)"]
RATIO_COLUMN = "local/shared ×"
PARTITION_COLUMNS = ["mount", "size", "type", "device / server"]
SEED_SCRIPTS = ("mamf-finder.py", "mamf-finder-all-gpus.py", "all_reduce_bench.py", "torch-distributed-gpu-test.py",
                "fio-scan", "fio-json-extract.py")
SEED_REPO = "github.com/stas00/ml-engineering"
TOOLS = ("fio", "dcgmi", "nvidia-smi", "torchrun", "lscpu", "findmnt", "lsblk", "df", "ibstat", "rdma", "dd",
         "nccl-tests", "all_reduce_perf", "lfs", "fi_info") + SEED_SCRIPTS
ACRONYMS: dict[str, str] = {
    # acronym (regex, case-sensitive) -> an accepted expansion (regex, case-insensitive)
    r"\bMAMF\b": r"maximum achievable matmul flops",
    r"\bMSMF\b": r"maximum sustainable matmul flops",
    r"\bDCGM\b": r"data center gpu manager",
    r"\bNVLS\b": r"nvlink sharp",
    r"\bGEMMs?\b": r"general matrix[- ](matrix[- ])?multipl",
    r"\bbusbw\b": r"bus bandwidth",
    r"\balgbw\b": r"algorithm bandwidth",
    r"\bMFU\b": r"model flops utili[sz]ation",
    r"\bHBM\b": r"high[- ]bandwidth memory",
    r"\bSMs?\b": r"streaming multiprocessor",
    r"\bEFA\b": r"elastic fabric adapter",
    r"\bNCCL\b": r"collective communications? library",
    r"\brdzv\b": r"rendezvous",
    r"\bCTAs?\b": r"cooperative thread array",
    r"\bTDP\b": r"thermal design power",
    r"\bOSTs?\b": r"object storage targets?",
}


def _prose_lines(doc: Doc, *, headings: bool = False) -> Iterator[tuple[Line, str]]:
    for ln in doc.lines:
        if ln.kind == "text" or (headings and ln.kind == "heading"):
            yield ln, prose(ln.raw)


def _search(doc: Doc, patterns: list[str], message: str, *, flags: int = re.IGNORECASE,
            headings: bool = True, tables: bool = True, keep_code: bool = False) -> Iterator[tuple[int, str]]:
    for ln in doc.lines:
        if ln.kind in ("text",) or (headings and ln.kind == "heading") or (tables and ln.kind == "table"):
            text = prose(ln.raw, keep_code=keep_code)
            for pat in patterns:
                m = re.search(pat, text, flags)
                if m:
                    yield ln.n, message.format(m.group().strip())
                    break


# -- head of the report ---------------------------------------------------------------------------


@rule("title", "title is `# Cluster eval: <N> node(s) of <G>× <GPU>` (or `without GPUs`)")
def _title(doc: Doc):
    first = next((ln for ln in doc.lines if ln.kind != "blank"), None)
    if first is None:
        yield 1, "the report is empty"
        return
    if not (first.kind == "heading" and first.level == 1 and
            re.fullmatch(r"Cluster eval: \d+ nodes?( (of \d+× \S.*|without GPUs.*))?", first.title)):
        yield first.n, "the first line must be `# Cluster eval: <N> node(s) of <G>× <GPU>` (node count and GPUs per node)"


@rule("header-lines", "datetime / access / nodes lines, then `Raw logs: [`raw-<name>/`](raw-<name>/).`")
def _header_lines(doc: Doc):
    head = [ln for ln in doc.lines if ln.h2 == "" and ln.kind == "text"]
    text = "\n".join(ln.raw for ln in head)
    at = head[0].n if head else 1
    for label in ("Datetime (UTC):", "Access:", "Nodes / GPUs:"):
        if not re.search(rf"^\s*[-*]\s+{re.escape(label)}\s*\S", text, re.MULTILINE):
            yield at, f"the header needs a `- {label} …` line"
    if not re.search(r"^Raw logs: \[`(raw-[^`/]+)/`\]\(\1/\)\.$", text, re.MULTILINE):
        yield at, "the header needs the raw-logs pointer `Raw logs: [`raw-<name>/`](raw-<name>/).`"


@rule("toc-present", "a numbered Table of Contents before Environment")
def _toc_present(doc: Doc):
    h2s = [h for h in doc.headings if h.level == 2]
    if not h2s:  # a report with no section (only preflight ran) has nothing to list
        return
    if h2s[0].title != "Table of Contents":
        yield h2s[0].n, "the first `##` heading must be `## Table of Contents`"
    elif not doc.toc and len(h2s) > 1:  # a report of the preflight alone has nothing to index
        yield h2s[0].n, "the Table of Contents has no numbered `[label](#anchor)` items"


@rule("toc-anchor", "every anchor resolves (GitHub anchors, -1/-2 for duplicates)")
def _toc_anchor(doc: Doc):
    anchors = doc.anchors()
    for ln in doc.lines:
        if ln.kind not in ("text", "table"):
            continue
        for label, target, _ in links(ln.raw):
            if target.startswith("#") and target[1:] not in anchors:
                yield ln.n, f"`{target}` ({label}) matches no heading; rebuild anchors from the headings written"


@rule("toc-label", "every TOC label matches the heading it links to")
def _toc_label(doc: Doc):
    anchors = doc.anchors()
    for e in doc.toc:
        h = anchors.get(e.anchor)
        if h is None or h.title == "Introduction":  # the connectivity line links the Network introduction
            continue
        if e.label.strip() != h.title.strip():
            yield e.n, f"TOC label `{e.label}` differs from its heading `{h.title}`"


@rule("toc-complete", "every `##` section and every Findings heading is in the TOC")
def _toc_complete(doc: Doc):
    if not doc.toc:
        return
    listed = {e.anchor for e in doc.toc}
    for h in doc.headings:
        wanted = (h.level == 2 and h.title != "Table of Contents") or (h.level == 3 and h.h2 == "Findings")
        if wanted and h.anchor not in listed:
            yield h.n, f"`{'#' * h.level} {h.title}` has no Table of Contents line"


# -- words ------------------------------------------------------------------------------------


@rule("acronym", "every acronym expanded at first use (MAMF, MSMF, DCGM, NVLS, GEMM, busbw, algbw, …)")
def _acronym(doc: Doc):
    seen_text = ""
    pending = dict(ACRONYMS)
    for ln in doc.lines:
        if ln.kind in ("code", "fence", "blank"):
            continue
        text = prose(ln.raw, keep_code=True)
        for acr, expansion in list(pending.items()):
            m = re.search(acr, text)
            if not m:
                continue
            del pending[acr]
            if not re.search(expansion, seen_text + "\n" + text, re.IGNORECASE):
                yield ln.n, f"`{m.group()}` is used before it is expanded; write its expansion here at first use"
        seen_text += "\n" + text


@rule("absence", "no absence asserted (`Skip reasons: none`, `None`, `N/A`, “not benchmarked”)")
def _absence(doc: Doc):
    patterns = [r"\bN/A\b", r"\bskip(ped)? reasons?\b", r":\s*(none|nothing)\s*\.?\s*$", r"^\s*([-*]\s+)?none\.?\s*$",
                r"\bnothing (was|were) (skipped|missing)\b", r"\bno gaps\b", r"\bnot (fio-scanned|benchmarked|tested|measured|scanned)\b",
                r"\bskipped\b"]
    yield from _search(doc, patterns, "`{}` asserts an absence; leave out what is not there", tables=False)
    for t in doc.tables:
        for n, row in t.rows:
            for c in row:
                if c.strip().lower() in ("none", "n/a", "-", "—", "–", "null", "nan", ""):
                    yield n, f"table cell `{c or 'empty'}` asserts an absence; leave the row out"
                    break


@rule("empty-gaps", "`### Gaps` only when something is missing")
def _empty_gaps(doc: Doc):
    for i, ln in enumerate(doc.lines):
        if ln.kind == "heading" and ln.title == "Gaps":
            rest = []
            for nxt in doc.lines[i + 1:]:
                if nxt.kind == "heading":
                    break
                if nxt.kind != "blank":
                    rest.append(nxt.raw)
            if not any(re.match(r"^\s*([-*]|\d+\.)\s+\S", r) for r in rest):
                yield ln.n, "`### Gaps` without a bullet; omit the heading when nothing is missing"


@rule("iec-units", "sizes in IEC units (`16 KiB`, never `16k` / `1m` / `1g`)")
def _iec(doc: Doc):
    pat = r"(?<![\w.])\d+(?:\.\d+)?\s?[kKmMgGtT](?:i)?(?![\w/])"
    for ln in doc.lines:
        if ln.kind not in ("text", "table", "heading"):
            continue
        text = prose(ln.raw)
        for m in re.finditer(pat, text):
            token = m.group().strip()
            if re.fullmatch(r"\d+(\.\d+)?\s?[mM]", token) and re.search(r"\d\s?m\s*(in|s)\b", text[m.start():m.end() + 3]):
                continue
            yield ln.n, f"`{token}` is not a unit; write IEC sizes (`16 KiB`, `1 MiB`, `1 GiB`, `28 TiB`)"
            break


@rule("feelings", "nothing inanimate given feelings")
def _feelings(doc: Doc):
    yield from _search(doc, [r"\b(feels?|felt|feeling|suffers?|suffered|suffering|struggles?|struggled|struggling|"
                             r"punish(ed|es|ing)?|painful|cares?|caring|happy|unhappy|hates?|angry)\b"],
                       "`{}`: name the operation and its measured rate instead of a feeling")


@rule("filler", "no filler sentences")
def _filler(doc: Doc):
    yield from _search(doc, [r"\bas expected\b", r"\bfor reference\b", r"\b(it is )?worth noting\b", r"\bthis section covers\b",
                             r"\bresults are shown\b", r"\bshown below\b", r"\bcollects the results into one table\b",
                             r"\bneedless to say\b", r"\bas (you|we) can see\b", r"\bas can be seen\b",
                             r"\bthe table below shows\b"],
                       "`{}` carries no information; delete it")


@rule("process-shorthand", "no eval-process shorthand (kept, as configured, the fix, rerun, …)")
def _shorthand(doc: Doc):
    yield from _search(doc, [r"\bkept\b", r"\bas configured\b", r"\bwe left it\b", r"\bplatform value\b", r"\bthe fix\b",
                             r"\bre-?runs?\b", r"\bthe book\b", r"\bMLE\b"],
                       "`{}` is shorthand from the eval session; name the actor and the state")


@rule("workload", "no workload assumed (“sustained workload”, not “training step”)")
def _workload(doc: Doc):
    yield from _search(doc, [r"\btraining steps?\b"], "`{}` assumes training; write “sustained workload”")


@rule("pass-no-fail", "no redundant verdicts (`Pass`, not `Pass … No Fail`)")
def _pass_no_fail(doc: Doc):
    yield from _search(doc, [r"\bno fail(s|ures?)?\b"], "`{}` repeats `Pass`; write `Pass` alone", flags=re.IGNORECASE)


@rule("targets-plural", "targets in the plural (“the figures they are supposed to hit”)")
def _targets(doc: Doc):
    yield from _search(doc, [r"\bthe (expected |target |advertised |provisioned )?figure (it|they|that|the \w+) (is|are|was) supposed\b",
                             r"\bthe target (figure|value|number|rate)\b", r"\bthe provisioned throughput\b(?! is unknown)"],
                       "`{}` promises one number; a filesystem has one expected value per measured cell")


@rule("percent-local", "shared-vs-local as times slower (`8.0×`), never a percentage")
def _percent_local(doc: Doc):
    yield from _search(doc, [r"%\s*local\b", r"%\s+of\s+(the\s+)?local\b", r"\blocal\s*/\s*shared\s*%", r"\bpercent of (the )?local\b",
                             r"\blocal\s*%"],
                       "`{}`: state shared vs local as times slower (`8.0×`)")


@rule("nic-percent", "multi-node all-reduce never scored as % of NIC / rail")
def _nic_percent(doc: Doc):
    yield from _search(doc, [r"%\s+of\s+(the\s+)?(\w+\s+)?(NIC|rail|line[- ]rate|adapter|EFA|InfiniBand|IB)\b",
                             r"\bof (the )?(NIC|rail) (spec|rate|bandwidth)\b"],
                       "`{}`: inter-node busbw mixes NVLink, NIC and in-network reduction; compare it with the 1-node run instead")


@rule("usage", "never how full a partition is (no Use%, free, used)")
def _usage(doc: Doc):
    yield from _search(doc, [r"\bUse%", r"\d\s*%\s*(full|used)\b", r"\b(free|used|available) space\b",
                             r"\d\s*([KMGTPE]i?B|[KMGTP])\s+(free|used|avail(able)?)\b", r"\bAvail\b"],
                       "`{}` reports usage; give capacity only", flags=0)
    for t in doc.tables:
        for h in t.headers:
            if h.strip().lower() in ("used", "free", "avail", "available", "use%", "use %"):
                yield t.start, f"column `{h}` reports usage; give capacity only"


@rule("number-unit", "every number outside a table carries its unit")
def _number_unit(doc: Doc):
    for ln in doc.lines:
        if ln.kind != "text":
            continue
        text = prose(ln.raw)
        for m in NUMBER.finditer(text):
            if not number_ok(text, m):
                yield ln.n, f"`{m.group()}` has no unit; write the unit after every number outside a table"
                break


@rule("quote-verbatim", "prose `N×` identical to the `local/shared ×` cell it cites")
def _quote(doc: Doc):
    ratios = set()
    for t in doc.tables:
        if t.headers and t.headers[-1] == RATIO_COLUMN:
            ratios |= {row[-1].rstrip("×").strip() for _, row in t.rows if row}
    if not ratios:
        return
    for ln, text in _prose_lines(doc):
        for m in re.finditer(r"(?<![\w.])(\d+(?:\.\d+)?)×(?=\s*(slower|faster|less|more|lower|higher|below|above)\b|\s*[.,;)]|\s*$)", text):
            if m.group(1) not in ratios:
                yield ln.n, f"`{m.group()}` matches no `{RATIO_COLUMN}` cell; quote the table value verbatim"


# -- sections -----------------------------------------------------------------------------------


@rule("findings", "Findings: only Healthy / Underperforming / Needs operator input, in order, each with bullets; last section")
def _findings(doc: Doc):
    h2s = [h for h in doc.headings if h.level == 2]
    if any(h.title == "Findings" for h in h2s) and h2s[-1].title != "Findings":
        yield h2s[-1].n, "`## Findings` must be the last section"
    subs = [h for h in doc.headings if h.level == 3 and h.h2 == "Findings"]
    order = [FINDINGS.index(h.title) for h in subs if h.title in FINDINGS]
    for h in subs:
        if h.title not in FINDINGS:
            yield h.n, f"`### {h.title}` is not a Findings heading; use {', '.join(FINDINGS)}"
    if order != sorted(order):
        yield subs[0].n, "Findings headings must come in the order " + " / ".join(FINDINGS)
    for _i, h in enumerate(subs):
        body = [ln for ln in doc.lines if ln.h2 == "Findings" and ln.h3 == h.title and ln.kind == "text"]
        bullets = [ln for ln in body if re.match(r"^\s*[-*]\s+\S", ln.raw)]
        if not bullets:
            yield h.n, f"`### {h.title}` has no bullets; omit a Findings heading with nothing under it"
        for b in bullets:
            if re.match(r"^\s*[-*]\s+(\*\*)?[A-C]\.\s", b.raw):
                yield b.n, "a Findings bullet is labelled by its subsystem, never `A.` / `B.` / `C.`"


@rule("gpu-naming", "every slow or dead GPU named `<hostname>(node<N>):gpu<i>` in Findings")
def _gpu_naming(doc: Doc):
    for ln in doc.section("Findings"):
        if ln.kind != "text":
            continue
        text = prose(ln.raw, keep_code=True)
        for m in re.finditer(r"\b(gpu|GPU)\s?#?(\d+)\b", text):
            if not re.search(r"\(node\d+\):$", text[:m.start()]):
                yield ln.n, f"`{m.group()}`: name a GPU as `<hostname>(node<N>):gpu<i>`"
                break
        counted = re.search(r"\b(one|two|three|four|five|six|seven|eight|several|some|a few|\d+)\s+(slow|dead|"
                            r"under-?performing|throttled)\s+(GPUs?|cards?)\b", text, re.IGNORECASE)
        if counted:
            yield ln.n, f"`{counted.group()}`: list every GPU by name, one bullet each"


@rule("single-node", "one node: no Inter-node section, TOC line or concurrent-write poke")
def _single_node(doc: Doc):
    if doc.node_count() != 1:
        return
    for h in doc.headings:
        if re.match(r"(Inter-node|Concurrent write)", h.title):
            yield h.n, f"`{h.title}` on a 1-node eval; omit the section"
    for e in doc.toc:
        if e.label.startswith("Inter-node"):
            yield e.n, f"TOC line `{e.label}` on a 1-node eval; a 1-node run is intra-node"


@rule("environment", "Environment: five tables Host / GPU / Fabric / Filesystems / Software, OS first, no MAMF/MSMF")
def _environment(doc: Doc):
    env = [h for h in doc.headings if h.level == 3 and h.h2 == "Environment"]
    titles = [h.title for h in env]
    known = [t for t in titles if t in ENV_TABLES]
    for h in env:
        if h.title == "Gaps":
            yield h.n, ("`### Gaps` under Environment; an environment problem goes once into the Gaps of the "
                        "section it affects (Compute, Network or Storage)")
        elif h.title not in ENV_TABLES:
            yield h.n, f"`### {h.title}` under Environment; the tables are {' / '.join(ENV_TABLES)}"
    # Host, GPU and Fabric always have rows (a node without GPUs says so, a 1-GPU node has its PCIe link)
    missing = [t for t in ENV_TABLES[:3] if t not in titles]
    if env and missing:
        yield env[0].n, f"Environment lacks the {' / '.join(missing)} table{'s' if len(missing) > 1 else ''}: the five tables always"
    if known != sorted(known, key=ENV_TABLES.index):
        yield env[0].n, "Environment tables must come in the order " + " / ".join(ENV_TABLES)
    if env and "Host" in titles and titles[0] != "Host":
        yield env[0].n, "the Host table comes first"
    for t in doc.tables:
        if t.h2 == "Environment" and t.h3 == "Host" and t.rows and not t.rows[0][1][0].startswith("OS") and \
                any(row[0].startswith("OS") for _, row in t.rows):
            yield t.rows[0][0], "the Host table's first row is the OS (`PRETTY_NAME`)"
    for ln in doc.section("Environment"):
        text = prose(ln.raw, keep_code=True)
        m = re.search(r"\bM[AS]MF\b|\bloaded\b|\d+\s*MiB\s*\(", text)
        if m:
            yield ln.n, f"`{m.group()}` does not belong in Environment (no MAMF/MSMF, no `loaded` clock, HBM in GiB only)"


@rule("venv-path", "no eval venv path")
def _venv(doc: Doc):
    yield from _search(doc, [r"(^|[\s`/])\.?venv(/|\b)", r"\bsite-packages\b", r"\bvirtualenv\b"],
                       "`{}`: the eval venv is how the run worked, not a report field", keep_code=True)


@rule("links", "links: absolute URLs for external tables, `raw-…/` relative paths, never `../`")
def _links(doc: Doc):
    for ln in doc.lines:
        if ln.kind not in ("text", "table", "heading"):
            continue
        for _label, target, _ in links(ln.raw):
            if target.startswith(("http://", "https://", "#", "mailto:")) or target.startswith("raw-"):
                if re.search(r"\.(png|svg|jpe?g)$", target):
                    yield ln.n, f"`{target}` is linked; inline the plot with `![alt]({target})`"
                continue
            yield ln.n, f"`{target}`: link external pages by absolute URL and run files by `raw-…/` path"
        for _, target in images(ln.raw):
            if not target.startswith(("raw-", "http://", "https://")):
                yield ln.n, f"image `{target}` must be a `raw-…/` path beside the report"


@rule("tool-link", "every tool introduced by name with a link at first mention; the runbook's scripts never named as run")
def _tool_link(doc: Doc):
    seen: set[str] = set()
    for ln in doc.lines:
        if ln.kind not in ("text", "table") or ln.h2 == "Table of Contents":
            continue  # the TOC names the tools its sections introduce
        linked = {}
        for label, href, _col in links(ln.raw):
            for span, _ in code_spans(label):
                linked[_tool_of(span)] = href
        for span, _ in code_spans(ln.raw):
            tool = _tool_of(span)
            if not tool or tool in seen:
                continue
            seen.add(tool)
            target = linked.get(tool)
            if target is None:
                yield ln.n, f"`{span}` is the first mention of `{tool}`; link it where it is introduced"
            elif tool in SEED_SCRIPTS and SEED_REPO not in target:
                yield ln.n, f"`{tool}` is the runbook's script; name the tool that ran, or link the original"


def _tool_of(span: str) -> str:
    first = span.strip().split(" ")[0] if span.strip() else ""
    first = first.rsplit("/", 1)[-1]
    if first in TOOLS or re.fullmatch(r"[\w\-]+\.py", first):
        return first
    return ""


@rule("introduction", "every `### Introduction` is a numbered list of the passes that ran, each tool linked")
def _introduction(doc: Doc):
    linked_before: set[str] = set()
    for i, ln in enumerate(doc.lines):
        if ln.kind in ("text", "table"):
            for label, _, _ in links(ln.raw):
                linked_before |= {_tool_of(s) for s, _ in code_spans(label)} | {label}
        if not (ln.kind == "heading" and ln.title == "Introduction"):
            continue
        items = []
        for nxt in doc.lines[i + 1:]:
            if nxt.kind == "heading":
                break
            if re.match(r"^\d+\.\s", nxt.raw):
                items.append(nxt)
        if not items:
            yield ln.n, "`### Introduction` needs a numbered list (`1.` `2.` …) of the passes that ran"
        known = set(linked_before)
        for item in items:
            spans = [_tool_of(s) for s, _ in code_spans(item.raw)]
            if links(item.raw) or any(s and s in known for s in spans):
                for label, _, _ in links(item.raw):
                    known |= {_tool_of(s) for s, _ in code_spans(label)}
                continue
            yield item.n, "an Introduction item names no linked tool; link the tool where it is introduced"


@rule("compute-headings", "Compute headings by purpose, not by tool nickname (DCGM / MAMF / Lemon GEMM)")
def _compute_headings(doc: Doc):
    for h in doc.headings:
        if h.h2 == "Compute" and h.level == 3 and re.search(r"DCGM|MAMF|MSMF|[Ll]emon|mamf", h.title):
            yield h.n, f"`### {h.title}`: name the purpose (Hardware health, GPU performance benchmarks, Find underperforming GPUs)"
    for e in doc.toc:
        if re.search(r"DCGM|MAMF|MSMF|[Ll]emon GEMM", e.label):
            yield e.n, f"TOC label `{e.label}`: the link text is the purpose; tools go after the dash"


@rule("tldr", "Find underperforming GPUs opens with the TLDR")
def _tldr(doc: Doc):
    for i, ln in enumerate(doc.lines):
        if ln.kind == "heading" and ln.title == "Find underperforming GPUs":
            first = next((x for x in doc.lines[i + 1:] if x.kind != "blank"), None)
            if first is None or first.kind == "heading" or not re.match(r"^\s*(\*\*)?TLDR:?", first.raw):
                yield ln.n, "open with `**TLDR:**` naming both outcomes (under-performing, dead)"


@rule("storage-headings", "Storage opens with Existing Partitions; `Shared … IO benchmark`, not a bare `Shared`")
def _storage_headings(doc: Doc):
    subs = [h for h in doc.headings if h.level == 3 and h.h2 == "Storage"]
    if subs and subs[0].title != "Existing Partitions":
        yield subs[0].n, "Storage opens with `### Existing Partitions`, then `### Introduction`"
    for h in subs:
        if h.title.startswith("Shared") and not re.fullmatch(r"Shared .*IO benchmark\b.*", h.title):
            yield h.n, f"`### {h.title}`: the heading is `Shared <FS> IO benchmark`"


# -- tables ---------------------------------------------------------------------------------------


def _storage_tables(doc: Doc) -> list[Table]:
    return [t for t in doc.tables if "rw" in t.headers or any(h.startswith("bw") for h in t.headers)]


@rule("storage-table", "storage tables: `size | rw | latency (msec) | bw (MiBps) | IOPS (M)` (+ `local/shared ×` last), numbers right-aligned")
def _storage_table(doc: Doc):
    for t in _storage_tables(doc):
        want = STORAGE_COLUMNS + ([RATIO_COLUMN] if t.headers and t.headers[-1] == RATIO_COLUMN else [])
        if t.headers != want:
            yield t.start, f"columns `{' | '.join(t.headers)}`; write `{' | '.join(want)}`"
            continue
        for name, align in zip(t.headers, t.aligns, strict=False):
            if name != "rw" and align != "r":
                yield t.start + 1, f"column `{name}` must be right-aligned (`---:`)"
                break
        for n, row in t.rows:
            if len(row) != len(want):
                continue
            if not re.fullmatch(r"\d+(\.\d+)? (KiB|MiB|GiB|TiB)", row[0]):
                yield n, f"size `{row[0]}`: write IEC sizes (`16 KiB`)"
            for c in (row[3], row[4]):
                if re.search(r"\d\s*[kKMG]\b|,", c):
                    yield n, f"`{c}`: no `k`/`M`/`,` in cells; the unit is in the header"
                    break


@rule("storage-thousands", "the local table groups thousands with `_` (`12_029.1`)")
def _storage_thousands(doc: Doc):
    for t in _storage_tables(doc):
        if t.headers != STORAGE_COLUMNS:
            continue
        for n, row in t.rows:
            if len(row) == len(STORAGE_COLUMNS):
                bw = row[3]
                if re.fullmatch(r"\d{4,}(\.\d+)?", bw):
                    yield n, f"bw `{bw}`: group thousands with `_` on the local table (`12_029.1`)"


@rule("partitions-table", "Existing Partitions: `mount | size | type | device / server`, `/` first, size right-aligned, backing type")
def _partitions(doc: Doc):
    for t in doc.tables:
        if not (t.h2 == "Storage" and t.h3 == "Existing Partitions"):
            continue
        if t.headers != PARTITION_COLUMNS:
            yield t.start, f"columns `{' | '.join(t.headers)}`; write `{' | '.join(PARTITION_COLUMNS)}`"
            continue
        if t.aligns[1] != "r":
            yield t.start + 1, "column `size` must be right-aligned (`---:`)"
        if t.rows and t.rows[0][1][0].strip("`") != "/":
            yield t.rows[0][0], "the first row is `/`"
        for n, row in t.rows:
            if row[2].strip().lower() == "overlay":
                yield n, "`overlay` is a container layer; write the backing filesystem type"
