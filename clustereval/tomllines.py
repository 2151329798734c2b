"""Where each key of a TOML file sits: tomllib gives values, not line numbers.

A light scan of the text (table headers, ``key =`` lines, string literals inside arrays) is
enough to point every config problem at a line. It never decides what a value is; tomllib does.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')


def _split_key(text: str) -> tuple[str, ...]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


class TomlLines:
    """Line numbers (1-based) of keys, tables and array elements in one TOML text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._keys: dict[tuple, int] = {}  # path -> line; array-of-tables entries carry their index
        self._spans: dict[tuple, tuple[int, int]] = {}  # key path -> (first, last) line of its value
        self._parse()

    def _parse(self) -> None:
        table: tuple = ()
        aot_count: dict[tuple, int] = {}
        depth = 0  # open brackets of a multi-line value
        open_key: tuple | None = None
        for num, raw in enumerate(self.lines, start=1):
            line = _strip_comment(raw)
            if depth > 0:
                depth += _bracket_delta(line)
                if depth <= 0 and open_key is not None:
                    self._spans[open_key] = (self._spans[open_key][0], num)
                    depth, open_key = 0, None
                continue
            header = _HEADER.match(line)
            if header and "=" not in line.split("]")[0]:
                path = _split_key(header.group(2))
                if header.group(1) == "[[":
                    idx = aot_count.get(path, 0)
                    aot_count[path] = idx + 1
                    table = (*path, idx)
                else:
                    table = path
                self._keys.setdefault(table, num)
                continue
            key = _KEY.match(line)
            if key:
                path = (*table, *_split_key(key.group(1)))
                self._keys.setdefault(path, num)
                value = line[key.end():]
                delta = _bracket_delta(value)
                self._spans[path] = (num, num)
                if delta > 0:
                    depth, open_key = delta, path

    def line(self, *path) -> int:
        """The line of ``path`` (a key or a table), else of its nearest enclosing table, else 1."""
        p = tuple(path)
        while p:
            if p in self._keys:
                return self._keys[p]
            p = p[:-1]
        return 1

    def has(self, *path) -> bool:
        return tuple(path) in self._keys

    def element_line(self, path: tuple, index: int) -> int:
        """The line of the ``index``-th string element of the array at ``path``."""
        if path not in self._spans:
            return self.line(*path)
        first, last = self._spans[path]
        seen = 0
        for num in range(first, last + 1):
            text = _strip_comment(self.lines[num - 1])
            if num == first:
                text = text.split("=", 1)[1] if "=" in text else text
            for _ in _STRING.finditer(text):
                if seen == index:
                    return num
                seen += 1
        return first


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside a string is kept)."""
    out = []
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                out.append(line[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
        i += 1
    return "".join(out)


def _bracket_delta(text: str) -> int:
    """Net open ``[``/``{`` outside strings."""
    text = _STRING.sub("", text)
    return text.count("[") + text.count("{") - text.count("]") - text.count("}")
