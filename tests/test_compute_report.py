"""The Compute section rendered from records: the runbook's template, slow and dead GPUs named."""

import re

import pytest

from clustereval.records import Gap
from clustereval.records.compute import HealthRecord, LemonRecord, MatmulRecord
from clustereval.report.markdown import github_slug
from clustereval.report.render import RunView, render_report
from tests import compute_records as cr

RAW = "raw-t-2026-11-30-1938Z"
HEALTHY_2 = [{0: 745.2, 1: 741.0}]
LEMON_2 = [{0: 735.2, 1: 741.0}]


def render(records):
    rendered = render_report(RunView(name="t", stamp="2026-11-30-1938Z", raw_rel=RAW, access="local",
                                     records=records))
    check_anchors(rendered.markdown)
    return rendered


def check_anchors(md):
    seen: dict[str, int] = {}
    anchors = set()
    for line in md.splitlines():
        m = re.match(r"^#{2,3} (.*)$", line)
        if m:
            slug = github_slug(m.group(1))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    for target in re.findall(r"\]\(#([^)]+)\)", md):
        assert target in anchors, f"TOC link #{target} has no heading"


def section(md, title):
    start = md.index(f"### {title}\n")
    end = md.find("\n##", start + 5)
    return md[start:end if end > 0 else None]


def lint(md, tmp_path):
    lint_mod = pytest.importorskip("clustereval.report.lint")
    path = tmp_path / "t-2026-11-30-1938Z.md"
    path.write_text(md)
    problems = lint_mod.lint_file(path)
    assert not problems, "\n".join(map(str, problems))


def test_healthy_two_gpu_node(tmp_path):
    recs = {"environment": cr.environment(), "health": cr.health(), "matmul": cr.matmul([HEALTHY_2]),
            "lemon": cr.lemon([LEMON_2])}
    out = render(recs)
    md = out.markdown
    assert re.search(r"^\d\. \[Compute\]\(#compute\)$", md, re.MULTILINE)
    assert "   1. [Hardware health](#hardware-health) — `dcgmi diag -r 2`" in md
    assert ("   2. [GPU performance benchmarks](#gpu-performance-benchmarks) — `matmul.py`, one GPU at a time while "
            "the others run a matmul") in md
    assert "   3. [Find underperforming GPUs](#find-underperforming-gpus) — fixed 16384³ `matmul` on every GPU" in md
    intro = section(md, "Introduction")
    assert intro.index("Each node has 2× NVIDIA H200: 132 SMs (streaming multiprocessors) and 140.4 GiB of HBM") \
        < intro.index("1. [`dcgmi diag -r 2`](https://docs.nvidia.com/datacenter/dcgm/") < intro.index("own health check")
    assert "989 TFLOPS" in intro and "#tflops-comparison-table" in intro
    assert f"2. [`matmul.py`]({RAW}/tools/matmul.py) — our matmul worker" in intro
    assert "3. Lemon GEMM (general matrix multiply) — an inline check of ours" in intro
    health = section(md, "Hardware health")
    assert health.startswith("### Hardware health\n\n**Pass**:") and "No Fail" not in health
    assert "| `memory_bandwidth` | Pass |" in health
    perf = section(md, "GPU performance benchmarks")
    assert ("timed 256 matmul shapes in bfloat16: every shape briefly (at least 3 timed iterations), the 8 fastest "
            "shapes again for at least 30 timed iterations and 50 ms, the 6 fastest large shapes held at full power one "
            "after another for 1 s each, and the best of them pinned for 1.5 s and then timed for 3 s") in perf
    assert "(50% duty), so the board stays under its power limit and the clock at boost" in perf
    assert "Two numbers vs official BF16 TFLOPS on NVIDIA H200 (989 TFLOPS):" in perf
    assert "- **MAMF** (Maximum Achievable Matmul FLOPS) — 808 TFLOPS (81.7% of spec) at 1024×4096×16384, " \
           "512 W / 1980 MHz" in perf
    assert "- **MSMF** (Maximum Sustainable Matmul FLOPS) — 741 TFLOPS (74.9% of spec) at 8192×8192×16384 (gpu1, " \
           "the slowest GPU), 698 W / 1530 MHz" in perf
    assert "| GPU | MSMF | MSMF shape | W / MHz | MSMF % spec |" in perf
    assert "| gpu0 | 745 | 8192×8192×16384 | 698 / 1530 | 75.3 |" in perf
    assert "Node MSMF (the slowest GPU): 741 TFLOPS; median 743 TFLOPS; spread 4 TFLOPS (741–745 TFLOPS)." in perf
    lemon = section(md, "Find underperforming GPUs")
    assert lemon.index("**TLDR: no under-performing or dead GPUs**") < lemon.index("SM coverage")
    assert "132 SMs run them as 62 full waves" in lemon and "a tail of 8 CTAs, a wave efficiency of 99.9%" in lemon
    assert "| gpu-a(node0) | 735.2 | 741.0 | 735.2 (gpu0) | 741.0 |" in lemon
    assert "### Gaps" not in md
    (finding,) = [f for f in out.findings if "TFLOPS" in f.text]
    assert finding.category == "healthy" and finding.subsystem == "GPUs"
    assert "MAMF 808 TFLOPS (81.7% of the official 989 TFLOPS dense BF16)" in finding.text
    assert "### Healthy subsystems" in md and "### Underperforming" not in md
    for absent in ("N/A", "None", "null", "Skip reasons"):
        assert absent not in md
    lint(md, tmp_path)


def test_slow_gpu_confirmed_in_three_passes_and_a_dip_that_did_not_repeat(tmp_path):
    passes = [{0: 750.0, 1: 752.0, 2: 705.0, 3: 718.0},
              {0: 749.0, 1: 751.0, 2: 701.0, 3: 763.0},
              {0: 751.0, 1: 750.0, 2: 704.0, 3: 745.0}]
    recs = {"environment": cr.environment(("blah-176",), 4), "health": cr.health(("blah-176",), 4),
            "matmul": cr.matmul([passes], ("blah-176",), suspect=True, idle_warning=True),
            "lemon": cr.lemon([[{0: 735.0, 1: 741.0, 2: 700.0, 3: 738.0}] * 3], ("blah-176",))}
    out = render(recs)
    md = out.markdown
    perf = section(md, "GPU performance benchmarks")
    assert ("`blah-176(node0):gpu2` was more than 2% below the node median in all three passes: MSMF 705 / 701 / 704 "
            "TFLOPS, 4.0–6.5% below.") in perf
    assert ("`blah-176(node0):gpu3` was 2.2% below the node median in the first pass; the dip did not repeat: "
            "MSMF 718 / 763 / 745 TFLOPS in three passes.") in perf
    assert "The held shape 4096×4096×16384 held 612 W against the 700 W limit" in perf and "SUSPECT" in perf
    assert "saw idle siblings" in perf
    lemon = section(md, "Find underperforming GPUs")
    assert "**TLDR:** under-performing: `blah-176(node0):gpu2`" in lemon
    slow = [f for f in out.findings if f.category == "underperforming" and not f.text.startswith("fleet-relative")]
    assert len(slow) == 1 and slow[0].text.startswith("`blah-176(node0):gpu2` — MSMF 705 / 701 / 704 TFLOPS in three "
                                                       "passes, 4.0–6.5% below the node median each time; lemon GEMM")
    # beside it, the same GPU against its peers, with the confidence; gpu3's dip is noise, not a verdict
    (fleet,) = [f for f in out.findings if f.text.startswith("fleet-relative")]
    assert fleet.category == "underperforming" and fleet.text.startswith(
        "fleet-relative: `blah-176(node0):gpu2` — MSMF 705.0 TFLOPS / 701.0 TFLOPS / 704.0 TFLOPS in three passes, "
        # the GPUs' means 750.0, 750.7, 703.3 and 742.0 TFLOPS: median 746.0 TFLOPS, 5.7% above gpu2's
        "5.7% below the median of the 4 GPUs of its kind (NVIDIA H200, unknown driver), 746.0 TFLOPS;")
    assert "slower than its peers at 99% confidence, corrected for the 4 GPUs judged" in fleet.text
    assert not [f for f in out.findings if f.category == "healthy"]
    lint(md, tmp_path)
    assert "- **GPUs** — `blah-176(node0):gpu2` — MSMF 705 / 701 / 704 TFLOPS" in md
    lint(md, tmp_path)


def test_dead_gpu_in_both_passes_and_a_dcgm_failure(tmp_path):
    hosts = ("gpu-a", "gpu-b")
    mm = cr.matmul([HEALTHY_2, [{0: 744.0, 1: None}]], hosts, dead=[(1, 1)])
    lemon = cr.lemon([LEMON_2, [{0: 737.0, 1: None}]], hosts, dead={(1, 1): "hung: no result within 300 s"})
    lemon.gaps.append(Gap("lemon", "gpu1 of 10.0.0.2 gave no lemon GEMM result (hung: no result within 300 s).",
                          "drain the GPU"))
    recs = {"environment": cr.environment(hosts), "health": cr.health(hosts, fail=(1, 1)), "matmul": mm,
            "lemon": lemon}
    out = render(recs)
    md = out.markdown
    health = section(md, "Hardware health")
    assert "**Fail**" in health and "`memory` on `gpu-b(node1):gpu1`" in health
    assert "| plugin | gpu-a(node0) | gpu-b(node1) |" in health and "| `memory` | Pass | Fail: gpu1 |" in health
    perf = section(md, "GPU performance benchmarks")
    assert "| gpu-b(node1):gpu0 | 744 |" in perf  # two nodes: full names in the table
    assert "gpu-b(node1):gpu1 |" not in perf and "`gpu-b(node1):gpu1` has no MSMF: its measurement failed twice" in perf
    lemon_md = section(md, "Find underperforming GPUs")
    assert "**TLDR:** dead: `gpu-b(node1):gpu1`" in lemon_md
    assert "| gpu-b(node1) | 737.0 | dead | 737.0 (gpu0) | 737.0 |" in lemon_md
    bullets = [f.text for f in out.findings if f.category == "underperforming"]
    assert any(b.startswith("`dcgmi diag -r 2` Fail: `memory` on `gpu-b(node1):gpu1`") for b in bullets)
    dead = [b for b in bullets if b.startswith("`gpu-b(node1):gpu1` — dead in the GPU performance pass")]
    assert len(dead) == 1 and "dead in the lemon GEMM pass: hung: no result within 300 s" in dead[0]
    assert "### Gaps" in md and "gave no lemon GEMM result" in md
    lint(md, tmp_path)


def test_one_gpu_node(tmp_path):
    recs = {"environment": cr.environment(num_gpus=1), "matmul": cr.matmul([[{0: 748.0}]]),
            "lemon": cr.lemon([[{0: 739.0}]])}
    md = render(recs).markdown
    perf = section(md, "GPU performance benchmarks")
    assert "— `matmul.py` on the only GPU" in md
    assert "there is no median or spread: gpu0 is the only GPU" in perf
    assert "while all the others compute" not in perf and "Node MSMF" not in perf
    assert "### Hardware health" not in md and "dcgmi diag" not in md  # it did not run: not listed
    lint(md, tmp_path)


def test_dcgm_missing_and_no_gpu_are_gaps(tmp_path):
    from clustereval.phases.health import dcgm_missing_gap

    health = HealthRecord(status="failed", gaps=[dcgm_missing_gap("gpu-a", "ubuntu:24.04:debian", "13")])
    recs = {"environment": cr.environment(), "health": health, "matmul": cr.matmul([HEALTHY_2]),
            "lemon": cr.lemon([LEMON_2])}
    md = render(recs).markdown
    assert "### Hardware health" not in md and "1. [`matmul.py`]" in md
    assert md.index("### Find underperforming GPUs") < md.index("### Gaps") < md.index("## Findings")
    lint(md, tmp_path)
    none = {"matmul": MatmulRecord(status="skipped", gaps=[Gap("matmul", "No NVIDIA GPU answered on any node.", "x")]),
            "lemon": LemonRecord(status="skipped", gaps=[Gap("lemon", "No NVIDIA GPU answered on any node.", "x")])}
    md = render(none).markdown
    assert "## Compute" in md and "### Gaps" in md and "### Introduction" not in md
    lint(md, tmp_path)


def test_compute_gaps_recorded_as_facts_are_worded_in_the_report(tmp_path):
    """A matmul or lemon Gap holds its kind and facts (stored and loaded as JSON); the report words it."""
    from clustereval.records import dumps, loads

    mm = cr.matmul([HEALTHY_2])
    mm.status = "partial"
    mm.gaps = [Gap("matmul", node="gpu-a", kind="matmul.gpu-failed-twice",
                   facts={"gpu": 1, "error": "CUDA error: an illegal memory access was encountered"}),
               Gap("matmul", node="gpu-a", kind="matmul.no-msmf-shape",
                   facts={"gpu": 0, "pinned": [[12288, 8192, 16384, "its clock was still changing"]], "siblings": True})]
    lemon = cr.lemon([LEMON_2])
    lemon.gaps = [Gap("lemon", kind="lemon.gpu-dead", facts={"node": "gpu-a", "gpu": 1, "error": "hung"})]
    md = render({"environment": cr.environment(), "matmul": loads(MatmulRecord, dumps(mm)),
                 "lemon": loads(LemonRecord, dumps(lemon))}).markdown
    gaps = md.split("\n### Gaps\n", 1)[1]
    assert ("The MSMF (Maximum Sustainable Matmul FLOPS) measurement of gpu1 on gpu-a failed twice (`CUDA error: an "
            "illegal memory access was encountered`).") in gaps
    assert ("No matmul shape held gpu0 of gpu-a at its power limit when pinned (12288×8192×16384 (its clock was "
            "still changing)), so there is no MSMF (Maximum Sustainable Matmul FLOPS) shape to time the other GPUs "
            "at.") in gaps
    assert "gpu1 of gpu-a gave no lemon GEMM (general matrix multiply) result (`hung`)." in gaps
    assert "cannot word" not in md
    lint(md, tmp_path)


def test_unknown_gpu_has_no_spec_and_asks_for_it(tmp_path):
    env = cr.environment(name="NVIDIA Hypothetical X9")
    out = render({"environment": env, "matmul": cr.matmul([HEALTHY_2]), "lemon": cr.lemon([LEMON_2])})
    md = out.markdown
    assert "MSMF % spec" not in md and "Two numbers on NVIDIA Hypothetical X9:" in md
    mine = [f for f in out.findings if "node MSMF (the slowest GPU) 741 TFLOPS" in f.text]
    assert [f.category for f in mine] == ["needs_input"]
    assert "no published measured MAMF for the NVIDIA Hypothetical X9 and no operator target" in mine[0].text
    assert not [f for f in out.findings if f.category == "healthy"]


def test_report_from_a_real_cpu_run_of_the_phases(tmp_path):
    """The records a real (CPU stand-in) run writes render and lint: no telemetry, no blanks."""
    from clustereval.phases.lemon import LemonPhase
    from clustereval.phases.matmul import MatmulPhase
    from clustereval.phases.settings import GpuSettings
    from tests.test_compute_phases import make_ctx

    settings = GpuSettings(device="cpu", cpu_gpus=1, settle_s=0.02, sustain_s=0.05, grid="M=32|64,N=32|64,K=64",
                           lemon_size=64)
    ctx = make_ctx(tmp_path)
    recs = {"matmul": MatmulPhase(settings).run(ctx), "lemon": LemonPhase(settings).run(ctx)}
    md = render(recs).markdown
    assert "| gpu0 |" in md and "W / MHz" not in md
    lint(md, tmp_path)
