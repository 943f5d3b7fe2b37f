"""A pytest plugin: the CPU each test module cost, for keeping a CPU-bound suite short on 2 cores.

pytest's ``--durations`` gives wall time, which on a loaded machine says more about the neighbours than about the
test. This adds, at the end of the run, the CPU-seconds (user + system) of the test process and of the processes it
waited for (an Airflow deployment's components and their tasks once stopped, a local Spark JVM), per test module, its
fixtures' set-up and tear-down included. Servers that detach from the test (PostgreSQL's, started by ``pg_ctl``) are
not counted. ``--cpu-report=N`` shows the N costliest modules (0: none).
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from collections.abc import Generator

import pytest

_COSTS: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # module -> [CPU-s, wall s]
_START: list[float] = []


def _cpu_seconds() -> float:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=int, default=15, metavar="N", help="show the N test modules costing most CPU")


def pytest_sessionstart(session: pytest.Session) -> None:
    _START.append(_cpu_seconds())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        cost = _COSTS[item.nodeid.split("::", 1)[0]]
        cost[0] += _cpu_seconds() - cpu
        cost[1] += time.monotonic() - wall


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    shown = config.getoption("cpu_report")
    if not shown or not _COSTS or not _START:
        return
    total = _cpu_seconds() - _START[0]
    terminalreporter.section(f"CPU of the {min(shown, len(_COSTS))} costliest test modules")
    for module, (cpu, wall) in sorted(_COSTS.items(), key=lambda kv: -kv[1][0])[:shown]:
        terminalreporter.write_line(f"{cpu:8.1f} CPU-s {wall:8.1f} s wall  {module}")
    outside = total - sum(cpu for cpu, _ in _COSTS.values())
    terminalreporter.write_line(
        f"{total:8.1f} CPU-s in all ({outside:.1f} outside any test: collection, session fixtures, processes reaped at "
        "the end)"
    )
