"""Evicting tiered rows from the hot store: with a writer inserting all along, after a crash between commit and
eviction and a crash inside an eviction transaction, every row ever written is in the lake or the hot store, the
hot store keeps exactly the rows younger than the retention or not yet tiered, and the view across tiers holds every
row once. Eviction never deletes what the lake does not hold."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_provider_tiering.across_tiers import read_across_tiers
from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import LakeSpec, TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.crash_round import crash_round
from testbed.hot_tables import BASE_TIME, COLUMNS, ConcurrentInserter, PostgresHot, SqliteHot, make_rows
from testbed.lake_check import digest, lake_rows, view_rows
from testbed.rounds import lake_of

#: Rows are dated BASE_TIME + id seconds: with this retention, rows below about id YOUNG_FROM are old enough.
YOUNG_FROM = 3000


def spec(name: str, *, retention_seconds: float, batch_rows: int = 500) -> dict:
    return {
        "name": name,
        "source": {"conn_id": "unused", "table": name, "cursor_column": "id", "max_watermark_wait_seconds": 2},
        "lake": {"namespace": "it", "table": name},
        "eviction": {
            "enabled": True,
            "retention_seconds": retention_seconds,
            "age_column": "created_at",
            "batch_rows": batch_rows,
        },
    }


def written_rows(inserts: list[tuple[int, int]]) -> list[tuple]:
    """The rows that ``hot.insert(start, count)`` calls wrote, as the hot store reads them back (amount a number)."""
    return [
        (i, region, Decimal(amount), at, note)
        for start, count in inserts
        for i, region, amount, at, note in make_rows(start, count)
    ]


def retention_for(young_from: int) -> float:
    """A retention under which rows with id >= young_from (dated BASE_TIME + id s) are younger, as of now."""
    return (datetime.now(UTC).replace(tzinfo=None) - BASE_TIME).total_seconds() - young_from


def test_eviction_with_a_writer_inserting_keeps_every_row_in_one_tier_at_least(
    pg_server, tmp_path: Path, catalog_properties
) -> None:
    started = datetime.now(UTC)
    table_spec = TableSpec.parse(spec("evicted", retention_seconds=retention_for(YOUNG_FROM)))
    hot = PostgresHot(pg_server.dsn)
    hot.create("evicted")
    hot.insert("evicted", 1, 1000)
    source = hot.source(table_spec.source)
    lake = lake_of(LakeSpec(namespace="it", table="evicted"), catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    round_writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    writer = ConcurrentInserter(pg_server.dsn, 1001, table="evicted")
    writer.start()
    evicted = 0
    try:
        for _ in range(8):
            result = run_round(table_spec, source, lake, round_writer, state)
            evicted += result.metrics.evicted_rows if result.metrics else 0
            # Between rounds, while rows arrive: the view across tiers has every committed row once.
            acknowledged = writer.acknowledged
            ids = [r[0] for r in view_rows(read_across_tiers(source, lake), COLUMNS)]
            assert len(ids) == len(set(ids)) and set(range(1, acknowledged)) <= set(ids)
    finally:
        writer.stop.set()
        writer.join()
    final = run_round(table_spec, source, lake, round_writer, state)
    evicted += final.metrics.evicted_rows if final.metrics else 0
    elapsed = (datetime.now(UTC) - started).total_seconds()

    inserts = [(1, 1000)] + [(start, 25) for start in range(1001, writer.next_id, 25)]  # as Writer inserts them
    written = {r[0]: r for r in written_rows(inserts)}
    lake_ids = [r[0] for r in lake_rows(catalog_properties, ("it", "evicted"), COLUMNS)]
    hot_ids = {r[0] for r in hot.rows("evicted")}
    committed = lake.committed().end_offsets["cursor"]
    assert committed == writer.next_id - 1  # the last round tiered everything
    # Everything ever written is in the lake, once; the hot store kept exactly the young rows.
    assert digest(lake_rows(catalog_properties, ("it", "evicted"), COLUMNS)) == digest(written.values())
    assert len(lake_ids) == len(set(lake_ids))
    assert not {i for i in hot_ids if i < YOUNG_FROM}, "a row older than the retention stayed in the hot store"
    assert set(range(YOUNG_FROM + int(elapsed) + 2, writer.next_id)) <= hot_ids, "a young row was evicted"
    assert evicted == len(written) - len(hot_ids) and evicted >= YOUNG_FROM - 1
    document = state.load()
    assert document.evicted_rows_total == evicted and document.eviction_note is None
    assert digest(view_rows(read_across_tiers(source, lake), COLUMNS)) == digest(written.values())


@pytest.mark.parametrize("kill_at", ["cleaned", "evicting"], ids=["between-commit-and-eviction", "inside-eviction"])
def test_a_crash_around_eviction_loses_nothing_and_the_next_round_finishes_it(
    kill_at: str, tmp_path: Path, catalog_properties
) -> None:
    table_spec = spec("crashy", retention_seconds=0, batch_rows=300)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("crashy", autoincrement=True)
    hot.insert("crashy", 1, 1000)
    everything = hot.rows("crashy")

    crashed = crash_round(tmp_path, catalog_properties, kill_at, spec=table_spec)
    assert crashed.returncode == -9, f"not killed: {crashed.returncode}\n{crashed.stdout}\n{crashed.stderr[-3000:]}"
    lake = lake_of(LakeSpec(namespace="it", table="crashy"), catalog_properties)
    assert lake.committed().end_offsets == {"cursor": 1000}
    left = hot.rows("crashy")
    # Killed before eviction: nothing deleted; inside its second batch: the first batch only (the second rolled back).
    assert len(left) == (1000 if kill_at == "cleaned" else 700)
    source = hot.source(TableSpec.parse(table_spec).source)
    assert digest(view_rows(read_across_tiers(source, lake), COLUMNS)) == digest(everything)

    hot.insert("crashy", 1001, 50)
    new_rows = [r for r in hot.rows("crashy") if r[0] > 1000]
    result = run_round(
        TableSpec.parse(table_spec),
        source,
        lake,
        build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True),
        JsonFileStateStore(tmp_path / "state.json"),
    )
    assert result.outcome == "tiered" and result.metrics.rows == 50  # the crashed round's rows are not tiered again
    assert hot.rows("crashy") == [] and result.metrics.evicted_rows == len(left) + 50
    assert digest(lake_rows(catalog_properties, ("it", "crashy"), COLUMNS)) == digest(everything + new_rows)


def test_eviction_refuses_rows_the_lake_does_not_hold(tmp_path: Path, catalog_properties) -> None:
    table_spec = TableSpec.parse(spec("guarded", retention_seconds=retention_for(300)))
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("guarded", autoincrement=True)
    hot.insert("guarded", 1, 400)
    source = hot.source(table_spec.source)
    lake = lake_of(LakeSpec(namespace="it", table="guarded"), catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    hot.insert("guarded", 401, 100)
    first = run_round(table_spec, source, lake, writer, state)
    assert 290 <= first.metrics.evicted_rows < 310  # the young rows stay, the newest among them
    # A row the rounds never saw below the committed offsets (committed late below the watermark, as a too short
    # settle lag would let happen), then a round: its eviction finds the lake short of that row.
    with sqlite3.connect(tmp_path / "hot.db") as conn:
        conn.execute(
            'INSERT INTO "guarded" VALUES (?, ?, ?, ?, ?)', (250, "eu", "1.00", "2026-11-01 08:00:00", "late row")
        )
    hot.insert("guarded", 501, 10)

    second = run_round(table_spec, source, lake, writer, state)

    assert second.outcome == "tiered" and second.metrics.rows == 10 and second.metrics.evicted_rows == 0
    document = state.load()
    assert "1 hot row(s) with cursor <= 510 are not in the lake as they are in the hot store (first: id=250)" in (
        document.eviction_note
    )
    left = [r[0] for r in hot.rows("guarded")]
    assert left == [250, *range(first.metrics.evicted_rows + 1, 511)]  # nothing evicted in that batch


def test_eviction_by_a_timestamp_cursor(tmp_path: Path, catalog_properties) -> None:
    data = spec("timed", retention_seconds=retention_for(300))
    data["source"]["cursor_column"] = "created_at"
    data["eviction"]["age_column"] = None  # the cursor dates the rows
    table_spec = TableSpec.parse(data)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("timed")
    hot.insert("timed", 1, 600)
    everything = hot.rows("timed")
    source = hot.source(table_spec.source)
    lake = lake_of(LakeSpec(namespace="it", table="timed"), catalog_properties)
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    result = run_round(table_spec, source, lake, writer, JsonFileStateStore(tmp_path / "state.json"))

    left = [r[0] for r in hot.rows("timed")]
    assert result.metrics.rows == 600 and result.metrics.evicted_rows == 600 - len(left)
    assert 290 <= result.metrics.evicted_rows < 310 and left == list(range(601 - len(left), 601))  # the young rows
    assert digest(lake_rows(catalog_properties, ("it", "timed"), COLUMNS)) == digest(everything)
    assert digest(view_rows(read_across_tiers(source, lake), COLUMNS)) == digest(everything)


def test_eviction_is_refused_on_a_rowid_cursor_sqlite_reuses(tmp_path: Path, catalog_properties) -> None:
    table_spec = TableSpec.parse(spec("reusable", retention_seconds=0))
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("reusable")  # id INTEGER PRIMARY KEY, no AUTOINCREMENT
    hot.insert("reusable", 1, 50)
    everything = hot.rows("reusable")
    source = hot.source(table_spec.source)
    lake = lake_of(LakeSpec(namespace="it", table="reusable"), catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    result = run_round(table_spec, source, lake, writer, state)

    assert result.outcome == "tiered" and result.metrics.rows == 50 and result.metrics.evicted_rows == 0
    note = state.load().eviction_note or ""
    assert "eviction refused: cursor column 'id' is the table's rowid" in note and "AUTOINCREMENT" in note
    assert hot.rows("reusable") == everything  # nothing deleted
    assert digest(lake_rows(catalog_properties, ("it", "reusable"), COLUMNS)) == digest(everything)
