from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_provider_tiering.core.errors import IllegalTransition
from airflow_provider_tiering.core.state import CommittedSnapshot, RoundMetrics, TableState, TableStatus


def test_round_trip_through_the_happy_path():
    state = TableState(table="t")
    state.walk_to_pending()
    assert state.status is TableStatus.PENDING
    state.transition(TableStatus.TIERING)
    state.transition(TableStatus.TIERED)
    state.walk_to_pending()
    assert state.status is TableStatus.PENDING


@pytest.mark.parametrize(
    ("start", "target"),
    [
        (TableStatus.NEW, TableStatus.TIERING),
        (TableStatus.TIERED, TableStatus.TIERING),
        (TableStatus.FAILED, TableStatus.TIERED),
        (TableStatus.SCHEDULED, TableStatus.TIERED),
        (TableStatus.TIERING, TableStatus.PENDING),
    ],
)
def test_illegal_transition_raises(start, target):
    state = TableState(table="t", status=start)
    with pytest.raises(IllegalTransition, match=f"{start.value} -> {target.value}"):
        state.transition(target)
    assert state.status is start


def test_cannot_start_a_round_while_tiering():
    with pytest.raises(IllegalTransition):
        TableState(table="t", status=TableStatus.TIERING).walk_to_pending()


def test_failure_is_counted_and_kept_after_success():
    state = TableState(table="t", status=TableStatus.TIERING)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state.record_failure("boom", now)
    assert (state.status, state.consecutive_failures, state.last_error) == (TableStatus.FAILED, 1, "boom")
    state.walk_to_pending()
    state.transition(TableStatus.TIERING)
    state.transition(TableStatus.TIERED)
    assert state.last_error == "boom" and state.last_error_time == now


def test_json_round_trip():
    state = TableState(
        table="t",
        status=TableStatus.TIERED,
        epoch=7,
        last_tiered_time=datetime(2026, 1, 1, tzinfo=UTC),
        committed=CommittedSnapshot(42, 7, {"cursor": 10}, datetime(2026, 1, 1, tzinfo=UTC)),
        last_round=RoundMetrics(rows=10, bytes=100, files=1, splits=1, duration_seconds=1.5),
        watermark_blockers=[{"pid": 1, "transaction_start": "x", "age_seconds": 3.0}],
    )
    assert TableState.from_json(state.to_json()) == state


def test_lag_is_measured_for_time_cursors_only():
    from airflow_provider_tiering.core.offsets import cursor_lag_seconds

    now = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert cursor_lag_seconds({"cursor": "2026-01-01 00:00:00"}, now) == 60.0
    assert cursor_lag_seconds({"cursor": "2026-01-01T00:00:30.000000+00:00"}, now) == 30.0
    assert cursor_lag_seconds({"cursor": 42}, now) is None
