"""`clustereval lint`: every rule flags its violating sample and passes its passing sample.

The base is a complete report that follows the template (tests/fixtures/reports/good-4node.md);
each case swaps one passage for a violating and for a passing version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clustereval.report.lint import lint_text, rule_ids
from tests.conftest import run_cli

REPORTS = Path(__file__).resolve().parent / "fixtures" / "reports"
BASE = (REPORTS / "good-4node.md").read_text()

# rule -> (passage in BASE, violating replacement, passing replacement)
CASES: dict[str, tuple[str, str, str]] = {
    "title": ("# Cluster eval: 4 nodes of 8× H200", "# Cluster eval: H200", "# Cluster eval: 4 nodes of 8× H200"),
    "header-lines": ("Raw logs: [`raw-h200-2026-09-17-1938Z/`](raw-h200-2026-09-17-1938Z/).",
                     "Raw logs are in raw-h200-2026-09-17-1938Z.",
                     "Raw logs: [`raw-h200-2026-09-17-1938Z/`](raw-h200-2026-09-17-1938Z/)."),
    "toc-present": ("## Table of Contents\n", "## Contents\n", "## Table of Contents\n"),
    "toc-anchor": ("(#hardware-health)", "(#hardware-health-dcgm)", "(#hardware-health)"),
    "toc-label": ("[Hardware health](#hardware-health)", "[Health check](#hardware-health)",
                  "[Hardware health](#hardware-health)"),
    "toc-complete": ("   3. [Needs operator input](#needs-operator-input)\n", "", "   3. [Needs operator input](#needs-operator-input)\n"),
    "acronym": ("MAMF (Maximum Achievable Matmul FLOPS)", "MAMF", "MAMF (Maximum Achievable Matmul FLOPS)"),
    "absence": ("Pass on every plugin and every GPU of `blah-176`.", "Pass on every plugin. Skip reasons: none",
                "Pass on every plugin and every GPU of `blah-176`."),
    "empty-gaps": ("## Network\n", "### Gaps\n\n## Network\n",
                   "### Gaps\n\n- `blah-179` has no DCGM host engine, so its health check did not run.\n\n## Network\n"),
    "iec-units": ("16 KiB, 1 MiB and 1 GiB files", "16k, 1m and 1g files", "16 KiB, 1 MiB and 1 GiB files"),
    "feelings": ("A `git clone` on `/code` runs at the 16 KiB read rate of 631.8 MiB/s",
                 "Small files will feel the 631.8 MiB/s 16 KiB read rate",
                 "A `git clone` on `/code` runs at the 16 KiB read rate of 631.8 MiB/s"),
    "filler": ("Peak busbw 480 GB/s at 8 GiB", "As expected, peak busbw 480 GB/s at 8 GiB", "Peak busbw 480 GB/s at 8 GiB"),
    "process-shorthand": ("The container image presets `NCCL_NVLS_ENABLE=1`",
                          "We kept the platform value `NCCL_NVLS_ENABLE=1`",
                          "The container image presets `NCCL_NVLS_ENABLE=1`"),
    "workload": ("sustainable winner", "winner of a training step", "sustainable winner"),
    "pass-no-fail": ("Pass on every plugin", "Pass on every plugin, No Fail", "Pass on every plugin"),
    "targets-plural": ("the figures they are supposed to hit", "the figure they are supposed to hit",
                       "the figures they are supposed to hit"),
    "percent-local": ("19.0× slower than local", "5.3% of local", "19.0× slower than local"),
    "nic-percent": ("0.75× the 1-node figure at the same payload", "91% of the NIC spec",
                    "0.75× the 1-node figure at the same payload"),
    "usage": ("| `/code` | 2.3 TiB |", "| `/code` | 2.3 TiB, 87% full |", "| `/code` | 2.3 TiB |"),
    "number-unit": ("read / write: 16 KiB **631.8 MiB/s / 358.4 MiB/s**", "read / write MiB/s: 16 KiB 631.8 / 358.4",
                    "read / write: 16 KiB **631.8 MiB/s / 358.4 MiB/s**"),
    "quote-verbatim": ("19.0× slower than local", "19× slower than local", "19.0× slower than local"),
    "findings": ("### Healthy subsystems\n", "### Healthy\n", "### Healthy subsystems\n"),
    "gpu-naming": ("`blah-176(node0):gpu7` — MSMF", "GPU7 — MSMF", "`blah-176(node0):gpu7` — MSMF"),
    "single-node": ("# Cluster eval: 4 nodes of 8× H200", "# Cluster eval: 1 node of 8× H200",
                    "# Cluster eval: 4 nodes of 8× H200"),
    "environment": ("| OS | Ubuntu 24.04.2 LTS |\n| Hostname |", "| Hostname | x |\n| OS | Ubuntu 24.04.2 LTS |\n| Host |",
                    "| OS | Ubuntu 24.04.2 LTS |\n| Hostname |"),
    "venv-path": ("| Python | 3.12.3 |", "| Python | 3.12.3 in `/scratch/eval/venv/bin/python` |", "| Python | 3.12.3 |"),
    "links": ("([NVLink generations](https://github.com/stas00/ml-engineering/blob/master/network/README.md#nvlink))",
              "([NVLink generations](../network/README.md#nvlink))",
              "([NVLink generations](https://github.com/stas00/ml-engineering/blob/master/network/README.md#nvlink))"),
    "tool-link": ("[`connectivity.py`](raw-h200-2026-09-17-1938Z/tools/connectivity.py)",
                  "[`torch-distributed-gpu-test.py`](raw-h200-2026-09-17-1938Z/tools/connectivity.py)",
                  "[`connectivity.py`](raw-h200-2026-09-17-1938Z/tools/connectivity.py)"),
    "introduction": ("1. [`connectivity.py`](raw-h200-2026-09-17-1938Z/tools/connectivity.py) — one process",
                     "1. The connectivity check — one process",
                     "1. [`connectivity.py`](raw-h200-2026-09-17-1938Z/tools/connectivity.py) — one process"),
    "compute-headings": ("### Hardware health\n", "### DCGM\n", "### Hardware health\n"),
    "tldr": ("**TLDR:** no under-performing or dead GPUs.", "No under-performing or dead GPUs.",
             "**TLDR:** no under-performing or dead GPUs."),
    "storage-headings": ("### Shared Lustre IO benchmark\n", "### Shared\n", "### Shared Lustre IO benchmark\n"),
    "storage-table": ("| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |\n| ---: | --- |",
                      "| size | rw | lat msec | bw (MiBps) | IOPS (M) |\n| ---: | --- |",
                      "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |\n| ---: | --- |"),
    "storage-thousands": ("12_029.1", "12029.1", "12_029.1"),
    "partitions-table": ("| mount | size | type | device / server |\n| --- | ---: |",
                         "| mount | size | type | device / server |\n| --- | --- |",
                         "| mount | size | type | device / server |\n| --- | ---: |"),
}


def test_base_report_is_clean():
    assert [str(p) for p in lint_text(BASE)] == []


def test_every_rule_has_a_case():
    assert sorted(CASES) == sorted(rule_ids())


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_flags_violation_and_passes_sample(rule_id):
    old, bad, good = CASES[rule_id]
    assert old in BASE, f"{rule_id}: passage not in the base report"
    bad_problems = lint_text(BASE.replace(old, bad, 1))
    assert rule_id in {p.rule for p in bad_problems}, [str(p) for p in bad_problems]
    good_problems = lint_text(BASE.replace(old, good, 1))
    assert rule_id not in {p.rule for p in good_problems}, [str(p) for p in good_problems]


def test_problem_names_line_and_rule():
    problems = lint_text(BASE.replace("As expected", "x").replace("Peak busbw 480 GB/s at 8 GiB",
                                                                  "As expected, peak busbw 480 GB/s at 8 GiB"))
    [p] = [p for p in problems if p.rule == "filler"]
    line = BASE.splitlines().index(next(ln for ln in BASE.splitlines() if ln.startswith("Peak busbw 480"))) + 1
    assert p.line == line and str(p).startswith(f"line {line}: [filler]")


# each planted violation in tests/fixtures/reports/bad-*.md, by rule
PLANTED = {
    "bad-environment.md": {"environment", "acronym", "absence", "usage", "venv-path", "iec-units", "number-unit"},
    "bad-storage.md": {"storage-table", "storage-thousands", "partitions-table", "percent-local", "quote-verbatim",
                       "storage-headings", "iec-units", "feelings"},
    "bad-findings.md": {"findings", "gpu-naming", "pass-no-fail", "nic-percent", "workload", "filler",
                        "targets-plural", "process-shorthand", "toc-label", "toc-anchor", "empty-gaps", "single-node"},
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_bad_samples_flag_every_planted_violation(name):
    problems = lint_text((REPORTS / name).read_text())
    assert PLANTED[name] <= {p.rule for p in problems}, sorted({p.rule for p in problems})


def test_cli_lint_exit_codes(tmp_path):
    good = tmp_path / "good.md"
    good.write_text(BASE)
    ok = run_cli("lint", str(good))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_cli("lint", str(REPORTS / "bad-findings.md"))
    assert bad.returncode == 1 and "[gpu-naming]" in bad.stdout


ALLOWED_NUMBERS = [
    "MSMF 701 / 698 / 704 TFLOPS in three passes, 6.8–7.2% below the node median.",
    "It timed 1,792 matmul shapes on GPU0 and 1 of the fastest large shapes ran for 30 s.",
    "The official figure is 989 TFLOPS (10¹² floating-point operations per second).",
    "Driver 580.159.04 with CUDA 13.0 on Ubuntu 24.04 and NVLink 4 across 18 links.",
    "The run started 2026-09-17 at 19:38 and took 4 min 30 s on `blah-176(node0):gpu7`.",
    "A 1024×4096×16384 shape and the fixed 16384³ matmul, 8× H200 per node, a 4-node write of 1 GiB.",
    "The 3200 Gb/s of 8× ConnectX-7 links at 400 Gb/s each; 26.5× slower than local; 1× would mean equal.",
    "busbw is algbw × 2(n−1)/n for n ranks; `NCCL_NVLS_ENABLE` (0 = force off, 2 = auto) after at least 20 calls.",
    "`/scratch/alice` is owned by uid 65534, not by the eval user (uid 0), and writable by group or others (mode 775).",
]
FLAGGED_NUMBERS = [
    "read / write MiB/s: 1_646.1 / 1_658.3",
    "The local disk reached 12_029.1 at 16 KiB.",
    "Peak busbw was 345 at the largest payload.",
]


@pytest.mark.parametrize("sentence", ALLOWED_NUMBERS)
def test_numbers_with_units_pass(sentence):
    text = BASE.replace("Pass on every plugin and every GPU of `blah-176`.", sentence)
    assert "number-unit" not in {p.rule for p in lint_text(text)}, [str(p) for p in lint_text(text)]


@pytest.mark.parametrize("sentence", FLAGGED_NUMBERS)
def test_bare_numbers_are_flagged(sentence):
    text = BASE.replace("Pass on every plugin and every GPU of `blah-176`.", sentence)
    assert "number-unit" in {p.rule for p in lint_text(text)}


def test_environment_has_the_five_tables_and_no_gaps():
    gaps = BASE.replace("\n### Software\n", "\n### Gaps\n\n- `ibstat` is missing on node0.\n\n### Software\n", 1)
    assert any("`### Gaps` under Environment" in p.message for p in lint_text(gaps) if p.rule == "environment")
    no_fabric = BASE.replace("\n### Fabric\n", "\n", 1)
    assert any("lacks the Fabric table" in p.message for p in lint_text(no_fabric) if p.rule == "environment")
    assert not [p for p in lint_text(BASE) if p.rule == "environment"]
