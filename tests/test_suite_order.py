"""The suite's own scheduling: the units pytest-xdist hands out go heaviest first."""

from __future__ import annotations

import pytest

from tests.conftest import heaviest_first


class FakeItem:
    """What ``heaviest_first`` reads of a collected test: its id and its marks."""

    def __init__(self, nodeid: str, *marks: pytest.MarkDecorator) -> None:
        self.nodeid = nodeid
        self.marks = {m.mark.name: m.mark for m in marks}

    def get_closest_marker(self, name: str):
        return self.marks.get(name)

    def __repr__(self) -> str:
        return self.nodeid


def test_a_group_of_slow_tests_goes_before_a_lone_slow_test_and_light_tests_go_last():
    light = FakeItem("t.py::light")
    lone = FakeItem("t.py::lone_slow", pytest.mark.slow)
    bed_a = FakeItem("t.py::bed_a", pytest.mark.netns, pytest.mark.xdist_group("bed"))
    bed_b = FakeItem("t.py::bed_b", pytest.mark.slow, pytest.mark.xdist_group("bed"))
    grouped_light = FakeItem("t.py::grouped_light", pytest.mark.xdist_group("bed"))
    items = [light, lone, bed_a, grouped_light, bed_b]
    heaviest_first(items)
    # the bed group (two heavy tests) first, whole and in collection order; then the lone slow test
    assert items == [bed_a, grouped_light, bed_b, lone, light]


def test_equal_units_keep_the_collection_order():
    items = [FakeItem(f"t.py::light{i}") for i in range(5)]
    before = list(items)
    heaviest_first(items)
    assert items == before


def test_cpu_top_charges_a_test_with_the_cpu_of_the_child_it_waited_for(tmp_path):
    """``--cpu-top`` (tests/cputime.py) through pytest-xdist: the test whose child burns CPU leads
    the table with that CPU, a test that only sleeps costs next to nothing."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\n\n"
        "def test_burns_in_a_child():\n"
        "    code = 'import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass'\n"
        "    subprocess.run([sys.executable, '-c', code], check=True)\n\n"
        "def test_sleeps():\n"
        "    time.sleep(0.6)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # this run's options are not the child's
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.cputime", "-p", "no:cacheprovider",
                           "-n", "2", "--cpu-top=2", "test_burn.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "costliest test phases in CPU seconds" in line)
    first = lines[head + 1].split()
    assert first[1:] == ["call", "test_burn.py::test_burns_in_a_child"], lines[head:head + 3]
    assert float(first[0].rstrip("s")) >= 0.5
    sleeper = [line.split() for line in proc.stdout.splitlines() if line.endswith("test_burn.py::test_sleeps")]
    assert all(float(row[0].rstrip("s")) < 0.3 for row in sleeper), sleeper
