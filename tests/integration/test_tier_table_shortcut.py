"""``TierTableOperator`` skips a table with no new rows without opening the lake (no catalog, no Spark), and
still runs the full round whenever the hot store has rows beyond the recorded offsets or the table is not at
rest. Real SQLite hot table and real Iceberg catalog; the context is in-process (tests/airflow_context.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_tiering.core.errors import TieringError
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import CommittedSnapshot, TableState, TableStatus, utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.operators.tier_table import TierTableOperator
from testbed.airflow_context import saved_state, task_context
from testbed.hot_tables import SqliteHot, recorded_shape, sqlite_events_table
from testbed.rounds import round_parts

TABLE = {
    "name": "events",
    "source": {"conn_id": "hot_sqlite", "table": "events", "cursor_column": "id"},
    "lake": {"namespace": "short", "table": "events", "catalog_conn_id": "iceberg_missing"},
    "freshness_seconds": 1,
}


@pytest.fixture
def hot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteHot:
    return sqlite_events_table(tmp_path, monkeypatch, rows=50)


def at_rest(through: int, **changes: Any) -> TableState:
    state = TableState(
        table="events",
        status=TableStatus.SCHEDULED,
        epoch=4,
        last_tiered_time=utcnow() - timedelta(minutes=5),
        committed=CommittedSnapshot(snapshot_id=9, epoch=4, end_offsets={"cursor": through}),
    )
    for key, value in changes.items():
        setattr(state, key, value)
    return state


def test_no_new_rows_skips_without_touching_the_lake(hot: SqliteHot) -> None:
    operator = TierTableOperator(table=TABLE)
    context = task_context(operator.table_asset, at_rest(50, hot_shape=recorded_shape(TABLE)))
    with pytest.raises(AirflowSkipException, match=r"no row beyond \{'cursor': 50\}"):
        operator.execute(context)  # the catalog connection does not even exist: the lake was not opened
    saved = saved_state(context, operator.table_asset)
    assert saved.status is TableStatus.SCHEDULED and saved.last_checked_time > utcnow() - timedelta(seconds=30)


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(at_rest(40), id="new-rows"),
        pytest.param(at_rest(50, consecutive_failures=1, status=TableStatus.FAILED), id="failed-before"),
        pytest.param(at_rest(50, watermark_candidate={"observed": {"cursor": 50}}), id="watermark-pending"),
        pytest.param(None, id="never-tiered"),
    ],
)
def test_anything_else_runs_the_round_which_opens_the_lake(hot: SqliteHot, state: TableState | None) -> None:
    operator = TierTableOperator(table=TABLE)
    context = task_context(operator.table_asset, state)
    with pytest.raises(Exception, match="iceberg_missing") as raised:
        operator.execute(context)
    assert not isinstance(raised.value, (AirflowSkipException, TieringError))


def test_the_lake_ahead_of_the_state_is_repaired_not_skipped(
    hot: SqliteHot, catalog_properties: dict[str, str], spark_writer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between commit and record leaves the state behind the lake: rows exist beyond the state's
    offsets, so the round runs, finds the lake already holds them, and repairs the state from the lake."""
    spec = TableSpec.parse(TABLE)
    parts = round_parts(spec, hot, catalog_properties, writer=spark_writer)
    done = parts.run(JsonFileStateStore(hot.path.with_suffix(".json")))
    assert done.end_offsets == {"cursor": 50}
    catalog_conn = {"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}}
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_MISSING", json.dumps(catalog_conn))
    operator = TierTableOperator(table=TABLE)
    context = task_context(operator.table_asset, at_rest(30))
    with pytest.raises(AirflowSkipException, match="nothing to tier; the lake is at"):
        operator.execute(context)
    repaired = saved_state(context, operator.table_asset)
    assert repaired.committed.snapshot_id == done.snapshot_id and repaired.committed.end_offsets == {"cursor": 50}
    assert "repaired from lake" in (repaired.note or "")
