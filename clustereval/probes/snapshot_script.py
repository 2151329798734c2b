"""The snapshot's collection script: one read-only shell script per node, output in sections.

One transport call per node (a single SSH round trip) collects every signal. The script is a
constant: user data (the eval Python, shared mount paths) reaches it only as positional
arguments, never as shell text. It writes nothing: no temp files, no caches (``python -B``),
only standard output. Every tool call has a timeout, so a hung GPU or a hung network mount shows
up as a timed-out section instead of a hung snapshot.

Output shape, parsed by ``split_sections``::

    @@ce NAME            a section starts
    ...                  the command's stdout and stderr
    @@ce-rc N            its exit status (124: timed out)
    @@ce-missing TOOL    instead of output and rc: the tool is not installed
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustereval.probes.df import DF_ARGV, parse_df
from clustereval.probes.gpu_procs import COMPUTE_APPS_FIELDS, parse_compute_apps
from clustereval.probes.mounts import NETWORK_FSTYPES
from clustereval.probes.nvsmi_query import SNAPSHOT_FIELDS, SNAPSHOT_FIELDS_MINIMAL, parse_rows
from clustereval.probes.storage import parse_lfs_df
from clustereval.records.snapshot import LustreMount, NodeReadings, ToolStatus

_SCRIPT = r"""
set +e
sample_s=$1; py=$2; shift 2
TMO=""; command -v timeout >/dev/null 2>&1 && TMO="timeout -k 2"
sec() { printf '\n@@ce %s\n' "$1"; }
rc() { printf '\n@@ce-rc %d\n' "$1"; }
miss() { printf '@@ce-missing %s\n' "$1"; }
# probe NAME SECONDS TOOL ARGS...: one section; "missing" when TOOL is not on PATH
probe() {
  local name=$1 t=$2 tool=$3; shift 3
  sec "$name"
  if command -v "$tool" >/dev/null 2>&1; then $TMO "$t" "$tool" "$@" 2>&1; rc $?; else miss "$tool"; fi
}
# iowait: two /proc/stat samples sample_s apart, before anything else runs
sec stat; head -n 1 /proc/stat; sleep "$sample_s"; head -n 1 /proc/stat; rc 0
sec hostname; hostname 2>&1; rc $?
sec kernel; uname -r 2>&1; rc $?
sec os; sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"'; rc 0
sec system; cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name 2>/dev/null; rc 0
probe net 10 ip -o -4 addr show scope global
sec nvsmi_query
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$($TMO 20 nvidia-smi --query-gpu=@@QUERY@@ --format=csv 2>&1); r=$?
  if [ $r -ne 0 ] && printf '%s' "$out" | grep -qi 'field'; then
    out=$($TMO 20 nvidia-smi --query-gpu=@@QUERYMIN@@ --format=csv 2>&1); r=$?
  fi
  printf '%s\n' "$out"; rc $r
else miss nvidia-smi; fi
probe nvsmi_q 30 nvidia-smi -q
probe nvsmi_topo 20 nvidia-smi topo -m
probe nvsmi_nvlink 20 nvidia-smi nvlink -s
probe nvsmi_apps 20 nvidia-smi --query-compute-apps=@@APPS@@ --format=csv
sec xid
if command -v dmesg >/dev/null 2>&1; then
  out=$($TMO 10 dmesg 2>&1); r=$?
  if [ $r -ne 0 ] && command -v journalctl >/dev/null 2>&1; then
    out=$($TMO 20 journalctl -k -q --no-pager 2>&1); r=$?
  fi
  if [ $r -eq 0 ]; then printf '%s\n' "$out" | grep -i -E 'xid' | tail -n 500; else printf '%s\n' "$out" | tail -n 3; fi
  rc $r
else miss dmesg; fi
sec ib
if [ -d /sys/class/infiniband ]; then
  for p in /sys/class/infiniband/*/ports/*; do
    [ -e "$p/state" ] || continue
    d=${p%/ports/*}; d=${d##*/}
    drv=$(readlink -f "/sys/class/infiniband/$d/device/driver" 2>/dev/null); drv=${drv##*/}
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "${p##*/}" "$(cat "$p/state" 2>/dev/null)" \
      "$(cat "$p/rate" 2>/dev/null)" "$(cat "$p/link_layer" 2>/dev/null)" "$drv" \
      "$(cat "$p/phys_state" 2>/dev/null)"
  done
  rc 0
else printf 'no /sys/class/infiniband\n'; rc 0; fi
FI=fi_info; command -v fi_info >/dev/null 2>&1 || { [ -x /opt/amazon/efa/bin/fi_info ] && FI=/opt/amazon/efa/bin/fi_info; }
sec fi_efa
if command -v "$FI" >/dev/null 2>&1; then $TMO 20 "$FI" -p efa 2>&1 | head -n 40; rc "${PIPESTATUS[0]}"; else miss fi_info; fi
sec fi_version
if command -v "$FI" >/dev/null 2>&1; then $TMO 10 "$FI" --version 2>&1; rc $?; else miss fi_info; fi
sec efa_versions
sed -n '1,3p' /opt/amazon/efa_installed_packages 2>/dev/null | sed 's/^/installer: /'
[ -r /sys/module/efa/version ] && printf 'module: %s\n' "$(cat /sys/module/efa/version)"
for f in /opt/amazon/ofi-nccl/lib*/libnccl-net*.so* /opt/aws-ofi-nccl/lib*/libnccl-net*.so* \
         /usr/local/lib/libnccl-net*.so* /usr/lib/x86_64-linux-gnu/libnccl-net*.so*; do
  [ -f "$f" ] || continue
  v=$(grep -a -o -m 1 -E 'aws-ofi-nccl [0-9][0-9A-Za-z.+-]*' "$f" 2>/dev/null | head -n 1)
  printf 'ofi-nccl: %s\t%s\n' "$f" "$v"
done
rc 0
sec nccl_versions
ldconfig -p 2>/dev/null | awk '/libnccl\.so/{print $NF}' | while read -r f; do printf 'lib: %s\n' "$(readlink -f "$f")"; done | sort -u
for h in /usr/include/nccl.h /usr/local/cuda/include/nccl.h; do
  [ -r "$h" ] && grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$h" | sed "s|^|header $h: |"
done
rc 0
sec cuda_toolkit
if [ -r /usr/local/cuda/version.json ]; then grep -A 3 '"cuda"' /usr/local/cuda/version.json | sed -n 's/.*"version" *: *"\([^"]*\)".*/json: \1/p' | head -n 1
elif command -v nvcc >/dev/null 2>&1; then nvcc --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/nvcc: \1/p'
elif [ -r /usr/local/cuda/version.txt ]; then sed 's/^/txt: /' /usr/local/cuda/version.txt; fi
rc 0
sec python_packages
if command -v "$py" >/dev/null 2>&1; then
  $TMO 30 "$py" -B -c '
import importlib.metadata as m
for d in m.distributions():
    n = (d.metadata["Name"] or "").lower()
    if n == "torch" or n.startswith("nvidia-nccl"):
        print(n + "\t" + d.version)
' 2>&1; rc $?
else miss "$py"; fi
sec fabricmanager
n=$(ls -d /dev/nvidia-nvswitch* /proc/driver/nvidia-nvswitch/devices/* 2>/dev/null | wc -l)
printf 'nvswitch_devices: %s\n' "$n"
if command -v systemctl >/dev/null 2>&1; then printf 'service: %s\n' "$($TMO 10 systemctl is-active nvidia-fabricmanager 2>/dev/null)"; fi
rc 0
sec governor
cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort | uniq -c; rc 0
sec shm; $TMO 10 @@DF@@ -- /dev/shm 2>&1; rc $?
sec root; $TMO 10 @@DF@@ -- / 2>&1; rc $?
sec mounts; cat /proc/mounts 2>&1; rc $?
shared=$(awk -v t="@@SHARED@@" 'BEGIN{n=split(t,a,",");for(i=1;i<=n;i++)s[a[i]]=1} ($3 in s){print $2}' /proc/mounts 2>/dev/null)
for m in $shared "$@"; do
  [ -n "$m" ] || continue
  sec "df $m"; $TMO 10 @@DF@@ -- "$m" 2>&1; rc $?
  fstype=$(awk -v m="$m" '$2==m{t=$3} END{print t}' /proc/mounts)
  if [ "$fstype" = lustre ]; then
    sec "lfs_df $m"
    if command -v lfs >/dev/null 2>&1; then $TMO 20 lfs df -- "$m" 2>&1; rc $?; else miss lfs; fi
  fi
done
"""


def build_script() -> str:
    return (_SCRIPT.replace("@@QUERYMIN@@", ",".join(SNAPSHOT_FIELDS_MINIMAL))
            .replace("@@QUERY@@", ",".join(SNAPSHOT_FIELDS))
            .replace("@@APPS@@", ",".join(COMPUTE_APPS_FIELDS))
            .replace("@@SHARED@@", ",".join(sorted(NETWORK_FSTYPES)))
            .replace("@@DF@@", " ".join(DF_ARGV)))


def build_argv(*, python: str = "python3", shared_paths: tuple[str, ...] | list[str] = (),
               sample_s: float = 3.0) -> list[str]:
    """``bash -c SCRIPT`` with the sample time, the Python and shared paths as plain arguments."""
    return ["bash", "-c", build_script(), "clustereval-snapshot", f"{sample_s:g}", python,
            *[str(p) for p in shared_paths]]


@dataclass
class Section(ToolStatus):
    """One section of the script's output: how its tool went, and what it printed."""

    text: str = ""


def split_sections(text: str) -> dict[str, Section]:
    """The script's output as sections by name (later duplicates win)."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    lines: list[str] = []

    def close() -> None:
        if current is not None:
            current.text = "\n".join(lines).strip("\n")
            sections[current.section] = current

    for line in text.splitlines():
        if line.startswith("@@ce-rc "):
            if current is not None:
                try:
                    current.rc = int(line[8:].strip())
                except ValueError:
                    current.rc = -1
        elif line.startswith("@@ce-missing "):
            if current is not None:
                current.missing = line[13:].strip()
        elif line.startswith("@@ce "):
            close()
            current = Section(section=line[5:].strip(), rc=None)  # None: the script ended before the section did
            lines = []
        elif current is not None:
            lines.append(line)
    close()
    return sections


def _status(sec: Section) -> ToolStatus:
    error = ""
    if not sec.ok and not sec.missing:
        lines = [ln.strip() for ln in sec.text.splitlines() if ln.strip()]
        error = lines[-1] if lines else ""
    return ToolStatus(section=sec.section, rc=sec.rc, missing=sec.missing, error=error)


def parse_output(node: str, text: str, *, sample_s: float = 0.0,
                 shared_requested: tuple[str, ...] | list[str] = ()) -> NodeReadings:
    """The whole script output as one node's readings (pure)."""
    from clustereval.probes import snapshot_gpu as gpu
    from clustereval.probes import snapshot_host as host
    from clustereval.probes.xid import parse_xid_lines

    secs = split_sections(text)
    r = NodeReadings(node=node, sample_s=sample_s, shared_requested=list(shared_requested))
    r.status = {name: _status(sec) for name, sec in secs.items()}

    def text_of(name: str) -> str:
        sec = secs.get(name)
        return sec.text if sec is not None and sec.ok else ""

    r.hostname = text_of("hostname").strip().split(".")[0]
    r.kernel = text_of("kernel").strip()
    r.os = text_of("os").strip()
    r.system_model = " ".join(ln.strip() for ln in text_of("system").splitlines() if ln.strip())
    r.addresses = [m.group(1) for m in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+/\d+)", text_of("net"))]
    r.cpu_samples = host.parse_proc_stat(text_of("stat"))
    r.gpus = parse_rows(text_of("nvsmi_query"))
    smi_q = gpu.parse_smi_q(text_of("nvsmi_q"))
    r.gpu_details = smi_q.gpus
    r.driver_version = smi_q.driver_version or next((g.driver_version for g in r.gpus), "")
    r.cuda_driver_version = smi_q.cuda_version
    r.nvlinks = gpu.parse_nvlink_status(text_of("nvsmi_nvlink"))
    r.topology = gpu.parse_topo(text_of("nvsmi_topo"))
    r.processes = parse_compute_apps(text_of("nvsmi_apps"))
    r.xids = parse_xid_lines(text_of("xid"))
    for g in r.gpus:
        g.pci_bus_id = gpu.normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else ""
    for d in r.gpu_details:
        d.bus_id = gpu.normalize_bus_id(d.bus_id)
    r.rdma_ports = host.parse_rdma_ports(text_of("ib"))
    if any(p.kind == "efa" for p in r.rdma_ports) and "fi_efa" in secs and not secs["fi_efa"].missing:
        r.efa_provider_visible = secs["fi_efa"].ok and host.efa_provider_visible(secs["fi_efa"].text)
    r.nvswitch_devices, r.fabricmanager_service = host.parse_fabricmanager(text_of("fabricmanager"))
    r.governors = host.parse_governors(text_of("governor"))
    shm = parse_df(text_of("shm"))
    r.shm = shm[0] if shm else None
    root = parse_df(text_of("root"))
    r.root = root[0] if root else None
    seen: set[str] = set()
    for name in secs:
        if name.startswith("df "):
            for row in parse_df(text_of(name)):
                row.path = name[3:]
                if row.target not in seen:
                    seen.add(row.target)
                    r.shared.append(row)
        elif name.startswith("lfs_df "):
            r.lustre.append(LustreMount(mount=name[7:], targets=parse_lfs_df(text_of(name)).targets))
    r.versions = _versions(r, secs, host)
    return r


def _versions(r: NodeReadings, secs: dict[str, Section], host) -> dict[str, str]:  # noqa: ANN001
    """Host-scope versions compared across nodes ("" where the node has none)."""
    def text_of(name: str) -> str:
        sec = secs.get(name)
        return sec.text if sec is not None and sec.ok else ""

    models = sorted({g.name for g in r.gpus})
    versions = {
        "kernel": r.kernel,
        "OS": r.os,
        "system model": r.system_model,
        "NVIDIA driver": r.driver_version,
        "CUDA (driver)": r.cuda_driver_version,
        "CUDA toolkit": host.parse_cuda_toolkit(text_of("cuda_toolkit")),
        "NCCL (system)": host.parse_nccl_versions(text_of("nccl_versions")),
        "GPU model": ", ".join(models),
        "GPU count": str(len(r.gpus)) if r.gpus else "",
        "libfabric": host.parse_fi_version(text_of("fi_version")),
    }
    pkgs = host.parse_python_packages(text_of("python_packages"))
    versions["torch"] = pkgs.get("torch", "")
    pip_nccl = sorted(v for k, v in pkgs.items() if k.startswith("nvidia-nccl"))
    versions["NCCL (pip wheel)"] = ", ".join(pip_nccl)
    versions.update(host.parse_efa_versions(text_of("efa_versions")))
    for key in ("EFA installer", "EFA kernel module", "aws-ofi-nccl"):
        versions.setdefault(key, "")
    return versions
