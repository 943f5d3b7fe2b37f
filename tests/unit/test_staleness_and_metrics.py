"""Staleness alerts and the metrics a table's task sends: what they say about a state document and a round."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_tiering.control import TableOutcome, exit_code
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import staleness_alert
from airflow_provider_tiering.core.state import RoundMetrics, TableState, TableStatus
from airflow_provider_tiering.core.table_metrics import Metric, MetricKind, round_metrics, table_gauges
from airflow_provider_tiering.metrics import metric_name

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def spec(**options: object) -> TableSpec:
    return TableSpec.parse(
        {
            "name": "orders",
            "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
            "lake": {"namespace": "sales", "table": "orders"},
            **options,
        }
    )


def test_the_default_bound_is_three_freshness_intervals_and_at_least_an_hour() -> None:
    assert spec().staleness_bound_seconds == 3600
    assert spec(freshness_seconds=7200).staleness_bound_seconds == 21600
    assert spec(staleness_alert_seconds=60).staleness_bound_seconds == 60


def test_a_table_held_back_past_its_bound_is_stale_naming_the_blockers() -> None:
    state = TableState(table="orders", status=TableStatus.SCHEDULED, caught_up_time=T0)
    state.watermark_blockers = [
        {"pid": 4242, "transaction_start": None, "age_seconds": 95.0},
        {"pid": None, "transaction_start": None, "age_seconds": None, "prepared": "tx-7"},
    ]
    bounded = spec(staleness_alert_seconds=60)
    assert staleness_alert(bounded, state, T0 + timedelta(seconds=59)) is None
    alert = staleness_alert(bounded, state, T0 + timedelta(seconds=90))
    assert alert is not None and alert.startswith("table 'orders' is stale: the lake last caught up")
    assert "90 s ago (staleness bound 60 s)" in alert
    assert "pid 4242, open 95.0 s; prepared transaction 'tx-7'" in alert


def test_quarantine_failures_backlog_and_silence_each_have_their_reason() -> None:
    bounded, late = spec(staleness_alert_seconds=60), T0 + timedelta(hours=2)
    quarantined = TableState(table="orders", caught_up_time=T0, quarantined_since=T0, consecutive_failures=5)
    quarantined.last_error = "SourceError: no such table"
    assert "quarantined since" in (staleness_alert(bounded, quarantined, late) or "")
    failing = TableState(table="orders", caught_up_time=T0, consecutive_failures=2, last_error="boom")
    assert "its last 2 round(s) failed (last error: boom)" in (staleness_alert(bounded, failing, late) or "")
    behind = TableState(table="orders", caught_up_time=T0, last_round=RoundMetrics(10, 1, 1, 1, 1.0, None, 500))
    assert "leave rows behind (500 at the last one)" in (staleness_alert(bounded, behind, late) or "")
    silent = TableState(table="orders", caught_up_time=T0)
    assert "no round has caught up since" in (staleness_alert(bounded, silent, late) or "")
    assert staleness_alert(bounded, TableState(table="orders"), late) is None  # never caught up: not measured


def test_round_metrics_and_table_gauges() -> None:
    metrics = RoundMetrics(rows=1200, bytes=34_000, files=2, splits=2, duration_seconds=1.5, lag_seconds=4.0)
    metrics.backlog_rows = 0
    result = RoundResult("orders", RoundOutcome.TIERED, 3, 99, {"cursor": 1}, {"cursor": 1201}, metrics)
    assert round_metrics(result) == [
        Metric(MetricKind.COUNT, "rounds.tiered", 1),
        Metric(MetricKind.COUNT, "rows", 1200),
        Metric(MetricKind.COUNT, "bytes", 34_000),
        Metric(MetricKind.TIMING, "round_duration", 1500.0),
        Metric(MetricKind.GAUGE, "backlog_rows", 0),
        Metric(MetricKind.GAUGE, "lag_seconds", 4.0),
    ]
    state = TableState(table="orders", consecutive_failures=1, last_tiered_time=T0)
    state.watermark_blockers = [{"pid": 1, "age_seconds": 12.5}]
    assert table_gauges(state, T0 + timedelta(seconds=30)) == [
        Metric(MetricKind.GAUGE, "consecutive_failures", 1),
        Metric(MetricKind.GAUGE, "quarantined", 0),
        Metric(MetricKind.GAUGE, "held_back_seconds", 12.5),
        Metric(MetricKind.GAUGE, "staleness_seconds", 30.0),
    ]
    assert metric_name("rows", "tiering.sales", "orders") == "tiering.rows.tiering__sales.orders"


def test_trigger_exit_codes_tell_the_four_outcomes_apart_and_the_worst_wins() -> None:
    assert [exit_code([o]) for o in TableOutcome] == [0, 0, 3, 4, 5, 1, 2]
    assert exit_code([TableOutcome.TIERED, TableOutcome.NOTHING_NEW]) == 3
    # Another run tiered the table's rows after the trigger: the lake has them, as the user asked.
    assert exit_code([TableOutcome.TIERED_BY_ANOTHER_RUN, TableOutcome.TIERED]) == 0
    assert exit_code([TableOutcome.TIERED_BY_ANOTHER_RUN, TableOutcome.NOTHING_NEW]) == 3
    assert exit_code([TableOutcome.HELD_BACK, TableOutcome.QUARANTINED, TableOutcome.TIERED]) == 5
    assert exit_code([TableOutcome.QUARANTINED, TableOutcome.FAILED]) == 1
    assert exit_code([]) == 0
