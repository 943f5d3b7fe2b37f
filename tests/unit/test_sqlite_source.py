"""SQLite hot tables: values SQLite's loose typing let in that do not fit the column's declared type."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.planner import RangeSplit
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.sqlite import SqliteSource


def test_a_value_that_does_not_fit_its_column_type_names_the_table_and_the_column(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER NOT NULL, qty INTEGER)")
        conn.execute("INSERT INTO orders VALUES (1, 5), (2, 'five')")  # SQLite keeps the text as it is
    source = SqliteSource(
        SqlSourceSpec(conn_id="hot", table="orders", cursor_column="id"), ConnectionInfo("sqlite", host=str(path))
    )
    schema = source.schema()
    with pytest.raises(SourceError, match=r"^sqlite table orders: column 'qty': cannot convert SQLite values to int64"):
        list(source.read_split(RangeSplit(index=0, lower=None, upper=2, estimated_rows=2), schema))


def test_a_settle_lag_on_an_integer_cursor_fails_instead_of_being_ignored(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER NOT NULL, created_at TIMESTAMP NOT NULL)")
        conn.execute("INSERT INTO orders VALUES (1, '2026-11-01 08:00:00'), (2, '2999-01-01 00:00:00')")
    connection = ConnectionInfo("sqlite", host=str(path))
    by_id = SqliteSource(
        SqlSourceSpec(conn_id="hot", table="orders", cursor_column="id", settle_lag_seconds=5), connection
    )
    with pytest.raises(SourceError, match="settle_lag_seconds applies to timestamp and date cursors; 'id' is int64"):
        by_id.safe_watermark(None, None)
    by_time = SqliteSource(
        SqlSourceSpec(conn_id="hot", table="orders", cursor_column="created_at", settle_lag_seconds=5), connection
    )
    # The row stamped in the future is not settled yet.
    assert by_time.safe_watermark(None, None).end == {"cursor": "2026-11-01 08:00:00"}
