"""Our own words never fail our own lint.

Every registered Gap wording is rendered from facts of every shape a real run records
(``tests/wording_facts.py``: exit statuses 0/1/2/137, seconds 0/1/61/3600, node names with digits,
paths, error lines with numbers and colons, counts of 0/1/many, optional facts left out), put where
the report puts it (a bullet under ``### Gaps`` of the section it belongs to, written by the
report's own ``render_gaps``) in a report that is otherwise clean, and linted with every rule of
``clustereval lint``. The section sentence builders that quote run facts are linted the same way.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from clustereval.records import Gap
from clustereval.report.gaps import kinds, say
from clustereval.report.lint import lint_text
from clustereval.report.markdown import Document
from clustereval.report.render import render_gaps
from tests.wording_facts import CATALOG, NODES, cases, fleet_cases

ROOT = Path(__file__).resolve().parent.parent

HEAD = """# Cluster eval: 2 nodes of 8× H200

- Datetime (UTC): 2026-12-03 10:13
- Access: SSH to 2 nodes
- Nodes / GPUs: 2 nodes (`vm`, `gpu-012`), 8× H200 each

Raw logs: [`raw-vm-2026-12-03-1013Z/`](raw-vm-2026-12-03-1013Z/).

## Table of Contents

1. [{section}](#{anchor})

## {section}
"""
PARTITIONS = """
### Existing Partitions

| mount | size | type | device / server |
| --- | ---: | --- | --- |
| `/` | 252 GiB | ext4 | /dev/vda |
"""
# where the report says each area's Gaps (render.GAP_SECTIONS, setup_gap_section)
AREA_SECTION = {"storage": "Storage", "debugfs": "Storage", "network": "Network", "pairwise": "Network",
                "preflight": "Network"}


def section_of(gap: Gap) -> str:
    area = gap.kind.split(".")[0]
    if area == "packages":
        binary = gap.facts.get("binary", "")
        return {"fio": "Storage", "ibstat": "Network", "rdma": "Network"}.get(binary, "Compute")
    return AREA_SECTION.get(area, "Compute")


def in_report(section: str, body: str) -> str:
    """``body`` as the only content of ``section`` in an otherwise lint-clean report."""
    head = HEAD.format(section=section, anchor=section.lower())
    return head + (PARTITIONS if section == "Storage" else "") + "\n" + body


def report_with(gap: Gap) -> str:
    doc = Document()
    render_gaps(doc, [say(gap)])
    return in_report(section_of(gap), doc.render())


def test_the_empty_context_is_clean():
    for section in ("Compute", "Network", "Storage"):
        assert lint_text(in_report(section, "### Gaps\n\n- Something is missing.\n")) == []


def test_every_registered_kind_has_generated_facts():
    assert sorted(kinds() - set(CATALOG)) == [], "a new Gap kind needs its facts in tests/wording_facts.py"


# kinds a phase records without a node (the phase's whole run, or nodes named in the facts)
NODELESS = {"gpu.none", "gpu.not-visible", "phase.error", "phase.defect", "preflight.missing", "preflight.allocation",
            "preflight.ssh-port-refused", "preflight.no-python", "preflight.peer-ssh", "preflight.gloo-no-torch",
            "evalpython.configured", "evalpython.fallback", "evalpython.node-python", "evalpython.newest-refused",
            "evalpython.not-newest", "network.launch-failed", "network.wrong-interpreter", "network.wrong-sum",
            "network.inter-sweep-failed", "pairwise.pair-failed", "pairwise.not-judged", "pairwise.round-ungated", "storage.concurrent-refused",
            "storage.no-shared", "lemon.gpu-dead", "health.cpu-stand-ins"}


@pytest.mark.parametrize("kind", sorted(CATALOG))
def test_every_wording_lints_clean_for_every_fact_shape(kind):
    failures = []
    for what, facts in cases(kind):
        for node in (("",) if kind in NODELESS else ()) + tuple(NODES):
            gap = Gap(kind.split(".")[0], node=node, kind=kind, facts=facts)
            try:
                text, plan = say(gap).text, say(gap).plan
            except (KeyError, TypeError, ValueError, IndexError) as exc:  # a fact shape the wording cannot take
                failures.append(f"{what} node={node!r}: {type(exc).__name__}: {exc}")
                continue
            assert text.strip() and plan.strip(), f"{kind} {what}: a Gap always has words and a plan"
            assert "\n" not in text, f"{kind} {what}: one bullet is one line"
            problems = lint_text(report_with(gap))
            if problems:
                failures.append(f"{what} node={node!r}: {text!r}: " + "; ".join(f"[{p.rule}] {p.message}"
                                                                           for p in problems))
    assert not failures, f"{kind}:\n" + "\n".join(failures[:12])


# ---- the section sentence builders that quote a run's facts ---------------------------------------

# what the Compute section has always written before these sentences (its Introduction and the MSMF
# bullet), so their acronyms are judged as the report's reader meets them
COMPUTE_LEAD = ("### Introduction\n\nEach node has 8× NVIDIA H200: 132 SMs (streaming multiprocessors) per GPU.\n\n"
                "1. [`matmul.py`](raw-vm-2026-12-03-1013Z/tools/matmul.py) — our matmul worker: reports **MAMF** "
                "(Maximum Achievable Matmul FLOPS) and **MSMF** (Maximum Sustainable Matmul FLOPS).\n\n"
                "### GPU performance benchmarks\n\n")


def _lint_sentences(section: str, lead: str, sentences: list[str]) -> list[str]:
    body = lead + "".join(f"{s}\n\n" for s in sentences)
    return [f"[{p.rule}] {p.message}" for p in lint_text(in_report(section, body))]


def _node(gpus: list[tuple[int, float | None, float | None, str]], hostname: str, index: int, **kw):
    from clustereval.records.compute import GpuMsmf, NodeMatmul, ShapeTiming

    out = NodeMatmul(node=hostname, index=index, hostname=hostname, num_gpus=len(gpus), **kw)
    for gpu, temp, power, error in gpus:
        t = None if error else ShapeTiming(8192, 8192, 8192, stage="sustained", mean_tflops=700.0,
                                           median_tflops=700.0, temp_c=temp, power_w=power)
        out.gpus.append(GpuMsmf(gpu=gpu, tflops=[None if error else 700.0], timings=[t],
                                errors=[error] if error else []))
    return out


TEMPS = [0.0, 1.0, 61.0, 95.4]
POWERS = [0.0, 1.0, 61.0, 699.6]


@pytest.mark.parametrize("hostname,index", [("vm", 0), ("gpu-012", 11), ("10.0.0.12", 3)])
def test_the_compute_sentences_lint_clean_for_every_fact_shape(hostname, index):
    from clustereval.analysis.steady import UNSTEADY
    from clustereval.records.compute import MatmulRecord
    from clustereval.report.compute import _missing_msmf, _node_summary
    from clustereval.report.compute_msmf import loaded_sentences, steadiness_sentences
    from tests.wording_facts import CATALOG as FACTS

    failures = []
    pinned = FACTS["matmul.no-msmf-shape"]["pinned"][2]
    for temp in TEMPS:
        for power in POWERS:
            for error in ("", *ERRORS_OF_A_GPU):
                n = _node([(0, temp, power, ""), (1, temp + 20, power * 0.5, ""), (7, None, None, error)],
                          hostname, index, hot_gpus=[1], low_power_gpus=[1])
                for t in (n.gpus[0].timings[0],):
                    t.label, t.why = UNSTEADY, pinned[2][3]
                sentences = (loaded_sentences(n) + steadiness_sentences(n, multi=True)
                             + _missing_msmf(MatmulRecord(nodes=[n])) + _node_summary(n, True, False)
                             + _node_summary(_node([(0, temp, power, "")], hostname, index), False, True))
                problems = _lint_sentences("Compute", COMPUTE_LEAD, sentences)
                if problems:
                    failures.append(f"temp={temp} power={power} error={error!r}: {problems[:3]} in {sentences}")
    assert not failures, "\n".join(failures[:6])


ERRORS_OF_A_GPU = ["CUDA error: an illegal memory access was encountered (700) at step 12",
                   "hung: no result within 300 s", "the worker exited (exit None with no output)",
                   'File "/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", line 319, in _lazy_init']


@pytest.mark.parametrize("nodes", [[], ["vm"], ["gpu-012", "10.0.0.12", "ip-10-0-3-17.ec2.internal"]])
def test_the_storage_introduction_without_figures_lints_clean(nodes):
    from clustereval.records.storage import StorageRecord
    from clustereval.report.storage import not_run_words

    rec = StorageRecord(gaps=[Gap("storage", node=n, kind="storage.fio-missing", facts={"tool": "fio"})
                              for n in nodes])
    item = f"1. [`fio`](https://github.com/axboe/fio) (the Flexible I/O Tester, a third-party tool) — {not_run_words(rec)}"
    assert _lint_sentences("Storage", "### Introduction\n\n", [item]) == []


def test_a_missing_tool_is_one_gap_in_its_section_and_in_the_close_out():
    """fio missing is recorded by the packages phase and by the storage phase, and the section may
    link its words: the report and the close-out say it once each."""
    from clustereval.records.run import NodePackages, PackagesRecord
    from clustereval.records.storage import StorageRecord
    from clustereval.report.closeout import closeout_text
    from clustereval.report.render import RunView, render_report

    fio_gap = Gap("storage", node="gpu-012", kind="storage.fio-missing", facts={"tool": "fio", "error": "exit 127"})
    storage = StorageRecord(num_nodes=1, shared_paths=[], gaps=[fio_gap, fio_gap], status="not-run")
    packages = PackagesRecord(nodes=[NodePackages(node="gpu-012", missing=["fio"])],
                              gaps=[Gap("packages", node="gpu-012", kind="packages.missing",
                                        facts={"binary": "fio", "apt": "fio", "dnf": "fio", "enabled": True})])
    rendered = render_report(RunView("t", "2026-12-03-1013Z", "raw-t-2026-12-03-1013Z", "local",
                                     {"storage": storage, "packages": packages}))
    assert rendered.markdown.count("is not installed on gpu-012") == 2  # the Introduction's item and one Gap
    assert rendered.markdown.count("- [`fio`](https://github.com/axboe/fio) is not installed on gpu-012") == 1
    closeout = closeout_text(rendered)
    assert closeout.count("is not installed on gpu-012") == 1 and closeout.count("is missing on gpu-012") == 0


@pytest.mark.parametrize("kind", ["node.error", "node.lost"])
def test_a_node_fault_in_setup_with_no_section_to_go_to_gets_its_own_lint_clean_section(kind):
    from clustereval.records.environment import EnvironmentRecord
    from clustereval.report.render import RunView, render_report

    (_, facts), *_ = cases(kind)
    env = EnvironmentRecord(gaps=[Gap("environment", node="gpu-012", kind=kind, facts=facts)])
    md = render_report(RunView("t", "2026-12-03-1013Z", "raw-t-2026-12-03-1013Z", "local",
                               {"environment": env})).markdown
    faults = md.split("\n## Node faults\n", 1)[1]
    assert say(env.gaps[0]).text in faults
    assert lint_text(md) == []


# ---- the fleet-relative sentences (report/fleet.py) --------------------------------------------------

FLEET_FIGURE = {"TFLOPS": 700.0, "GB/s": 52.3, "MiB/s": 1480.0}  # a healthy unit's figure in each unit


def _fleet_kind(facts: dict):
    """One peer group of ``facts`` judged by the fleet statistics, in the words ``analysis.fleet`` gives it."""
    from clustereval.analysis.fleet import new_kind
    from clustereval.analysis.fleetstats import UnitSamples, VerdictPolicy, judge_fleet

    kind = new_kind(facts["kind"], VerdictPolicy(confidence=facts["confidence"]))
    rnd = random.Random(7)
    for i in range(facts["num_units"]):
        host = NODES[i % len(NODES)]
        label = f"{host}(node{i // 8}):gpu{i % 8}" if kind.noun == "GPU" else f"{host}(node{i})"
        rate = FLEET_FIGURE[kind.unit] * (1 - facts["slow_frac"] if i == 0 else 1.0)
        # a figure is never below zero: a wide spread's low draws stop at 2% of the rate
        samples = tuple(rate * max(0.02, 1 + facts["spread"] * rnd.gauss(0, 1)) for _ in range(facts["repeats"]))
        kind.units.append(UnitSamples(label, samples, facts["group"]))
    kind.groups = judge_fleet(kind.units, kind.policy)
    return kind


def test_the_fleet_relative_sentences_lint_clean_for_every_fact_shape():
    """Every group sentence and slow-unit bullet ``report/fleet.py`` writes, for peer groups judged from
    generated figures (``tests/wording_facts.py``, ``FLEET``), in the report's Findings; never a
    detectable shortfall of 100% or more."""
    from clustereval.report.fleet import fleet_findings
    from clustereval.report.markdown import Document
    from clustereval.report.render import render_findings

    # the landed example report up to its Findings: its sections expand every acronym the sentences use
    # (MSMF, GEMM, HBM, busbw) as a reader meets them
    head = (ROOT / "examples" / "vm-2026-12-03-1439Z.md").read_text().split("\n## Findings\n", 1)[0]
    failures = []
    seen_too_noisy = False
    for what, facts in fleet_cases():
        findings = fleet_findings([_fleet_kind(facts)], [])
        doc = Document()
        render_findings(doc, findings)
        rendered = doc.render()
        # the Table of Contents lists the Findings headings these findings have
        listed = "".join(f"\n   {i}. [{t}](#{t.lower().replace(' ', '-')})"
                         for i, t in enumerate(re.findall(r"^### (.+)$", rendered, re.MULTILINE), 1))
        toc = re.search(r"\d+\. \[Findings\]\(#findings\)(\n   \d+\. .*)*", head)
        assert toc is not None, "the example report lists its Findings in its Table of Contents"
        report = head[:toc.start()] + toc.group().split("\n", 1)[0] + listed + head[toc.end():]
        problems = [f"[{p.rule}] {p.message}" for p in lint_text(report + "\n" + rendered)]
        text = " ".join(f.text for f in findings)
        if problems:
            failures.append(f"{what} {facts}: {problems[:3]} in {text!r}")
        past = [x for x in re.findall(r"fell (\d+(?:\.\d+)?)% short", text) if float(x) >= 100]
        if past:
            failures.append(f"{what} {facts}: a shortfall of {past[0]}% is no figure: {text!r}")
        if "too noisy to judge against each other" in text:
            seen_too_noisy = True
            assert "would have been found" not in text, text
    assert not failures, "\n".join(failures[:6])
    assert seen_too_noisy, "the smoke run's 4 widely scattered writes say only that they were too noisy to judge"
