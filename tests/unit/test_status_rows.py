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


def test_a_stream_groups_table_shows_its_group_backlog_and_reader():
    """A table of a stream group: its group, its changes waiting in the change log (the later count of its last
    round's and the reader's), and the reader's status, its error while it fails, and its lag; then the same as the
    CLI shows it."""
    from airflow_provider_tiering.cli.status_table import render_one
    from airflow_provider_tiering.core.stream_state import StreamGroupState, StreamTableState
    from airflow_provider_tiering.status.view import stream_group_json

    state = TableState(table="orders", status=TableStatus.FAILED, epoch=4, consecutive_failures=3)
    state.last_checked_time = NOW - timedelta(minutes=5)
    state.change_stream = {"stream_group": "sales_db", "change_log": "sales.sales_db_changes",
                           "log_backlog_changes": 7, "position": "0/10"}  # fmt: skip
    group = StreamGroupState("sales_db", status="failed", last_error="slot is gone", consecutive_failures=2,
                             caught_up_time=NOW - timedelta(seconds=40), position="0/90")  # fmt: skip
    group.tables["public.orders"] = StreamTableState("orders", joined_at="0/8", held_from=8, backlog_changes=12,
                                                     backlog_counted_at=NOW - timedelta(minutes=1))  # fmt: skip
    found = status_row(
        namespace="sales", table="orders", asset="tiering/sales/orders", dag_id="d", tiered_table="orders",
        state=state, now=NOW, group=group,
    )  # fmt: skip
    assert (found.stream_group, found.log_backlog_changes) == ("sales_db", 12), "the reader counted it later"
    assert (found.stream_reader_status, found.stream_reader_error, found.stream_reader_lag_seconds) == (
        "failed", "slot is gone", 40.0,
    )  # fmt: skip
    record = {"table": "orders", "namespace": "sales", "lake_table": "orders", "status": "FAILED", "epoch": 4,
              "mode": "change_stream", "merge_key": ["id"],
              "change_stream": state.change_stream, "stream_group": stream_group_json(group, state, NOW)}  # fmt: skip
    text = render_one(record)
    assert "stream group" in text and "sales.sales_db_changes" in text and "7 changes" in text
    assert "failing (2 runs): slot is gone" in text and "joined at 0/8" in text
