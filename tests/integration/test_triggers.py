"""The triggers as the triggerer runs them (an asyncio loop, connections looked up asynchronously), against a
real SQLite hot table and a real Iceberg catalog with a real tiering round in it."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.triggers.table_due import TableDueTrigger
from airflow_provider_tiering.triggers.table_tiered import TableTieredTrigger
from testbed.hot_tables import SqliteHot, sqlite_events_table
from testbed.rounds import round_parts


def spec(name: str = "events") -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "hot_sqlite", "table": name, "cursor_column": "id"},
            "lake": {"namespace": "trig", "table": name},
        }
    )


@pytest.fixture
def hot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteHot:
    return sqlite_events_table(tmp_path, monkeypatch, rows=100)


def first_event(trigger: Any, timeout: float) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        return (await anext(trigger.run())).payload

    return asyncio.run(asyncio.wait_for(run(), timeout))


def due_trigger(**overrides: Any) -> TableDueTrigger:
    kwargs: dict[str, Any] = {
        "table": spec().model_dump(mode="json"),
        "due_at": None,
        "committed": {"cursor": 100},
        "poke_interval": 0.2,
        "deadline": (utcnow() + timedelta(seconds=30)).isoformat(),
        **overrides,
    }
    return TableDueTrigger(**kwargs)


def test_due_trigger_serializes_to_what_rebuilds_it() -> None:
    trigger = due_trigger()
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_tiering.triggers.table_due.TableDueTrigger"
    assert TableDueTrigger(**kwargs).serialize() == (path, kwargs)
    assert "password" not in json.dumps(kwargs)


def test_due_trigger_waits_for_the_due_time_then_fires_on_new_rows(hot: SqliteHot) -> None:
    started = time.monotonic()
    event = first_event(due_trigger(due_at=(utcnow() + timedelta(seconds=1.5)).isoformat(), committed=None), 30)
    assert event["status"] == "due" and time.monotonic() - started >= 1.4


def test_due_trigger_fires_without_new_rows_once_the_keys_reconciliation_is_due(hot: SqliteHot) -> None:
    """A merge table's reconciliation finds hard deletes, which no probe sees: due at its time, rows or not."""
    started = time.monotonic()
    event = first_event(due_trigger(reconcile_at=(utcnow() + timedelta(seconds=1.5)).isoformat()), 30)
    elapsed = time.monotonic() - started
    assert event["status"] == "due" and 1.4 <= elapsed < 10, (event, elapsed)
    assert event["probes"] >= 2  # it probed (no rows beyond 100) until the reconciliation was due


def test_due_trigger_probes_until_rows_arrive(hot: SqliteHot) -> None:
    async def insert_later() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(hot.insert, "events", 101, 5)

    async def run() -> tuple[dict[str, Any], float]:
        started = time.monotonic()
        inserter = asyncio.create_task(insert_later())
        event = (await anext(due_trigger().run())).payload
        await inserter
        return event, time.monotonic() - started

    event, waited = asyncio.run(asyncio.wait_for(run(), 30))
    assert event["status"] == "due" and event["probes"] >= 3 and waited >= 1.0


def test_due_trigger_gives_up_at_the_deadline(hot: SqliteHot) -> None:
    event = first_event(due_trigger(deadline=(utcnow() + timedelta(seconds=1)).isoformat()), 30)
    assert event["status"] == "deadline" and event["probes"] >= 2
    late = due_trigger(
        due_at=(utcnow() + timedelta(hours=1)).isoformat(), deadline=(utcnow() + timedelta(seconds=0.5)).isoformat()
    )
    assert first_event(late, 10)["status"] == "deadline"  # not due before the deadline: no waiting an hour


def test_due_trigger_hands_a_broken_source_to_the_round(hot: SqliteHot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_HOT_SQLITE", json.dumps({"conn_type": "sqlite", "host": "/nonexistent/x.db"}))
    event = first_event(due_trigger(), 30)
    assert event["status"] == "due" and "cannot open /nonexistent/x.db" in event["probe_error"]


@pytest.fixture
def tiered_lake(
    hot: SqliteHot,
    catalog_properties: dict[str, str],
    spark_writer: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> int:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_DEFAULT",
        json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}}),
    )
    table_spec = spec()
    parts = round_parts(table_spec, hot, catalog_properties, writer=spark_writer)
    result = parts.run(JsonFileStateStore(tmp_path / "state.json"))
    assert result.outcome == "tiered" and result.end_offsets == {"cursor": 100}
    return int(result.snapshot_id)


def tiered_trigger(cursor_value: Any, table: str = "events") -> TableTieredTrigger:
    return TableTieredTrigger(
        catalog_conn_id="iceberg_default", namespace="trig", table=table, cursor_value=cursor_value, poke_interval=0.2
    )


def test_tiered_trigger_fires_once_the_lake_reaches_the_cursor(tiered_lake: int) -> None:
    event = first_event(tiered_trigger("100"), 60)
    assert event["status"] == "reached" and event["snapshot_id"] == tiered_lake
    assert event["end_offsets"] == {"cursor": 100} and event["epoch"] == 1
    with pytest.raises(TimeoutError):  # the lake is at 100: waiting for 101 goes on
        first_event(tiered_trigger(101), 2)
    path, kwargs = tiered_trigger(5).serialize()
    assert TableTieredTrigger(**kwargs).serialize() == (path, kwargs)


def test_tiered_trigger_reports_an_incomparable_target_instead_of_waiting_forever(tiered_lake: int) -> None:
    event = first_event(tiered_trigger("not-a-number"), 60)
    assert event["status"] == "error" and "is not a number" in event["error"]


def test_tiered_trigger_waits_for_a_table_that_does_not_exist_yet(tiered_lake: int) -> None:
    with pytest.raises(TimeoutError):
        first_event(tiered_trigger(1, table="not_yet"), 2)
