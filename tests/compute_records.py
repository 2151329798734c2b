"""Hand-built Compute records for report tests: consistent numbers, the shapes a run produces."""

from clustereval.analysis.gpu_passes import three_pass
from clustereval.records.compute import (
    DiagResult,
    GpuMsmf,
    HealthRecord,
    LemonGpu,
    LemonRecord,
    MatmulRecord,
    NodeHealth,
    NodeLemon,
    NodeMatmul,
    SearchSummary,
    ShapeTiming,
)
from clustereval.records.environment import EnvironmentRecord, GpuInfo, NodeEnvironment

MSMF_SHAPE = (8192, 8192, 16384)


def timing(shape, tflops, stage="sustained", power=698.0, clock=1530.0, label="", why=""):
    m, n, k = shape
    return ShapeTiming(m=m, n=n, k=k, stage=stage, mean_tflops=tflops, median_tflops=tflops, max_tflops=tflops + 4,
                       iterations=400, power_w=power, sm_mhz=clock, sm_mhz_low=clock - 30, sm_mhz_high=clock + 30,
                       num_samples=150, label=label, why=why)


def environment(hosts=("gpu-a",), num_gpus=2, name="NVIDIA H200"):
    return EnvironmentRecord(nodes=[
        NodeEnvironment(node=f"10.0.0.{i + 1}", index=i, hostname=h, has_gpu=True, os_pretty="Ubuntu 24.04.3 LTS",
                        kernel="6.8.0-88-generic", cpu_model="AMD EPYC 9654", cpu_cores=32, numa_nodes=1,
                        mem_total_bytes=270 * 2**30,
                        gpus=[GpuInfo(index=g, name=name, memory_total_mib=143771, power_limit_w=700.0,
                                      clocks_max_sm_mhz=1980, sm_count=132) for g in range(num_gpus)])
        for i, h in enumerate(hosts)])


def health(hosts=("gpu-a",), num_gpus=2, fail=None):
    nodes = []
    for i, h in enumerate(hosts):
        results = [DiagResult(p, c, "Pass", {g: "Pass" for g in range(num_gpus)})
                   for p, c in (("software", "Deployment"), ("memory", "Hardware"), ("pcie", "Integration"),
                                ("memory_bandwidth", "Stress"))]
        if fail and fail[0] == i:
            r = results[1]
            r.result, r.gpus[fail[1]] = "Fail", "Fail"
            r.messages = [f"Warning: GPU{fail[1]} GPU {fail[1]} Error using CUDA API cudaMemcpy"]
        nodes.append(NodeHealth(node=f"10.0.0.{i + 1}", index=i, hostname=h, ran=True, dcgm_version="4.2.3",
                                results=results, log_rel=f"health/dcgm-diag-r2-10.0.0.{i + 1}.txt"))
    return HealthRecord(nodes=nodes)


def matmul(per_node_passes, hosts=("gpu-a",), dead=(), suspect=False, idle_warning=False, num_gpu_passes=1):
    """``per_node_passes``: for each node, a list of passes, each {gpu: TFLOPS or None}; ``num_gpu_passes``:
    the passes ``[verdicts] gpu_passes`` asked for."""
    nodes = []
    for i, (h, passes) in enumerate(zip(hosts, per_node_passes, strict=True)):
        gpus = sorted(passes[0])
        mamf = timing((1024, 4096, 16384), 807.53, "burst", 512.0, 1980.0)
        msmf = timing(MSMF_SHAPE, passes[0][gpus[0]])
        sustained = [msmf]
        if suspect:
            sustained.insert(0, timing((4096, 4096, 16384), 790.0, "hot", power=612.0, clock=1980.0, label="SUSPECT",
                                       why="held 612 W against the 700 W limit (below 95% of it)"))
        search = SearchSummary(shapes_tried=256, num_screened=256, num_confirmed=8, num_hot=6, num_sustained=1,
                               screen_min_iters=3, confirm_min_iters=30, confirm_min_s=0.05, burst_duty=0.5, hot_s=1.0,
                               mamf=mamf, msmf=msmf, sustained=sustained)
        rec_gpus = []
        for g in gpus:
            vals = [p.get(g) for p in passes]
            rec_gpus.append(GpuMsmf(gpu=g, tflops=vals, timings=[timing(MSMF_SHAPE, v) if v is not None else None
                                                                 for v in vals],
                                    errors=["RuntimeError: CUDA error: an illegal memory access was encountered"] * 2
                                    if (i, g) in dead else []))
        verdict = three_pass(passes)
        node = NodeMatmul(node=f"10.0.0.{i + 1}", index=i, hostname=h, gpu_name="NVIDIA H200", num_gpus=len(gpus),
                          sm_count=132, memory_gib=140.4, power_limit_w=700.0, boost_mhz=1980.0, search=search,
                          msmf_shape=MSMF_SHAPE, gpus=rec_gpus, num_passes=len(passes), medians=verdict.medians,
                          flagged=verdict.flagged, underperforming=verdict.underperforming,
                          dead=[g for (n, g) in dead if n == i])
        if idle_warning:
            node.warnings.append(f"During the MSMF measurement of `{h}(node{i}):gpu1` the worker saw idle siblings "
                                 "(gpu0 stopped computing), so it was measured again")
        nodes.append(node)
    return MatmulRecord(tool_rel="tools/matmul.py", settle_s=1.5, sustain_s=3.0, nodes=nodes,
                        saturated_sm_mhz=(1500, 1560), num_gpu_passes=num_gpu_passes)


def lemon(per_node_passes, hosts=("gpu-a",), dead=None, num_gpu_passes=1):
    """``dead``: {(node, gpu): why}; ``num_gpu_passes``: the passes ``[verdicts] gpu_passes`` asked for."""
    dead = dead or {}
    nodes = []
    for i, (h, passes) in enumerate(zip(hosts, per_node_passes, strict=True)):
        gpus = sorted(passes[0])
        verdict = three_pass(passes)
        nodes.append(NodeLemon(node=f"10.0.0.{i + 1}", index=i, hostname=h, gpu_name="NVIDIA H200", sm_count=132,
                               gpus=[LemonGpu(gpu=g, tflops=[p.get(g) for p in passes], power_w=699.0, sm_mhz=1540.0,
                                              sm_count=132, error=dead.get((i, g), "")) for g in gpus],
                               num_passes=len(passes), medians=verdict.medians, flagged=verdict.flagged,
                               underperforming=verdict.underperforming, dead=[g for (n, g) in dead if n == i]))
    return LemonRecord(nodes=nodes, num_gpu_passes=num_gpu_passes)


def gpupass(hosts=("gpu-a",), num_gpus=2, *, slow_pcie=(), corrupt=(), wrong=()):
    """A GPU memory and links record of H200s: every GPU healthy but the (node, gpu) pairs listed —
    ``slow_pcie`` on a Gen4 x8 link, ``corrupt`` with 3 bad words, ``wrong`` dissenting in the vote."""
    from clustereval.records.gpupass import (
        GpuPassRecord,
        MemMismatch,
        MemoryHealth,
        NodePass,
        P2pCell,
        PassGpu,
        PcieLink,
        PcieRates,
        VoteCase,
    )

    nodes = []
    for i, h in enumerate(hosts):
        gpus = []
        for g in range(num_gpus):
            slow = (i, g) in slow_pcie
            health = MemoryHealth(ecc_enabled=True, ecc_uncorrected_volatile=0, remapped_uncorrected=0,
                                  remap_failed=False, remap_pending=False)
            gpus.append(PassGpu(
                gpu=g, name="NVIDIA H200", sm_count=132, memory_gib=139.8,
                link=PcieLink(gen_current=1, gen_max=5, width_current=8 if slow else 16, width_max=16,
                              gen_under_load=4 if slow else 5, width_under_load=8 if slow else 16),
                health_before=health, health_after=health, copy_gb_s=2150.0 - g, read_gb_s=2300.0, write_gb_s=2500.0,
                pcie_solo=PcieRates(24.1 if slow else 55.5, 23.9 if slow else 55.4, 51.0, 50.5),
                pcie_all=PcieRates(53.0, 53.1, 45.0, 44.0) if num_gpus > 1 else None,
                mem_bytes_tested=120 * 2**30, mem_patterns=["zeros", "ones", "0xAA", "0x55", "address"],
                mem_mismatches=[MemMismatch("0x55", 3, 4096, 1, 3)] if (i, g) in corrupt else [],
                vote=[VoteCase("bfloat16", [4096, 4096, 4096], ["ff" if (i, g) in wrong else "a1"] * 3, 0.0011, 1e-2),
                      VoteCase("float32", [1024, 1024, 1024], ["b2"] * 3, 2e-7, 1e-5)]))
        p2p = [P2pCell(a, b, True, 380.0, 740.0) for a in range(num_gpus) for b in range(num_gpus) if a != b]
        nodes.append(NodePass(node=f"10.0.0.{i + 1}", index=i, hostname=h, torch="2.11.0+cu130", cuda="13.0",
                              device="cuda", telemetry=True, gpus=gpus, p2p=p2p, seconds=41.0))
    return GpuPassRecord(quick=True, tool_rel="tools/gpu_pass.py", nodes=nodes)
