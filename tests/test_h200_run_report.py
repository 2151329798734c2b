"""The records of real `clustereval run --profile quick` runs on a 1x H200 machine without DCGM or
internet, one without `fio` and one with it: the report rendered from them passes lint and says only
what happened."""

from __future__ import annotations

import shutil
from pathlib import Path

from clustereval.report.lint import lint_text
from clustereval.runner import load_records
from clustereval.runner import render as render_run
from clustereval.store import RunStore
from tests.reportcheck import problems

RUNS = Path(__file__).resolve().parent / "fixtures" / "runs"
RUN = RUNS / "raw-vm-2026-12-01-1218Z"
WITH_FIO = RUNS / "raw-vm-2026-12-01-1737Z"  # with its report beside it, as this tree renders it


def _rendered(tmp_path: Path, run: Path = RUN):
    raw = tmp_path / run.name
    shutil.copytree(run, raw)
    store = RunStore.open(raw)
    return render_run(store, "local").markdown, load_records(store)


def test_a_gpu_node_without_fio_renders_a_lint_clean_report(tmp_path):
    md, records = _rendered(tmp_path)
    assert lint_text(md, path="vm-2026-12-01-1218Z.md") == []
    assert problems(md, records) == []


def test_the_missing_fio_is_one_storage_gap_that_links_the_tool(tmp_path):
    md, _ = _rendered(tmp_path)
    storage = md.split("\n## Storage\n", 1)[1].split("\n## ", 1)[0]
    # the section keeps its Introduction, which introduces the tool and says the scans did not run
    intro = storage.split("\n### Introduction\n", 1)[1].split("\n### ", 1)[0]
    assert intro.strip().startswith("1. [`fio`](https://github.com/axboe/fio) (the Flexible I/O Tester")
    assert "the local and shared scans did not run: `fio` is not installed on vm" in intro
    assert md.count("is not installed on vm, so the local and shared IO benchmarks did not run") == 1
    assert "### Fabric" in md and "### Gaps" not in md.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]


def test_a_run_with_fio_renders_the_report_it_wrote_on_the_gpu_machine(tmp_path):
    md, records = _rendered(tmp_path, WITH_FIO)
    assert md == (RUNS / "vm-2026-12-01-1737Z.md").read_text()  # the same report, drawn again from the records
    assert lint_text(md, path="vm-2026-12-01-1737Z.md") == []
    assert problems(md, records) == []
    storage = md.split("\n## Storage\n", 1)[1].split("\n## ", 1)[0]
    assert "### Local disk IO benchmark" in storage and "is not installed" not in storage
    # the trace plot of the matmul search is drawn from the records at render time
    assert (tmp_path / WITH_FIO.name / "plots" / "matmul-vm-gpu0.png").read_bytes()[:4] == b"\x89PNG"


def test_the_fio_outputs_of_that_run_parse_to_the_cells_it_recorded():
    import json

    from clustereval.probes.fio import parse_fio_json

    cells = json.loads((WITH_FIO / "storage.record.json").read_text())["local"]["cells"]
    assert len(cells) == 6
    for cell in cells:
        label = {16384: "16k", 2**20: "1m", 2**30: "1g"}[cell["file_size_bytes"]]
        got = parse_fio_json((WITH_FIO / "storage" / f"fio-local-{label}-{cell['rw']}.json").read_text())
        assert got.rw == cell["rw"] and got.error == 0 and got.fio_version == "fio-3.33"
        assert abs(got.bw_mib_s - cell["bw_mib_s"]) < 1e-6 and abs(got.latency_msec - cell["latency_msec"]) < 1e-9


NO_MSMF = RUNS / "raw-cluster-2026-12-01-1845Z"  # a smoke run on the 1x H200: its 2 s soaks settle no shape


def test_a_search_without_an_msmf_shape_reports_mamf_and_says_why_in_the_gaps(tmp_path):
    md, records = _rendered(tmp_path, NO_MSMF)
    assert lint_text(md, path="cluster-2026-12-01-1845Z.md") == []
    assert problems(md, records) == []
    mamf = records["matmul"].nodes[0].search.mamf
    perf = md.split("\n### GPU performance benchmarks\n", 1)[1].split("\n### ", 1)[0]
    assert "MAMF vs official BF16 TFLOPS on NVIDIA H200 (989 TFLOPS):" in perf
    assert f"**MAMF** (Maximum Achievable Matmul FLOPS) — {round(mamf.mean_tflops)} TFLOPS" in perf
    assert "**MSMF**" not in perf and "| GPU | MSMF |" not in perf
    assert "The held shape 12288×8192×16384: its clock was still changing" in perf
    (gap,) = [g.text for g in records["matmul"].gaps]
    assert gap.startswith("No matmul shape held gpu0 of vm at its power limit when pinned (12288×8192×16384 (its clock")
    assert gap.endswith("so there is no MSMF shape.") and "()" not in gap  # one GPU: no other GPU to time
    assert "### Gaps" in md.split("\n## Compute\n", 1)[1].split("\n## ", 1)[0]


def test_the_header_says_what_the_profile_shortened_of_what_ran(tmp_path):
    quick, _ = _rendered(tmp_path, WITH_FIO)
    (line,) = [ln for ln in quick.splitlines() if ln.startswith("- Shortened run")]
    # one GPU: no all-reduce sweep ran, so its shortening is not said
    assert line == ("- Shortened run (`--profile quick`): each storage IO run lasted 10 s of timed IO instead of "
                    "the published 3 min")
    smoke, _ = _rendered(tmp_path / "smoke", NO_MSMF)
    (line,) = [ln for ln in smoke.splitlines() if ln.startswith("- Shortened run")]
    assert line.startswith("- Shortened run (`--profile smoke`): this was a smoke run, a rehearsal of the pipeline")
    assert "each matmul shape was timed for 0.5 s with at most 2 s to settle" in line
    assert "the concurrent write" not in line  # one node: no concurrent write


ACCEPTED = RUNS / "raw-cluster-2026-12-03-1443Z"  # the README's quick run with `skip = ["health"]`
TWO_GPUS = RUNS / "raw-vm-2026-11-30-2034Z"  # a quick run on 2x H200, with the intra-node sweep


def test_a_run_that_skips_health_on_purpose_says_so_and_names_no_dcgm(tmp_path):
    md, records = _rendered(tmp_path, ACCEPTED)
    assert md == (RUNS / "cluster-2026-12-03-1443Z.md").read_text()  # as it was written on the GPU machine
    assert lint_text(md, path="cluster-2026-12-03-1443Z.md") == [] and problems(md, records) == []
    assert "Not asked for by the operator" in md and "the hardware health pass" in md
    assert "DCGM" not in md and "dcgmi" not in md  # a pass left out on purpose wants no tool
    assert "health" not in records and records["packages"].status == "ok"
    assert all(r.status == "ok" for r in records.values())  # the run exited 0


def test_the_two_gpu_run_renders_the_report_it_wrote_and_redraws_its_sweep_plot(tmp_path):
    raw = tmp_path / TWO_GPUS.name
    shutil.copytree(TWO_GPUS, raw)
    for png in raw.rglob("*.png"):
        png.unlink()  # drawn again from the records
    store = RunStore.open(raw)
    md, records = render_run(store, "local").markdown, load_records(store)
    assert md == (RUNS / "vm-2026-11-30-2034Z.md").read_text()
    assert lint_text(md, path="vm-2026-11-30-2034Z.md") == [] and problems(md, records) == []
    assert "![Intra-node all-reduce](raw-vm-2026-11-30-2034Z/network/busbw-intra-node-2.png)" in md
    assert (tmp_path / TWO_GPUS.name / "network" / "busbw-intra-node-2.png").read_bytes()[:4] == b"\x89PNG"
