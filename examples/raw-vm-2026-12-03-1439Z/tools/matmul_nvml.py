"""NVML for the matmul worker: the few calls it needs, and the sampling thread behind every
measurement (board power, SM clock, temperature and clock-event reasons of the measured GPU; the
utilisation of its siblings, to see whether their load stopped). Stdlib + pynvml only.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from clustereval.analysis.matmul import idle_siblings, percentile
from clustereval.analysis.steady import reason_names
from clustereval.records.compute import TracePoint

SAMPLE_INTERVAL_S = 0.02
MIN_SIBLING_SAMPLES = 2  # a sibling read fewer times than this in a window counts as unread


class Nvml:
    """The few NVML calls we need; ``ok`` is False without pynvml or a driver."""

    _VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}

    def __init__(self) -> None:
        self.ok = False
        self.error = ""
        self.power_source = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.ok = True
        except Exception as exc:  # noqa: BLE001 - no pynvml, no driver: run without telemetry
            self.error = f"{type(exc).__name__}: {exc}"

    @classmethod
    def absent(cls, why: str) -> Nvml:
        nvml = cls.__new__(cls)
        nvml.ok, nvml.error, nvml.power_source = False, why, ""
        return nvml

    def handle(self, index: int) -> Any:
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, h: Any) -> str:
        return _text(self.nv.nvmlDeviceGetUUID(h))

    def name(self, h: Any) -> str:
        return _text(self.nv.nvmlDeviceGetName(h))

    def power_limit_w(self, h: Any) -> float | None:
        try:
            return self.nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except Exception:  # noqa: BLE001
            return None

    def boost_mhz(self, h: Any) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetMaxClockInfo(h, self.nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            return None

    def sm_mhz(self, h: Any) -> float:
        return float(self.nv.nvmlDeviceGetClockInfo(h, self.nv.NVML_CLOCK_SM))

    def temp_c(self, h: Any) -> float:
        return float(self.nv.nvmlDeviceGetTemperature(h, self.nv.NVML_TEMPERATURE_GPU))

    def clock_reasons(self, h: Any) -> int:
        """The clock-event reasons bitmask (older pynvml: the "throttle reasons" call)."""
        call = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(call(h))

    def util_pct(self, h: Any) -> float:
        return float(self.nv.nvmlDeviceGetUtilizationRates(h).gpu)

    def _instant_power_w(self, h: Any) -> float | None:
        field_id = getattr(self.nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field_id is None:
            return None
        value = self.nv.nvmlDeviceGetFieldValues(h, [field_id])[0]
        if value.nvmlReturn != 0:
            return None
        raw = getattr(value.value, self._VALUE_FIELDS.get(value.valueType, "uiVal"))
        watts = float(raw) / 1000.0
        return watts if 1.0 <= watts <= 5000.0 else None

    def power_w(self, h: Any) -> float:
        """Instantaneous board power where the driver offers it, else NVML's (1 s averaged) reading."""
        if self.power_source != "average":
            try:
                watts = self._instant_power_w(h)
            except Exception:  # noqa: BLE001
                watts = None
            if watts is not None:
                self.power_source = "instant"
                return watts
            self.power_source = "average"
        return self.nv.nvmlDeviceGetPowerUsage(h) / 1000.0

    def processes(self, h: Any) -> list[tuple[int, str, int]]:
        """(pid, name, used MiB) of the compute processes on a GPU."""
        out = []
        for p in self.nv.nvmlDeviceGetComputeRunningProcesses(h):
            used = getattr(p, "usedGpuMemory", None) or 0
            out.append((int(p.pid), self._process_name(int(p.pid)), int(used) // 2**20))
        return out

    def _process_name(self, pid: int) -> str:
        try:
            return _text(self.nv.nvmlSystemGetProcessName(pid))
        except Exception:  # noqa: BLE001
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    return fh.read().strip()
            except OSError:
                return "?"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class Sample:
    t: float  # time.monotonic()
    power_w: float
    sm_mhz: float
    temp_c: float | None = None
    reasons: int | None = None  # None: the driver did not answer
    util: dict[int, float] = field(default_factory=dict)  # sibling -> utilisation %, the ones read


class Sampler(threading.Thread):
    """NVML readings of the measured GPU and its siblings' utilisation, every 20 ms.

    A failed read of the measured GPU's power or clock leaves a hole; a failed read of one
    sibling is counted against that sibling only, so ``siblings_sampled`` means every sibling was
    really read during the window, not merely that siblings exist."""

    def __init__(self, nvml: Nvml, handle: Any, siblings: dict[int, Any]) -> None:
        super().__init__(daemon=True)
        self.nvml, self.handle, self.siblings = nvml, handle, siblings
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._times: list[float] = []
        self.sibling_error = ""  # the last error reading a sibling
        self.reasons_available = False

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample_once()
            self._stop_event.wait(SAMPLE_INTERVAL_S)

    def sample_once(self) -> None:
        t = time.monotonic()
        try:
            power = self.nvml.power_w(self.handle)
            clock = self.nvml.sm_mhz(self.handle)
        except Exception:  # noqa: BLE001 - a failed read leaves a hole, not a crash
            return
        s = Sample(t, power, clock)
        try:
            s.temp_c = self.nvml.temp_c(self.handle)
        except Exception:  # noqa: BLE001
            pass
        try:
            s.reasons = self.nvml.clock_reasons(self.handle)
            self.reasons_available = True
        except Exception:  # noqa: BLE001 - not every driver reports them
            pass
        for g, h in self.siblings.items():
            try:
                s.util[g] = self.nvml.util_pct(h)
            except Exception as exc:  # noqa: BLE001 - this sibling is unread this time
                self.sibling_error = f"gpu{g}: {type(exc).__name__}: {exc}"[:200]
        with self._lock:
            self._samples.append(s)
            self._times.append(t)

    def stop(self) -> None:
        self._stop_event.set()

    def _inside(self, t0: float, t1: float) -> list[Sample]:
        with self._lock:
            lo = bisect.bisect_left(self._times, t0)
            hi = bisect.bisect_right(self._times, t1)
            inside = self._samples[lo:hi]
            if not inside:  # a window shorter than one sample: the first one after it
                inside = self._samples[hi:hi + 1] or self._samples[-1:]
        return inside

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        inside = self._inside(t0, t1)
        if not inside:
            return {}
        powers = [s.power_w for s in inside]
        clocks = [s.sm_mhz for s in inside]
        temps = [s.temp_c for s in inside if s.temp_c is not None]
        util: dict[int, list[float]] = {g: [] for g in self.siblings}
        for s in inside:
            for g, u in s.util.items():
                util[g].append(u)
        unread = sorted(g for g, values in util.items() if len(values) < min(MIN_SIBLING_SAMPLES, len(inside)))
        reasons = 0
        for s in inside:
            reasons |= s.reasons or 0
        return {
            "power_w": round(sum(powers) / len(powers), 1),
            "power_max_w": round(max(powers), 1),
            "sm_mhz": round(sum(clocks) / len(clocks), 1),
            "sm_mhz_low": round(percentile(clocks, 5), 1),
            "sm_mhz_high": round(percentile(clocks, 95), 1),
            "num_samples": len(inside),
            "temp_c": max(temps) if temps else None,
            "clock_reasons": reason_names(reasons),
            "idle_siblings": idle_siblings({g: v for g, v in util.items() if g not in unread}),
            "siblings_sampled": bool(self.siblings) and not unread,
            "siblings_unread": unread,
            "sibling_error": self.sibling_error if unread else "",
        }

    def point(self, t0: float, t1: float, origin: float, tflops: float, stage: str) -> TracePoint:
        """A trace point for a stretch [t0, t1] of monotonic time, ``origin`` the trace's start."""
        inside = self._inside(t0, t1)
        p = TracePoint(t_s=round((t0 + t1) / 2 - origin, 3), tflops=tflops, stage=stage)
        if inside:
            p.power_w = round(sum(s.power_w for s in inside) / len(inside), 1)
            p.sm_mhz = round(sum(s.sm_mhz for s in inside) / len(inside), 1)
            temps = [s.temp_c for s in inside if s.temp_c is not None]
            p.temp_c = max(temps) if temps else None
            for s in inside:
                p.reasons |= s.reasons or 0
        return p

    def telemetry(self, origin: float, bin_s: float = 0.5) -> list[TracePoint]:
        """The board over the whole run in ``bin_s`` bins (the trace's continuous readings)."""
        with self._lock:
            samples = list(self._samples)
        out: list[TracePoint] = []
        i = 0
        while i < len(samples):
            start = samples[i].t
            j = i
            while j < len(samples) and samples[j].t < start + bin_s:
                j += 1
            chunk = samples[i:j]
            temps = [s.temp_c for s in chunk if s.temp_c is not None]
            reasons = 0
            for s in chunk:
                reasons |= s.reasons or 0
            out.append(TracePoint(t_s=round(start + bin_s / 2 - origin, 3),
                                  power_w=round(sum(s.power_w for s in chunk) / len(chunk), 1),
                                  sm_mhz=round(sum(s.sm_mhz for s in chunk) / len(chunk), 1),
                                  temp_c=max(temps) if temps else None, reasons=reasons, stage="telemetry"))
            i = j
        return out
