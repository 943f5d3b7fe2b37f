"""``TableDueSensor``'s decisions on the worker, before and after its trigger fires, against a real SQLite hot
table. The asset state store accessor is a dict here; under a real scheduler and triggerer the same sensor runs
in tests/e2e/test_deferral.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from airflow_provider_tiering.core.state import CommittedSnapshot, TableState, TableStatus, utcnow
from airflow_provider_tiering.sensors.table_due import TableDueSensor
from airflow_provider_tiering.triggers.table_due import TableDueTrigger
from testbed.airflow_context import saved_state, task_context
from testbed.hot_tables import SqliteHot, recorded_shape, sqlite_events_table

TABLE = {
    "name": "events",
    "source": {"conn_id": "hot_sqlite", "table": "events", "cursor_column": "id"},
    "lake": {"namespace": "due", "table": "events"},
    "freshness_seconds": 600,
}


@pytest.fixture
def hot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteHot:
    return sqlite_events_table(tmp_path, monkeypatch, rows=50)


def context_for(sensor: TableDueSensor, state: TableState | None, conf: dict | None = None) -> dict[str, Any]:
    return task_context(sensor.table_asset, state, conf)


def tiered(minutes_ago: float, through: int) -> TableState:
    return TableState(
        table="events",
        status=TableStatus.TIERED,
        epoch=2,
        last_tiered_time=utcnow() - timedelta(minutes=minutes_ago),
        committed=CommittedSnapshot(snapshot_id=7, epoch=2, end_offsets={"cursor": through}),
        hot_shape=recorded_shape(TABLE),
    )


def deferred(sensor: TableDueSensor, context: dict[str, Any]) -> TableDueTrigger:
    with pytest.raises(TaskDeferred) as raised:
        sensor.execute(context)
    assert raised.value.method_name == "execute_complete"
    return raised.value.trigger


def test_never_tiered_table_with_rows_is_due_without_deferring(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE)
    assert sensor.execute(context_for(sensor, None))["due"] is True


def test_not_due_table_is_recorded_scheduled_and_handed_to_the_trigger(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE, timeout=3600)
    context = context_for(sensor, tiered(minutes_ago=1, through=50))
    trigger = deferred(sensor, context)
    saved = saved_state(context, sensor.table_asset)
    assert saved.status is TableStatus.SCHEDULED and saved.last_checked_time is not None
    assert trigger.committed == {"cursor": 50} and trigger.due_at is not None and trigger.deadline is not None
    assert trigger.table["name"] == "events"


def test_due_table_without_new_rows_waits_for_rows_in_the_trigger(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE, poke_interval=5)
    trigger = deferred(sensor, context_for(sensor, tiered(minutes_ago=11, through=50)))
    assert trigger.due_at is None and trigger.poke_interval == 5
    hot.insert("events", 51, 1)
    assert sensor.execute(context_for(sensor, tiered(minutes_ago=11, through=50)))["due"] is True


def test_a_table_not_due_before_the_deadline_skips_at_once(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE, timeout=30)
    with pytest.raises(AirflowSkipException, match="not due until"):
        sensor.execute(context_for(sensor, tiered(minutes_ago=1, through=50)))


def test_after_the_trigger_fires_the_worker_checks_the_state_again(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE)
    deadline = (utcnow() + timedelta(hours=1)).isoformat()
    due = context_for(sensor, tiered(minutes_ago=11, through=40))
    assert sensor.execute_complete(due, {"status": "due"}, deadline)["due"] is True
    # A manual run tiered the table while the trigger waited: not due any more, so wait again.
    fresh = context_for(sensor, tiered(minutes_ago=0.1, through=50))
    with pytest.raises(TaskDeferred):
        sensor.execute_complete(fresh, {"status": "due"}, deadline)
    with pytest.raises(AirflowSkipException, match="not due with new rows before"):
        sensor.execute_complete(due, {"status": "deadline"}, deadline)


def test_quarantined_tables_skip_and_named_tables_do_not_wait(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE)
    quarantined = tiered(minutes_ago=11, through=50)
    quarantined.status, quarantined.quarantined_since, quarantined.note = TableStatus.FAILED, utcnow(), "quarantined!"
    with pytest.raises(AirflowSkipException, match="quarantined!"):
        sensor.execute(context_for(sensor, quarantined))
    recent = tiered(minutes_ago=1, through=50)
    assert sensor.execute(context_for(sensor, recent, conf={"tables": ["events"]}))["due"] is True
    with pytest.raises(AirflowSkipException, match="not among the tables"):
        sensor.execute(context_for(sensor, recent, conf={"tables": ["other"]}))


def test_poking_without_deferral_gives_the_same_answers(hot: SqliteHot) -> None:
    sensor = TableDueSensor(task_id="due", table=TABLE, deferrable=False)
    assert sensor.poke(context_for(sensor, tiered(minutes_ago=11, through=40))) is True
    assert sensor.poke(context_for(sensor, tiered(minutes_ago=11, through=50))) is False
    assert sensor.poke(context_for(sensor, tiered(minutes_ago=1, through=40))) is False
