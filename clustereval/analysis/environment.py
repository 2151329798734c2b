"""Pure analysis of the environment record: spec enrichment, cross-node drift, findings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from clustereval.analysis.drift import nodes_by_value
from clustereval.analysis.gpus import node_gpu_label
from clustereval.analysis.specs import lookup_gpu, lookup_nic
from clustereval.records import Finding
from clustereval.records.environment import EnvironmentRecord, NodeEnvironment


def enrich(node: NodeEnvironment) -> NodeEnvironment:
    """Fill what the spec database knows and the node did not say: SM counts, NIC product names."""
    for gpu in node.gpus:
        spec = lookup_gpu(gpu.name, power_limit_w=gpu.power_limit_w or None)
        if spec and not gpu.sm_count and spec.sm_count:
            gpu.sm_count = spec.sm_count
    for nic in node.nics:
        nic_spec = lookup_nic(nic.kind, nic.rate_gb_s, nic.ca_type)
        if nic_spec:
            nic.product = nic_spec.key
    return node


def _gpu_model(n: NodeEnvironment) -> str:
    names = Counter(g.name for g in n.gpus)
    return " + ".join(f"{c}× {name}" for name, c in sorted(names.items())) if names else "no GPU"


def _pcie_widths(n: NodeEnvironment) -> str:
    widths = Counter(f"×{g.pcie_width_current}" for g in n.gpus if g.pcie_width_current)
    return ", ".join(f"{w} on {c} GPU{'s' if c != 1 else ''}" for w, c in sorted(widths.items()))


DRIFT_ITEMS: list[tuple[str, Callable[[NodeEnvironment], str]]] = [
    ("GPUs", _gpu_model),
    ("NVIDIA driver", lambda n: n.software.driver),
    ("CUDA (driver)", lambda n: n.software.cuda_driver),
    ("torch", lambda n: n.software.torch),
    ("CUDA (torch)", lambda n: n.software.torch_cuda),
    ("NCCL", lambda n: n.software.nccl),
    ("PCIe link width", _pcie_widths),
]


def node_name(n: NodeEnvironment) -> str:
    return f"{n.hostname or n.node}(node{n.index})"


def drift(nodes: list[NodeEnvironment]) -> list[str]:
    """One line per item that differs across nodes: ``NVIDIA driver: 580.1 on a(node0); 575.2 on b(node1)``."""
    if len(nodes) < 2:
        return []
    per_node = [(node_name(n), {label: value_of(n) for label, value_of in DRIFT_ITEMS}) for n in nodes]
    lines = []
    for label, groups in nodes_by_value(per_node, missing="not reported").items():
        if len(groups) > 1:
            parts = [f"`{value}` on {', '.join(f'`{name}`' for name in names)}" for value, names in groups.items()]
            lines.append(f"{label}: " + "; ".join(parts))
    return lines


def findings(rec: EnvironmentRecord, *, ask_unknown_gpus: bool = True) -> list[Finding]:
    """What the inventory alone shows: drift, degraded PCIe links, NVLink links down, memory faults,
    slowdowns at idle, GPUs the spec database does not know (``ask_unknown_gpus``: False when the
    compute section asks for their figures with its measurements)."""
    out: list[Finding] = []
    if rec.drift:
        out.append(Finding("underperforming", "node consistency",
                           "the nodes are not set up alike (" + "; ".join(rec.drift) + "). A job that spans them "
                           "runs on mixed versions or hardware, which NCCL and torch do not promise to handle."))
    for n in rec.nodes:
        for g in n.gpus:
            label = f"`{node_gpu_label(n, g.index)}`"
            if g.pcie_width_max and g.pcie_width_current and g.pcie_width_current < g.pcie_width_max:
                out.append(Finding("underperforming", "PCIe link",
                                   f"{label} — the PCIe link runs at ×{g.pcie_width_current} where the board supports "
                                   f"×{g.pcie_width_max}, so host-to-GPU copies move over {g.pcie_width_current} lanes "
                                   f"instead of {g.pcie_width_max} lanes."))
            if g.pcie_gen_host_max and g.pcie_gen_max and g.pcie_gen_host_max < g.pcie_gen_max:
                out.append(Finding("underperforming", "PCIe link",
                                   f"{label} — the host side of the PCIe link allows Gen{g.pcie_gen_host_max}; "
                                   f"the board supports Gen{g.pcie_gen_max}."))
            if g.ecc_uncorrected_volatile:
                out.append(Finding("underperforming", "GPUs",
                                   f"{label} — {g.ecc_uncorrected_volatile} uncorrectable ECC errors since the "
                                   "driver loaded."))
            if g.retired_or_remapped:
                out.append(Finding("underperforming", "GPUs", f"{label} — {g.retired_or_remapped}."))
            slow = [r for r in g.clock_event_reasons.split(" (")[0].split(", ")
                    if r and r not in ("Idle", "Applications Clocks Setting", "GPU idle")]
            if slow and not n.compute_processes:
                out.append(Finding("underperforming", "GPUs",
                                   f"{label} — clock event reasons active with no compute process on the GPU: "
                                   f"{', '.join(slow)}."))
        if n.nvlink.links_down:
            down = ", ".join(f"`{node_gpu_label(n, int(item.split(':')[0][3:]))}` link {item.split(':link')[1]}"
                             for item in n.nvlink.links_down)
            out.append(Finding("underperforming", "NVLink",
                               f"{len(n.nvlink.links_down)} link{'s' if len(n.nvlink.links_down) != 1 else ''} inactive ({down}) while the "
                               f"other links run at {n.nvlink.per_link_gb_s:g} GB/s each."))
    unknown = sorted({g.name for n in rec.nodes for g in n.gpus
                      if not lookup_gpu(g.name, power_limit_w=g.power_limit_w or None)}) if ask_unknown_gpus else []
    for name in unknown:
        out.append(Finding("needs_input", "GPUs",
                           f"`{name}` has no row in clustereval's accelerator spec database, so its measurements "
                           "have no official figures to be judged against. Obtain the vendor's figures for this "
                           "exact board: dense BF16 and FP8 TFLOPS, memory capacity and bandwidth, power limit, "
                           "and the GPU-to-GPU link bandwidth per direction."))
    return out


def torch_provenance(ev: object) -> str:
    """Where the eval Python's torch came from and whether it was the newest release there, for the
    Software table (an ``EvalPythonRecord``; never a path)."""
    source = getattr(ev, "source", "") or getattr(ev, "mode", "")
    tag = getattr(ev, "index_tag", "")
    newest = getattr(ev, "newest_on_index", "")
    if source == "default-index":
        where = "the index pip on the nodes is configured with"
    else:
        where = "the PyTorch wheel index" + (f" for `{tag}`" if tag else "")
    if getattr(ev, "verified_newest", False):
        return f"the newest release on {where} at eval time"
    if source in ("pytorch-index", "default-index", "venv") and newest:
        return f"installed from {where}; the newest release there at eval time was {newest}, see Gaps"
    who = {"configured": "the interpreter `eval_python` in cluster.toml names",
           "fallback-python": "the interpreter `fallback_python` in cluster.toml names",
           "fallback": "the interpreter `fallback_python` in cluster.toml names",
           "node-python": "the node's own `python3`"}.get(source, "")
    return (f"from {who}; " if who else "") + "not verified as the newest release, see Gaps"
