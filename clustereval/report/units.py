"""How the report writes quantities: IEC sizes, ranges, node lists. Pure."""

from __future__ import annotations

from collections.abc import Iterable


def iec(n_bytes: int | float) -> str:
    """``3.5 TiB``, ``252 GiB``, ``512 MiB``: IEC units, never ``16k`` / ``1g``."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    value = float(n_bytes)
    i = 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    if i == 0:
        return f"{int(n_bytes)} B"
    return f"{fmt_num(value)} {units[i]}"


def fmt_num(value: float, digits: int = 1) -> str:
    """One decimal below 100 (trailing ``.0`` dropped), whole numbers above."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def gib_of_mib(mib: int | float) -> str:
    return f"{fmt_num(mib / 1024)} GiB"


def span(values: Iterable[float], unit: str, fmt=None) -> str:  # noqa: ANN001
    """``345 MHz`` when all equal, ``77–79 W`` for a range (en dash, one unit)."""
    vals = sorted(v for v in values if v)
    if not vals:
        return ""
    f = fmt or (lambda v: f"{v:g}")
    lo, hi = f(vals[0]), f(vals[-1])
    return f"{lo} {unit}" if lo == hi else f"{lo}–{hi} {unit}"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def pcie_uni_gb_s(gen: int, width: int) -> float:
    """Unidirectional PCIe payload bandwidth in GB/s after line encoding (Gen5 ×16 ≈ 63)."""
    per_lane = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gen, 0.0)
    return per_lane * width
