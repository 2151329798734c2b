"""The CPU each test costs, beside pytest's wall-clock ``--durations``: on a 2-core machine the
suite is bound by CPU, and a test that waits costs wall time but no CPU, so the tests worth making
cheaper are the ones this lists. Loaded by ``tests/conftest.py``.

Each phase of a test (setup, call, teardown) records the CPU seconds its worker process and the
children it waited for used during the phase (``getrusage``, user + system) as the report's
``cpu_s`` user property, which pytest-xdist carries to the controller. ``--cpu-top=N`` prints the N
test phases that used the most (0, the default, prints none). A process a test started and never waited
for (a daemon another process reaps) is not counted; a session fixture's cost lands on the test
that first asked for it, its teardown on the last."""

from __future__ import annotations

import resource

import pytest

CPU_KEY = "cpu_s"


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its waited-for children so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def pytest_addoption(parser) -> None:
    parser.addoption("--cpu-top", type=int, default=0, metavar="N",
                     help="print the N test phases that used the most CPU seconds (with their children's)")


def _measured(item):
    start = cpu_seconds()
    yield
    item.user_properties.append((CPU_KEY, round(cpu_seconds() - start, 3)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measured(item)


class CpuTally:
    """Sums the ``cpu_s`` the reports carry, per test and per phase (on the controller with xdist)."""

    def __init__(self) -> None:
        self.by_phase: dict[tuple[str, str], float] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report) -> None:
        # one report per phase; a phase's property list holds that phase's figure last
        figures = [v for k, v in getattr(report, "user_properties", ()) if k == CPU_KEY]
        if figures:
            self.by_phase[(report.nodeid, report.when)] = float(figures[-1])

    def top(self, count: int) -> list[tuple[float, str, str]]:
        """The ``count`` costliest (seconds, phase, test id), costliest first."""
        rows = [(seconds, when, nodeid) for (nodeid, when), seconds in self.by_phase.items()]
        return sorted(rows, reverse=True)[:count]

    def total(self) -> float:
        return sum(self.by_phase.values())


def pytest_configure(config) -> None:
    if config.getoption("--cpu-top") > 0:
        config.pluginmanager.register(CpuTally(), "cputally")


def pytest_terminal_summary(terminalreporter, config) -> None:
    tally = config.pluginmanager.get_plugin("cputally")
    if tally is None:
        return
    count = config.getoption("--cpu-top")
    terminalreporter.write_sep("=", f"the {count} costliest test phases in CPU seconds "
                                    f"(all tests: {tally.total():.0f} CPU-s)")
    for seconds, when, nodeid in tally.top(count):
        terminalreporter.write_line(f"{seconds:8.1f}s {when:<8} {nodeid}")
