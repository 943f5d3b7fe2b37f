"""Hot tables whose shape and identity change, for the tests of ``core/follow_shape.py``: a table
``(id, ver, b, q, f)`` in PostgreSQL, MariaDB or SQLite, a writer thread that keeps inserting (and, for tables whose
rows change, updating and deleting) rows while the test runs DDL, and each change of shape written in the store's
own SQL.

Every row the writer touches gets the next ``ver`` (a merge table's cursor); ``id`` is an append table's cursor.
The writer names only ``id`` and ``ver``, so it keeps writing whatever happens to the other columns.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from airflow_provider_tiering.core.connections import ConnectionInfo

#: The columns a table starts with; ``id`` is the key (and an append table's cursor), ``ver`` a merge table's cursor.
START_COLUMNS = ("id", "ver", "b", "q", "f")


class ShapeTable:
    """One table in one store; subclasses speak its SQL."""

    kind = ""
    quote = '"'

    def __init__(self, table: str) -> None:
        self.table = table
        self.next_id = 1
        self.next_ver = 1
        #: One statement at a time on the table's connection (the writer thread and the test share it).
        self.lock = threading.RLock()
        self.rng = random.Random(11)
        #: The store's connection, opened by each subclass after this.
        self._conn: Any = None

    # -- what a store provides -----------------------------------------------------------------
    def connection(self) -> ConnectionInfo:
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement, committed (autocommit)."""
        raise NotImplementedError

    def script(self, statements: Sequence[str]) -> None:
        """Several statements in one transaction."""
        raise NotImplementedError

    def columns(self) -> list[str]:
        """The table's columns now, in order."""
        raise NotImplementedError

    def close(self) -> None:
        self._conn.close()

    def create_sql(self) -> str:
        return (
            f"CREATE TABLE {self.ref} (id BIGINT NOT NULL PRIMARY KEY, ver BIGINT NOT NULL, b TEXT, q INTEGER, f REAL)"
        )

    def change_sql(self, change: str) -> list[str]:
        """The DDL of a change of shape, in this store's SQL (see the subclasses)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------
    @property
    def ref(self) -> str:
        return f"{self.quote}{self.table}{self.quote}"

    def p(self) -> str:
        return "%s"

    def create(self, rows: int) -> None:
        self.execute(f"DROP TABLE IF EXISTS {self.ref}")
        self.execute(self.create_sql())
        self.next_id = self.next_ver = 1
        self.insert_full(rows)

    def insert_full(self, count: int, *, start: int | None = None, salt: str = "") -> None:
        """Rows with the starting columns set, those the table still has (``b`` under its new name once renamed);
        ``start``: from that id, e.g. to reload a re-created table."""
        with self.lock:
            present = self.columns()
            names = [c for c in ("id", "ver", "b", "b2", "q", "f") if c in present]
            first = self.next_id if start is None else start
            rows = []
            for i in range(first, first + count):
                values = {"id": i, "ver": self.next_ver, "b": f"{salt}b{i}", "b2": f"{salt}b{i}", "q": i % 1000}
                rows.append(tuple({**values, "f": i / 4}[c] for c in names))
                self.next_ver += 1
            if start is None:
                self.next_id = first + count
            marks = ", ".join([self.p()] * len(names))
            self.executemany(f"INSERT INTO {self.ref} ({', '.join(names)}) VALUES ({marks})", rows)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            self.execute(sql, row)

    def write_some(self, updates: bool, deletes: bool) -> None:
        """A writer's step: two inserts, and two updates and a delete of random rows when asked."""
        p = self.p()
        with self.lock:
            for _ in range(2):
                self.execute(f"INSERT INTO {self.ref} (id, ver) VALUES ({p}, {p})", (self.next_id, self.next_ver))
                self.next_id += 1
                self.next_ver += 1
            for _ in range(2 if updates else 0):
                target = self.rng.randrange(1, self.next_id)
                self.execute(f"UPDATE {self.ref} SET ver = {p} WHERE id = {p}", (self.next_ver, target))
                self.next_ver += 1
            if deletes:
                self.execute(f"DELETE FROM {self.ref} WHERE id = {p}", (self.rng.randrange(1, self.next_id),))

    def change(self, change: str) -> None:
        """Apply a change of shape (a DDL, or a table dropped and created again and reloaded)."""
        with self.lock:
            self.script(self.change_sql(change))
        if change in ("recreate", "truncate_other"):
            self.insert_full(40, start=1, salt="new-")  # other rows, their ids starting over below the lake's

    def rows(self, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        selected = ", ".join(f"{self.quote}{c}{self.quote}" for c in columns)
        return self.execute(f"SELECT {selected} FROM {self.ref}")


class PostgresShapeTable(ShapeTable):
    kind = "postgres"

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__(table)
        self.dsn = dsn
        self._conn = psycopg.connect(dsn, autocommit=True)
        # The change stream reads flushed WAL only: commit with it flushed (the test server's default is off).
        self._conn.execute("SET synchronous_commit = on")

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.dsn)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            cur = self._conn.execute(sql, tuple(params) or None)  # type: ignore[arg-type]  # SQL built from constants
            return list(cur.fetchall()) if cur.description else []

    def script(self, statements: Sequence[str]) -> None:
        with self._conn.transaction():
            for statement in statements:
                self._conn.execute(statement)  # type: ignore[arg-type]  # test SQL built from constants

    def columns(self) -> list[str]:
        return [
            name
            for (name,) in self.execute(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum",
                (self.ref,),
            )
        ]

    def change_sql(self, change: str) -> list[str]:
        t = self.ref
        return {
            "add_constant": [f"ALTER TABLE {t} ADD COLUMN c integer NOT NULL DEFAULT 7"],
            "add_now": [f"ALTER TABLE {t} ADD COLUMN added_at timestamptz DEFAULT now()"],
            "add_volatile": [f"ALTER TABLE {t} ADD COLUMN u uuid DEFAULT gen_random_uuid()"],
            "add_plain": [f"ALTER TABLE {t} ADD COLUMN n integer"],
            "rename": [f"ALTER TABLE {t} RENAME COLUMN b TO b2"],
            "drop": [f"ALTER TABLE {t} DROP COLUMN f"],
            "drop_and_add": [f"ALTER TABLE {t} DROP COLUMN q", f"ALTER TABLE {t} ADD COLUMN q text DEFAULT 'x'"],
            "promote": [f"ALTER TABLE {t} ALTER COLUMN q TYPE bigint"],
            "promote_using": [f"ALTER TABLE {t} ALTER COLUMN q TYPE bigint USING q * 10"],
            "retype": [f"ALTER TABLE {t} ALTER COLUMN q TYPE text"],
            "recreate": [  # dropped and created again as it is (a reload from a dump): another oid
                f'CREATE TABLE "{self.table}_new" (LIKE {t} INCLUDING ALL)',
                f"DROP TABLE {t}",
                f'ALTER TABLE "{self.table}_new" RENAME TO {t}',
            ],
            "truncate_same": [
                f"CREATE TEMP TABLE keep ON COMMIT DROP AS SELECT * FROM {t}",
                f"TRUNCATE {t}",
                f"INSERT INTO {t} SELECT * FROM keep",
            ],
            "truncate_other": [f"TRUNCATE {t}"],
            # a migration that adds a column, then fills it row by row without touching the cursor
            "add_then_fill": [
                f"ALTER TABLE {t} ADD COLUMN filled integer DEFAULT 0",
                f"UPDATE {t} SET filled = id % 3",
            ],
            # changes under a name the next change renames, then a rewrite (a volatile default)
            "rename_and_rewrite": [
                f"ALTER TABLE {t} RENAME COLUMN n TO n2",
                f"ALTER TABLE {t} ADD COLUMN u2 uuid DEFAULT gen_random_uuid()",
            ],
        }[change]


class MariaDBShapeTable(ShapeTable):
    kind = "mariadb"
    quote = "`"

    def __init__(self, url: str, table: str) -> None:
        from testbed.hot_tables import MariaDBHot

        super().__init__(table)
        self.server = MariaDBHot(url)
        self._conn = self.server.connect()

    def connection(self) -> ConnectionInfo:
        return self.server.connection()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock, self._conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return list(cur.fetchall())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql, [tuple(r) for r in rows])

    def script(self, statements: Sequence[str]) -> None:
        for statement in statements:  # DDL commits implicitly in MariaDB
            self.execute(statement)

    def columns(self) -> list[str]:
        return [
            name
            for (name,) in self.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (self.table,),
            )
        ]

    def create_sql(self) -> str:
        return (
            f"CREATE TABLE {self.ref} (id BIGINT NOT NULL PRIMARY KEY, ver BIGINT NOT NULL, b TEXT, q INT, f FLOAT) "
            "ENGINE=InnoDB"
        )

    def change_sql(self, change: str) -> list[str]:
        t = self.ref
        return {
            "add_constant": [f"ALTER TABLE {t} ADD COLUMN c INT NOT NULL DEFAULT 7"],
            "add_now": [f"ALTER TABLE {t} ADD COLUMN added_at DATETIME(6) DEFAULT NOW(6)"],
            "add_volatile": [f"ALTER TABLE {t} ADD COLUMN u CHAR(36) DEFAULT (UUID()), ALGORITHM=COPY"],
            "add_plain": [f"ALTER TABLE {t} ADD COLUMN n INT"],
            "rename": [f"ALTER TABLE {t} RENAME COLUMN b TO b2"],
            "drop": [f"ALTER TABLE {t} DROP COLUMN f"],
            "promote": [f"ALTER TABLE {t} MODIFY q BIGINT"],
            "retype": [f"ALTER TABLE {t} MODIFY q VARCHAR(20)"],
            "recreate": [
                f"CREATE TABLE `{self.table}_new` LIKE {t}",
                f"DROP TABLE {t}",
                f"RENAME TABLE `{self.table}_new` TO {t}",
            ],
            "truncate_other": [f"TRUNCATE TABLE {t}"],
        }[change]


class SqliteShapeTable(ShapeTable):
    kind = "sqlite"

    def __init__(self, path: Path, table: str) -> None:
        super().__init__(table)
        self.path = path
        self._conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = wal")

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo("sqlite", host=str(self.path))

    def p(self) -> str:
        return "?"

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return self._conn.execute(sql, tuple(params)).fetchall()

    def script(self, statements: Sequence[str]) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements:
                self._conn.execute(statement)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def columns(self) -> list[str]:
        return [name for (name,) in self.execute("SELECT name FROM pragma_table_info(?)", (self.table,))]

    def change_sql(self, change: str) -> list[str]:
        t = self.ref
        return {
            "add_constant": [f"ALTER TABLE {t} ADD COLUMN c INTEGER NOT NULL DEFAULT 7"],
            "add_plain": [f"ALTER TABLE {t} ADD COLUMN n INTEGER"],
            "rename": [f"ALTER TABLE {t} RENAME COLUMN b TO b2"],
            "drop": [f"ALTER TABLE {t} DROP COLUMN f"],
            "recreate": [f"DROP TABLE {t}", self._definition()],
        }[change]

    def _definition(self) -> str:
        ((sql,),) = self.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (self.table,))
        return str(sql)


class Writer:
    """A thread that keeps writing a table (``ShapeTable.write_some``) until stopped; it can be paused, so a round
    reads a table that holds still. A step that fails (the table gone for a moment) is retried at the next tick."""

    def __init__(self, table: ShapeTable, *, updates: bool, deletes: bool, tick: float = 0.02) -> None:
        self.table = table
        self.updates, self.deletes, self.tick = updates, deletes, tick
        self.steps = self.failures = 0
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{table.table}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.is_set():
                self._idle.set()
                self._running.wait(0.05)
                continue
            self._idle.clear()
            try:
                self.table.write_some(self.updates, self.deletes)
                self.steps += 1
            except Exception:
                self.failures += 1
            time.sleep(self.tick)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join(timeout=30)

    def pause(self) -> None:
        """Stop writing; returns once the step under way is done."""
        self._idle.clear()
        self._running.clear()
        self._idle.wait(timeout=30)

    def resume(self) -> None:
        self._running.set()
