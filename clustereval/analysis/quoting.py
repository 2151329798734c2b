"""A tool's own output line as the report quotes it: a code span, so its words, numbers and paths stay
the tool's and are not read as the report's prose; a path into an interpreter's environment is left
out (how the eval ran is not a report field). Pure; the Gap wordings and the analysis sentences that
carry a launcher's error line both quote through here."""

from __future__ import annotations

import re

_ENV_PATH = re.compile(r"(?<![\w])/[^\s'\"`:,)]*(venv|site-packages|virtualenv)[^\s'\"`:,)]*")


def quoted_line(line: str) -> str:
    """``line`` as a code span (its backticks made quotes), environment paths replaced."""
    line = _ENV_PATH.sub("a path on the node", line)
    return f"`{line.replace('`', chr(39))}`"
