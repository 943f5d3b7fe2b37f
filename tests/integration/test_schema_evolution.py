"""The lake follows the hot store's schema: new columns and safe widenings in the same round; an incompatible
change fails only that table, names the column and both types, and commits nothing (real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.types import DoubleType, LongType, StringType

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SchemaConflict
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.rounds import round_parts


def _spec(table: str) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "unused", "table": table, "cursor_column": "id", "max_watermark_wait_seconds": 0},
            "lake": {"namespace": "evo", "table": table},
        }
    )


def _sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _round(dsn: str, table: str, catalog_properties, writer, tmp_path: Path):
    spec = _spec(table)
    store = JsonFileStateStore(tmp_path / f"{table}.json")
    return round_parts(spec, ConnectionInfo.from_uri(dsn), catalog_properties, writer=writer).run(store), store


def _lake_type(catalog_properties, table: str, column: str):
    return (
        load_catalog("default", **catalog_properties).load_table(("evo", table)).schema().find_field(column).field_type
    )


def _create(dsn: str, table: str) -> None:
    _sql(
        dsn,
        f'DROP TABLE IF EXISTS "{table}"',
        f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, qty integer NOT NULL DEFAULT 0, price real, '
        "big bigint, label text)",
        f"INSERT INTO \"{table}\" SELECT g, g % 7, g / 4.0, g::bigint * 1000000000, 'r' || g "
        "FROM generate_series(1, 500) g",
    )


def test_added_column_and_widenings_reach_the_lake_in_the_same_round(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    dsn, table = pg_server.dsn, "evolving"
    _create(dsn, table)
    first, _ = _round(dsn, table, catalog_properties, spark_writer, tmp_path)
    assert first.outcome == "tiered"
    _sql(
        dsn,
        f'ALTER TABLE "{table}" ADD COLUMN note text',
        f'ALTER TABLE "{table}" ALTER COLUMN qty TYPE bigint',  # int -> long
        f'ALTER TABLE "{table}" ALTER COLUMN price TYPE double precision',  # float -> double
        f"INSERT INTO \"{table}\" SELECT g, g * 3000000000, g / 3.0, g, 'r' || g, 'new ' || g "
        "FROM generate_series(501, 800) g",
    )
    second, store = _round(dsn, table, catalog_properties, spark_writer, tmp_path)
    assert second.outcome == "tiered" and second.metrics.rows == 300
    assert _lake_type(catalog_properties, table, "note") == StringType()
    assert _lake_type(catalog_properties, table, "qty") == LongType()
    assert _lake_type(catalog_properties, table, "price") == DoubleType()
    columns = ("id", "qty", "price", "big", "label", "note")
    lake = lake_rows(catalog_properties, ("evo", table), columns)
    # Older rows read the new column as null, and every value equals the hot store's (price compared as stored:
    # rows of round one were real, so compare them through the same float32 rounding).
    assert all(row[5] is None for row in lake if row[0] <= 500)
    assert digest((r[0], r[1], r[3], r[4], r[5]) for r in lake) == digest(
        (r[0], r[1], r[3], r[4], r[5]) for r in postgres_rows(dsn, table, columns)
    )
    assert store.load().status is TableStatus.TIERED


@pytest.mark.parametrize(
    ("change", "column", "hot_type", "lake_type"),
    [
        ("ALTER COLUMN qty TYPE text", "qty", "string", "int"),  # a type change that loses the type
        ("ALTER COLUMN big TYPE integer USING (big / 1000000000)::integer", "big", "int", "long"),  # narrowing
    ],
    ids=["lossy-change", "narrowing"],
)
def test_incompatible_change_fails_only_that_table_naming_column_and_types(
    change, column, hot_type, lake_type, pg_server, catalog_properties, spark_writer, tmp_path
):
    dsn = pg_server.dsn
    broken, sibling = "evo_broken", "evo_sibling"
    for table in (broken, sibling):
        _create(dsn, table)
        _round(dsn, table, catalog_properties, spark_writer, tmp_path)
    lake_before = load_catalog("default", **catalog_properties).load_table(("evo", broken))
    snapshot_before, schema_before = lake_before.current_snapshot().snapshot_id, lake_before.schema()
    _sql(dsn, f'ALTER TABLE "{broken}" {change}')
    for table in (broken, sibling):
        _sql(dsn, f"INSERT INTO \"{table}\" (id, label) SELECT g, 'x' FROM generate_series(501, 510) g")
    with pytest.raises(SchemaConflict) as failure:
        _round(dsn, broken, catalog_properties, spark_writer, tmp_path)
    message = str(failure.value)
    assert f"column {column!r}" in message and lake_type in message
    assert f"hot store's type {hot_type}" in message
    state = JsonFileStateStore(tmp_path / f"{broken}.json").load()
    assert state.status is TableStatus.FAILED and f"column {column!r}" in state.last_error
    lake_after = load_catalog("default", **catalog_properties).load_table(("evo", broken))
    assert lake_after.current_snapshot().snapshot_id == snapshot_before  # nothing committed
    assert lake_after.schema() == schema_before  # and the schema untouched
    result, _ = _round(dsn, sibling, catalog_properties, spark_writer, tmp_path)
    assert result.outcome == "tiered" and result.metrics.rows == 10


def test_a_dropped_required_column_stays_in_the_lake_optional_and_null_in_later_rows(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    dsn, table = pg_server.dsn, "evo_dropped"
    _create(dsn, table)
    _round(dsn, table, catalog_properties, spark_writer, tmp_path)
    _sql(
        dsn,
        f'ALTER TABLE "{table}" DROP COLUMN qty',
        f"INSERT INTO \"{table}\" (id, label) SELECT g, 'x' FROM generate_series(501, 510) g",
    )
    result, store = _round(dsn, table, catalog_properties, spark_writer, tmp_path)
    assert result.outcome == "tiered" and result.metrics.rows == 10
    lake = load_catalog("default", **catalog_properties).load_table(("evo", table))
    assert not lake.schema().find_field("qty").required  # kept, and optional now
    rows = lake_rows(catalog_properties, ("evo", table), ("id", "qty"))
    assert [r for r in rows if r[0] > 500 and r[1] is not None] == []  # NULL in the rows tiered after the drop
    assert sorted(r[1] for r in rows if r[0] <= 500) == sorted(g % 7 for g in range(1, 501))  # earlier rows keep it
    assert store.load().status is TableStatus.TIERED
