"""Every environment tool's output on one node -> ``NodeEnvironment``. Pure.

``TOOLS`` is the collection plan: tool name -> argv (the software worker's argv comes from the
phase, since it needs the eval Python). ``assemble`` takes ``{tool: stdout}`` and parses what is
there; a missing or failed tool leaves its fields empty and a line in ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from clustereval.probes import (
    df,
    filesystems,
    gpu_procs,
    host,
    lscpu,
    mounts,
    nics,
    nvsmi_nvlink,
    nvsmi_q,
    nvsmi_query,
    nvsmi_topo,
)
from clustereval.probes import software as software_probe
from clustereval.records.environment import NodeEnvironment

TOOLS: dict[str, Callable[[], list[str]]] = {
    "date": host.date_argv,
    "hostname": host.hostname_argv,
    "uname": host.uname_argv,
    "os-release": host.os_release_argv,
    "meminfo": host.meminfo_argv,
    "lscpu": lscpu.build_argv,
    "nvidia-smi-query-gpu": nvsmi_query.build_argv,
    "nvidia-smi-q": nvsmi_q.build_argv,
    "nvidia-smi-topo-m": nvsmi_topo.build_argv,
    "nvidia-smi-nvlink-s": nvsmi_nvlink.build_argv,
    "nvidia-smi-compute-apps": gpu_procs.compute_apps_argv,
    "ibstat": nics.ibstat_argv,
    "rdma-link": nics.rdma_argv,
    "sys-class-infiniband": nics.sysfs_argv,
    "findmnt": mounts.findmnt_argv,
    "lsblk": mounts.lsblk_argv,
    "df": df.df_argv,
    "proc-mounts": mounts.proc_mounts_argv,
}
GPU_TOOLS = ("nvidia-smi-q", "nvidia-smi-topo-m", "nvidia-smi-nvlink-s", "nvidia-smi-compute-apps")
SOFTWARE = "software"


def assemble(node: str, index: int, outputs: Mapping[str, str], *, prefer: Sequence[str] = (),
             gpu_visibility: str = "") -> NodeEnvironment:
    """Parse whatever outputs are present. ``gpu_visibility``: why nvidia-smi gave no GPU, if it did not."""
    env = NodeEnvironment(node=node, index=index)
    out = outputs.get
    env.datetime_utc = host.parse_date(out("date", ""))
    env.hostname = host.parse_hostname(out("hostname", ""))
    un = host.parse_uname(out("uname", ""))
    env.uname, env.kernel = un.line, un.kernel
    env.os_pretty = host.pretty_name(out("os-release", ""))
    env.mem_total_bytes = host.parse_mem_total_bytes(out("meminfo", ""))
    cpu = lscpu.parse(out("lscpu", ""))
    env.cpu_model, env.cpu_cores, env.cpu_threads = cpu.model, cpu.cores, cpu.threads
    env.cpu_sockets, env.numa_nodes = cpu.sockets, cpu.numa_nodes

    env.gpus = nvsmi_query.parse(out("nvidia-smi-query-gpu", ""))
    env.has_gpu = bool(env.gpus)
    env.gpu_visibility = "" if env.gpus else (gpu_visibility or "nvidia-smi listed no GPU")
    q = nvsmi_q.parse(out("nvidia-smi-q", ""))
    by_bus = {g.bus_id.lower(): g for g in q.gpus}
    for gpu in env.gpus:
        qg = by_bus.get(gpu.pci_bus_id.lower())
        if qg is None and len(q.gpus) == len(env.gpus):
            qg = q.gpus[gpu.index]
        if qg is None:
            continue
        gpu.arch = qg.architecture
        pcie = qg.pcie()
        gpu.pcie_gen_host_max = pcie["gen_host_max"]
        gpu.pcie_width_current = gpu.pcie_width_current or pcie["width_current"]
        gpu.pcie_width_max = gpu.pcie_width_max or pcie["width_max"]
        gpu.pcie_gen_max = gpu.pcie_gen_max or pcie["gen_max"]
        gpu.ecc_mode = qg.ecc_mode()
        gpu.ecc_uncorrected_aggregate = qg.ecc_uncorrectable("Aggregate")
        gpu.retired_or_remapped = qg.memory_health()
        reasons = qg.clock_event_reasons()
        if reasons:
            gpu.clock_event_reasons = ", ".join(reasons) + (f" ({gpu.clock_event_reasons})" if gpu.clock_event_reasons else "")
    topo = nvsmi_topo.parse(out("nvidia-smi-topo-m", ""))
    env.topo_matrix = out("nvidia-smi-topo-m", "")
    env.nvlink = nvsmi_nvlink.summarize(nvsmi_nvlink.parse(out("nvidia-smi-nvlink-s", "")), topo.bond())
    env.compute_processes = gpu_procs.describe_compute_apps(out("nvidia-smi-compute-apps", ""), env.gpus)

    env.nics = nics.merge(nics.parse_ibstat(out("ibstat", "")), nics.parse_rdma_link(out("rdma-link", "")),
                          nics.parse_sysfs(out("sys-class-infiniband", "")))

    table = mounts.parse_findmnt(out("findmnt", ""), columns=mounts.FINDMNT_COLUMNS) if out("findmnt") else []
    if not table:
        table = mounts.parse_proc_mounts(out("proc-mounts", ""))
    env.filesystems = filesystems.inventory(table, mounts.parse_lsblk(out("lsblk", "")),
                                            df.parse_df_sizes(out("df", "")), prefer)

    sw = software_probe.parse(out(SOFTWARE, "")) if out(SOFTWARE) else None
    if sw is not None:
        env.software = sw.info
        for dev in sw.devices:
            if dev.index < len(env.gpus):
                env.gpus[dev.index].sm_count = dev.sm_count
                env.gpus[dev.index].compute_capability = dev.compute_capability
    env.software.driver = q.driver_version or (env.gpus[0].driver_version if env.gpus else "")
    env.software.cuda_driver = q.cuda_version
    return env
