"""A whole run's records for a fleet of any size (9, 64, 1024 nodes of 8 GPUs), built with the real record
classes in the shapes the phases write them, with outliers planted where a test asks: slow GPUs in the
GPU performance and lemon passes, GPUs on a narrow PCIe link, GPUs failing a DCGM plugin, straggler
nodes in the pairwise hunt, slow intra-node all-reduce nodes and slow concurrent writers.

Every healthy figure moves a little from unit to unit and pass to pass (a fixed pattern, under 0.5%),
so the fleet statistics have a spread and repeat noise to work with, as on a real fleet.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clustereval.records.compute import DiagResult, HealthRecord, NodeHealth
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    LaunchInfo,
    PairResult,
    PairwiseRecord,
)
from clustereval.records.storage import ConcurrentWrite, NodeWrite
from clustereval.report.render import RunView
from tests import compute_records as cr
from tests.test_network_report import sweep
from tests.test_report_matrix import NVLS, env_of, evalpython_of, hosts_for, preflight_of, storage_of
from tests.test_storage_report import lustre

GIB = 2**30
STAMP = "2026-12-03-1700Z"
RAW = f"raw-fleet-{STAMP}"
PLUGINS = (("software", "Deployment"), ("memory", "Hardware"), ("pcie", "Integration"), ("memory_bandwidth", "Stress"))
MSMF_TFLOPS = 740.0
LEMON_TFLOPS = 735.0
PAIR_GB_S = 90.0
INTRA_GB_S = 345.0
WRITE_MIB_S = 400.0
SLOW = 0.94  # a planted slow unit runs at 94% of its peers (6% below)


@dataclass(frozen=True)
class Plant:
    """Outliers to plant: (node, gpu) pairs for the per-GPU passes, node indexes for the per-node ones."""

    msmf: tuple[tuple[int, int], ...] = ()
    lemon: tuple[tuple[int, int], ...] = ()
    pcie: tuple[tuple[int, int], ...] = ()
    health: tuple[tuple[int, int], ...] = ()
    stragglers: tuple[int, ...] = ()
    intra: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()


def jitter(i: int, scale: float = 0.003) -> float:
    """A fixed pattern within ±``scale``: unit ``i``'s share of the fleet's spread."""
    return 1 + scale * ((i * 7919) % 11 - 5) / 5


def node_name(i: int) -> str:
    return f"10.0.0.{i + 1}"  # the builders' configured names (a string, read as a name only)


def _passes(num_nodes: int, num_gpus: int, base: float, slow: tuple[tuple[int, int], ...]) -> list:
    out = []
    for i in range(num_nodes):
        node = []
        for p in range(3):
            node.append({g: round(base * jitter(i * num_gpus + g) * (1 + 0.001 * p)
                                  * (SLOW if (i, g) in slow else 1.0), 1) for g in range(num_gpus)})
        out.append(node)
    return out


def health(hosts: list[str], num_gpus: int, fail: tuple[tuple[int, int], ...]) -> HealthRecord:
    nodes = []
    for i, h in enumerate(hosts):
        results = [DiagResult(p, c, "Pass", {g: "Pass" for g in range(num_gpus)}) for p, c in PLUGINS]
        for node, gpu in fail:
            if node == i:
                r = results[1]
                r.result, r.gpus[gpu] = "Fail", "Fail"
                r.messages.append(f"Warning: GPU{gpu} GPU {gpu} Error using CUDA API cudaMemcpy")
        nodes.append(NodeHealth(node=node_name(i), index=i, hostname=h, ran=True, dcgm_version="4.2.3",
                                results=results, log_rel=f"health/dcgm-diag-r2-{node_name(i)}.txt"))
    return HealthRecord(nodes=nodes)


def pairwise(num_nodes: int, stragglers: tuple[int, ...]) -> PairwiseRecord:
    """Three rounds of pairs (i with i+1, i+2 and i+3 apart), disjoint but for a node an odd count leaves
    over, which pairs with its next node as well; a pair with a straggler is slow."""
    pairs = []
    for r, step in enumerate((1, 2, 3), 1):
        seen: set[int] = set()
        todo = []
        for a in range(num_nodes):
            b = (a + step) % num_nodes
            if a in seen or b in seen or a == b:
                continue
            seen |= {a, b}
            todo.append((a, b))
        todo += [(a, (a + 1) % num_nodes) for a in range(num_nodes) if a not in seen]
        for a, b in todo:
            k = len(pairs)
            slow = a in stragglers or b in stragglers
            base = PAIR_GB_S * (0.6 if slow else 1.0)
            samples = [round(base * jitter(k + s, 0.004), 2) for s in range(3)]
            pairs.append(PairResult(node_name(a), node_name(b), r, statistics.median(samples), slow=slow,
                                    samples_gb_s=samples))
    healthy = [x for p in pairs if not p.slow for x in p.samples_gb_s]
    floor = min(healthy)
    return PairwiseRecord(payload_bytes=GIB, backend="nccl", ranks_per_node=8, num_rounds=3, pairs=pairs,
                          mean_busbw_gb_s=statistics.fmean(p.busbw_gb_s or 0.0 for p in pairs), samples_per_pair=3,
                          judged=True, healthy_pairs=sum(not p.slow for p in pairs), healthy_samples=len(healthy),
                          healthy_median_gb_s=statistics.median(healthy), healthy_floor_gb_s=floor,
                          limit_gb_s=round(floor * 0.95, 2), stragglers=[node_name(i) for i in stragglers])


def network(num_nodes: int, num_gpus: int, plant: Plant) -> dict:
    names = [node_name(i) for i in range(num_nodes)]
    conn = ConnectivityRecord(scope="inter-node", backend="nccl", num_nodes=num_nodes, num_ranks=num_gpus * num_nodes,
                              allreduce_ok=True, nccl_env=NVLS,
                              launch=LaunchInfo(nodes=names, nproc_per_node=num_gpus, world_size=num_gpus * num_nodes,
                                                ok=True, rc_by_node={x: 0 for x in names}, endpoint="10.0.0.1:29500"))
    intra = [sweep("intra-node", [x], num_gpus, round(INTRA_GB_S * jitter(i) * (0.8 if i in plant.intra else 1.0), 2))
             for i, x in enumerate(names)]
    ar = AllreduceRecord(min_bytes=2**15, max_bytes=16 * GIB, nccl_env=NVLS, intra=intra,
                         inter=sweep("inter-node", names, num_gpus * num_nodes, 95.0))
    return {"connectivity": conn, "allreduce": ar, "pairwise": pairwise(num_nodes, plant.stragglers)}


def storage(num_nodes: int, slow: tuple[int, ...]):
    rec = storage_of(num_nodes, [lustre("/data", 25, "10.4.138.63@tcp:/data", 3.0)])
    writes = [NodeWrite(node_name(i), GIB, 0.0, round(WRITE_MIB_S * jitter(i, 0.01) * (0.3 if i in slow else 1.0), 1))
              for i in range(num_nodes)]
    for w in writes:
        w.seconds = round(1024 / w.mib_s, 2)
    rec.concurrent = ConcurrentWrite(mount="/data", size_bytes=25 * 2**40, fstype="lustre", nodes=writes,
                                     aggregate_mib_s=num_nodes * 1024 / max(w.seconds for w in writes), wall_s=3.0)
    return rec


def fleet_records(num_nodes: int, num_gpus: int = 8, plant: Plant | None = None) -> dict:
    plant = plant or Plant()
    hosts = hosts_for(num_nodes)
    records = {"preflight": preflight_of(hosts), "evalpython": evalpython_of(hosts),
               "environment": env_of(hosts, num_gpus, shared=("/data",)),
               "health": health(hosts, num_gpus, plant.health),
               "gpupass": cr.gpupass(tuple(hosts), num_gpus, slow_pcie=plant.pcie),
               "matmul": cr.matmul(_passes(num_nodes, num_gpus, MSMF_TFLOPS, plant.msmf), hosts=tuple(hosts)),
               "lemon": cr.lemon(_passes(num_nodes, num_gpus, LEMON_TFLOPS, plant.lemon), hosts=tuple(hosts))}
    records.update(network(num_nodes, num_gpus, plant))
    records["storage"] = storage(num_nodes, plant.writes)
    return records


def fleet_view(num_nodes: int, num_gpus: int = 8, plant: Plant | None = None) -> RunView:
    return RunView(name="fleet", stamp=STAMP, raw_rel=RAW, access="ssh",
                   records=fleet_records(num_nodes, num_gpus, plant))
