"""Hot tables for the integration tests: the same test table in SQLite and in a real PostgreSQL."""

from __future__ import annotations

import json
import random
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from airflow_provider_tiering.core.spec import SqlSourceSpec
from airflow_provider_tiering.sources.base import Source

COLUMNS = ("id", "region", "amount", "created_at", "note")
REGIONS = ("eu", "us", "apac")
BASE_TIME = datetime(2026, 11, 1, 8, 0, 0)


def make_rows(start: int, count: int) -> list[tuple[Any, ...]]:
    rng = random.Random(start)
    return [
        (
            i,
            rng.choice(REGIONS),
            f"{rng.randint(0, 10**6) / 100:.2f}",
            (BASE_TIME + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S"),
            None if i % 11 == 0 else f'row {i} \' with "quotes"',
        )
        for i in range(start, start + count)
    ]


class SqliteHot:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self, table: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                f'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY, region TEXT NOT NULL, amount DECIMAL(12,2), '
                "created_at TIMESTAMP, note TEXT)"
            )

    def insert(self, table: str, start: int, count: int) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.executemany(f'INSERT INTO "{table}" VALUES (?, ?, ?, ?, ?)', make_rows(start, count))

    def source(self, spec: SqlSourceSpec) -> Source:
        from airflow_provider_tiering.sources.sqlite import SqliteSource

        return SqliteSource(spec, str(self.path))

    def rows(self, table: str) -> list[tuple]:
        from tests.lake_check import sqlite_rows

        return sqlite_rows(self.path, table, COLUMNS)


class PostgresHot:
    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def create(self, table: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute(
                f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2), '
                "created_at timestamp, note text)"
            )

    def insert(self, table: str, start: int, count: int) -> None:
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            cur.executemany(f'INSERT INTO "{table}" VALUES (%s, %s, %s, %s, %s)', make_rows(start, count))

    def source(self, spec: SqlSourceSpec) -> Source:
        from airflow_provider_tiering.sources.postgres import PostgresSource

        return PostgresSource(spec, self.dsn)

    def rows(self, table: str) -> list[tuple]:
        from tests.lake_check import postgres_rows

        return postgres_rows(self.dsn, table, COLUMNS)


def sqlite_events_table(tmp_path: Path, monkeypatch: Any, rows: int) -> SqliteHot:
    """A SQLite hot table ``events`` of ``rows`` rows, reachable through the Airflow connection ``hot_sqlite``."""
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("events")
    hot.insert("events", 1, rows)
    monkeypatch.setenv("AIRFLOW_CONN_HOT_SQLITE", json.dumps({"conn_type": "sqlite", "host": str(hot.path)}))
    return hot
