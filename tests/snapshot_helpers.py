"""Build snapshot script output from captured tool outputs, the way the collection script frames it."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200 = FIXTURES / "h200x2"


def captured(path: Path) -> str:
    """A fixture's text without its ``$ command`` line."""
    text = path.read_text()
    if text.startswith("$ "):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text


def section(name: str, text: str = "", rc: int | None = 0, missing: str = "") -> str:
    if missing:
        return f"\n@@ce {name}\n@@ce-missing {missing}\n"
    body = f"\n@@ce {name}\n{text.rstrip(chr(10))}\n"
    return body + (f"\n@@ce-rc {rc}\n" if rc is not None else "")


def h200_sections(**override: str | tuple[str, int] | None) -> dict[str, tuple[str, int] | None]:
    """The real 2x H200 captures as snapshot sections; ``override`` replaces (text or (text, rc)) or
    drops (None) a section."""
    stat_line = captured(H200 / "shm-loadavg.txt").splitlines()[-1]
    secs: dict[str, tuple[str, int] | None] = {
        "stat": (stat_line + "\n" + stat_line.replace(" 101960 ", " 102160 "), 0),
        "hostname": ("vm", 0),
        "kernel": ("6.18.44-fc-v657-gpu", 0),
        "os": ("Ubuntu 24.04.3 LTS", 0),
        "nvsmi_query": (captured(H200 / "nvidia-smi-query-gpu.csv"), 0),
        "nvsmi_q": (captured(H200 / "nvidia-smi-q.txt"), 0),
        "nvsmi_topo": (captured(H200 / "nvidia-smi-topo-m.txt"), 0),
        "nvsmi_nvlink": (captured(H200 / "nvidia-smi-nvlink-s.txt"), 0),
        "nvsmi_apps": (captured(H200 / "nvidia-smi-compute-apps.csv"), 0),
        "xid": ("", 0),  # grep -i xid over the captured dmesg: no line matches
        "ib": ("no /sys/class/infiniband", 0),
        "fabricmanager": ("nvswitch_devices: 0\nservice: inactive", 0),
        "governor": ("", 0),  # the captured VM exposes no cpufreq governor
        "shm": (captured(H200 / "shm-loadavg.txt").split("\n0.08")[0], 0),
        "root": ("Filesystem     Type  Size  Used Avail Use% Mounted on\n"
                 + captured(H200 / "mounts.txt").splitlines()[2], 0),
        "nccl_versions": ("header /usr/include/nccl.h: #define NCCL_MAJOR 2\n"
                          "header /usr/include/nccl.h: #define NCCL_MINOR 28\n"
                          "header /usr/include/nccl.h: #define NCCL_PATCH 3", 0),
        "cuda_toolkit": ("nvcc: 13.0", 0),
        "python_packages": ("torch\t2.11.0+cu130\nnvidia-nccl-cu13\t2.28.9", 0),
    }
    for name, value in override.items():
        secs[name] = (value, 0) if isinstance(value, str) else value
    return secs


def script_output(secs: dict[str, tuple[str, int] | None], missing: dict[str, str] | None = None) -> str:
    parts = []
    for name, value in secs.items():
        if value is None:
            continue
        text, rc = value
        parts.append(section(name, text, rc))
    for name, tool in (missing or {}).items():
        parts.append(section(name, missing=tool))
    return "".join(parts)
