"""summary.json, the JUnit verdicts and ``clustereval diff``: between the CLI and the pure modules.

``save_summary`` runs wherever a report is written (``run`` and ``report``); ``diff_runs`` reads two
runs' summaries and writes the comparison beside the later run's report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clustereval import __version__
from clustereval.analysis.diff import FIO_TOLERANCE, check_summary, diff_summaries
from clustereval.analysis.summary import SUMMARY_FILE, build_summary
from clustereval.errors import UsageError
from clustereval.records import to_dict
from clustereval.records.diff import DiffRecord
from clustereval.report.diff import render_diff
from clustereval.report.junit import junit_xml
from clustereval.report.render import Rendered
from clustereval.runner import load_records
from clustereval.store import RunStore, atomic_write


def save_summary(store: RunStore, rendered: Rendered, access: str, storage_targets: Any = None,
                 junit_path: Path | None = None, *, policy: Any = None) -> dict[str, Any]:
    """Write ``summary.json`` into the run folder (and the JUnit file when asked for); return the summary.
    ``policy``: the fleet verdicts' policy the report was rendered with (None: the defaults)."""
    state = store.load_state()
    records = load_records(store)
    summary = build_summary(state, records, rendered.findings, rendered.gaps, access=access,
                            storage_targets=storage_targets, report_name=store.report_path.name, version=__version__,
                            policy=policy)
    store.write_raw(SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    if junit_path is not None:
        atomic_write(Path(junit_path), junit_xml(summary))
    return summary


def read_summary(path: Path) -> tuple[dict[str, Any], Path | None]:
    """A run folder, its report .md or a summary.json -> (the summary, the run's raw folder or None)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".json":
        raw = path.parent if (path.parent / "state.json").exists() else None
        file = path
    else:
        store = RunStore.open(path)
        raw = store.raw_dir
        file = raw / SUMMARY_FILE
        if not file.exists():
            raise UsageError(f"{raw}: no {SUMMARY_FILE} (the run was rendered by an older clustereval)",
                             f"write it with `clustereval report {raw}`, then compare again")
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: cannot read it ({exc})",
                         "pass a run folder or the summary.json a clustereval run wrote") from exc
    return check_summary(doc, str(file)), raw


def diff_runs(old: Path, new: Path, *, fio_tolerance: float = FIO_TOLERANCE,
              output: Path | None = None) -> tuple[DiffRecord, Path, Path]:
    """Compare two runs; write ``diff-<old>-vs-<new>.md`` and ``.json`` (beside the later report by default)."""
    old_doc, _ = read_summary(old)
    new_doc, new_raw = read_summary(new)
    rec = diff_summaries(old_doc, new_doc, fio_tolerance=fio_tolerance)
    raw_rel = new_raw.name if new_raw is not None else f"raw-{rec.new.id}"
    if output is None:
        folder = new_raw.parent if new_raw is not None else Path.cwd()
        output = folder / f"diff-{rec.old.id}-vs-{rec.new.id}.md"
    md_path = Path(output) if Path(output).suffix == ".md" else Path(output).with_suffix(".md")
    json_path = md_path.with_suffix(".json")
    atomic_write(md_path, render_diff(rec, raw_rel))
    doc = {**to_dict(rec), "num_beyond_noise": len(rec.beyond), "num_within_noise": len(rec.within)}
    atomic_write(json_path, json.dumps(doc, indent=2) + "\n")
    return rec, md_path, json_path
