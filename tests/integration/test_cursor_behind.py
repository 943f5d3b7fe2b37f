"""A cursor that goes backwards: rows arriving at or below the lake's committed offsets fail the round, naming how
many, instead of being skipped for good; a stretch emptied by deletes alone never fails anything."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.decisions import TaskAction, decide_task, probe_hot_store, record_decision
from airflow_provider_tiering.core.errors import CursorBehindLake
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus, utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, PostgresHot, SqliteHot, make_rows
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts


def spec_for(table: str) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "unused", "table": table, "cursor_column": "id", "max_watermark_wait_seconds": 1},
            "lake": {"namespace": "it", "table": table},
            "freshness_seconds": 0.001,
        }
    )


@pytest.fixture(scope="module")
def local_writer() -> Any:
    """Rounds of one split, written in this process (no Spark session needed)."""
    return build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)


def test_sqlite_ids_reused_after_the_newest_rows_were_deleted_fail_the_round_naming_the_count(
    tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    table = "reused"
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create(table)  # INTEGER PRIMARY KEY without AUTOINCREMENT: SQLite hands out max(rowid) + 1
    hot.insert(table, 1, 100)
    spec = spec_for(table)
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_() -> Any:
        return round_parts(spec, hot, catalog_properties, writer=local_writer).run(state)

    assert round_().end_offsets == {"cursor": 100}
    with sqlite3.connect(tmp_path / "hot.db") as conn:
        conn.execute(f'DELETE FROM "{table}" WHERE id > 90')
    # The task's probe (the table is at rest and due) finds the newest rows gone and keeps that stretch watched.
    decision = decide_task(spec, state.load(), now=utcnow(), selected=None)
    assert decision.action is TaskAction.PROBE
    probed = probe_hot_store(hot.source(spec.source).probe, decision)
    assert probed.action is TaskAction.NOTHING_NEW and probed.emptied == {"after": 90, "through": 100}
    recorded = record_decision(state.load(), probed, utcnow())
    assert recorded is not None
    state.save(recorded)

    with sqlite3.connect(tmp_path / "hot.db") as conn:  # new rows, no id given: SQLite reuses 91..95
        conn.executemany(
            f'INSERT INTO "{table}" (region, amount, created_at, note) VALUES (?, ?, ?, ?)',
            [row[1:] for row in make_rows(1000, 5)],
        )
    again = probe_hot_store(hot.source(spec.source).probe, decide_task(spec, state.load(), now=utcnow(), selected=None))
    assert again.runs and "5 row(s) behind" in again.reason

    with pytest.raises(CursorBehindLake, match=r"5 row\(s\) arrived at or below the lake's committed offsets"):
        round_()
    failed = state.load()
    assert failed.status is TableStatus.FAILED and "drop lake table it.reused" in (failed.last_error or "")
    assert len(lake_rows(catalog_properties, ("it", table), COLUMNS)) == 100  # committed data untouched
    with pytest.raises(CursorBehindLake):  # and again, until someone acts: never a silent skip
        round_()

    # The way out the message names: drop the lake table; the next round tiers the whole hot table again.
    load_catalog("default", **catalog_properties).drop_table(("it", table))
    result = round_()
    assert result.outcome == "tiered" and result.metrics.rows == 95
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))
    assert state.load().emptied_range is None


def test_a_postgres_table_reloaded_below_the_offsets_fails_once_rows_arrive_where_the_lake_already_was(
    pg_server: Any, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    """The reproduction: a table truncated and reloaded with a restarted cursor; later rows with ids the lake
    already holds (other rows under those ids) would never be tiered."""
    table = "reloaded"
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 200)
    spec = spec_for(table)
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_() -> Any:
        return round_parts(spec, hot, catalog_properties, writer=local_writer).run(state)

    assert round_().end_offsets == {"cursor": 200}
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'TRUNCATE "{table}"')
    hot.insert(table, 1, 100)
    quiet = round_()
    assert quiet.outcome == "nothing_to_tier" and state.load().emptied_range == {"after": 100, "through": 200}
    hot.insert(table, 101, 150)  # 101..200 fall where the lake already was; 201..250 beyond it
    with pytest.raises(CursorBehindLake, match=r"100 row\(s\) arrived .* \(100 < id <= 200\)"):
        round_()
    assert len(lake_rows(catalog_properties, ("it", table), COLUMNS)) == 200


def test_deleting_the_newest_rows_of_a_sequence_table_fails_nothing(
    pg_server: Any, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    table = "newest_deleted"
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 100)
    spec = spec_for(table)
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_() -> Any:
        return round_parts(spec, hot, catalog_properties, writer=local_writer).run(state)

    round_()
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{table}" WHERE id > 90')
    assert round_().outcome == "nothing_to_tier"
    assert state.load().emptied_range == {"after": 90, "through": 100}
    hot.insert(table, 101, 10)  # the sequence goes on above the offsets
    result = round_()
    assert result.outcome == "tiered" and result.metrics.rows == 10 and state.load().emptied_range is None
    lake = lake_rows(catalog_properties, ("it", table), COLUMNS)
    assert sorted(r[0] for r in lake) == list(range(1, 111))
