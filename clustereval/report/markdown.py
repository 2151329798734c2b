"""A small markdown document builder: headings with GitHub anchors, a numbered TOC, tables.

The TOC is built from the headings actually written, so labels and anchors always agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TOC_MARK = "\x00TOC\x00"


def github_slug(title: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation stripped, spaces to '-'."""
    text = title.strip().lower()
    text = re.sub(r"`", "", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class AnchorBook:
    """Hands out anchors the way GitHub does: duplicates get -1, -2, ..."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def take(self, title: str) -> str:
        slug = github_slug(title)
        if slug not in self._seen:
            self._seen[slug] = 0
            return slug
        self._seen[slug] += 1
        return f"{slug}-{self._seen[slug]}"


@dataclass
class Heading:
    level: int
    title: str
    anchor: str
    toc_label: str | None  # None: not in the TOC
    toc_note: str = ""  # "— tool/test that ran" annotation
    children: list[Heading] = field(default_factory=list)


def fmt_table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A markdown table; ``align`` is one letter per column, 'l' or 'r'."""
    align = align or "l" * len(headers)
    if len(align) != len(headers):
        raise ValueError("align needs one letter per column")
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


class Document:
    """Blocks of markdown in order; the TOC is filled in at render time."""

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._anchors = AnchorBook()
        self._toc: list[Heading] = []
        self._last_h2: Heading | None = None

    def heading(self, level: int, title: str, *, toc: bool | str = True, note: str = "",
                toc_label: str | None = None) -> str:
        """Add a heading and return its anchor.

        ``toc``: level-2 headings are always listed; a level-3 heading is listed when ``toc`` is
        True or a label string. ``note`` is the "— tool that ran" annotation.
        """
        anchor = self._anchors.take(title)
        self._blocks.append("#" * level + " " + title)
        label = toc_label if toc_label is not None else (toc if isinstance(toc, str) else title)
        listed = bool(toc) if level == 3 else level == 2
        h = Heading(level, title, anchor, label if listed else None, note)
        if level == 2:
            self._toc.append(h)
            self._last_h2 = h
        elif level == 3 and listed and self._last_h2 is not None:
            self._last_h2.children.append(h)
        return anchor

    def para(self, text: str) -> None:
        self._blocks.append(text.strip("\n"))

    def bullets(self, items: list[str]) -> None:
        if items:
            self._blocks.append("\n".join(f"- {i}" for i in items))

    def numbered(self, items: list[str]) -> None:
        if items:
            self._blocks.append("\n".join(f"{n}. {i}" for n, i in enumerate(items, 1)))

    def table(self, headers: list[str], rows: list[list[str]], align: str | None = None) -> None:
        self._blocks.append(fmt_table(headers, rows, align))

    def image(self, alt: str, rel_path: str) -> None:
        self._blocks.append(f"![{alt}]({rel_path})")

    def toc_here(self, title: str | None = None) -> None:
        """Where the numbered TOC goes; with ``title`` it is preceded by ``## <title>``, and both are
        left out when no heading made it into the TOC (a report with no section)."""
        self._blocks.append(TOC_MARK + (title or ""))

    def toc_markdown(self) -> str:
        lines = []
        for n, h in enumerate(self._toc, 1):
            lines.append(f"{n}. [{h.toc_label}](#{h.anchor})" + (f" — {h.toc_note}" if h.toc_note else ""))
            for m, c in enumerate(h.children, 1):
                lines.append(f"   {m}. [{c.toc_label}](#{c.anchor})" + (f" — {c.toc_note}" if c.toc_note else ""))
        return "\n".join(lines)

    def render(self) -> str:
        toc = self.toc_markdown()
        out = []
        for b in self._blocks:
            if not b.startswith(TOC_MARK):
                out.append(b)
            elif toc:
                title = b[len(TOC_MARK):]
                out += ([f"## {title}"] if title else []) + [toc]
        return "\n\n".join(out).rstrip() + "\n"
