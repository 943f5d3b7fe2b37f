"""A tiered table's row of the lake's status table (``core/status_rows.py``), from its state document alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_tiering.core.state import CommittedSnapshot, RoundMetrics, TableState, TableStatus
from airflow_provider_tiering.core.status_rows import status_row

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def row(state: TableState | None):
    return status_row(
        namespace="sales", table="orders", asset="tiering/sales/orders", dag_id="tiering_sales",
        tiered_table="orders", state=state, now=NOW,
    )  # fmt: skip


def test_a_healthy_table_shows_no_last_error_but_keeps_the_recent_one():
    """The seed's ``last_error`` is NULL while healthy; a table that failed and then tiered again keeps its error
    in ``recent_error`` (a flapping table is visible)."""
    state = TableState(table="orders", status=TableStatus.TIERED, epoch=7, last_tiered_time=NOW - timedelta(minutes=5))
    state.committed = CommittedSnapshot(42, 7, {"cursor": 100})
    state.last_round = RoundMetrics(rows=250, bytes=9, files=1, splits=1, duration_seconds=1.5, backlog_rows=12)
    state.caught_up_time = NOW - timedelta(seconds=90)
    state.last_error, state.last_error_time = "connection refused", NOW - timedelta(hours=1)
    state.change_stream = {"backlog_wal_bytes": 2048, "retained_wal_bytes": 4096}
    found = row(state)
    assert (found.database_name, found.table_name, found.status, found.tiering_epoch) == (
        "sales",
        "orders",
        "TIERED",
        7,
    )
    assert found.last_error is None and found.last_error_time is None
    assert found.recent_error == "connection refused" and found.recent_error_time == NOW - timedelta(hours=1)
    assert (found.last_round_rows, found.last_round_duration_seconds, found.snapshot_id) == (250, 1.5, 42)
    assert found.data_age_seconds == 90 and found.backlog_rows == 12
    assert (found.backlog_wal_bytes, found.retained_wal_bytes) == (2048, 4096)
    assert found.quarantined is False and found.as_of == NOW and found.airflow_dag_id == "tiering_sales"


def test_a_failing_or_quarantined_table_shows_its_error_and_time():
    state = TableState(table="orders", status=TableStatus.FAILED, epoch=3, consecutive_failures=2)
    state.last_error, state.last_error_time = "password authentication failed for user ***", NOW
    state.quarantined_since, state.next_retry_at = NOW, None
    found = row(state)
    assert found.status == "FAILED" and found.last_error == state.last_error and found.last_error_time == NOW
    assert found.quarantined is True and found.consecutive_failures == 2


def test_a_table_never_tiered_is_new():
    found = row(None)
    assert found.status == "NEW" and found.tiering_epoch == 0 and found.last_tiered_time is None
    assert found.data_age_seconds is None and found.snapshot_id is None
