"""The report's head (title, datetime / access / nodes lines, raw-logs pointer, TOC) and the
Environment section: five tables, Host / GPU / Fabric / Filesystems / Software.

Title forms: ``# Cluster eval: 4 nodes of 8× H200``, ``1 node of 8× B200``; nodes with different
GPUs are listed in turn (``2 nodes of 8× H200 and 1 node of 4× H100``); nodes without a visible
GPU read ``1 node without GPUs``. With several nodes every table row shows one value when the
nodes agree and the value per group of nodes when they do not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from clustereval.analysis.environment import findings as environment_findings
from clustereval.analysis.environment import torch_provenance
from clustereval.analysis.specs import INTERNODE_TABLE_URL, NVLINK_TABLE_URL, lookup_gpu, short_gpu_name
from clustereval.records.environment import EnvironmentRecord, NodeEnvironment
from clustereval.report.fold import FOLD_NODES, folded_names
from clustereval.report.markdown import Document
from clustereval.report.preflight import across_nodes_line, tcp_coverage_line
from clustereval.report.render import RunView, SectionResult
from clustereval.report.units import iec, joined, pcie_uni_gb_s, plural, span

ACCESS_WORDS = {
    "local": "local execution (clustereval ran on the node itself)",
    "ssh": "SSH from the controller to every node",
    "slurm": "Slurm (`srun` into the allocation)",
    "kubectl": "`kubectl exec` into every pod",
}
TOOL_URLS = {
    "nvidia-smi": "https://docs.nvidia.com/deploy/nvidia-smi/index.html",
    "lscpu": "https://man7.org/linux/man-pages/man1/lscpu.1.html",
    "findmnt": "https://man7.org/linux/man-pages/man8/findmnt.8.html",
    "lsblk": "https://man7.org/linux/man-pages/man8/lsblk.8.html",
    "df": "https://man7.org/linux/man-pages/man1/df.1.html",
    "ibstat": "https://linux.die.net/man/8/ibstat",
    "rdma link": "https://man7.org/linux/man-pages/man8/rdma-link.8.html",
}
FS_NAMES = {"lustre": "Lustre", "nfs": "NFS", "nfs4": "NFS 4", "gpfs": "GPFS", "beegfs": "BeeGFS",
            "virtiofs": "virtiofs", "cifs": "SMB", "smb3": "SMB", "wekafs": "WekaFS", "ceph": "CephFS",
            "fuse.ceph": "CephFS", "9p": "9p"}


# -- small helpers ------------------------------------------------------------------------


def env_record(view: RunView) -> EnvironmentRecord | None:
    rec = view.get("environment")
    return rec if isinstance(rec, EnvironmentRecord) else None


def _node_tag(n: NodeEnvironment) -> str:
    return f"`{n.hostname or n.node}`(node{n.index})"


def node_tags(nodes: list[NodeEnvironment]) -> str:
    """Every node's tag, folded past ``FOLD_NODES``."""
    return folded_names([_node_tag(n) for n in nodes])


def per_node(nodes: list[NodeEnvironment], value_of: Callable[[NodeEnvironment], str]) -> str:
    """One value when the nodes agree; ``value on `a`(node0), `b`(node1); other on `c`(node2)`` when not.
    Above ``FOLD_NODES`` nodes the most common value is given with its node count (``value on 1022
    nodes; other on `c`(node2), `d`(node9)``), the others with their nodes."""
    groups: dict[str, list[NodeEnvironment]] = {}
    for n in nodes:
        groups.setdefault(value_of(n), []).append(n)
    groups.pop("", None)
    if not groups:
        return ""
    if len(groups) == 1 and len(next(iter(groups.values()))) == len(nodes):
        return next(iter(groups))
    if len(nodes) <= FOLD_NODES:
        return "; ".join(f"{value} on {', '.join(_node_tag(n) for n in members)}" for value, members in groups.items())
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))  # stable: ties keep node order
    (common, members), rest = ranked[0], ranked[1:]
    parts = [f"{common} on {plural(len(members), 'node')}"]
    return "; ".join(parts + [f"{value} on {node_tags(others)}" for value, others in rest])


def hostname_row(nodes: list[NodeEnvironment]) -> str:
    """Every node's hostname; above ``FOLD_NODES`` nodes the first and the last, and any hostname
    that more than one node answers with (two nodes that call themselves the same break rendezvous)."""
    if len(nodes) == 1:
        return f"`{nodes[0].hostname or nodes[0].node}`"
    if len(nodes) <= FOLD_NODES:
        return ", ".join(_node_tag(n) for n in nodes)
    text = f"{plural(len(nodes), 'node')}, {_node_tag(nodes[0])} to {_node_tag(nodes[-1])}"
    seen: dict[str, list[NodeEnvironment]] = {}
    for n in nodes:
        if n.hostname:
            seen.setdefault(n.hostname, []).append(n)
    shared = [(name, members) for name, members in seen.items() if len(members) > 1]
    if shared:
        text += "; the same hostname on more than one node: " + "; ".join(
            f"`{name}` on {folded_names([f'node{m.index}' for m in members])}" for name, members in shared[:FOLD_NODES])
    return text


def _stamp_text(stamp: str) -> str:
    """``2026-09-17-1938Z`` -> ``2026-09-17 19:38``."""
    parts = stamp.rstrip("Z").split("-")
    if len(parts) >= 4 and len(parts[3]) >= 4:
        return f"{parts[0]}-{parts[1]}-{parts[2]} {parts[3][:2]}:{parts[3][2:4]}"
    return stamp


def _node_count(view: RunView, env: EnvironmentRecord | None) -> int:
    if env and env.nodes:
        return len(env.nodes)
    pre = view.get("preflight")
    if pre is not None and getattr(pre, "nodes", None):
        return len(pre.nodes)
    return 1


def title(view: RunView) -> str:
    """``Cluster eval: 4 nodes of 8× H200`` (see the module docstring for the other forms)."""
    env = env_record(view)
    count = _node_count(view, env)
    if not env or not env.nodes:
        return f"Cluster eval: {plural(count, 'node')}"
    groups: Counter[str] = Counter()
    order: list[str] = []
    for n in env.nodes:
        if n.gpus:
            names = Counter(short_gpu_name(g.name) for g in n.gpus)
            key = " + ".join(f"{c}× {name}" for name, c in names.most_common())
        else:
            key = ""
        if key not in groups:
            order.append(key)
        groups[key] += 1
    parts = [f"{plural(groups[k], 'node')} of {k}" if k else f"{plural(groups[k], 'node')} without GPUs"
             for k in order]
    return "Cluster eval: " + " and ".join(parts)


# -- header -------------------------------------------------------------------------------


# the run's passes in the report's words, for the header's line of passes the operator did not ask for
PASS_WORDS = {
    "packages": "the host packages check",
    "evalpython": "the eval Python setup",
    "environment": "the environment inventory",
    "connectivity": "the connectivity test",
    "health": "the hardware health pass",
    "matmul": "the GPU performance benchmarks",
    "lemon": "the underperforming-GPU check",
    "allreduce": "the all-reduce benchmarks",
    "pairwise": "the pairwise all-reduce benchmark",
    "storage": "the storage benchmarks",
}


def write_header(view: RunView, doc: Document) -> None:
    env = env_record(view)
    doc.para(f"# {title(view)}")
    count = _node_count(view, env)
    access = ACCESS_WORDS.get(view.access, view.access or "local execution")
    detail = getattr(view.get("preflight"), "access_detail", "")
    lines = [f"Datetime (UTC): {_stamp_text(view.stamp)}", f"Access: {access} ({detail})" if detail else f"Access: {access}"]
    if env and env.nodes:
        names = (", ".join(f"`{n.hostname or n.node}`" for n in env.nodes) if len(env.nodes) <= FOLD_NODES else
                 f"`{env.nodes[0].hostname or env.nodes[0].node}` to `{env.nodes[-1].hostname or env.nodes[-1].node}`")
        per = Counter(len(n.gpus) for n in env.nodes)
        total = sum(len(n.gpus) for n in env.nodes)
        if total == 0:
            gpus = "no GPU visible (" + "; ".join(sorted({n.gpu_visibility for n in env.nodes if n.gpu_visibility})) + ")"
        elif len(per) == 1:
            g = next(iter(per))
            gpus = plural(g, "GPU") + (f" each, {plural(total, 'GPU')} in all" if count > 1 else "")
        elif len(env.nodes) <= FOLD_NODES:
            gpus = ", ".join(f"{plural(len(n.gpus), 'GPU')} on `{n.hostname or n.node}`" for n in env.nodes)
            gpus += f", {plural(total, 'GPU')} in all"
        else:
            gpus = per_node(env.nodes, lambda n: plural(len(n.gpus), "GPU")) + f", {plural(total, 'GPU')} in all"
        lines.append(f"Nodes / GPUs: {plural(count, 'node')} ({names}), {gpus}")
    else:
        lines.append(f"Nodes / GPUs: {plural(count, 'node')}")
    said = [text for phase, text in view.shortenings if not phase or _measured(view, phase)]
    if said:  # a profile shorter than the published runs: said before any figure
        lines.append(f"Shortened run (`--profile {view.profile}`): " + "; ".join(said))
    asked_not = [PASS_WORDS[p] for p in view.not_asked if p in PASS_WORDS]
    if asked_not:  # said, so a reader does not take a missing section for a pass that failed
        lines.append("Not asked for by the operator (`skip` in cluster.toml, or left out of `--phases`): "
                     + "; ".join(asked_not))
    not_across = getattr(view.get("preflight"), "across_nodes_not_run", None)
    if not_across is not None:  # said, so a reader does not take the checks for ones that passed
        lines.append(across_nodes_line(not_across))
    untried = tcp_coverage_line(getattr(view.get("preflight"), "tcp_coverage", None), view.raw_rel)
    if untried:  # said, so a reader does not take the pairs the rule left out for pairs it proved
        lines.append(untried)
    if view.interrupted:
        lines.append("Status: the run was interrupted; the sections below hold what finished")
    doc.bullets(lines)
    doc.para(f"Raw logs: [`{view.raw_rel}/`]({view.raw_rel}/).")
    doc.toc_here("Table of Contents")


def _measured(view: RunView, what: str) -> bool:
    """Whether the run measured what a shortening of its profile applies to: a phase's name, or
    ``concurrent`` for the storage phase's concurrent write."""
    rec = view.get("storage" if what == "concurrent" else what)
    if rec is None or getattr(rec, "status", "") == "skipped":
        return False
    if what == "allreduce":
        return bool(rec.intra or rec.inter)
    if what == "matmul":
        return any(n.search is not None for n in rec.nodes)
    if what == "concurrent":
        return rec.concurrent is not None
    if what == "storage":
        return bool((rec.local is not None and rec.local.cells) or rec.shared)
    return True


# -- Environment --------------------------------------------------------------------------


def _intro(view: RunView, env: EnvironmentRecord) -> str:
    used: list[str] = []
    nodes = env.nodes
    if any(n.gpus for n in nodes):
        used.append(f"[`nvidia-smi`]({TOOL_URLS['nvidia-smi']}) (NVIDIA's GPU query tool: boards, clocks, power, "
                    "PCIe links, NVLink and the GPU/NIC topology)")
    ran = set().union(*(set(n.raw_files) for n in nodes)) if nodes else set()
    if "lscpu" in ran:
        used.append(f"[`lscpu`]({TOOL_URLS['lscpu']}) (CPUs and NUMA nodes)")
    fs_tools = [t for t in ("findmnt", "lsblk", "df") if t in ran]
    if fs_tools:
        used.append(joined([f"[`{t}`]({TOOL_URLS[t]})" for t in fs_tools]) + " (mounts and their sizes)")
    if any(n.nics for n in nodes):
        nic_tools = [t for t in ("ibstat", "rdma link") if t.replace(" ", "-") in ran]
        used.append(joined([f"[`{t}`]({TOOL_URLS[t]})" for t in nic_tools] + ["`/sys/class/infiniband`"]) + " "
                    "(RDMA adapters and their port rates)")
    link = env.tool_links.get("software.py")
    if link:
        used.append(f"[`software.py`]({link}) (clustereval's own worker: the versions of Python, torch and NCCL, the NVIDIA "
                    "Collective Communications Library, in the interpreter every benchmark ran with)")
    lead = "Inventory of every node, not a benchmark"
    if not used:
        return lead + f". Raw outputs are in [`{view.raw_rel}/env/`]({view.raw_rel}/env/)."
    return (lead + ", read with " + joined(used) + f". Raw outputs are in [`{view.raw_rel}/env/`]({view.raw_rel}/env/).")


def _two_col(doc: Document, head: str, rows: list[tuple[str, str]]) -> None:
    rows = [(k, v) for k, v in rows if v]
    if rows:
        doc.table([head, "value"], [[k, v] for k, v in rows])


def _pcie(n: NodeEnvironment) -> str:
    if not n.gpus:
        return ""
    links: Counter[str] = Counter()
    notes = []
    for g in n.gpus:
        text = f"Gen{g.pcie_gen_max} ×{g.pcie_width_current}" if g.pcie_gen_max else ""
        if text:
            links[text] += 1
        if g.pcie_width_max and g.pcie_width_current and g.pcie_width_current < g.pcie_width_max:
            notes.append(f"gpu{g.index} below its ×{g.pcie_width_max}")
    if not links:
        return ""
    if len(links) == 1:
        text = f"{next(iter(links))} on every GPU" if len(n.gpus) > 1 else next(iter(links))
    else:
        text = ", ".join(f"{k} on {plural(c, 'GPU')}" for k, c in links.most_common())
    return text + (f" ({', '.join(notes)})" if notes else "")


def _cpu(n: NodeEnvironment) -> str:
    if not n.cpu_threads and not n.cpu_cores:
        return ""
    text = plural(n.cpu_cores or n.cpu_threads, "core")
    if n.cpu_threads and n.cpu_threads != n.cpu_cores:
        text += f" ({plural(n.cpu_threads, 'thread')})"
    if n.numa_nodes:
        text += f", {plural(n.numa_nodes, 'NUMA node')}"
    if n.cpu_model:
        text = f"{n.cpu_model}: {text}"
    return text


def host_rows(nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    hostnames = hostname_row(nodes)
    return [
        ("OS", per_node(nodes, lambda n: n.os_pretty)),
        ("Hostname", hostnames),
        ("Kernel", per_node(nodes, lambda n: n.kernel)),
        ("CPU cores / NUMA", per_node(nodes, _cpu)),
        ("Host RAM", per_node(nodes, lambda n: iec(n.mem_total_bytes) if n.mem_total_bytes else "")),
        ("PCIe gen × width (GPU links)", per_node(nodes, _pcie)),
    ]


def _saturated(view: RunView) -> str:
    """The SM clock at the power limit under a dense matmul, from the compute record when it has one."""
    for phase in ("matmul", "compute"):
        value = getattr(view.get(phase), "saturated_sm_mhz", None)
        if value in (None, "", [], ()):
            continue
        if isinstance(value, (int, float)):
            return f"{value:g} MHz"
        if isinstance(value, (list, tuple)):
            return span([float(v) for v in value if isinstance(v, (int, float))], "MHz")
        if isinstance(value, dict):
            nums = [float(v) for v in value.values() if isinstance(v, (int, float))]
            return span(nums, "MHz")
        return str(value)
    return ""


def gpu_rows(view: RunView, nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    gnodes = [n for n in nodes if n.gpus]

    def name_count(n: NodeEnvironment) -> str:
        names = Counter(g.name for g in n.gpus)
        return ", ".join(f"{name} × {c}" for name, c in names.most_common())

    def arch(n: NodeEnvironment) -> str:
        g = n.gpus[0]
        a = g.arch or ""
        if g.compute_capability:
            a += f" (compute capability {g.compute_capability})" if a else f"compute capability {g.compute_capability}"
        sms = Counter(x.sm_count for x in n.gpus if x.sm_count)
        count = " / ".join(f"{k} SMs" for k in sorted(sms)) if sms else ""
        return " / ".join(x for x in (a, count) if x)

    def hbm(n: NodeEnvironment) -> str:
        return span([g.memory_total_mib / 1024 for g in n.gpus if g.memory_total_mib], "GiB", lambda v: f"{v:.1f}")

    def driver(n: NodeEnvironment) -> str:
        return " / ".join(x for x in (n.software.driver, n.software.cuda_driver) if x)

    def boost(n: NodeEnvironment) -> str:
        return span([g.clocks_max_sm_mhz for g in n.gpus], "MHz")

    def idle(n: NodeEnvironment) -> str:
        return span([g.clocks_sm_mhz for g in n.gpus], "MHz")

    def power(n: NodeEnvironment) -> str:
        limit = span([g.power_limit_w for g in n.gpus], "W")
        draw = span([round(g.power_draw_w) for g in n.gpus], "W")
        return " / ".join(x for x in (limit, draw) if x)

    def ecc(n: NodeEnvironment) -> str:
        modes = Counter(g.ecc_mode.lower() for g in n.gpus if g.ecc_mode)
        return ", ".join(f"{m} on {plural(c, 'GPU')}" if len(modes) > 1 else m for m, c in modes.items())

    def procs(n: NodeEnvironment) -> str:
        return "; ".join(n.compute_processes)

    rows = [
        ("GPU name × count per node", per_node(gnodes, name_count)),
        ("SM (streaming multiprocessor) architecture / count", per_node(gnodes, arch)),
        ("HBM (high-bandwidth memory) per GPU", per_node(gnodes, hbm)),
        ("Driver / CUDA", per_node(gnodes, driver)),
        ("SM clock, boost (`clocks.max.sm`)", per_node(gnodes, boost)),
    ]
    saturated = _saturated(view)
    if saturated:
        rows.append(("SM clock, saturated (at the power limit under a dense matmul)", saturated))
    rows += [
        ("SM clock, parked idle (`clocks.sm` with no compute)", per_node(gnodes, idle)),
        ("Power limit / idle draw", per_node(gnodes, power)),
        ("ECC", per_node(gnodes, ecc)),
        ("Compute processes at the start of the eval", per_node(gnodes, procs)),
    ]
    return rows


def no_gpu_rows(nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    return [("GPU name × count per node",
             per_node(nodes, lambda n: "no GPU visible" + (f" ({n.gpu_visibility})" if n.gpu_visibility else "")))]


def _intra(n: NodeEnvironment) -> str:
    if not n.gpus:
        return "no GPU on the node, so no GPU interconnect"
    if len(n.gpus) == 1:
        g = n.gpus[0]
        link = f"Gen{g.pcie_gen_max} ×{g.pcie_width_max}" if g.pcie_gen_max and g.pcie_width_max else ""
        speed = f", {link} ≈ {pcie_uni_gb_s(g.pcie_gen_max, g.pcie_width_max):.0f} GB/s unidirectional" if link else ""
        return f"1 GPU: its PCIe link to the host{speed}; no NVLink (no second GPU to link to)"
    nv = n.nvlink
    if nv.generation:
        links = f"{nv.num_links_per_gpu} links × {nv.per_link_gb_s:g} GB/s per GPU"
        bond = f", {nv.topo_bond}" if nv.topo_bond else ""
        return (f"NVLink {nv.generation}{bond} ({links}); spec {nv.spec_uni_gb_s:g} GB/s unidirectional per GPU "
                f"([NVLink generations]({NVLINK_TABLE_URL}))")
    g = n.gpus[0]
    path = f" (`nvidia-smi topo -m`: {nv.topo_bond})" if nv.topo_bond else ""
    if g.pcie_gen_max and g.pcie_width_max:
        uni = pcie_uni_gb_s(g.pcie_gen_max, g.pcie_width_max)
        return f"PCIe only{path}; Gen{g.pcie_gen_max} ×{g.pcie_width_max} ≈ {uni:.0f} GB/s unidirectional per GPU"
    return f"PCIe only{path}"


def _inter(n: NodeEnvironment) -> str:
    if not n.nics:
        return "no RDMA adapter found in `/sys/class/infiniband`"
    kinds = {"infiniband": "InfiniBand", "roce": "RoCE (RDMA over Ethernet)",
             "efa": "AWS EFA (Elastic Fabric Adapter)", "ethernet": "Ethernet"}
    groups: dict[tuple[str, str, float], list[str]] = {}
    for nic in n.nics:
        groups.setdefault((nic.kind, nic.product, nic.rate_gb_s), []).append(nic.name)
    parts = []
    for (kind, product, rate), names in groups.items():
        label = kinds.get(kind, kind)
        if product and not product.startswith("EFA"):
            label = f"{product} {label}"
        shown = f"`{names[0]}`" if len(names) == 1 else f"`{names[0]}` … `{names[-1]}`"
        text = f"{len(names)}× {label} ({shown})"
        if rate:
            text += f", {rate:g} Gb/s each"
            if len(names) > 1:
                text += f": {rate * len(names):,.0f} Gb/s per node"
        parts.append(text)
    down = [f"`{nic.name}`" for nic in n.nics if nic.state and nic.state not in ("ACTIVE", "4: ACTIVE")]
    text = "; ".join(parts)
    if n.gpus and len(n.nics) == len(n.gpus):
        text += "; one adapter per GPU"
    if down:
        text += f"; port state not ACTIVE on {', '.join(down)}"
    return text + f" ([adapters]({INTERNODE_TABLE_URL}))"


def fabric_rows(nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    # one node has no inter-node anything (the runbook): its adapters are inventory all the same
    label = "Inter-node adapters (inventory)" if len(nodes) > 1 else "Network adapters (inventory)"
    return [("Intra-node", per_node(nodes, _intra)), (label, per_node(nodes, _inter))]


def _fs_value(fs: Any) -> str:
    size = iec(fs.size_bytes) if fs.size_bytes else ""
    if fs.shared:
        kind = FS_NAMES.get(fs.fstype, fs.fstype)
        product = f" ({fs.product})" if fs.product else ""
        src = f"tag `{fs.source}`" if fs.fstype == "virtiofs" else f"`{fs.source}`"
        return f"{kind}{product} `{fs.mount}` {size}, {src}".replace("  ", " ")
    device = fs.raid or (f"`{fs.source}`" if fs.source else "")
    return f"`{fs.mount}` {size}, {fs.fstype}" + (f" on {device}" if device else "")


def filesystem_rows(nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    """One row per distinct volume; a volume every node has reads once, node-specific ones say where."""
    rows: list[tuple[str, str]] = []
    seen: dict[tuple[str, str], list[NodeEnvironment]] = {}
    for n in nodes:
        for fs in n.filesystems:
            seen.setdefault(("Shared network FS" if fs.shared else "Local", _fs_value(fs)), []).append(n)
    for (label, value), members in sorted(seen.items(), key=lambda kv: (kv[0][0] != "Local", kv[0][1])):
        if len(members) != len(nodes):
            value += " on " + ", ".join(_node_tag(n) for n in members)
        rows.append((label, value))
    return rows


def software_rows(view: RunView, nodes: list[NodeEnvironment]) -> list[tuple[str, str]]:
    ev = view.get("evalpython")

    def torch(n: NodeEnvironment) -> str:
        t = n.software.torch
        if t and ev is not None and t == getattr(ev, "torch", t):
            t += f" ({torch_provenance(ev)})"
        return t

    rows = [
        ("Python", per_node(nodes, lambda n: n.software.python)),
        ("torch", per_node(nodes, torch)),
        ("CUDA (torch build)", per_node(nodes, lambda n: n.software.torch_cuda)),
        ("NCCL (the version torch loads)", per_node(nodes, lambda n: n.software.nccl)),
    ]
    rows.append(("NCCL environment", _nccl_env(view)))
    return rows


def _nccl_env(view: RunView) -> str:
    pre = view.get("preflight")
    final = dict(getattr(pre, "final_env", {}) or {})
    if not final:
        return ""
    source = dict(getattr(pre, "env_source", {}) or {})
    words = {"platform": "set by the platform before clustereval ran",
             "clustereval default": "set by clustereval: the runbook default when the platform sets nothing",
             "cluster.toml": "set in cluster.toml"}
    return "; ".join(f"`{k}={v}`" + (f" ({words.get(source[k], source[k])})" if source.get(k) else "")
                     for k, v in sorted(final.items()))


def render_environment(view: RunView, doc: Document) -> SectionResult:
    env = env_record(view)
    if env is None:
        return SectionResult()
    nodes = env.nodes
    has_gpu = any(n.gpus for n in nodes)
    note = "host, GPU, fabric, mounts, software (inventory, not a benchmark)"
    doc.heading(2, "Environment", note=note)
    # Environment has no Gaps of its own: the inventory's, the host packages' and the eval Python's
    # problems are said once, in the section they affect (render.setup_gaps)
    result = SectionResult()
    if nodes:
        doc.para(_intro(view, env))
        doc.heading(3, "Host", toc=False)
        _two_col(doc, "Host", host_rows(nodes))
        doc.heading(3, "GPU", toc=False)
        _two_col(doc, "GPU", gpu_rows(view, nodes) if has_gpu else no_gpu_rows(nodes))
        doc.heading(3, "Fabric", toc=False)
        _two_col(doc, "Fabric", fabric_rows(nodes))
        fs_rows = filesystem_rows(nodes)
        if fs_rows:
            doc.heading(3, "Filesystems", toc=False)
            _two_col(doc, "Filesystems", fs_rows)
        sw = software_rows(view, nodes)
        if any(v for _, v in sw):
            doc.heading(3, "Software", toc=False)
            _two_col(doc, "Software", sw)
    compute_ran = any(view.get(phase) is not None for phase in ("matmul", "lemon"))
    # an operator's GPU target answers the question the spec database could not
    asked = not compute_ran and not getattr(view.get("preflight"), "gpu_bf16_target_tflops", None)
    result.findings = environment_findings(env, ask_unknown_gpus=asked)
    return result


def spec_of(node: NodeEnvironment):  # noqa: ANN201 - convenience for other sections
    """The spec-database row for a node's first GPU (None when unknown or no GPU)."""
    if not node.gpus:
        return None
    g = node.gpus[0]
    return lookup_gpu(g.name, power_limit_w=g.power_limit_w or None)
