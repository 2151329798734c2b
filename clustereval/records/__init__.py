"""Typed results. Units live in field names (``busbw_gb_s``, ``power_w``).

Every record is a dataclass; ``to_dict`` / ``from_dict`` round-trip it through JSON
unchanged, nested dataclasses, lists, dicts and optionals included.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

SCHEMA_VERSION = 1

T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """A dataclass (or list / dict of them) as plain JSON-able data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    # each base class resolves its annotations in its own module
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return _convert(options[0], value)
        for arg in options:  # first that fits
            try:
                return _convert(arg, value)
            except (TypeError, ValueError, KeyError):
                continue
        return value
    if origin in (list, typing.List):  # noqa: UP006
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v) for v in value]
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        return tuple(_convert(a, v) for a, v in zip(args, value, strict=False))
    if origin in (dict, typing.Dict):  # noqa: UP006
        key_t, val_t = typing.get_args(tp) or (Any, Any)
        return {_convert(key_t, k): _convert(val_t, v) for k, v in value.items()}
    if origin is typing.Literal:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float and isinstance(value, int):
        return float(value)
    if tp is int and isinstance(value, str):
        return int(value)
    return value


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a dataclass from ``to_dict`` output; unknown keys are ignored."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints.get(f.name, Any), data[f.name])
    return cls(**kwargs)


def dumps(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=2, sort_keys=False) + "\n"


def loads(cls: type[T], text: str) -> T:
    return from_dict(cls, json.loads(text))


# ---- records shared by every layer -------------------------------------------------------


@dataclass
class CommandResult:
    """What one command did on one node."""

    node: str
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


@dataclass
class Gap:
    """Something a phase needed and could not do; the report's ``### Gaps`` and the close-out list it.

    A phase records the case and its facts: ``kind`` names the case (``storage.fio-missing``),
    ``facts`` hold what failed, where, the raw error and the plan's parameters. ``report.gaps``
    words them at render time into ``text`` (what is missing) and ``plan`` (the proposed plan of
    action). A phase leaves those two empty; a record of a run from before kinds stored its words
    there, and the report says them as stored."""

    phase: str
    text: str = ""
    plan: str = ""
    node: str = ""
    kind: str = ""
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    """One bullet under ``## Findings``."""

    category: str  # "healthy" | "underperforming" | "needs_input"
    subsystem: str  # GPUs, fabric, local disk, shared network FS, torchrun, ...
    text: str
    # the figures behind the bullet, each judged by a row of analysis/rules.py (Judged.to_dict()), met or not
    judged: list[dict] = field(default_factory=list)


FINDING_CATEGORIES = ("healthy", "underperforming", "needs_input")


@dataclass
class PhaseRecord:
    """Fields every phase record carries."""

    phase: str = ""
    status: str = "ok"  # ok | failed | partial | skipped
    started_utc: str = ""
    finished_utc: str = ""
    seconds: float = 0.0
    gaps: list[Gap] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
