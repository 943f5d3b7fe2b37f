"""Hot tables whose rows change, for the merge tests: inserts, updates, soft deletes and un-deletes, and (for key
reconciliation) hard deletes, changes of the key itself and deletes followed by a re-insert of the same key, each
stamping the row with the next ``version`` (the cursor), in SQLite or a real PostgreSQL.

The expected lake is the table's rows whose ``deleted_at`` is NULL; ``lake_by_key`` reads the lake back with
pyiceberg and ``files_by_key`` with pyarrow's Parquet reader over the files pyiceberg's scan plans (none of the
code under test).
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.registry import build_source
from testbed.lake_check import _normal, digest, duckdb_lake_rows, lake_rows, live_file_rows

#: Tiered columns, key first.
MUTABLE_COLUMNS = ("tenant", "id", "name", "amount", "deleted_at", "version")
DELETED_AT = datetime(2026, 11, 2, 9, 30, 0)


class MutableHot:
    """One table ``(tenant, id)``-keyed (``composite_key``) or ``id``-keyed, mutated with fresh versions."""

    def __init__(
        self,
        kind: str,
        execute: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]],
        connection: ConnectionInfo,
        table: str,
        *,
        composite_key: bool = False,
        seed: int = 7,
    ) -> None:
        self.kind = kind
        self._execute = execute
        self._connection = connection
        self.table = table
        self.composite_key = composite_key
        self.version = 0
        self.rng = random.Random(seed)
        self.next_id = 1
        #: One change at a time takes its version and commits (a writer thread and the test may both change rows).
        self.lock = threading.RLock()
        self.counts: dict[str, int] = {}
        self._p = "?" if kind == "sqlite" else "%s"
        quote = "`" if kind == "mariadb" else '"'
        self._t = f"{quote}{table}{quote}"

    # -- schema ----------------------------------------------------------------------------------
    def create(self, *, primary_key: bool = True, nullable_key: bool = False) -> None:
        integer = "INTEGER" if self.kind == "sqlite" else "BIGINT"
        moment = "DATETIME(6)" if self.kind == "mariadb" else "TIMESTAMP"  # a MariaDB TIMESTAMP updates itself
        null = "" if nullable_key else " NOT NULL"
        key = "tenant, id" if self.composite_key else "id"
        constraint = f", PRIMARY KEY ({key})" if primary_key else ""
        self._execute(f"DROP TABLE IF EXISTS {self._t}", ())
        self._execute(
            f"CREATE TABLE {self._t} (tenant {integer}{null}, id {integer}{null}, name TEXT, "
            f"amount DECIMAL(12, 2), deleted_at {moment}, version {integer} NOT NULL{constraint})",
            (),
        )

    # -- changes ---------------------------------------------------------------------------------
    def _next_version(self) -> int:
        self.version += 1
        return self.version

    def insert_locked(self, count: int) -> list[tuple[int, int]]:
        with self.lock:
            return self.insert(count)

    def _where(self, key: tuple[int, int]) -> tuple[str, list[Any]]:
        return f"tenant = {self._p} AND id = {self._p}", [key[0], key[1]]

    def insert(self, count: int) -> list[tuple[int, int]]:
        keys, values = [], []
        for _ in range(count):
            key = (self.rng.randint(1, 3) if self.composite_key else 0, self.next_id)
            self.next_id += 1
            price = f"{self.rng.randint(0, 10**6) / 100:.2f}"
            values += [*key, f"name {key[1]}", price, None, self._next_version()]
            keys.append(key)
        row = f"({', '.join([self._p] * 6)})"
        for start in range(0, len(keys), 1000):  # one statement per 1,000 rows
            chunk = values[start * 6 : (start + 1000) * 6]
            self._execute(f"INSERT INTO {self._t} VALUES {', '.join([row] * (len(chunk) // 6))}", chunk)
        return keys

    def update(self, key: tuple[int, int]) -> None:
        where, params = self._where(key)
        self._execute(
            f"UPDATE {self._t} SET name = {self._p}, amount = {self._p}, version = {self._p} WHERE {where}",
            (
                f"renamed {self.rng.random():.6f}",
                f"{self.rng.randint(0, 10**6) / 100:.2f}",
                self._next_version(),
                *params,
            ),
        )

    def soft_delete(self, key: tuple[int, int]) -> None:
        where, params = self._where(key)
        moment = DELETED_AT + timedelta(seconds=self.version)
        self._execute(
            f"UPDATE {self._t} SET deleted_at = {self._p}, version = {self._p} WHERE {where}",
            (moment.strftime("%Y-%m-%d %H:%M:%S"), self._next_version(), *params),
        )

    def undelete(self, key: tuple[int, int]) -> None:
        where, params = self._where(key)
        self._execute(
            f"UPDATE {self._t} SET deleted_at = NULL, name = {self._p}, version = {self._p} WHERE {where}",
            (f"back {self.version}", self._next_version(), *params),
        )

    def hard_delete(self, key: tuple[int, int]) -> None:
        where, params = self._where(key)
        self._execute(f"DELETE FROM {self._t} WHERE {where}", params)

    def change_key(self, key: tuple[int, int]) -> tuple[int, int]:
        """The row's ``id`` becomes a new one (an UPDATE of the key); returns its new key."""
        with self.lock:
            where, params = self._where(key)
            new_id = self.next_id
            self.next_id += 1
            self._execute(
                f"UPDATE {self._t} SET id = {self._p}, name = {self._p}, version = {self._p} WHERE {where}",
                (new_id, f"moved from {key[1]}", self._next_version(), *params),
            )
            return (key[0], new_id)

    def reinsert(self, key: tuple[int, int]) -> None:
        """Delete the row and insert it again under the same key, with new values, in one transaction."""
        with self.lock:
            where, params = self._where(key)
            row = [*key, f"again {key[1]}", f"{self.rng.randint(0, 10**6) / 100:.2f}", None, self._next_version()]
            self._execute_all(
                [
                    (f"DELETE FROM {self._t} WHERE {where}", params),
                    (f"INSERT INTO {self._t} VALUES ({', '.join([self._p] * 6)})", row),
                ]
            )

    def _execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        for sql, params in statements:  # overridden per store to run in one transaction
            self._execute(sql, params)

    def random_workload(self, changes: int) -> None:
        """``changes`` random changes of every kind: inserts, updates (several of one key in a row), updates of the
        key itself, soft deletes, hard deletes, a delete then a re-insert of one key. Safe from a thread."""
        with self.lock:
            for _ in range(changes):
                live = self.keys(deleted=False)
                choice = self.rng.random()
                kind = "insert" if choice < 0.25 or not live else None
                if kind == "insert":
                    self.insert(self.rng.randint(1, 3))
                else:
                    key = self.rng.choice(live)
                    if choice < 0.5:
                        kind = "update"
                        for _ in range(self.rng.randint(1, 3)):
                            self.update(key)
                    elif choice < 0.62:
                        kind = "key_change"
                        self.change_key(key)
                    elif choice < 0.72:
                        kind = "soft_delete"
                        self.soft_delete(key)
                    elif choice < 0.88:
                        kind = "hard_delete"
                        self.hard_delete(key)
                    else:
                        kind = "reinsert"
                        self.reinsert(key)
                self.counts[kind] = self.counts.get(kind, 0) + 1

    def keys(self, *, deleted: bool | None = None) -> list[tuple[int, int]]:
        condition = "" if deleted is None else f" WHERE deleted_at IS {'NOT ' if deleted else ''}NULL"
        rows = self._execute(f"SELECT tenant, id FROM {self._t}{condition} ORDER BY tenant, id", ())
        return [(int(t), int(i)) for t, i in rows]

    def random_changes(self, inserts: int, updates: int, deletes: int, undeletes: int) -> dict[str, int]:
        """One batch of changes between rounds; some keys are updated several times, some deleted and brought
        back, some inserted and changed again before any round sees them."""
        fresh = self.insert(inserts)
        live, gone = self.keys(deleted=False), self.keys(deleted=True)
        for key in self.rng.sample(live, min(updates, len(live))):
            for _ in range(self.rng.randint(1, 3)):
                self.update(key)
        for key in self.rng.sample(live, min(deletes, len(live))):
            self.soft_delete(key)
        for key in self.rng.sample(gone, min(undeletes, len(gone))):
            self.undelete(key)
        if fresh:
            self.update(fresh[0])
            self.soft_delete(fresh[-1])  # inserted and deleted between two rounds: the lake never holds it
        return {"inserts": inserts, "updates": updates, "deletes": deletes, "undeletes": undeletes}

    # -- reading ---------------------------------------------------------------------------------
    def live_rows(self) -> list[tuple[Any, ...]]:
        return self._execute(f"SELECT {', '.join(MUTABLE_COLUMNS)} FROM {self._t} WHERE deleted_at IS NULL", ())

    def connection(self) -> ConnectionInfo:
        return self._connection

    def source(self, spec: SqlSourceSpec) -> AnySource:
        return build_source(spec, self._connection)


def sqlite_mutable(path: Path, table: str, **options: Any) -> MutableHot:
    def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path, timeout=60) as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    hot = MutableHot("sqlite", execute, ConnectionInfo("sqlite", host=str(path)), table, **options)

    def execute_all(statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        with sqlite3.connect(path, timeout=60) as conn:  # commits once, at the end
            for sql, params in statements:
                conn.execute(sql, tuple(params))

    hot._execute_all = execute_all  # type: ignore[method-assign]
    return hot


def postgres_mutable(dsn: str, table: str, **options: Any) -> MutableHot:
    def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(sql, tuple(params))  # type: ignore[arg-type]  # test SQL built from constants
            return list(cur.fetchall()) if cur.description else []

    hot = MutableHot("postgres", execute, ConnectionInfo.from_uri(dsn), table, **options)

    def execute_all(statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        with psycopg.connect(dsn) as conn:  # one transaction, committed on leaving
            for sql, params in statements:
                conn.execute(sql, tuple(params))  # type: ignore[arg-type]  # test SQL built from constants

    hot._execute_all = execute_all  # type: ignore[method-assign]
    return hot


def mariadb_mutable(url: str, table: str, **options: Any) -> MutableHot:
    import pymysql

    from testbed.hot_tables import MariaDBHot

    server = MariaDBHot(url)
    # One connection per thread, kept: PyMySQL sets up TLS on every connect (about 10 ms of CPU on each side),
    # and the random workloads run thousands of statements. One that fails a ping (the server restarted) is replaced.
    kept = threading.local()

    def connection() -> Any:
        conn = getattr(kept, "conn", None)
        if conn is not None:
            try:
                conn.ping(reconnect=False)
                return conn
            except pymysql.MySQLError:
                with suppress(pymysql.MySQLError):  # already closed by the failed ping
                    conn.close()
        kept.conn = server.connect()
        return kept.conn

    def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        conn = connection()
        with conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return list(cur.fetchall())

    return MutableHot("mariadb", execute, server.connection(), table, **options)


def lake_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[tuple[Any, ...], tuple]:
    """The lake's rows by key ``(tenant, id)``; fails when a key is there twice."""
    rows = lake_rows(catalog_properties, identifier, MUTABLE_COLUMNS)
    by_key: dict[tuple[Any, ...], tuple] = {}
    for row in rows:
        key = (row[0], row[1])
        assert key not in by_key, f"key {key} is in the lake twice: {by_key[key]} and {row}"
        by_key[key] = tuple(_normal(v) for v in row)
    return by_key


def files_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[tuple[Any, ...], tuple]:
    """The lake's rows by key, read with pyarrow's Parquet reader from the data files pyiceberg's scan plans for the
    current snapshot (their position deletes applied with pyarrow too); fails when a key is there twice."""
    table = load_catalog("default", **catalog_properties).load_table(identifier)
    by_key: dict[tuple[Any, ...], tuple] = {}
    for task in table.scan().plan_files():
        rows = live_file_rows(task, MUTABLE_COLUMNS, table.io)
        for row in zip(*(rows.column(c).to_pylist() for c in MUTABLE_COLUMNS)):
            key = (row[0], row[1])
            assert key not in by_key, f"key {key} is in the data files twice: {by_key[key]} and {row}"
            by_key[key] = tuple(_normal(v) for v in row)
    return by_key


def duckdb_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[tuple[Any, ...], tuple]:
    """The lake's rows by key as DuckDB's Iceberg reader reads them (a local warehouse); fails when a key is there
    twice."""
    by_key: dict[tuple[Any, ...], tuple] = {}
    for row in duckdb_lake_rows(catalog_properties, identifier, MUTABLE_COLUMNS):
        key = (row[0], row[1])
        assert key not in by_key, f"key {key} is in DuckDB's read twice: {by_key[key]} and {row}"
        by_key[key] = tuple(_normal(v) for v in row)
    return by_key


def assert_lake_equals_live_rows_in_files(
    hot: MutableHot, catalog_properties: dict[str, str], identifier: tuple[str, str], *, duckdb: bool = False
) -> None:
    """As ``assert_lake_equals_live_rows`` (pyiceberg), and again through the Parquet files themselves, and with
    ``duckdb`` through DuckDB's Iceberg reader too."""
    assert_lake_equals_live_rows(hot, catalog_properties, identifier)
    for read in (files_by_key, duckdb_by_key) if duckdb else (files_by_key,):
        _assert_same_by_key(read.__name__, read(catalog_properties, identifier), hot)


def assert_lake_equals_live_rows(
    hot: MutableHot, catalog_properties: dict[str, str], identifier: tuple[str, str]
) -> None:
    """The lake holds exactly the hot table's non-deleted rows, one per key: same keys, same content, same hash."""
    _assert_same_by_key("pyiceberg", lake_by_key(catalog_properties, identifier), hot)
    assert digest(lake_rows(catalog_properties, identifier, MUTABLE_COLUMNS)) == digest(hot.live_rows())


def _assert_same_by_key(reader: str, found: dict[tuple[Any, ...], tuple], hot: MutableHot) -> None:
    """``found`` (a reader's rows by key) holds the hot table's live rows: same keys, same rows, same hash."""
    expected = {(r[0], r[1]): tuple(_normal(v) for v in r) for r in hot.live_rows()}
    assert set(found) == set(expected), (
        f"{reader}: keys only in the lake: {sorted(set(found) - set(expected))[:10]}, "
        f"only in the hot table: {sorted(set(expected) - set(found))[:10]}"
    )
    differing = [k for k in expected if found[k] != expected[k]]
    assert not differing, (
        f"{reader}: {len(differing)} keys differ, e.g. {differing[0]}: {found[differing[0]]} != "
        f"{expected[differing[0]]}"
    )
    assert digest(found.values()) == digest(hot.live_rows()), reader
