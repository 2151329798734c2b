"""The Network section from hand-built records: 1 node (no inter-node anything) and 4 nodes."""

from __future__ import annotations

from clustereval.records.environment import EnvironmentRecord, GpuInfo, NicInfo, NodeEnvironment, NvlinkInfo
from clustereval.records.network import (
    AllreduceRecord,
    ConnectivityRecord,
    LaunchInfo,
    NcclDebugInfo,
    NcclEnvInfo,
    NodeSuspect,
    PairResult,
    PairwiseRecord,
    Sweep,
    SweepRow,
)
from clustereval.report.markdown import Document
from clustereval.report.network import pairwise_lines, render_network
from clustereval.report.render import RunView, render_findings

GIB = 2**30
PAYLOADS = [2**15 * 2**i for i in range(20)]  # 32 KiB .. 16 GiB


def sweep(scope, nodes, ranks, peak, **kw) -> Sweep:
    rows = [SweepRow(p, p / (peak * 1e9 * min(1, (i + 1) / 14)), 0, peak * min(1.0, (i + 1) / 14), 20, "events")
            for i, p in enumerate(PAYLOADS)]
    for r in rows:
        r.algbw_gb_s = r.payload_bytes / r.time_s / 1e9
    nccl = NcclDebugInfo(scope=scope, version="2.28.9+cuda13.0", transports=["P2P/CUMEM"] + (["NET/IB"] if scope ==
                         "inter-node" else []), network="IB", nvls_available=False, nvls_used=False, nvls_env="0")
    return Sweep(scope=scope, nodes=nodes, num_ranks=ranks, backend="nccl", device_name="NVIDIA H200", rows=rows,
                 blocking_rows=[SweepRow(r.payload_bytes, r.time_s * 1.2, r.algbw_gb_s / 1.2, r.busbw_gb_s / 1.2)
                                for r in rows],
                 plot=f"network/busbw-{scope}-{ranks}.png", ok=True, nccl=nccl,
                 launch=LaunchInfo(label=scope, nodes=nodes, nproc_per_node=8, world_size=ranks, ok=True,
                                   rc_by_node={n: 0 for n in nodes}, endpoint="10.0.0.1:29500"), **kw)


def env_record(names) -> EnvironmentRecord:
    return EnvironmentRecord(nodes=[NodeEnvironment(node=n, index=i, hostname=f"gpu-{i:03d}",
                                                    gpus=[GpuInfo(index=g, name="NVIDIA H200") for g in range(8)],
                                                    nvlink=NvlinkInfo(18, 26.562, 4, 450.0, "NV18"),
                                                    nics=[NicInfo(f"mlx5_{k}", "infiniband", 400.0, "ACTIVE")
                                                          for k in range(8)]) for i, n in enumerate(names)])


def view_for(names, *, intra_peaks, inter_peak=None, pairwise=None, conn_ok=True) -> RunView:
    env = NcclEnvInfo(final_env={"NCCL_NVLS_ENABLE": "0"}, env_source={"NCCL_NVLS_ENABLE": "platform"},
                      nvls_enable="0", nvls_source="platform")
    n = len(names)
    conn = ConnectivityRecord(scope="inter-node" if n > 1 else "intra-node", backend="nccl", num_nodes=n,
                              num_ranks=8 * n, allreduce_ok=conn_ok, nccl_env=env,
                              launch=LaunchInfo(nodes=names, nproc_per_node=8, world_size=8 * n, ok=conn_ok,
                                                rc_by_node={x: 0 for x in names}, endpoint="10.0.0.1:29500"))
    ar = AllreduceRecord(min_bytes=2**15, max_bytes=16 * GIB, nccl_env=env,
                         intra=[sweep("intra-node", [x], 8, p) for x, p in zip(names, intra_peaks, strict=True)],
                         inter=sweep("inter-node", names, 8 * n, inter_peak) if inter_peak else None)
    records = {"environment": env_record(names), "connectivity": conn, "allreduce": ar}
    if pairwise:
        records["pairwise"] = pairwise
    return RunView(name="h200", stamp="2026-11-30-1938Z", raw_rel="raw-h200-2026-11-30-1938Z", access="ssh",
                   records=records)


def render(view) -> tuple[str, list]:
    doc = Document()
    doc.toc_here()
    result = render_network(view, doc)
    render_findings(doc, result.findings)
    return doc.render(), result.findings


def test_one_node_section_has_no_inter_node_anything():
    md, findings = render(view_for(["n0"], intra_peaks=[345.0]))
    assert "## Network" in md and "### Introduction" in md
    assert "Inter-node" not in md and "inter-node all-reduce" not in md.lower()
    assert "1. [Intra-node connectivity](#introduction) — `connectivity.py`, 8 ranks on 1 node" in md
    assert "[Intra-node all-reduce benchmark](#intra-node-all-reduce-benchmark) — `allreduce.py`, 8 ranks" in md
    assert "it ran on one node, so it is an intra-node check only" in md
    assert "from 32 KiB to 16 GiB" in md
    assert "**algbw** (algorithm bandwidth" in md and "**busbw** (bus bandwidth" in md
    assert "NVLS (NVLink SHARP)" in md and "`NCCL_NVLS_ENABLE=0` (0 = force off" in md
    assert "the container image or the cluster" in md
    assert "Transport: NVLink 4, NV18; spec 450.00 GBps unidirectional per GPU" in md
    assert "| payload | algbw (GBps) | busbw (GBps) | busbw blocking (GBps) |" in md
    assert "| 16 GiB |" in md
    assert "Peak busbw **345.00 GBps** at 256 MiB = 76.7% of the NVLink 4 spec of 450.00 GBps" in md
    assert "![Intra-node all-reduce](raw-h200-2026-11-30-1938Z/network/busbw-intra-node-8.png)" in md
    assert "### Gaps" not in md
    (fabric,) = findings
    assert fabric.category == "healthy" and fabric.subsystem == "fabric" and "76.7%" in fabric.text


def test_four_nodes_inter_node_pairwise_and_stragglers():
    names = ["n0", "n1", "n2", "n3"]
    pairs = [PairResult("n0", "n1", 1, 90.0), PairResult("n2", "n3", 1, 70.0, slow=True),
             PairResult("n0", "n2", 2, 71.0, slow=True), PairResult("n1", "n3", 2, 89.0),
             PairResult("n0", "n3", 3, 90.5), PairResult("n1", "n2", 3, 70.5, slow=True)]
    pw = PairwiseRecord(payload_bytes=GIB, backend="nccl", ranks_per_node=8, num_rounds=3, pairs=pairs,
                        mean_busbw_gb_s=80.17, suspects=[NodeSuspect("n2", 3, 3, 1.0, 70.5),
                                                         NodeSuspect("n3", 1, 3, 0.333, 83.2)],
                        stragglers=["n2"], heatmap="network/pairwise-heatmap.png", judged=True, healthy_pairs=3,
                        healthy_samples=3, healthy_median_gb_s=90.0, healthy_floor_gb_s=89.0, limit_gb_s=84.55)
    md, findings = render(view_for(names, intra_peaks=[345.0, 344.0, 300.0, 346.0], inter_peak=95.0, pairwise=pw))
    assert "1. [Inter-node connectivity](#introduction) — `connectivity.py`, 32 ranks on 4 nodes" in md
    assert "[Inter-node all-reduce benchmark](#inter-node-all-reduce-benchmark) — `allreduce.py`, 32 ranks" in md
    assert "[Pairwise all-reduce benchmark](#pairwise-all-reduce-benchmark)" in md
    assert "| payload | busbw gpu-000(node0) (GBps) |" in md
    assert "inter ÷ 1-node (×)" in md
    assert "NIC inventory per node" in md and "400 Gb/s (50.00 GBps) each" in md
    assert "% of" not in md.split("### Inter-node all-reduce benchmark")[1].split("###")[0]
    assert "Stragglers (every sample of their pairs below the limit): `gpu-002(node2)`" in md
    assert "the slowest was 89.00 GBps, so a pair is slow when even its fastest sample is below 84.55 GBps" in md
    assert "| gpu-000(node0) | gpu-002(node2) | 2 | 71.00 | 71.00 | 71.00 | -21.1 | slow |" in md
    assert "| gpu-000(node0) | gpu-001(node1) | 1 | 90.00 | 90.00 | 90.00 | +0.0 | within the healthy spread |" in md
    by_cat = {}
    for f in findings:
        by_cat.setdefault(f.category, []).append(f)
    assert any("gpu-002(node2)" in f.text and "intra-node" in f.text for f in by_cat["underperforming"])
    (straggler,) = [f for f in by_cat["underperforming"] if "pairwise" in f.text]
    assert straggler.text.startswith("`gpu-002(node2)` is a straggler")
    assert "below the limit of 84.55 GBps" in straggler.text
    (inter,) = by_cat["needs_input"]
    assert "no NIC rate is its target" in inter.text and "NET/IB" in inter.text
    assert all("% of NIC" not in f.text and "rail" not in f.text for f in findings)


def test_failed_launcher_is_a_torchrun_problem_not_the_network():
    view = view_for(["n0", "n1"], intra_peaks=[345.0, 345.0], conn_ok=False)
    conn = view.records["connectivity"]
    conn.launch.ok = False
    conn.launch.rc_by_node = {"n0": 1, "n1": 1}
    conn.launch.diagnosis = "store-not-listening"
    conn.launch.diagnosis_text = "nobody hosted the rendezvous store"
    from clustereval.records import Gap

    conn.gaps = [Gap(phase="connectivity", text="The connectivity test did not run: torchrun failed.", plan="x")]
    md, findings = render(view)
    assert "### Gaps" in md and "**failed** (see Gaps below)" in md
    (torchrun,) = [f for f in findings if f.subsystem == "torchrun"]
    assert torchrun.category == "underperforming" and "nobody hosted" in torchrun.text
    assert not any(f.subsystem == "fabric" and "unhealthy" in f.text for f in findings)


def test_connectivity_toc_line_links_to_the_second_introduction():
    doc = Document()
    doc.toc_here()
    doc.heading(2, "Compute")
    doc.heading(3, "Introduction", toc=False)
    render_network(view_for(["n0"], intra_peaks=[345.0]), doc)
    md = doc.render()
    assert "[Intra-node connectivity](#introduction-1)" in md


def test_full_reports_with_the_network_section_pass_lint():
    from clustereval.report.lint import lint_text
    from clustereval.report.render import render_report
    from tests.envfixtures import h200_record

    for count in (1, 4):
        env = h200_record(count)
        names = [n.node for n in env.nodes]
        view = view_for(names, intra_peaks=[345.0] * count, inter_peak=95.0 if count > 1 else None)
        view.records["environment"] = env
        md = render_report(view).markdown
        assert lint_text(md) == [], [str(p) for p in lint_text(md)]
        assert ("### Inter-node all-reduce benchmark" in md) == (count > 1)
        assert ("Inter-node connectivity" in md) == (count > 1)


def test_sweep_without_the_connectivity_record_still_expands_nccl_and_passes_lint():
    from clustereval.report.lint import lint_text
    from clustereval.report.render import render_report
    from tests.envfixtures import h200_record

    env = h200_record(1)
    view = view_for([env.nodes[0].node], intra_peaks=[345.0])
    view.records["environment"] = env
    del view.records["connectivity"]
    md = render_report(view).markdown
    assert "connectivity" not in md.split("## Network")[0]  # no TOC line for a test that did not run
    assert lint_text(md) == [], [str(p) for p in lint_text(md)]


def _pw(pairs, **kw) -> PairwiseRecord:
    return PairwiseRecord(payload_bytes=GIB, backend="nccl", ranks_per_node=8, num_rounds=3, pairs=pairs,
                          samples_per_pair=3, **kw)


def test_pairwise_with_a_failed_pair_and_with_every_pair_failed_passes_lint():
    from clustereval.records import Gap
    from clustereval.report.lint import lint_text
    from clustereval.report.render import render_report
    from tests.envfixtures import h200_record

    env = h200_record(4)
    names = [n.node for n in env.nodes]
    a, b, c, d = names
    ok = [PairResult(a, b, 1, 90.0, samples_gb_s=[89.0, 90.0, 91.0]), PairResult(c, d, 1, 90.5, samples_gb_s=[90.5] * 3),
          PairResult(a, c, 2, 89.5, samples_gb_s=[89.5] * 3), PairResult(b, d, 2, 90.2, samples_gb_s=[90.2] * 3),
          PairResult(a, d, 3, 90.1, samples_gb_s=[90.1] * 3)]
    failed = PairResult(b, c, 3, None, error="the launch failed on both nodes")
    partly = _pw([*ok, failed], judged=True, healthy_pairs=5, healthy_samples=15, healthy_median_gb_s=90.1,
                 healthy_floor_gb_s=89.0, limit_gb_s=84.55, mean_busbw_gb_s=90.06, status="partial",
                 gaps=[Gap("pairwise", f"The pair {b} + {c} did not complete (the launch failed).", "re-run")])
    none = _pw([PairResult(x, y, 1, None, error="the rendezvous port is blocked") for x, y in
                [(a, b), (c, d), (a, c), (b, d), (a, d), (b, c)]],
               why_not_judged="none of the 6 pairs completed", status="failed", not_joined=[b],
               gaps=[Gap("pairwise", "No straggler was judged: none of the 6 pairs completed.", "fix the launch")])
    for pw in (partly, none):
        view = view_for(names, intra_peaks=[345.0] * 4, inter_peak=95.0, pairwise=pw)
        view.records["environment"] = env
        md = render_report(view).markdown
        assert lint_text(md) == [], [str(p) for p in lint_text(md)]
        section = md.split("### Pairwise all-reduce benchmark")[1].split("###")[0]
        assert "| |" not in section and "Mean" not in section
        assert "Stragglers" not in section
    md, findings = render(view_for(names, intra_peaks=[345.0] * 4, inter_peak=95.0, pairwise=partly))
    assert f"counted neither slow nor fast): {b}" in md or "counted neither slow nor fast)" in md
    assert not [f for f in findings if "straggler" in f.text]
    md, findings = render(view_for(names, intra_peaks=[345.0] * 4, inter_peak=95.0, pairwise=none))
    assert "No node was judged: none of the 6 pairs completed." in md
    (launcher,) = [f for f in findings if f.subsystem == "torchrun"]
    assert launcher.category == "underperforming" and "says nothing about the fabric" in launcher.text
    assert not [f for f in findings if f.subsystem == "fabric" and "pairwise" in f.text]


def test_suspects_the_round_budget_left_are_said_as_neither_named_nor_cleared(tmp_path):
    names = [f"n{i}" for i in range(8)]
    pairs = [PairResult("n0", "n1", 1, 90.0), PairResult("n2", "n3", 1, 60.0), PairResult("n4", "n5", 1, 60.5),
             PairResult("n6", "n7", 1, 61.0), PairResult("n2", "n0", 2, 61.0)]
    pw = PairwiseRecord(payload_bytes=GIB, backend="nccl", ranks_per_node=8, num_rounds=2, pairs=pairs,
                        mean_busbw_gb_s=66.5, unresolved=["n2", "n3", "n4"])
    md, _ = render(view_for(names, intra_peaks=[345.0] * 8, inter_peak=95.0, pairwise=pw))
    assert ("The hunt stopped at its budget of 2 rounds; 3 nodes it suspected were neither named nor cleared (too "
            "few nodes seen fast to pair them with): `gpu-002(node2)`, `gpu-003(node3)`, `gpu-004(node4)`.") in md
    from clustereval.report.lint import lint_text

    para = next(ln for ln in md.splitlines() if ln.startswith("The hunt stopped"))
    page = ("# Cluster eval\n\n## Network\n\n" + para + "\n")
    assert [p for p in lint_text(page) if p.line == 5] == []
    assert "unresolved at the 2-round budget: n2, n3, n4" in pairwise_lines(pw)
