"""The report is lint-clean by construction: a matrix of record sets, each rendered, run through
`clustereval lint` and checked sentence by sentence against its records (tests/reportcheck.py).

The record sets are built with the real record classes, in the shapes the phases write them:
1 node with 1, 2 and 8 GPUs; 2, 4 and 16 nodes (also without the checks across nodes at preflight, in
a run and in a resume); a dead GPU; a slow GPU confirmed in three passes;
a node lost mid-phase; a failed and a partly failed pairwise round; a failed rendezvous; no
shared filesystem; two shared mounts grouped and not grouped; a run interrupted during storage.
"""

from __future__ import annotations

import copy

import pytest

from clustereval.records import Gap
from clustereval.records.environment import (
    EnvironmentRecord,
    FilesystemInfo,
    GpuInfo,
    NicInfo,
    NodeEnvironment,
    NvlinkInfo,
)
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    LaunchInfo,
    NcclEnvInfo,
    PairResult,
    PairwiseRecord,
)
from clustereval.records.run import AcrossNodesNotRun, EvalPythonRecord, NodeInfo, PreflightRecord
from clustereval.records.storage import ConcurrentWrite, FioCell, MountScan, NodeWrite, StorageRecord
from clustereval.report.render import RunView, render_report
from tests import compute_records as cr
from tests.conftest import run_cli
from tests.reportcheck import problems
from tests.test_network_report import sweep
from tests.test_storage_report import lustre, real_cells

GIB = 2**30
TIB = 2**40
INTERPRETER = "/scratch/alice/cluster-eval-2026-11-30-1938Z/venv/bin/python"
NVLS = NcclEnvInfo(final_env={"NCCL_NVLS_ENABLE": "2"}, env_source={"NCCL_NVLS_ENABLE": "clustereval default"},
                   nvls_enable="2", nvls_source="clustereval default")


# -- builders -------------------------------------------------------------------------------------
def hosts_for(num_nodes: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(num_nodes)]


def env_of(hosts: list[str], num_gpus: int, *, shared: tuple[str, ...] = ()) -> EnvironmentRecord:
    nodes = []
    for i, h in enumerate(hosts):
        n = NodeEnvironment(
            node=f"10.0.0.{i + 1}", index=i, hostname=h, has_gpu=True, os_pretty="Ubuntu 24.04.3 LTS",
            kernel="6.8.0-88-generic", cpu_model="AMD EPYC 9654", cpu_cores=96, cpu_threads=192, numa_nodes=2,
            mem_total_bytes=2 * 2**40,
            gpus=[GpuInfo(index=g, name="NVIDIA H200", memory_total_mib=143771, power_limit_w=700.0,
                          power_draw_w=75.0, clocks_max_sm_mhz=1980, clocks_sm_mhz=345, sm_count=132,
                          pcie_gen_max=5, pcie_width_max=16, pcie_width_current=16, ecc_mode="Enabled")
                  for g in range(num_gpus)],
            nvlink=NvlinkInfo(18, 26.562, 4, 450.0, "NV18") if num_gpus > 1 else NvlinkInfo(),
            nics=[NicInfo(f"mlx5_{k}", "infiniband", 400.0, "ACTIVE") for k in range(num_gpus)] if len(hosts) > 1
            else [],
            filesystems=[FilesystemInfo("/", 3 * TIB, "ext4", "/dev/md0")]
            + [FilesystemInfo(m, 25 * TIB, "lustre", "10.4.138.63@tcp:/data", shared=True) for m in shared])
        n.software.python, n.software.torch, n.software.torch_cuda, n.software.nccl = \
            "3.12.3", "2.11.0+cu130", "13.0", "2.28.9"
        n.software.driver, n.software.cuda_driver = "580.159.04", "13.0"
        nodes.append(n)
    for n in nodes:
        n.raw_files = {t: f"env/{n.node}/{t}.txt" for t in ("nvidia-smi", "lscpu", "findmnt", "lsblk", "df")}
    return EnvironmentRecord(phase="environment", nodes=nodes,
                             tool_links={"software.py": "raw-h200-2026-11-30-1938Z/tools/software.py"})


def preflight_of(hosts: list[str]) -> PreflightRecord:
    return PreflightRecord(access="ssh", passed=True,
                           nodes=[NodeInfo(f"10.0.0.{i + 1}", f"10.0.0.{i + 1}", i, h) for i, h in enumerate(hosts)],
                           final_env=dict(NVLS.final_env), env_source=dict(NVLS.env_source))


def evalpython_of(hosts: list[str]) -> EvalPythonRecord:
    return EvalPythonRecord(mode="venv", source="pytorch-index", interpreter=INTERPRETER, torch="2.11.0+cu130",
                            nccl="2.28.9", python="3.12.3", index_kind="pytorch", index_tag="cu130",
                            index_url="https://download.pytorch.org/whl/cu130", newest_on_index="2.11.0+cu130",
                            verified_newest=True,
                            executables={f"10.0.0.{i + 1}": INTERPRETER for i in range(len(hosts))})


def passes(num_gpus: int, slow: dict[int, float] | None = None, num_passes: int = 1) -> list[dict[int, float | None]]:
    slow = slow or {}
    return [{g: 740.0 * (1 - slow.get(g, 0.0)) + p for g in range(num_gpus)} for p in range(num_passes)]


def compute_of(hosts: list[str], num_gpus: int, **kw) -> dict:
    mm_passes = kw.get("mm_passes") or [passes(num_gpus) for _ in hosts]
    lemon_passes = kw.get("lemon_passes") or [passes(num_gpus) for _ in hosts]
    return {"health": cr.health(tuple(hosts), num_gpus),
            "gpupass": cr.gpupass(tuple(hosts), num_gpus, **kw.get("gpupass", {})),
            "matmul": cr.matmul(mm_passes, hosts=tuple(hosts), dead=kw.get("dead", ()),
                                num_gpu_passes=kw.get("gpu_passes", 1)),
            "lemon": cr.lemon(lemon_passes, hosts=tuple(hosts), dead=kw.get("lemon_dead"),
                              num_gpu_passes=kw.get("gpu_passes", 1))}


def network_of(hosts: list[str], num_gpus: int, *, conn_ok: bool = True, pairs: list[PairResult] | None = None) -> dict:
    names = [f"10.0.0.{i + 1}" for i in range(len(hosts))]
    n = len(names)
    conn = ConnectivityRecord(scope="inter-node" if n > 1 else "intra-node", backend="nccl", num_nodes=n,
                              num_ranks=num_gpus * n, allreduce_ok=conn_ok, nccl_env=NVLS,
                              launch=LaunchInfo(nodes=names, nproc_per_node=num_gpus, world_size=num_gpus * n,
                                                ok=conn_ok, rc_by_node={x: 0 for x in names},
                                                endpoint="10.0.0.1:29500"))
    out: dict = {"connectivity": conn}
    if num_gpus > 1 or n > 1:  # one GPU alone has no intra-node sweep; several nodes have an inter-node one
        out["allreduce"] = AllreduceRecord(
            min_bytes=2**15, max_bytes=16 * GIB, nccl_env=NVLS,
            intra=[sweep("intra-node", [x], num_gpus, 345.0 - i * 0.5) for i, x in enumerate(names)] if num_gpus > 1 else [],
            inter=sweep("inter-node", names, num_gpus * n, 95.0) if n > 1 else None)
    if n > 1:
        if pairs is None:
            pairs = [PairResult(a, b, r + 1, 90.0 + (r % 3) * 0.2)
                     for r, (a, b) in enumerate((names[i], names[j]) for i in range(n) for j in range(i + 1, n))]
        done = [p.busbw_gb_s for p in pairs if p.busbw_gb_s is not None]
        out["pairwise"] = PairwiseRecord(payload_bytes=GIB, backend="nccl", ranks_per_node=num_gpus,
                                         num_rounds=max(p.round for p in pairs), pairs=pairs,
                                         mean_busbw_gb_s=sum(done) / len(done) if done else 0.0)
    return out


def storage_of(num_nodes: int, shared: list[MountScan] | None = None, *, local_cells=None) -> StorageRecord:
    shared = shared if shared is not None else []
    local = MountScan("/tmp", 3 * TIB, "ext4", "/dev/md0", "/", False, "10.0.0.1",
                      cells=local_cells if local_cells is not None else real_cells(), complete=local_cells is None)
    parts = [FilesystemInfo("/", 3 * TIB, "ext4", "/dev/md0")] + [
        FilesystemInfo(s.mount, s.size_bytes, s.fstype, s.source, shared=True) for s in shared]
    concurrent = None
    if num_nodes >= 2 and shared:
        writes = [NodeWrite(f"10.0.0.{i + 1}", GIB, 2.5 + i * 0.01, 400.0 - i) for i in range(num_nodes)]
        concurrent = ConcurrentWrite(mount=shared[0].mount, size_bytes=shared[0].size_bytes, fstype="lustre",
                                     nodes=writes, aggregate_mib_s=sum(w.mib_s for w in writes) * 0.9, wall_s=2.7)
    return StorageRecord(partitions=parts, local=local, shared=shared, concurrent=concurrent, runtime_s=60,
                         num_nodes=num_nodes, tool_files=["tools/storage.py", "tools/fio.py"], fio_version="fio-3.36",
                         shared_paths=[s.mount for s in shared])


def full_run(num_nodes: int, num_gpus: int, *, shared: bool = True, **kw) -> dict:
    hosts = hosts_for(num_nodes)
    scans = [lustre("/data", 25, "10.4.138.63@tcp:/data", 3.0)] if shared else []
    records = {"preflight": preflight_of(hosts), "evalpython": evalpython_of(hosts),
               "environment": env_of(hosts, num_gpus, shared=("/data",) if shared else ())}
    records.update(compute_of(hosts, num_gpus, **kw))
    records.update(network_of(hosts, num_gpus, conn_ok=kw.get("conn_ok", True), pairs=kw.get("pairs")))
    records["storage"] = storage_of(num_nodes, scans)
    return records


# -- the matrix -----------------------------------------------------------------------------------
def dead_gpu() -> dict:
    return full_run(1, 8, dead=((0, 3),), mm_passes=[[{**passes(8)[0], 3: None}]],
                    lemon_passes=[[{**passes(8)[0], 3: None}]],
                    lemon_dead={(0, 3): "RuntimeError: CUDA error: an illegal memory access was encountered"})


def slow_gpu() -> dict:
    three = passes(8, slow={5: 0.04}, num_passes=3)
    return full_run(1, 8, mm_passes=[three], lemon_passes=[passes(8, slow={5: 0.05})])


def lost_node() -> dict:
    """gpu-002 stopped answering during the compute phases: its results are missing, every other node's kept."""
    rec = full_run(4, 8)
    lost = "10.0.0.3"
    for phase in ("health", "matmul", "lemon"):
        r = rec[phase]
        r.nodes = [n for n in r.nodes if n.node != lost]
        r.status = "partial"
        r.gaps.append(Gap(phase=phase, node=lost, text=f"`gpu-002(node2)` stopped answering during {phase} "
                          "(connection lost after 41 s); the other nodes' results are below.",
                          plan="check that node2 is up, then run `clustereval run --resume RUN_DIR`"))
    rec["storage"].concurrent.nodes[2].error = "connection lost"
    return rec


def pairwise_failed() -> dict:
    names = [f"10.0.0.{i + 1}" for i in range(4)]
    pairs = [PairResult(a, b, r + 1, None, error="torchrun failed")
             for r, (a, b) in enumerate((names[i], names[j]) for i in range(4) for j in range(i + 1, 4))]
    rec = full_run(4, 8, pairs=pairs)
    rec["pairwise"].status = "failed"
    rec["pairwise"].gaps = [Gap(phase="pairwise", text="No node pair completed its all-reduce (torchrun failed on "
                                "every pair), so no straggler can be named.", plan="see network/pairwise/ in the raw "
                                "folder, then run `clustereval run --resume RUN_DIR`")]
    return rec


def pairwise_partly_failed() -> dict:
    names = [f"10.0.0.{i + 1}" for i in range(4)]
    combos = [(names[i], names[j]) for i in range(4) for j in range(i + 1, 4)]
    pairs = [PairResult(a, b, r + 1, 90.0 + r * 0.1) for r, (a, b) in enumerate(combos)]
    pairs[5].busbw_gb_s, pairs[5].error = None, "torchrun failed"
    rec = full_run(4, 8, pairs=pairs)
    rec["pairwise"].status = "partial"
    rec["pairwise"].gaps = [Gap(phase="pairwise", text="The pair gpu-002(node2)–gpu-003(node3) did not complete its "
                                "all-reduce (torchrun failed).", plan="see network/pairwise/ in the raw folder")]
    return rec


def rendezvous_failed() -> dict:
    rec = full_run(2, 8)
    conn = rec["connectivity"]
    conn.num_ranks, conn.allreduce_ok, conn.status = 0, False, "failed"
    conn.launch.ok, conn.launch.rc_by_node = False, {"10.0.0.1": 1, "10.0.0.2": 1}
    conn.launch.diagnosis, conn.launch.diagnosis_text = "store-not-listening", "nobody hosted the rendezvous store"
    conn.gaps = [Gap(phase="connectivity", text="No rank joined the rendezvous at 10.0.0.1:29500: nobody hosted the "
                     "store (torchrun failed on both nodes).", plan="open TCP port 29500 on 10.0.0.1")]
    ar = rec["allreduce"]
    ar.intra, ar.inter, ar.status = [], None, "failed"
    ar.gaps = [Gap(phase="allreduce", text="The all-reduce sweep did not run: the rendezvous failed.",
                   plan="open TCP port 29500 on 10.0.0.1")]
    del rec["pairwise"]
    return rec


def grouped_mounts(grouped: bool) -> dict:
    rec = full_run(1, 8)
    a = lustre("/data", 25, "10.4.138.63@tcp:/data", 3.0)
    b = lustre("/ckpt", 25, "10.4.138.64@tcp:/ckpt", 3.0 if grouped else 6.0)
    rec["storage"] = storage_of(1, [a, b])
    return rec


def partial_run() -> dict:
    """Ctrl-C during storage: two local runs finished, the third was stopped; nothing after it ran."""
    rec = full_run(1, 8, shared=False)
    cells = real_cells()[:2] + [FioCell(2**20, "read", 0, 0, 0, error="stopped by Ctrl-C")]
    rec["storage"] = storage_of(1, [], local_cells=cells)
    rec["storage"].status = "partial"
    return rec


def newest_torch_refused() -> dict:
    """The PyTorch index listed a newer torch that pip could not install; pip's own index gave the venv."""
    from clustereval.phases.evalpython import not_newest_gap

    rec = full_run(1, 1, shared=False)
    ev = rec["evalpython"]
    ev.source, ev.index_kind, ev.index_url, ev.torch, ev.newest_on_index = ("default-index", "default", "",
                                                                          "2.11.0+cu130", "2.11.0+cu130")
    ev.refused_newest, ev.refused_url = "2.12.0+cu130", "https://download.pytorch.org/whl/cu130"
    ev.refused_why = "ERROR: No matching distribution found for torch==2.12.0+cu130"
    ev.verified_newest = False
    ev.gaps = [not_newest_gap(ev, ["torch==2.11.0+cu130"])]
    return rec


def pairwise_without_a_sweep() -> dict:
    """The all-reduce phase measured nothing (stopped before its inter-node sweep), pairwise ran."""
    rec = full_run(4, 1)
    del rec["allreduce"]
    return rec


def one_gpu_no_shared() -> dict:
    return full_run(1, 1, shared=False)


def nothing_across_nodes(resume: bool) -> dict:
    """16 nodes, no phase after preflight that starts a job across nodes, so preflight left its checks
    across nodes out: `--phases environment,storage`, or a resume of storage alone after every other
    phase (the network ones too) had finished."""
    rec = full_run(16, 8)
    if not resume:
        for phase in [p for p in rec if p not in ("preflight", "evalpython", "environment", "storage")]:
            del rec[phase]
    rec["preflight"].across_nodes_not_run = AcrossNodesNotRun(
        phases=["storage"] if resume else ["environment", "storage"],
        across_nodes=["connectivity", "allreduce", "pairwise"], resume=resume)
    return rec


MATRIX = {
    "1 node x 1 GPU": lambda: full_run(1, 1),
    "1 node x 2 GPUs": lambda: full_run(1, 2),
    "1 node x 8 GPUs": lambda: full_run(1, 8),
    "2 nodes": lambda: full_run(2, 8),
    "4 nodes": lambda: full_run(4, 8),
    "16 nodes": lambda: full_run(16, 8),
    "4 nodes x 1 GPU": lambda: full_run(4, 1),
    "pairwise without an all-reduce sweep": pairwise_without_a_sweep,
    "dead GPU": dead_gpu,
    "slow GPU in three passes": slow_gpu,
    "lost node mid-phase": lost_node,
    "failed pairwise": pairwise_failed,
    "partly failed pairwise": pairwise_partly_failed,
    "failed rendezvous": rendezvous_failed,
    "no shared FS": lambda: full_run(1, 8, shared=False),
    "1 GPU, no shared FS": one_gpu_no_shared,
    "two shared mounts grouped": lambda: grouped_mounts(True),
    "two shared mounts not grouped": lambda: grouped_mounts(False),
    "partial run": partial_run,
    "newest torch not installable": newest_torch_refused,
    "16 nodes, no phase across nodes": lambda: nothing_across_nodes(False),
    "16 nodes, a resume of storage alone": lambda: nothing_across_nodes(True),
    "slow PCIe, corrupt memory and a wrong answer": lambda: full_run(4, 8, gpupass={
        "slow_pcie": ((1, 2),), "corrupt": ((3, 7),), "wrong": ((0, 5),)}),
}


def render(records: dict, *, interrupted: bool = False) -> str:
    view = RunView(name="h200", stamp="2026-11-30-1938Z", raw_rel="raw-h200-2026-11-30-1938Z", access="ssh",
                   records=records, profile="quick", interrupted=interrupted)
    return render_report(view).markdown


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[str, dict, str]]:
    """Every record set rendered once, and `clustereval lint` run once over the lot."""
    folder = tmp_path_factory.mktemp("matrix")
    out = {}
    for i, (name, build) in enumerate(MATRIX.items()):
        records = build()
        md = render(copy.deepcopy(records), interrupted=name == "partial run")
        path = folder / f"h200-2026-11-30-19{i:02d}Z.md"
        path.write_text(md)
        out[name] = (md, records, str(path))
    return out


@pytest.mark.parametrize("name", list(MATRIX))
def test_record_set_renders_lint_clean_through_the_cli(rendered, name):
    md, _, path = rendered[name]
    res = run_cli("lint", path, timeout=120)
    assert res.returncode == 0, (name, res.stdout[-3000:], res.stderr[-2000:])


@pytest.mark.parametrize("name", list(MATRIX))
def test_every_sentence_matches_the_records(rendered, name):
    md, records, _ = rendered[name]
    assert problems(md, records) == []


def test_one_gpu_and_no_shared_fs_sets_render_the_five_tables_and_one_storage_gap(rendered):
    for name in ("1 node x 1 GPU", "1 GPU, no shared FS", "no shared FS"):
        md = rendered[name][0]
        env = md.split("## Environment")[1].split("\n## ")[0]
        assert [ln[4:] for ln in env.splitlines() if ln.startswith("### ")] == \
            ["Host", "GPU", "Fabric", "Filesystems", "Software"], name
    one = rendered["1 GPU, no shared FS"][0]
    assert ("| Intra-node | 1 GPU: its PCIe link to the host, Gen5 ×16 ≈ 63 GB/s unidirectional; no NVLink "
            "(no second GPU to link to) |") in one
    assert "| Network adapters (inventory) | no RDMA adapter found in `/sys/class/infiniband` |" in one
    for name in ("1 GPU, no shared FS", "no shared FS"):
        storage = rendered[name][0].split("## Storage")[1].split("\n## ")[0]
        gaps = storage.split("### Gaps")[1].strip().splitlines()
        assert len([g for g in gaps if "shared" in g]) == 1 and "No shared filesystem was named" in gaps[0], name
        closeout_plan = render_report(RunView(name="h200", stamp="2026-11-30-1938Z", raw_rel="raw", access="ssh",
                                              records=rendered[name][1])).gaps
        assert [g.plan for g in closeout_plan if "No shared filesystem" in g.text][0].count("`shared_paths`") == 1
    with_shared = rendered["1 node x 1 GPU"][0]
    assert "No shared filesystem was named" not in with_shared


def test_partial_run_says_exactly_what_was_measured(rendered):
    md = rendered["partial run"][0]
    storage = md.split("## Storage")[1].split("\n## ")[0]
    assert "2 runs against one folder: file size 16 KiB, read and write." in storage
    assert "Reads ran at" in storage and "at 16 KiB." in storage
    assert "1 MiB" not in storage.split("### Local disk IO benchmark")[1].split("###")[0]


def test_node_setup_gaps_are_said_once_in_the_section_they_affect():
    records = full_run(1, 8)
    records["packages"] = __import__("clustereval.records.run", fromlist=["PackagesRecord"]).PackagesRecord(gaps=[
        Gap("packages", "[`dcgmi`](https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html) "
                        "is missing on 10.0.0.1, so the hardware health pass cannot run.", "install DCGM"),
        Gap("packages", "[`ibstat`](https://linux.die.net/man/8/ibstat) is missing on 10.0.0.1, so adapter rates are "
                        "read from /sys/class/infiniband.", "install infiniband-diags")])
    records["health"].gaps = [Gap("health", "DCGM (`dcgmi`) is not installed on 10.0.0.1, so the hardware health "
                                            "pass did not run.", "install datacenter-gpu-manager-4-cuda13")]
    records["evalpython"].verified_newest = False
    records["evalpython"].newest_on_index = "2.12.0+cu130"
    records["evalpython"].gaps = [Gap("evalpython", "Every benchmark ran on torch 2.11.0+cu130, which is not the newest "
                                      "release on the PyTorch wheel index for `cu130` at eval time (2.12.0+cu130).",
                                      "accept torch 2.11.0+cu130 as the version settled for")]
    view = RunView(name="h200", stamp="2026-11-30-1938Z", raw_rel="raw-h200-2026-11-30-1938Z", access="ssh",
                   records=records)
    out = render_report(view)
    md = out.markdown
    sections = {s.split("\n", 1)[0]: s for s in md.split("\n## ")}
    assert "### Gaps" not in sections["Environment"]
    dcgm_gaps = [ln for s in sections.values() if "### Gaps" in s for ln in s.split("### Gaps")[1].splitlines()
                 if "dcgm" in ln.lower()]
    assert dcgm_gaps == ["- DCGM (`dcgmi`) is not installed on 10.0.0.1, so the hardware health pass did not run."]
    assert "not the newest release" in sections["Compute"] and "not the newest release" not in sections["Network"]
    assert "`ibstat`" in sections["Network"].split("### Gaps")[1]
    assert "the newest release there at eval time was 2.12.0+cu130" in sections["Environment"]
    texts = [g.text for g in out.gaps]
    assert len(texts) == len(set(texts)) and not any(t.startswith("[`dcgmi`]") for t in texts)


def test_the_example_report_is_its_records_rendered_and_lint_clean():
    """examples/ holds a real run: the committed report is exactly what the renderer makes of its records."""
    from pathlib import Path

    from clustereval.runner import load_records
    from clustereval.runner import render as render_run
    from clustereval.store import RunStore

    examples = Path(__file__).resolve().parents[1] / "examples"
    (report,) = sorted(examples.glob("*.md"))
    store = RunStore.open(examples / f"raw-{report.stem}")
    assert render_run(store, "local").markdown == report.read_text()
    assert problems(report.read_text(), load_records(store)) == []
    assert run_cli("lint", str(report), timeout=120).returncode == 0


@pytest.mark.parametrize("old, new, complaint", [
    ("8 ranks on 1 node", "0 ranks on 1 node", "`0 ranks`"),
    ("It ran at 8 ranks (intra-node", "It ran at no rank count (intra-node", "`no rank count`"),
    ("over payloads from 32 KiB to 16 GiB", "over payloads from 32 KiB to 1 GiB", "sweep range"),
    ("### Intra-node all-reduce benchmark", "### Intra-node all-reduce", "no `all-reduce benchmark` section"),
    ("6 runs against one folder", "4 runs against one folder", "says 4 runs"),
    ("across the 3 file sizes", "across the 2 file sizes", "says 2 file sizes"),
    ("| torch | 2.11.0+cu130", f"| torch | 2.11.0+cu130 in `{INTERPRETER}`", "interpreter path"),
])
def test_the_sentence_checker_catches_each_contradiction(rendered, old, new, complaint):
    md, records, _ = rendered["1 node x 8 GPUs"]
    assert old in md and problems(md, records) == []
    found = problems(md.replace(old, new, 1), records)
    assert any(complaint in p for p in found), found


def test_clustereval_report_redraws_the_example_plots_from_its_records(tmp_path):
    """Plots are drawn at report time from the records: with every PNG of the example's raw folder gone,
    `clustereval report` draws each one the report links again."""
    import re
    import shutil
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    (report,) = sorted(examples.glob("*.md"))
    raw = tmp_path / f"raw-{report.stem}"
    shutil.copytree(examples / raw.name, raw)
    shutil.copy(report, tmp_path / report.name)
    for png in raw.rglob("*.png"):
        png.unlink()
    res = run_cli("report", str(raw), cwd=tmp_path, timeout=300)
    # written and lint-clean (3 otherwise); 1: its Findings hold the leftover Gaps (DCGM, torch, no shared FS)
    assert res.returncode == 1 and "underperforming: GPUs" in res.stderr, (res.stdout + res.stderr)[-3000:]
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", (tmp_path / report.name).read_text())
    assert linked, "the example report links no plot"
    for rel in linked:
        assert (tmp_path / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", rel
    assert (tmp_path / report.name).read_text() == report.read_text()
