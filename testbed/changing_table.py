"""A table changed the way operational tables are, for the change-stream tests: inserts, updates (of the key too,
and of one key several times), deletes, deletes then re-inserts of one key, and large values (stored out of line in
PostgreSQL, TOAST) left alone by later updates. ``ChangingTable`` is PostgreSQL's, ``ChangingMariaDBTable``
MariaDB's (``tags`` a JSON text there, an array in PostgreSQL).

PostgreSQL sessions commit with ``synchronous_commit = on``: a change stream reads only flushed WAL. The expected lake
is the table's rows; ``lake_by_key`` reads the lake back with pyiceberg only, and ``files_by_key`` reads the data
files the current snapshot lists with pyarrow's Parquet reader (neither uses code under test).
"""

from __future__ import annotations

import json
import random
import string
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pymysql
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from testbed.lake_check import _normal, digest, duckdb_lake_rows, live_file_rows

COLUMNS = ("id", "name", "amount", "doc", "tags")


class _ChangingRows:
    """``id``-keyed rows; ``doc`` is sometimes a value large enough to be stored out of line. A database's session
    fills in how a statement runs, a transaction holds, and names are quoted."""

    def __init__(self, table: str, *, seed: int = 5) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.next_id = 1
        self.counts = {"insert": 0, "update": 0, "key_update": 0, "delete": 0, "reinsert": 0, "toast": 0}

    # -- the database's session ----------------------------------------------------------------------------
    def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; its row count."""
        raise NotImplementedError

    def _select(self, sql: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _atomic(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _rolled_back(self) -> BaseException:
        """What a block of ``_atomic`` raises to roll its transaction back quietly."""
        raise NotImplementedError

    @property
    def ref(self) -> str:
        return f'"{self.table}"'

    def _appended(self, column: str, text: str) -> str:
        return f"{column} || '{text}'"

    def _tags(self, key: int) -> Any:
        return [f"t{key % 3}", "x"]

    # -- changes ---------------------------------------------------------------------------------------------
    def _big(self) -> str:
        # Incompressible and above the 2 kB TOAST threshold: stored out of line, not inline-compressed.
        return "".join(self.rng.choices(string.ascii_letters + string.digits, k=6000))

    def insert(self, count: int) -> None:
        with self._atomic():
            for _ in range(count):
                self._insert_one(self.next_id)
                self.next_id += 1

    def _insert_one(self, key: int) -> None:
        doc = self._big() if self.rng.random() < 0.2 else f"doc {key}"
        self._run(
            f"INSERT INTO {self.ref} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)",  # a column added: default
            (key, f"row {key}", round(self.rng.uniform(0, 1000), 2), doc, self._tags(key)),
        )
        self.counts["insert"] += 1

    def keys(self) -> list[int]:
        return [k for (k,) in self._select(f"SELECT id FROM {self.ref} ORDER BY id")]

    def random_changes(self, operations: int) -> None:
        """``operations`` changes, a few per transaction, chosen at random."""
        done = 0
        while done < operations:
            with self._atomic():
                for _ in range(self.rng.randint(1, 4)):
                    self._one_change()
                    done += 1

    def transaction(self, changes: int, *, hold: float = 0.0, rollback: bool = False) -> bool:
        """One transaction of ``changes`` random changes, held open ``hold`` seconds, then committed (or rolled
        back); ``counts`` take its changes only once it has committed. True when it committed; a broken session
        raises (its transaction may or may not have committed, and is not counted)."""
        before = dict(self.counts)
        try:
            with self._atomic():
                for _ in range(changes):
                    self._one_change()
                if hold:
                    time.sleep(hold)
                if rollback:
                    raise self._rolled_back()
        except BaseException:
            self.counts = before
            raise
        if rollback:
            self.counts = before
        return not rollback

    def _one_change(self) -> None:
        keys = self.keys()
        choice = self.rng.random()
        t = self.ref
        if not keys or choice < 0.25:
            self._insert_one(self.next_id)
            self.next_id += 1
            return
        key = self.rng.choice(keys)
        if choice < 0.50:  # an update of other columns; the stored-out-of-line doc is left alone
            self._run(f"UPDATE {t} SET name = {self._appended('name', '+')}, amount = amount + 1 WHERE id = %s", (key,))
            self.counts["update"] += 1
        elif choice < 0.58:  # several updates of one key in one transaction
            for _ in range(3):
                self._run(f"UPDATE {t} SET amount = coalesce(amount, 0) + 0.5 WHERE id = %s", (key,))
            self.counts["update"] += 3
        elif choice < 0.66:
            self._run(f"UPDATE {t} SET doc = %s WHERE id = %s", (self._big(), key))
            self.counts["toast"] += 1
        elif choice < 0.74:  # the key itself changes
            self._run(
                f"UPDATE {t} SET id = %s, name = {self._appended('name', '*')} WHERE id = %s", (self.next_id, key)
            )
            self.next_id += 1
            self.counts["key_update"] += 1
        elif choice < 0.87:
            self._run(f"DELETE FROM {t} WHERE id = %s", (key,))
            self.counts["delete"] += 1
        else:  # deleted and inserted again under the same key
            # Only if this delete removed it: when another writer changed the key first (deleted it, or deleted and
            # inserted it again) the delete waits for that commit, then finds no row of its own snapshot to remove,
            # and an insert would collide with the other writer's row.
            if self._run(f"DELETE FROM {t} WHERE id = %s", (key,)):
                self._insert_one(key)
                self.counts["reinsert"] += 1

    def hot_by_key(self) -> dict[Any, tuple[Any, ...]]:
        rows = self._select(f"SELECT {', '.join(COLUMNS)} FROM {self.ref}")
        return {row[0]: tuple(_normal_value(v) for v in row) for row in rows}


class ChangingTable(_ChangingRows):
    """A PostgreSQL table (``tags text[]``), changed on one autocommit psycopg session (``conn``)."""

    def __init__(self, dsn: str, table: str, *, seed: int = 5) -> None:
        super().__init__(table, seed=seed)
        self.dsn = dsn
        self.conn = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        conn.execute("SET synchronous_commit = on")
        return conn

    def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params).rowcount  # type: ignore[arg-type]  # test SQL

    def _select(self, sql: str) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql).fetchall()  # type: ignore[arg-type]  # test SQL

    def _atomic(self) -> AbstractContextManager[None]:
        return self.conn.transaction()  # type: ignore[return-value]  # yields the transaction, unused

    def _rolled_back(self) -> BaseException:
        return psycopg.Rollback()

    def reconnect(self) -> None:
        """A new session (after a server restart dropped the old one)."""
        self.conn.close()
        self.conn = self._connect()

    def close(self) -> None:
        self.conn.close()

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.dsn)

    def create(self) -> None:
        self._run(f"DROP TABLE IF EXISTS {self.ref}")
        self._run(
            f"CREATE TABLE {self.ref} (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), doc text, "
            "tags text[])"
        )


class _Rollback(Exception):
    """Rolls a MariaDB transaction of ``ChangingMariaDBTable._atomic`` back."""


class ChangingMariaDBTable(_ChangingRows):
    """A MariaDB table (``tags`` a JSON text), changed on one PyMySQL session (``conn``)."""

    def __init__(self, url: str, table: str, *, seed: int = 5) -> None:
        super().__init__(table, seed=seed)
        self.url = url
        self.conn = self._connect()

    def _connect(self) -> Any:
        info = ConnectionInfo.from_uri(self.url)
        return pymysql.connect(
            host=info.host, port=info.port, user=info.login, password=info.password or "", database=info.schema,
            charset="utf8mb4", autocommit=True, connect_timeout=5,
        )  # fmt: skip

    @property
    def ref(self) -> str:
        return f"`{self.table}`"

    def _appended(self, column: str, text: str) -> str:
        return f"CONCAT({column}, '{text}')"

    def _tags(self, key: int) -> Any:
        return json.dumps([f"t{key % 3}", "x"])

    def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self.conn.cursor() as cur:
            return int(cur.execute(sql, tuple(params)))

    def _select(self, sql: str) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())

    @contextmanager
    def _atomic(self) -> Iterator[None]:
        self.conn.begin()
        try:
            yield
        except _Rollback:
            self.conn.rollback()
            return
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()

    def _rolled_back(self) -> BaseException:
        return _Rollback()

    def reconnect(self) -> None:
        """A new session (after a server restart dropped the old one)."""
        self.close()
        self.conn = self._connect()

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError:  # a session the server already dropped
            pass

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.url)

    def create(self) -> None:
        self._run(f"DROP TABLE IF EXISTS {self.ref}")
        self._run(
            f"CREATE TABLE {self.ref} (id BIGINT PRIMARY KEY, name VARCHAR(200) NOT NULL, amount DECIMAL(12,2), "
            "doc LONGTEXT, tags JSON)"
        )


def normal_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of ``COLUMNS`` as the hot store and the lake are compared (arrays as tuples, numbers and times as text)."""
    return tuple(_normal_value(v) for v in row)


def _normal_value(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    return _normal(value)


def _by_key(rows: list[dict[str, Any]]) -> dict[Any, tuple[Any, ...]]:
    found: dict[Any, tuple[Any, ...]] = {}
    for row in rows:
        if row["id"] in found:
            raise AssertionError(f"the lake holds key {row['id']} twice")
        found[row["id"]] = tuple(_normal_value(row[c]) for c in COLUMNS)
    return found


def lake_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[Any, tuple[Any, ...]]:
    table = load_catalog("default", **catalog_properties).load_table(identifier)
    return _by_key(table.scan(selected_fields=COLUMNS).to_arrow().to_pylist())


def files_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[Any, tuple[Any, ...]]:
    """The live rows of the data files the current snapshot lists, read with pyarrow's Parquet reader (their position
    deletes applied by ``testbed.lake_check.live_file_rows``)."""
    table = load_catalog("default", **catalog_properties).load_table(identifier)
    rows: list[dict[str, Any]] = []
    for task in table.scan().plan_files():
        rows += live_file_rows(task, COLUMNS, table.io).to_pylist()
    return _by_key(rows)


def duckdb_by_key(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> dict[Any, tuple[Any, ...]]:
    """The lake's rows as DuckDB's Iceberg reader reads them (a local warehouse)."""
    rows = duckdb_lake_rows(catalog_properties, identifier, COLUMNS)
    return _by_key([dict(zip(COLUMNS, row, strict=True)) for row in rows])


def assert_lake_equals_hot(
    hot: ChangingTable, catalog_properties: dict[str, str], identifier: tuple[str, str], *, duckdb: bool = False
) -> None:
    """Row for row by key, then by count and content hash, through pyiceberg and through the Parquet files, and with
    ``duckdb`` through DuckDB's Iceberg reader too."""
    expected = hot.hot_by_key()
    for read in (lake_by_key, files_by_key, *((duckdb_by_key,) if duckdb else ())):
        found = read(catalog_properties, identifier)
        missing = sorted(set(expected) - set(found))
        extra = sorted(set(found) - set(expected))
        differ = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
        assert not (missing or extra or differ), (
            f"{read.__name__}: missing keys {missing[:10]}, extra keys {extra[:10]}, differing rows {differ[:10]}"
            + ("" if not differ else f" (first: hot {_short(expected[differ[0]])}, lake {_short(found[differ[0]])})")
        )
        assert digest(found.values()) == digest(expected.values())


def _short(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v[:20] + "..." if isinstance(v, str) and len(v) > 20 else v for v in row)
