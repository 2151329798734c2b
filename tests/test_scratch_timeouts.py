"""Timeouts in proportion to the work: a small fio run on a hung mount is given up in minutes."""

from clustereval.probes.fio import RUN_MARGIN_S, SLOWEST_LAYOUT_BYTES_S, bytes_written_at_once, run_timeout_s


def test_fio_timeout_grows_with_the_files_not_a_fixed_four_hours():
    small = run_timeout_s(16 * 2**10, 60, 5)
    big = run_timeout_s(2**30, 60, 5)
    assert small < 60 + 5 + RUN_MARGIN_S + 1  # 16 files of 16 KiB: nothing to lay out
    assert big == 60 + 5 + RUN_MARGIN_S + bytes_written_at_once(2**30) / SLOWEST_LAYOUT_BYTES_S
    assert big < 4 * 3600


def test_a_fast_mount_and_a_seen_layout_tighten_the_limit():
    slow_guess = run_timeout_s(2**30, 60, 5)
    measured_fast = run_timeout_s(2**30, 60, 5, write_bytes_s=2 * 2**30)  # 2 GiB/s: 8 s at a quarter of it
    assert measured_fast < slow_guess and measured_fast == 60 + 5 + RUN_MARGIN_S + 16 * 2**30 / (2**29)
    seen = run_timeout_s(2**30, 60, 5, layout_seen_s=100)
    assert seen == 60 + 5 + RUN_MARGIN_S + 400
    assert run_timeout_s(2**30, 60, 5, layout_seen_s=1) == 60 + 5 + 2 * RUN_MARGIN_S
