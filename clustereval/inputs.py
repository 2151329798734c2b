"""Paths the user hands over on the command line, checked before anything slow starts.

Each check raises a ``UsageError`` with its own id, the path, what is wrong and a fix, so a
missing, binary, unreadable or misplaced file is one line and exit 2, never a traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from clustereval.errors import UsageError


def decode_text(data: bytes) -> tuple[str | None, int, str]:
    """(text, 0, "") for a UTF-8 text file; (None, line, why) for binary or non-UTF-8 bytes."""
    newline = b"\n"
    nul = data.find(b"\x00")
    if nul >= 0:
        return None, data.count(newline, 0, nul) + 1, "not a text file: it holds binary data (a NUL byte)"
    try:
        return data.decode("utf-8"), 0, ""
    except UnicodeDecodeError as exc:
        return None, data.count(newline, 0, exc.start) + 1, (f"not a text file: byte 0x{data[exc.start]:02x} "
                                                              "is not UTF-8")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_text_file(path_text: str, *, what: str, hint: str) -> str:
    """The UTF-8 text of the file at ``path_text``; ``what`` names it in messages ("the report")."""
    if not path_text.strip():
        raise UsageError(f"the path of {what} is empty", hint, error_id="empty-path")
    path = Path(path_text)
    if path.is_dir():
        raise UsageError(f"{path_text}: is a directory, not {what}", hint, error_id="not-a-file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path_text}: no such file", hint, error_id="file-not-found") from None
    except PermissionError as exc:
        raise UsageError(f"{path_text}: cannot read it ({_reason(exc)})",
                         "check the file's permissions, or run as a user who can read it",
                         error_id="unreadable") from None
    except OSError as exc:
        raise UsageError(f"{path_text}: cannot read it ({_reason(exc)})", hint, error_id="unreadable") from None
    text, line, why = decode_text(data)
    if text is None:
        raise UsageError(f"{path_text}:{line}: {why}, so it is not {what}", hint, error_id="not-text")
    return text


def file_to_write(path_text: str, *, example: str) -> Path:
    """A path ``init`` may create: not empty, not a directory, not an existing file, its folder writable.

    ``example``: a command that works, for the hints."""
    if not path_text.strip():
        raise UsageError("the path is empty", f"give a file name, e.g. {example}", error_id="empty-path")
    path = Path(path_text)
    if path_text.endswith(("/", os.sep)) or path.is_dir():
        raise UsageError(f"{path_text}: is a directory; a file name is needed",
                         f"name the file inside it, e.g. clustereval init {path_text.rstrip('/')}/cluster.toml",
                         error_id="path-is-directory")
    if path.exists() or path.is_symlink():
        raise UsageError(f"{path_text}: already exists; not overwriting it",
                         "edit it, or give another path: clustereval init other.toml", error_id="file-exists")
    parent = path.parent
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{path_text}: cannot create it: {existing} is a file, not a folder",
                         f"pick another path, e.g. {example}", error_id="cannot-write")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{path_text}: cannot create it: {existing} is not writable by this user",
                         f"pick a folder you can write, e.g. {example}", error_id="cannot-write")
    return path


def write_new_file(path: Path, text: str, *, example: str) -> None:
    """Create ``path`` (and its folders) with ``text``; an OS refusal is a ``cannot-write`` error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"{path}: already exists; not overwriting it",
                         "edit it, or give another path: clustereval init other.toml", error_id="file-exists") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot create it ({_reason(exc)})",
                         f"pick a folder you can write, e.g. {example}", error_id="cannot-write") from None


def writable_dir(path_text: str, *, option: str) -> Path:
    """A folder the run writes into (created when missing); ``option`` says where it came from,
    e.g. "--reports-dir" or "reports_dir in cluster.toml"."""
    example = f"{option} reports" if option.startswith("--") else 'reports_dir = "reports"'
    if not path_text.strip():
        raise UsageError(f"{option} is an empty path", f"give a folder, e.g. {example}", error_id="empty-path")
    path = Path(path_text).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path_text} ({option}): is a file, not a folder",
                         f"give a folder, e.g. {example}", error_id="not-a-directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{path_text} ({option}): cannot create the folder ({_reason(exc)})",
                         f"pick a folder you can write, e.g. {example}", error_id="cannot-write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{path_text} ({option}): {os.strerror(errno.EACCES).lower()}: this user cannot write "
                         "there", f"pick a folder you can write, e.g. {example}", error_id="cannot-write")
    return path
