"""How the report writes quantities: IEC sizes, durations, ranges, node lists. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable

IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# Byte sizes. Each format below is used for a different kind of size on purpose and they differ
# in rounding, so they are kept apart; every size the report, the findings and the progress
# lines write goes through one of them.


def _scaled(n_bytes: int | float) -> tuple[float, str]:
    """The value in the largest IEC unit that keeps it at 1 or more: (1.5, "GiB")."""
    value = float(n_bytes)
    i = 0
    while value >= 1024 and i < len(IEC_UNITS) - 1:
        value /= 1024
        i += 1
    return value, IEC_UNITS[i]


def iec(n_bytes: int | float) -> str:
    """A measured size in prose: one decimal below 100 with a trailing ``.0`` dropped, whole
    numbers above: ``3.5 TiB``, ``252 GiB``, ``1 GiB``, ``512 B``. Never ``16k`` / ``1g``."""
    value, unit = _scaled(n_bytes)
    if unit == "B":
        return f"{int(n_bytes)} B"
    return f"{fmt_num(value)} {unit}"


def iec_tenths(n_bytes: int | float) -> str:
    """A size with its tenth always shown below 100: ``16.0 GiB``, ``1.5 GiB``, ``256 GiB``
    (the snapshot's findings: a ``/dev/shm`` of 64.0 GiB reads as measured, not as a setting)."""
    value, unit = _scaled(n_bytes)
    return f"{value:.0f} {unit}" if value >= 100 or unit == "B" else f"{value:.1f} {unit}"


def iec_one_decimal(n_bytes: int | float) -> str:
    """Always one decimal: ``16.0 GiB``, ``256.0 GiB``, ``1.5 KiB``, ``0 B`` (scratch sizes in the
    cleanup and free-space lines)."""
    value, unit = _scaled(n_bytes)
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def iec_df(n_bytes: int | float) -> str:
    """A volume size at the precision ``df -h`` shows: one decimal below 10, whole above:
    ``2.3 TiB``, ``252 GiB``, ``28 TiB``. Two volumes are "the same size" when these agree."""
    value, unit = _scaled(n_bytes)
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def iec_whole(num_bytes: int) -> str:
    """A size that is a whole number of its unit: ``16 KiB``, ``1 GiB``, ``1536 MiB``, else bytes.
    fio file sizes, block and stripe sizes: settings, written exactly. Without the space it is the
    cell key of operator targets (``16KiB-read``)."""
    for label, unit in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit} {label}"
    return f"{num_bytes} B"


def iec_precise(num_bytes: int) -> str:
    """A size in the largest unit up to GiB, to six significant digits: ``32 KiB``, ``1.25 GiB``,
    ``16 GiB``. All-reduce payloads (table rows, plot ticks, prose): a payload is a setting, so
    ``--payload-mib 1280`` reads ``1.25 GiB``, not a rounded ``1.2 GiB``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:g} {unit}"
    return f"{num_bytes} B"


def fmt_duration(seconds: float) -> str:
    """``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    total = max(0, int(round(seconds)))
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def fmt_num(value: float, digits: int = 1) -> str:
    """One decimal below 100 (trailing ``.0`` dropped), whole numbers above."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def span(values: Iterable[float], unit: str, fmt=None) -> str:  # noqa: ANN001
    """``345 MHz`` when all equal, ``77–79 W`` for a range (en dash, one unit)."""
    vals = sorted(v for v in values if v)
    if not vals:
        return ""
    f = fmt or (lambda v: f"{v:g}")
    lo, hi = f(vals[0]), f(vals[-1])
    return f"{lo} {unit}" if lo == hi else f"{lo}–{hi} {unit}"


def short_list(names: list[str], limit: int = 8) -> str:
    """``a, b, c``; past ``limit`` names, the first ``limit`` and "and N more"."""
    return ", ".join(names) if len(names) <= limit else ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def joined(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` ("" for none)."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def pcie_uni_gb_s(gen: int, width: int) -> float:
    """Unidirectional PCIe payload bandwidth in GB/s after line encoding (Gen5 ×16 ≈ 63)."""
    per_lane = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gen, 0.0)
    return per_lane * width


# ---- storage figures: the fio tables and the prose beside them ----------------------------


def fmt_bw(mib_s: float, grouped: bool) -> str:
    """MiB/s with one decimal; ``_`` thousands on the local table (``1_095.4``)."""
    return f"{mib_s:,.1f}".replace(",", "_") if grouped else f"{mib_s:.1f}"


def fmt_iops_m(iops: float) -> str:
    """IOPS in millions with three significant digits: ``3.08``, ``0.157``, ``0.280``."""
    millions = iops / 1e6
    if millions <= 0:
        return "0"
    decimals = max(0, min(6, 2 - math.floor(math.log10(millions))))
    return f"{millions:.{decimals}f}"


def fmt_latency(msec: float) -> str:
    """Milliseconds: one decimal from 1 ms up, two significant digits below."""
    if msec >= 1 or msec <= 0:
        return f"{msec:.1f}"
    decimals = max(1, min(6, 1 - math.floor(math.log10(msec))))
    return f"{msec:.{decimals}f}"


def fmt_ratio(local_bw: float, shared_bw: float) -> str:
    return f"{local_bw / shared_bw:.1f}" if shared_bw > 0 else ""


def fmt_target(value: float, unit: str, grouped: bool) -> str:
    """A measured or target value in prose, in the table's own units (IOPS in millions)."""
    if unit == "IOPS":
        return f"{fmt_iops_m(value)} million IOPS"
    return fmt_bw(value, grouped) + " MiB/s"
