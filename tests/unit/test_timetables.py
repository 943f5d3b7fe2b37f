"""The tables' timetable: every interval at a phase of the DAG's own, the same instants run after run, the latest
interval ended when catch-up is off, serialized as Airflow stores it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from pendulum import UTC, DateTime

from airflow_provider_tiering.timetables import StaggeredInterval, phase_of

NOW = DateTime(2026, 12, 2, 5, 51, 7, 250_000, tzinfo=UTC)
EARLY = TimeRestriction(earliest=DateTime(2024, 1, 1, tzinfo=UTC), latest=None, catchup=False)


class AtNow(StaggeredInterval):
    def now(self) -> DateTime:
        return NOW


def interval(info: DagRunInfo | None) -> DataInterval:
    assert info is not None and info.data_interval is not None
    return info.data_interval


def test_a_new_dag_runs_at_once_then_at_its_own_phase_every_interval_and_catch_up_is_skipped() -> None:
    every = AtNow(timedelta(seconds=60), timedelta(seconds=12))
    first = interval(every.next_dagrun_info(last_automated_data_interval=None, restriction=EARLY))
    assert first.end == NOW  # at once, as a timedelta schedule runs a new DAG
    runs = [first]
    for _ in range(3):
        runs.append(interval(every.next_dagrun_info(last_automated_data_interval=runs[-1], restriction=EARLY)))
    # Then a whole interval later, on its grid (05:52:12, not 05:52:07.25), and every 60 s.
    assert runs[1].end == DateTime(2026, 12, 2, 5, 52, 12, tzinfo=UTC)
    ends = [r.end for r in runs[1:]]
    assert [(b - a).total_seconds() for a, b in zip(ends, ends[1:], strict=False)] == [60.0, 60.0]
    assert all(r.end - r.start == timedelta(seconds=60) for r in runs)
    # A scheduler that was down for an hour: the latest instant passed runs, not the 60 it missed.
    stale = DataInterval(DateTime(2026, 12, 2, 4, 49, 12, tzinfo=UTC), DateTime(2026, 12, 2, 4, 50, 12, tzinfo=UTC))
    resumed = interval(every.next_dagrun_info(last_automated_data_interval=stale, restriction=EARLY))
    assert resumed.end == DateTime(2026, 12, 2, 5, 50, 12, tzinfo=UTC)


def test_with_catch_up_every_instant_from_the_start_date_on_the_grid() -> None:
    every = AtNow(timedelta(seconds=300), timedelta(seconds=7))
    restriction = TimeRestriction(earliest=DateTime(2026, 12, 2, 5, 0, 0, tzinfo=UTC), latest=None, catchup=True)
    first = interval(every.next_dagrun_info(last_automated_data_interval=None, restriction=restriction))
    assert first.end == DateTime(2026, 12, 2, 5, 5, 7, tzinfo=UTC)
    second = interval(every.next_dagrun_info(last_automated_data_interval=first, restriction=restriction))
    assert second.end == DateTime(2026, 12, 2, 5, 10, 7, tzinfo=UTC)
    ended = TimeRestriction(earliest=restriction.earliest, latest=DateTime(2026, 12, 2, 5, 3, tzinfo=UTC), catchup=True)
    assert every.next_dagrun_info(last_automated_data_interval=first, restriction=ended) is None


def test_phases_spread_tables_of_one_interval_over_it() -> None:
    every = timedelta(seconds=300)
    phases = [phase_of(f"sales.t{n:03d}", every).total_seconds() for n in range(100)]
    assert all(0 <= p < 300 and p == int(p) for p in phases)
    assert phases == [phase_of(f"sales.t{n:03d}", every).total_seconds() for n in range(100)]  # stable
    # Spread, not bunched: no 30-s tenth of the interval holds more than a quarter of the tables.
    assert max(sum(1 for p in phases if k * 30 <= p < (k + 1) * 30) for k in range(10)) <= 25
    assert phase_of("sales.fast", timedelta(seconds=1)) == timedelta(0)


def test_serialized_as_airflow_stores_it_and_validated() -> None:
    timetable = StaggeredInterval(timedelta(seconds=90), timedelta(seconds=95))
    assert timetable.phase == timedelta(seconds=5)  # within the interval
    assert StaggeredInterval.deserialize(timetable.serialize()) == timetable
    assert timetable.summary == "0:01:30 (+0:00:05)"
    from airflow.exceptions import AirflowTimetableInvalid

    with pytest.raises(AirflowTimetableInvalid):
        StaggeredInterval(timedelta(0)).validate()
