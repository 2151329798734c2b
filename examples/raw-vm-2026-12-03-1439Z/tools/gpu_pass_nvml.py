"""NVML readings for the GPU memory and links pass: the PCIe link (generation and width, current
and maximum) and the memory-health counters read before and after the pass (ECC, retired pages,
remapped rows). Stdlib + pynvml only; every reading that the driver does not offer is None, never
a guess.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a counter this GPU or driver does not offer stays unread
        return None


def pcie_link(nv: Any, handle: Any) -> dict[str, int | None]:
    """The link as NVML reports it now and at most (the GPU's own maximum where the driver has
    that call: the system's maximum can be lower when the slot is)."""
    gpu_max = getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
    return {
        "gen_current": _call(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "gen_max": _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "gen_gpu_max": _call(gpu_max, handle) if gpu_max else None,
        "width_current": _call(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "width_max": _call(nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
    }


def memory_health(nv: Any, handle: Any) -> dict[str, Any]:
    """ECC counts (volatile: since the driver loaded; aggregate: the GPU's life), retired pages
    (pre-Ampere) and remapped rows (Ampere and later)."""
    out: dict[str, Any] = {"ecc_enabled": None}
    mode = _call(nv.nvmlDeviceGetEccMode, handle)
    if mode is not None:
        out["ecc_enabled"] = bool(mode[0])
    for kind, etype in (("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                        ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        for scope, counter in (("volatile", nv.NVML_VOLATILE_ECC), ("aggregate", nv.NVML_AGGREGATE_ECC)):
            value = _call(nv.nvmlDeviceGetTotalEccErrors, handle, etype, counter)
            out[f"ecc_{kind}_{scope}"] = int(value) if value is not None else None
    for name, cause in (("retired_sbe", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                        ("retired_dbe", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
        pages = _call(nv.nvmlDeviceGetRetiredPages, handle, getattr(nv, cause, 0))
        out[name] = len(pages) if pages is not None else None
    pending = _call(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    out["retired_pending"] = bool(pending) if pending is not None else None
    rows = _call(getattr(nv, "nvmlDeviceGetRemappedRows", None) or (lambda h: None), handle)
    if rows is not None:
        corr, unc, is_pending, failed = rows
        out.update(remapped_corrected=int(corr), remapped_uncorrected=int(unc),
                   remap_pending=bool(is_pending), remap_failed=bool(failed))
    else:
        out.update(remapped_corrected=None, remapped_uncorrected=None, remap_pending=None, remap_failed=None)
    return out


@contextlib.contextmanager
def near_gpu(nv: Any, handle: Any) -> Iterator[bool]:
    """The calling thread on the CPUs NVML names nearest the GPU while the block runs, then on its
    old ones again: pinned host buffers allocated inside sit in the GPU's NUMA node, as nvbandwidth
    binds its thread before allocating its host buffers. Yields whether it was bound (False without
    NVML, a handle, or Linux's per-thread affinity)."""
    bound = False
    saved = os.sched_getaffinity(0) if nv is not None and handle is not None and hasattr(os, "sched_getaffinity") \
        else None
    if saved is not None:
        try:
            nv.nvmlDeviceSetCpuAffinity(handle)
            bound = True
        except Exception:  # noqa: BLE001 - the driver cannot say: the copies run where the thread is
            bound = False
    try:
        yield bound
    finally:
        if bound and saved is not None:
            os.sched_setaffinity(0, saved)
