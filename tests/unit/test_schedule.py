from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_tiering.core.schedule import due_at, is_due, record_not_due
from airflow_provider_tiering.core.state import TableState, TableStatus

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def tiered_at(when: datetime, status: TableStatus = TableStatus.TIERED) -> TableState:
    return TableState(table="t", status=status, epoch=3, last_tiered_time=when)


def test_never_tiered_table_is_due_at_once():
    assert is_due(None, 300, T0) and is_due(TableState(table="t"), 300, T0)


def test_table_is_due_once_its_freshness_interval_has_passed():
    state = tiered_at(T0)
    assert not is_due(state, 300, T0 + timedelta(seconds=299))
    assert is_due(state, 300, T0 + timedelta(seconds=300))
    assert due_at(state, 300) == T0 + timedelta(seconds=300)


def test_failed_or_interrupted_tables_are_due_regardless_of_freshness():
    for status in (TableStatus.FAILED, TableStatus.TIERING, TableStatus.PENDING):
        assert is_due(tiered_at(T0, status), 3600, T0 + timedelta(seconds=1))


def test_a_not_due_check_rests_the_table_in_scheduled():
    state = tiered_at(T0)
    record_not_due(state, T0 + timedelta(seconds=5))
    assert state.status is TableStatus.SCHEDULED and state.last_checked_time == T0 + timedelta(seconds=5)
    record_not_due(state, T0 + timedelta(seconds=6))
    assert state.status is TableStatus.SCHEDULED
    assert not is_due(state, 300, T0 + timedelta(seconds=6))
