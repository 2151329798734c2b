"""The records of one real `clustereval run --profile quick` on a 1x H200 machine without `fio`, DCGM
or internet: the report rendered from them passes lint and says only what happened."""

from __future__ import annotations

import shutil
from pathlib import Path

from clustereval.report.lint import lint_text
from clustereval.runner import load_records
from clustereval.runner import render as render_run
from clustereval.store import RunStore
from tests.reportcheck import problems

RUN = Path(__file__).resolve().parent / "fixtures" / "runs" / "raw-vm-2026-12-01-1218Z"


def _rendered(tmp_path: Path):
    raw = tmp_path / RUN.name
    shutil.copytree(RUN, raw)
    store = RunStore.open(raw)
    return render_run(store, "local").markdown, load_records(store)


def test_a_gpu_node_without_fio_renders_a_lint_clean_report(tmp_path):
    md, records = _rendered(tmp_path)
    assert lint_text(md, path="vm-2026-12-01-1218Z.md") == []
    assert problems(md, records) == []


def test_the_missing_fio_is_one_storage_gap_that_links_the_tool(tmp_path):
    md, _ = _rendered(tmp_path)
    storage = md.split("\n## Storage\n", 1)[1].split("\n## ", 1)[0]
    assert "[`fio`](https://github.com/axboe/fio) is not installed on vm" in storage
    assert md.count("is not installed on vm, so the local and shared IO benchmarks did not run") == 1
    assert "### Fabric" in md and "### Gaps" not in md.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]
