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
