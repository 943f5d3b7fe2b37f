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
