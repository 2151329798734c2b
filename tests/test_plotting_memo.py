"""report/plotting.memo_png: a plot is drawn once per distinct input in a process, never handed back
for an input that differs in any value drawn."""

from __future__ import annotations

import threading

import pytest

from clustereval.report import plotting
from clustereval.report.network_plots import Series, busbw_png


def counting():
    calls: list[tuple] = []

    @plotting.memo_png
    def draw(values, title="t"):
        calls.append((tuple(values) if isinstance(values, list) else values, title))
        return f"{values}|{title}".encode()

    return draw, calls


def test_the_same_input_is_drawn_once_and_any_changed_value_is_drawn_again():
    draw, calls = counting()
    first = draw([1.0, 2.0], title="a")
    assert draw([1.0, 2.0], title="a") is first and len(calls) == 1
    assert draw([1.0, 2.0000001], title="a") != first  # one value differs
    assert draw([1.0, 2.0], title="b") == b"[1.0, 2.0]|b"  # a keyword differs
    assert draw([1.0, 2.0], "a") == first  # spelled positionally it is another key: drawn again, the same bytes
    assert len(calls) == 4


def test_an_input_that_cannot_be_pickled_is_simply_drawn_every_time():
    draw, calls = counting()
    lock = threading.Lock()  # not picklable
    draw(lock)
    draw(lock)
    assert len(calls) == 2


def test_the_memo_keeps_only_the_last_plots(monkeypatch):
    monkeypatch.setattr(plotting, "MEMO_PLOTS", 3)
    monkeypatch.setattr(plotting, "_drawn", type(plotting._drawn)())
    draw, calls = counting()
    for i in range(5):
        draw([float(i)])
    assert len(plotting._drawn) == 3
    draw([4.0])  # the newest is kept
    draw([0.0])  # the oldest was let go
    assert len(calls) == 6


def test_a_real_plot_comes_back_byte_for_byte_and_another_series_is_another_png():
    pytest.importorskip("matplotlib")
    series = [Series("2 ranks back-to-back", [2**20, 2**21], [1.5, 2.5])]
    png = busbw_png(series, "All-reduce busbw")
    assert png is not None and png.startswith(b"\x89PNG")
    assert busbw_png([Series("2 ranks back-to-back", [2**20, 2**21], [1.5, 2.5])], "All-reduce busbw") is png
    other = busbw_png([Series("2 ranks back-to-back", [2**20, 2**21], [1.5, 2.6])], "All-reduce busbw")
    assert other is not None and other != png
