import datetime as dt

import pytest

from clustereval.errors import UsageError
from clustereval.records.run import PreflightRecord
from clustereval.store import RunState, RunStore


def test_run_folder_names_and_never_reuses(tmp_path):
    now = dt.datetime(2026, 9, 17, 19, 38, tzinfo=dt.timezone.utc)
    a = RunStore.create(tmp_path, "h200", now)
    b = RunStore.create(tmp_path, "h200", now)
    assert a.report_path.name == "h200-2026-09-17-1938Z.md"
    assert a.raw_dir.name == "raw-h200-2026-09-17-1938Z"
    assert b.raw_dir != a.raw_dir


def test_records_and_state(tmp_path):
    s = RunStore.create(tmp_path, "c")
    s.save_state(RunState(name="c", stamp="x"))
    s.save_record("preflight", PreflightRecord(passed=True))
    s.mark_finished("preflight")
    again = RunStore.open(s.raw_dir)
    assert again.load_state().phases_finished == ["preflight"]
    assert again.load_record("preflight", PreflightRecord).passed


def test_rerender_moves_old_report_to_trash(tmp_path):
    s = RunStore.create(tmp_path, "c")
    s.write_report("one\n")
    moved = s.write_report("two\n")
    assert moved is not None and moved.read_text() == "one\n" and "trash" in moved.parts
    assert s.report_path.read_text() == "two\n"


def test_open_rejects_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(UsageError):
        RunStore.open(tmp_path)
