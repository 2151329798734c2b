"""Phases record a Gap's facts; report/gaps words them. The split holds across the whole tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from clustereval.records import Gap, dumps, loads
from clustereval.records.compute import HealthRecord
from clustereval.report.gaps import kinds, said, say

PACKAGE = Path(__file__).resolve().parents[1] / "clustereval"
# the layers that run the eval: they record what happened and never word it
RECORDING = [*sorted((PACKAGE / "phases").glob("*.py")), *sorted((PACKAGE / "debug").glob("*.py")),
             *sorted((PACKAGE / "analysis").glob("*.py")), PACKAGE / "runner.py"]


def _gap_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", "")) == "Gap"]


def test_no_phase_words_a_gap():
    worded = []
    for path in RECORDING:
        for call in _gap_calls(path):
            words = [k.arg for k in call.keywords if k.arg in ("text", "plan")]
            if words or len(call.args) > 1:
                worded.append(f"{path.relative_to(PACKAGE)}:{call.lineno}")
    assert not worded, f"Gaps given words outside report/: {worded}"


def test_every_kind_a_phase_records_is_worded():
    areas = {kind.split(".")[0] for kind in kinds()}
    pattern = re.compile(rf"(?:{'|'.join(sorted(areas))})\.[a-z0-9-]+")
    used = {}
    # every kind a phase records: Gap(kind=...), and the kinds a stopped pass carries to its Gap
    # (PassAborted("matmul.busy", ...), NodePass.gap("matmul.search-failed", ...))
    for path in RECORDING:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            named = getattr(node.func, "id", getattr(node.func, "attr", ""))
            values = [k.value for k in node.keywords if k.arg == "kind"]
            values += node.args[:1] if named in ("PassAborted", "gap") else []
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and pattern.fullmatch(value.value):
                    used[value.value] = f"{path.relative_to(PACKAGE)}:{node.lineno}"
    assert len(used) >= 40  # the scan found the phases' kinds
    missing = {kind: where for kind, where in used.items() if kind not in kinds()}
    assert not missing, f"recorded but never worded: {missing}"


def test_a_gap_round_trips_through_its_record_and_is_worded_at_render_time():
    rec = HealthRecord(gaps=[Gap("health", node="gpu-a(node0)", kind="health.diag-incomplete",
                                 facts={"level": 2, "output": "", "timeout_min": 15})])
    back = loads(HealthRecord, dumps(rec))
    assert back.gaps[0].kind == "health.diag-incomplete" and back.gaps[0].facts["level"] == 2
    assert not back.gaps[0].text  # the stored record holds facts, not words
    worded = said(back).gaps[0]
    assert worded.text.startswith("[`dcgmi diag -r 2`](") and "did not complete on gpu-a(node0) (timed out" in worded.text
    assert "fix what it names" in worded.plan
    assert not back.gaps[0].text  # wording a record does not change it


def test_an_older_runs_words_are_kept_and_an_unknown_kind_is_still_said():
    old = Gap("storage", "The concurrent write could not reach `/scratch`.", "mount it")
    assert say(old) is old
    new = say(Gap("storage", kind="storage.from-a-newer-version", facts={"path": "/scratch"}))
    assert "`storage.from-a-newer-version`" in new.text and "path: /scratch" in new.text and new.plan
