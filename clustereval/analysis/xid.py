"""What the common Xid numbers mean, in one line each, and who usually causes them.

The meanings paraphrase NVIDIA's Xid catalog. ``origin`` decides where the snapshot points:
hardware (drain / replace), NVLink (fabric), the application (its own bug; hardware only if it
repeats across unrelated code) or the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustereval.records.snapshot import XidEvent


@dataclass(frozen=True)
class XidInfo:
    meaning: str
    origin: str  # "hardware" | "application" | "driver" | "nvlink"


XID_CATALOG: dict[int, XidInfo] = {
    8: XidInfo("GPU stopped responding to the driver (channel timeout)", "driver"),
    13: XidInfo("graphics engine exception: usually an out-of-range access in the application's kernel",
                "application"),
    31: XidInfo("GPU memory page fault: usually an illegal address in the application", "application"),
    32: XidInfo("invalid or corrupted push buffer stream", "driver"),
    38: XidInfo("driver firmware error", "driver"),
    43: XidInfo("GPU stopped processing: the channel was reset after an application fault", "application"),
    45: XidInfo("preemptive cleanup after earlier errors (a process was killed or exited)", "application"),
    48: XidInfo("double-bit ECC error in GPU memory", "hardware"),
    56: XidInfo("display engine error", "hardware"),
    61: XidInfo("internal micro-controller breakpoint or warning", "hardware"),
    62: XidInfo("internal micro-controller halt", "hardware"),
    63: XidInfo("ECC page retirement or row remapping recorded (needs a GPU reset to take effect)",
                "hardware"),
    64: XidInfo("ECC page retirement or row remapping failed to record", "hardware"),
    68: XidInfo("video decoder exception", "hardware"),
    69: XidInfo("graphics engine class error", "driver"),
    74: XidInfo("NVLink error", "nvlink"),
    79: XidInfo("GPU has fallen off the bus", "hardware"),
    92: XidInfo("high single-bit ECC error rate", "hardware"),
    94: XidInfo("contained ECC error: the affected application was stopped", "hardware"),
    95: XidInfo("uncontained ECC error: every application on the GPU is affected, a reset is needed",
                "hardware"),
    109: XidInfo("context switch timeout", "driver"),
    119: XidInfo("GSP (GPU System Processor) RPC timeout", "hardware"),
    120: XidInfo("GSP (GPU System Processor) error", "hardware"),
    121: XidInfo("C2C (chip-to-chip) link error", "nvlink"),
    123: XidInfo("SPI PMU RPC write failure", "hardware"),
    136: XidInfo("GPU initialization failure", "hardware"),
    140: XidInfo("unrecovered ECC error", "hardware"),
    143: XidInfo("GPU initialization failure", "hardware"),
    144: XidInfo("NVLink: SAW (switch access window) error", "nvlink"),
    145: XidInfo("NVLink: RLW (receive link) error", "nvlink"),
    146: XidInfo("NVLink: TLW (transmit link) error", "nvlink"),
    147: XidInfo("NVLink: TREX error", "nvlink"),
    148: XidInfo("NVLink: NVLPW_CTRL error", "nvlink"),
    149: XidInfo("NVLink: NETIR error", "nvlink"),
    150: XidInfo("NVLink: MSE (management subsystem) error", "nvlink"),
    154: XidInfo("GPU recovery action changed (the driver asks for a reset, reboot or drain)", "hardware"),
}



def xid_meaning(event: XidEvent) -> str:
    if event.nvswitch:
        return "NVSwitch error"
    info = XID_CATALOG.get(event.xid)
    return info.meaning if info else "no one-line meaning here; look it up in NVIDIA's Xid catalog"


def xid_origin(event: XidEvent) -> str:
    if event.nvswitch:
        return "nvlink"
    info = XID_CATALOG.get(event.xid)
    return info.origin if info else "hardware"
