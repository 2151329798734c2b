"""``clustereval lint REPORT.md``: the runbook's "Final pass" checklist and the template rules a
program can check, mechanically.

Entry points: ``lint_text(text) -> list[LintProblem]`` and ``lint_file(path)``. The rules live in
``lint_rules.py``; each has an id, checks one thing, and reports the line. This module parses the
markdown once into a ``Doc`` (lines with their section, headings with GitHub anchors, tables,
the Table of Contents) that every rule reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from clustereval.report.markdown import AnchorBook


@dataclass(frozen=True)
class LintProblem:
    rule: str  # kebab-case id, e.g. "acronym"
    line: int  # 1-based line in the report
    message: str
    path: str = ""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.path else f"line {self.line}"
        return f"{where}: [{self.rule}] {self.message}"


@dataclass
class Line:
    n: int  # 1-based
    raw: str
    kind: str  # heading | table | fence | code | blank | text
    h2: str = ""  # the enclosing ## heading ('' before the first)
    h3: str = ""  # the enclosing ### heading within it
    level: int = 0  # headings only
    title: str = ""  # headings only
    anchor: str = ""  # headings only


@dataclass
class Table:
    start: int  # line number of the header row
    headers: list[str]
    aligns: list[str]  # "l" | "r" | "c" per column
    rows: list[tuple[int, list[str]]]  # (line number, cells)
    h2: str = ""
    h3: str = ""


@dataclass
class TocEntry:
    n: int
    label: str
    anchor: str
    note: str
    depth: int  # 0: top-level item


@dataclass
class Doc:
    lines: list[Line]
    tables: list[Table] = field(default_factory=list)
    toc: list[TocEntry] = field(default_factory=list)

    @property
    def headings(self) -> list[Line]:
        return [ln for ln in self.lines if ln.kind == "heading"]

    def anchors(self) -> dict[str, Line]:
        return {h.anchor: h for h in self.headings}

    def section(self, h2: str) -> list[Line]:
        return [ln for ln in self.lines if ln.h2 == h2]

    def node_count(self) -> int | None:
        for ln in self.lines:
            if ln.kind == "heading" and ln.level == 1:
                m = re.search(r"Cluster eval:\s*(\d+)\s+nodes?", ln.title)
                if m:
                    return sum(int(x) for x in re.findall(r"(\d+)\s+nodes?\b", ln.title))
        return None


# -- prose extraction -----------------------------------------------------------------------

_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
_URL = re.compile(r"<?https?://[^\s)>`]+>?")  # a URL in a code span ends at its closing backtick
_CODE = re.compile(r"`[^`]*`")
_COMMENT = re.compile(r"<!--.*?-->")


def links(text: str) -> list[tuple[str, str, int]]:
    """``(label, target, column)`` of every link (images excluded)."""
    out = []
    for m in _LINK.finditer(text):
        if m.start() > 0 and text[m.start() - 1] == "!":
            continue
        out.append((m.group(1), m.group(2), m.start()))
    return out


def images(text: str) -> list[tuple[str, str]]:
    return re.findall(r"!\[([^\]]*)\]\(([^)]*)\)", text)


def prose(text: str, *, keep_code: bool = False) -> str:
    """The words a reader reads: images dropped, links reduced to their label, URLs and HTML
    comments dropped, code spans blanked (or kept without backticks), emphasis markers removed."""
    text = _COMMENT.sub(" ", text)
    text = _IMAGE.sub(" ", text)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _URL.sub(" ", text)
    text = _CODE.sub((lambda m: m.group()[1:-1]) if keep_code else (lambda m: " ‹code› "), text)
    text = text.replace("**", "").replace("__", "")
    return text


def code_spans(text: str) -> list[tuple[str, int]]:
    text = _COMMENT.sub(" ", text)
    return [(m.group()[1:-1], m.start()) for m in _CODE.finditer(text)]


def cells(row: str) -> list[str]:
    body = row.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def parse(text: str) -> Doc:
    lines: list[Line] = []
    book = AnchorBook()
    h2 = h3 = ""
    fence = False
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
            lines.append(Line(n, raw, "fence", h2, h3))
            continue
        if fence:
            lines.append(Line(n, raw, "code", h2, h3))
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", raw)
        if m:
            level, title = len(m.group(1)), m.group(2)
            if level == 2:
                h2, h3 = title, ""
            elif level == 3:
                h3 = title
            lines.append(Line(n, raw, "heading", h2, h3, level, title, book.take(title)))
            continue
        kind = "blank" if not stripped else ("table" if stripped.startswith("|") else "text")
        lines.append(Line(n, raw, kind, h2, h3))
    doc = Doc(lines)
    doc.tables = _tables(lines)
    doc.toc = _toc(lines)
    return doc


def _tables(lines: list[Line]) -> list[Table]:
    tables: list[Table] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if ln.kind == "table" and nxt is not None and nxt.kind == "table" and \
                re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", nxt.raw.strip()):
            aligns = []
            for c in cells(nxt.raw):
                aligns.append("r" if c.endswith(":") and not c.startswith(":") else "c" if c.startswith(":") and c.endswith(":") else "l")
            t = Table(ln.n, cells(ln.raw), aligns, [], ln.h2, ln.h3)
            j = i + 2
            while j < len(lines) and lines[j].kind == "table":
                t.rows.append((lines[j].n, cells(lines[j].raw)))
                j += 1
            tables.append(t)
            i = j
            continue
        i += 1
    return tables


def _toc(lines: list[Line]) -> list[TocEntry]:
    out: list[TocEntry] = []
    inside = False
    for ln in lines:
        if ln.kind == "heading":
            if inside:
                break
            inside = ln.level == 2 and ln.title.strip().lower() == "table of contents"
            continue
        if not inside or ln.kind != "text":
            continue
        m = re.match(r"^(\s*)\d+\.\s+\[([^\]]+)\]\(#([^)]*)\)\s*(?:—\s*(.*))?$", ln.raw)
        if m:
            out.append(TocEntry(ln.n, m.group(2), m.group(3), m.group(4) or "", len(m.group(1)) // 2))
    return out


# -- rules registry ---------------------------------------------------------------------------

RuleFn = Callable[[Doc], Iterable[tuple[int, str]]]


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # the checklist item, as the runbook states it
    fn: RuleFn


RULES: list[Rule] = []


def rule(rule_id: str, summary: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(rule_id, summary, fn))
        return fn
    return register


def lint_text(text: str, *, path: str = "") -> list[LintProblem]:
    """Every problem in a report, in line order."""
    from clustereval.report import lint_rules  # noqa: F401 - registers the rules

    doc = parse(text)
    problems = [LintProblem(r.id, n, msg, path) for r in RULES for n, msg in r.fn(doc)]
    return sorted(set(problems), key=lambda p: (p.line, p.rule, p.message))


_REPORT_HINT = "lint checks a report clustereval wrote: clustereval lint reports/<name>-<YYYY-MM-DD-HHMMZ>.md"
_REPORT_MARKS = ("- Datetime (UTC):", "- Nodes / GPUs:", "Raw logs: [", "## Table of Contents")


def looks_like_report(text: str) -> bool:
    """A clustereval report: its title, or at least two of the header lines and headings every
    report has (a report with a mangled title is still a report, and lint says what is wrong)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("# Cluster eval"):
        return True
    lines = text.splitlines()
    return sum(any(ln.startswith(mark) for ln in lines) for mark in _REPORT_MARKS) >= 2


def lint_file(path: Path | str) -> list[LintProblem]:
    """Lint the report at ``path``. A file that is missing, binary or not a report is refused with a
    ``UsageError`` (one line, its id, a fix) instead of being linted as if it were one."""
    from clustereval.errors import UsageError
    from clustereval.inputs import read_text_file

    text = read_text_file(str(path), what="a report", hint=_REPORT_HINT)
    if not looks_like_report(text):
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        shown = first if len(first) <= 40 else first[:37] + "..."
        raise UsageError(f"{path}:1: not a clustereval report (it starts {shown!r}, not `# Cluster eval: …`)"
                         if first else f"{path}: not a clustereval report (the file is empty)",
                         _REPORT_HINT, error_id="not-a-report")
    return lint_text(text, path=str(path))


def rule_ids() -> list[str]:
    from clustereval.report import lint_rules  # noqa: F401

    return [r.id for r in RULES]
