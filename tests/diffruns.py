"""Whole run folders built from the real record classes, for summary.json, diff and JUnit tests.

``healthy_records`` is a 2-node run of 4 GPUs each; keyword arguments make the changes the tests
look for (one GPU slower in three passes, one node's 1 MiB write halved, a newer NCCL, other hosts).
"""

from __future__ import annotations

from pathlib import Path

from clustereval.analysis.summary import SUMMARY_FILE
from clustereval.compare import save_summary
from clustereval.records.environment import FilesystemInfo, NvlinkInfo, SoftwareInfo
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    LaunchInfo,
    NcclDebugInfo,
    NcclEnvInfo,
    PairResult,
    PairwiseRecord,
    Sweep,
    SweepRow,
)
from clustereval.records.run import EvalPythonRecord, NodeInfo, PreflightRecord
from clustereval.records.storage import (
    FILE_SIZES,
    ConcurrentWrite,
    FioCell,
    MountScan,
    NodeWrite,
    StorageRecord,
)
from clustereval.runner import render
from clustereval.store import RunState, RunStore
from tests import compute_records as cr

HOSTS = ("gpu-a", "gpu-b")
NUM_GPUS = 4
# small run-to-run jitter, inside every noise the summary states (well under 1%)
JITTER = (0.0, 0.003, -0.002, 0.001, -0.003, 0.002, -0.001, 0.0)
PAYLOADS = [2**20 * 4**i for i in range(5)]  # 1 MiB .. 256 MiB
FIO_BW = {(16 * 2**10, "read"): 410.0, (16 * 2**10, "write"): 290.0, (2**20, "read"): 1480.0,
          (2**20, "write"): 980.0, (2**30, "read"): 2900.0, (2**30, "write"): 2100.0}


def _addr(i: int) -> str:
    return f"10.0.0.{i + 1}"


def _passes(slow_gpu: tuple[int, int] | None, slow_frac: float, seed: int,
            num_nodes: int = len(HOSTS)) -> list[list[dict[int, float]]]:
    """Per node, the MSMF passes: one pass when nothing is flagged, three on the node with a slow GPU."""
    out = []
    for n in range(num_nodes):
        num = 3 if slow_gpu and slow_gpu[0] == n else 1
        passes = []
        for p in range(num):
            vals = {}
            for g in range(NUM_GPUS):
                v = 700.0 * (1 + JITTER[(g + 3 * n + p + seed) % len(JITTER)])
                if slow_gpu == (n, g):
                    v = 700.0 * (1 - slow_frac) * (1 + JITTER[(p + seed) % len(JITTER)])
                vals[g] = round(v, 2)
            passes.append(vals)
        out.append(passes)
    return out


def _sweep(scope: str, nodes: list[str], ranks: int, peak: float, seed: int) -> Sweep:
    rows, blocking = [], []
    for i, p in enumerate(PAYLOADS):
        bus = peak * min(1.0, (i + 1) / 4) * (1 + JITTER[(i + seed) % len(JITTER)])
        alg = bus / (2 * (ranks - 1) / ranks)
        rows.append(SweepRow(p, p / (alg * 1e9), alg, bus, 100, "events"))
        blocking.append(SweepRow(p, p / (alg * 0.99 * 1e9), alg * 0.99, bus * 0.99, 20, "barrier+sync"))
    return Sweep(scope=scope, nodes=nodes, num_ranks=ranks, backend="nccl", device_name="NVIDIA H200", rows=rows,
                 blocking_rows=blocking, ok=True)


def _cells(factor: dict[tuple[int, str], float], seed: int) -> list[FioCell]:
    cells = []
    for _, size, _label in FILE_SIZES:
        for rw in ("read", "write"):
            bw = FIO_BW[(size, rw)] * factor.get((size, rw), 1.0) * (1 + JITTER[(size + len(rw) + seed) % 8])
            cells.append(FioCell(size, rw, latency_msec=64 * 4 / bw, bw_mib_s=bw, iops=bw * 256))
    return cells


def healthy_records(*, slow_gpu: tuple[int, int] | None = None, slow_frac: float = 0.07,
                    halve_write_node: int | None = None, nccl: str = "2.27.3", hosts: tuple[str, ...] = HOSTS,
                    seed: int = 0, nccl_env: dict[str, str] | None = None) -> dict[str, object]:
    """Every record a 2-node run writes. ``halve_write_node``: that node's local 1 MiB fio write at half speed."""
    addrs = [_addr(i) for i in range(len(hosts))]
    env_vars = nccl_env if nccl_env is not None else {"NCCL_IB_HCA": "mlx5", "NCCL_NVLS_ENABLE": "0"}
    pre = PreflightRecord(access="ssh", passed=True, rendezvous="10.0.0.1:29500", final_env=dict(env_vars),
                          nodes=[NodeInfo(a, a, i, h) for i, (a, h) in enumerate(zip(addrs, hosts, strict=True))],
                          gpus_per_node=NUM_GPUS)
    env = cr.environment(hosts, NUM_GPUS)
    for n, a in zip(env.nodes, addrs, strict=True):
        n.node = a
        n.nvlink = NvlinkInfo(18, 26.562, 4, 450.0, "NV18")
        n.software = SoftwareInfo(python="3.12.3", torch="2.11.0+cu130", torch_cuda="13.0", nccl=nccl,
                                  driver="580.95.05", cuda_driver="13.0", cuda_available=True)
        n.filesystems = [FilesystemInfo("/", 270553174016, "ext4", "/dev/vda"),
                         FilesystemInfo("/data", 50 * 2**40, "lustre", "10.4.0.1@tcp:/fs", shared=True)]
    ev = EvalPythonRecord(mode="venv", torch="2.11.0+cu130", nccl=nccl, python="3.12.3")
    mm = cr.matmul(_passes(slow_gpu, slow_frac, seed, len(hosts)), hosts)
    lemon = cr.lemon(_passes(None, 0.0, seed + 1, len(hosts)), hosts)
    health = cr.health(hosts, NUM_GPUS)
    env.tool_links = {"software.py": "raw-h200/tools/software.py"}
    nenv = NcclEnvInfo(final_env=dict(env_vars), env_source={k: "cluster.toml" for k in env_vars},
                       nvls_enable=env_vars.get("NCCL_NVLS_ENABLE", ""), nvls_source="cluster.toml")
    conn = ConnectivityRecord(scope="inter-node", backend="nccl", num_nodes=len(addrs), num_ranks=NUM_GPUS * len(addrs),
                              allreduce_ok=True, nccl_env=nenv,
                              launch=LaunchInfo(nodes=addrs, nproc_per_node=NUM_GPUS, world_size=NUM_GPUS * len(addrs),
                                                ok=True, rc_by_node={a: 0 for a in addrs}, endpoint="10.0.0.1:29500"))
    ar = AllreduceRecord(intra=[_sweep("intra-node", [a], NUM_GPUS, 360.0, seed + i) for i, a in enumerate(addrs)],
                         inter=_sweep("inter-node", addrs, NUM_GPUS * len(addrs), 180.0, seed) if len(addrs) > 1
                         else None, min_bytes=PAYLOADS[0], max_bytes=PAYLOADS[-1], nccl_env=nenv)
    pw = PairwiseRecord(payload_bytes=2**30, backend="nccl", ranks_per_node=NUM_GPUS, num_rounds=1,
                        pairs=[PairResult(addrs[0], addrs[1], 1, 178.0 * (1 + JITTER[seed % 8]))],
                        mean_busbw_gb_s=178.0 * (1 + JITTER[seed % 8]))
    halve = {(2**20, "write"): 0.5}
    local = MountScan("/tmp", 270553174016, "ext4", "/dev/vda", "/", False, addrs[0],
                      cells=_cells(halve if halve_write_node == 0 else {}, seed), complete=True)
    shared = MountScan("/data", 50 * 2**40, "lustre", "10.4.0.1@tcp:/fs", "/data", True, addrs[1],
                       cells=_cells(halve if halve_write_node == 1 else {}, seed + 2), complete=True)
    cw = ConcurrentWrite("/data", 50 * 2**40, "lustre",
                         nodes=[NodeWrite(a, 2**30, 1.0, 1024.0 * (1 + JITTER[(i + seed) % 8])) for i, a in enumerate(addrs)],
                         aggregate_mib_s=2048.0, wall_s=1.0)
    st = StorageRecord(partitions=[FilesystemInfo("/", 270553174016, "ext4", "/dev/vda"),
                                   FilesystemInfo("/data", 50 * 2**40, "lustre", "10.4.0.1@tcp:/fs", shared=True)],
                       local=local, shared=[shared], concurrent=cw, num_nodes=len(addrs), fio_version="fio-3.33",
                       tool_files=["tools/storage.py"])
    for sw in ar.intra + ([ar.inter] if ar.inter else []):
        sw.nccl = NcclDebugInfo(scope=sw.scope, version=f"{nccl}+cuda13.0", transports=["P2P/CUMEM"], network="IB",
                                nvls_available=False, nvls_used=False, nvls_env="0")
    return {"preflight": pre, "evalpython": ev, "environment": env, "connectivity": conn, "health": health,
            "matmul": mm, "lemon": lemon, "allreduce": ar, "pairwise": pw, "storage": st}


def write_run(reports: Path, records: dict[str, object], *, name: str = "h200", stamp: str = "2026-11-30-1938Z",
              junit: Path | None = None) -> Path:
    """A run folder as `clustereval run` leaves it: records, state, the report and summary.json."""
    import datetime as dt

    when = dt.datetime.strptime(stamp, "%Y-%m-%d-%H%MZ").replace(tzinfo=dt.timezone.utc)
    store = RunStore.create(reports, name, now=when)
    phases = list(records)
    store.save_state(RunState(name=name, stamp=store.run_id[len(name) + 1:], profile="standard", phases_planned=phases,
                              started_utc=when.strftime("%Y-%m-%dT%H:%M:%SZ")))
    for phase, rec in records.items():
        store.save_record(phase, rec)
        store.mark_finished(phase)
    rendered = render(store, "ssh")
    store.write_report(rendered.markdown)
    save_summary(store, rendered, "ssh", None, junit)
    assert (store.raw_dir / SUMMARY_FILE).exists()
    return store.raw_dir
