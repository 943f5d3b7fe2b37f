"""Hot tables for the integration tests: the same test table in SQLite and in a real PostgreSQL."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.registry import build_source

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

    def create(self, table: str, *, autoincrement: bool = False) -> None:
        """The test table, ``id`` its rowid; with ``autoincrement`` SQLite never reuses an id (eviction needs it)."""
        key = "INTEGER PRIMARY KEY AUTOINCREMENT" if autoincrement else "INTEGER PRIMARY KEY"
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                f'CREATE TABLE "{table}" (id {key}, region TEXT NOT NULL, amount DECIMAL(12,2), '
                "created_at TIMESTAMP, note TEXT)"
            )

    def insert(self, table: str, start: int, count: int) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.executemany(f'INSERT INTO "{table}" VALUES (?, ?, ?, ?, ?)', make_rows(start, count))

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo("sqlite", host=str(self.path))

    def source(self, spec: SqlSourceSpec) -> AnySource:
        return build_source(spec, self.connection())

    def rows(self, table: str) -> list[tuple]:
        from testbed.lake_check import sqlite_rows

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

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.dsn)

    def source(self, spec: SqlSourceSpec) -> AnySource:
        return build_source(spec, self.connection())

    def rows(self, table: str) -> list[tuple]:
        from testbed.lake_check import postgres_rows

        return postgres_rows(self.dsn, table, COLUMNS)


class MariaDBHot:
    """The test table in a real MariaDB (``id`` the primary key and cursor)."""

    kind = "mariadb"

    def __init__(self, url: str) -> None:
        self.url = url

    def connect(self, **kwargs: Any) -> Any:
        import pymysql
        from sqlalchemy.engine import make_url

        parts = make_url(self.url)
        return pymysql.connect(
            host=parts.host,
            port=parts.port,
            user=parts.username,
            password=parts.password or "",
            database=parts.database,
            autocommit=kwargs.pop("autocommit", True),
            **kwargs,
        )

    def create(self, table: str, *, auto_increment: bool = False) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{table}`")
            identity = " AUTO_INCREMENT" if auto_increment else ""
            cur.execute(
                f"CREATE TABLE `{table}` (id BIGINT NOT NULL{identity} PRIMARY KEY, region VARCHAR(8) NOT NULL, "
                "amount DECIMAL(12,2), created_at DATETIME(6), note TEXT) ENGINE=InnoDB"
            )

    def insert(self, table: str, start: int, count: int) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s, %s)", make_rows(start, count))

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.url)

    def source(self, spec: SqlSourceSpec) -> AnySource:
        return build_source(spec, self.connection())

    def rows(self, table: str) -> list[tuple]:
        from testbed.lake_check import mariadb_rows

        return mariadb_rows(self.url, table, COLUMNS)


def sqlite_events_table(tmp_path: Path, monkeypatch: Any, rows: int) -> SqliteHot:
    """A SQLite hot table ``events`` of ``rows`` rows, reachable through the Airflow connection ``hot_sqlite``."""
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("events")
    hot.insert("events", 1, rows)
    monkeypatch.setenv("AIRFLOW_CONN_HOT_SQLITE", json.dumps({"conn_type": "sqlite", "host": str(hot.path)}))
    return hot


class ConcurrentInserter(threading.Thread):
    """Inserts batches of rows, one transaction each, recording the ids whose commit returned."""

    def __init__(self, dsn: str, start: int, table: str = "across") -> None:
        super().__init__(daemon=True)
        self.hot = PostgresHot(dsn)
        self.table = table
        self.next_id = start
        self.acknowledged = 0  # every id below this has committed
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.hot.insert(self.table, self.next_id, 25)
            self.next_id += 25
            self.acknowledged = self.next_id
            time.sleep(0.01)


def recorded_shape(table: Any) -> dict[str, Any]:
    """The hot table's identity and shape as a round records them (``TableState.hot_shape``), read through the table
    spec's Airflow connection: a state document "at rest" that a probe compares the hot table with."""
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.hooks.tiering import TieringSourceHook

    return TieringSourceHook(TableSpec.parse(table).source).get_source().identity().shape_json()
