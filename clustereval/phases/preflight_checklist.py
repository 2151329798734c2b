"""The runbook's "Ask now, not later" checklist, from cluster.toml and the node list: what preflight
checks first, before any node is touched, and what the console shows as the preflight checklist."""

from __future__ import annotations

from clustereval.config import Config
from clustereval.records.run import ChecklistItem
from clustereval.report.units import short_list
from clustereval.transport.base import Node


def checklist(config: Config, transport_desc: str, nodes: list[Node] | None = None, *,
              across_nodes: bool = True) -> list[ChecklistItem]:
    """The seed's "Ask now, not later" rows, from the config and the node list (GPUs may be
    detected later). ``nodes``: the transport's node list (a Slurm allocation's); default the config's.
    ``across_nodes``: whether preflight runs its checks across nodes (passwordless SSH between nodes among them)."""
    items: list[ChecklistItem] = []
    names = [n.name for n in nodes] if nodes is not None else list(config.nodes)
    multi = len(names) >= 2
    exec_value = {"local": "local exec on this machine"}.get(config.access, transport_desc)
    items.append(ChecklistItem("How to exec on a node", True, exec_value))
    items.append(ChecklistItem("All node identities", bool(names), f"{len(names)}: {short_list(names)}",
                               'list every node in cluster.toml: nodes = ["gpu-a", "gpu-b"]'))
    if multi and config.access == "slurm":
        items.append(ChecklistItem("Hostfile (or equivalent) with peer IPs", True,
                                   "the allocation's nodes and the address each reports (scontrol show hostnames)"))
    elif multi:
        known = len(config.hosts) == len(config.nodes)
        value = (f"{config.hostfile} ({len(config.hosts)} addresses; rendezvous at {config.hosts[0].address})"
                 if config.hosts else "")
        items.append(ChecklistItem("Hostfile (or equivalent) with peer IPs", known, value,
                                   'one peer IP per line, then hostfile = "hostfile" in cluster.toml'))
    else:
        items.append(ChecklistItem("Hostfile (or equivalent) with peer IPs", True, "not needed for 1 node"))
    if config.access == "ssh":
        port = f"port {config.ssh.port}" if config.ssh.port is not None else "port from the ssh configuration"
        user = f", user {config.ssh.user}" if config.ssh.user else ""
        peers = "" if not multi else ("; passwordless SSH between nodes checked below" if across_nodes else
                                      "; passwordless SSH between nodes not checked (no check across nodes here)")
        items.append(ChecklistItem("SSH / launcher details", True, f"{port}{user}{peers}"))
    elif config.access == "slurm":
        items.append(ChecklistItem("SSH / launcher details", True, "srun inside the allocation (no SSH needed); "
                                   "the allocation is checked below"))
    elif config.access == "kubectl":
        items.append(ChecklistItem("SSH / launcher details", True, "kubectl exec into every pod (no SSH needed)"))
    else:
        items.append(ChecklistItem("SSH / launcher details", True, "not needed: local exec"))
    if config.gpus_per_node is not None:
        source = "hostfile slots" if "gpus_per_node" not in config.given else "cluster.toml"
        items.append(ChecklistItem("GPUs per node", True, f"{config.gpus_per_node} ({source})"))
    else:
        items.append(ChecklistItem("GPUs per node", False, "", "detected with nvidia-smi -L on every node"))
    shared_known = bool(config.shared_paths) or "shared_paths" in config.given or not multi
    if config.shared_paths:
        shared = f"shared {', '.join(config.shared_paths)}"
    elif "shared_paths" in config.given:
        shared = "no shared FS (cluster.toml says so)"
    else:
        shared = "no shared FS listed"
    items.append(ChecklistItem("Local disk path + shared-FS path", shared_known,
                               f"local {config.local_scratch}; {shared}",
                               'list the shared mounts every node sees (find them with `df -hT`): shared_paths = '
                               '["/data"], or shared_paths = [] when there is none'))
    t = config.targets
    targets = [f"{v:g} {unit}" for v, unit in ((t.gpu_bf16_tflops, "TFLOPS bf16"), (t.nvlink_uni_gb_s, "GB/s NVLink"),
                                              (t.internode_busbw_gb_s, "GB/s inter-node busbw")) if v]
    targets += [f"storage figures for {s.mount}" for s in t.storage]
    items.append(ChecklistItem("Advertised uni bandwidth / official TFLOPS", bool(targets), "; ".join(targets),
                               "optional: without them GPUs are judged against the spec database (an unlisted GPU, "
                               "and storage, go under Needs operator input) ([targets] in cluster.toml)", required=False))
    return items
