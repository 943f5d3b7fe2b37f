"""A PostgreSQL change-stream table whose columns keep changing under a writer, for the tests of a change stream that
follows its table's migrations: ``(id bigint primary key, ver bigint not null, <extra columns>)``.

A writer inserts rows (every extra column set), updates them (one extra column, or only ``ver``, which leaves a
large text value alone: an update's unchanged TOAST value), deletes them, and deletes and inserts a key again in one
transaction. A migrator changes the extra columns every few seconds the way deploys do: a column added with a
constant default or without one, renamed (again and again: each rename takes a new name), dropped, an integer
column promoted to ``bigint`` (a rewrite of the table), and dropped then added again under its name. Both work on
one connection, so the writer always names the columns the table has.
"""

from __future__ import annotations

import random
import string
import threading
from typing import Any

import psycopg

from airflow_provider_tiering.core.connections import ConnectionInfo

#: Extra columns the table starts with: name -> type.
START_EXTRA = {"a": "integer", "b": "text", "c": "text"}
#: The migrations in the order they are tried.
CYCLE = ("add_constant", "rename", "drop_and_add", "add_plain", "promote", "rename", "drop", "drop_and_add")
#: A text value this long, of random letters, is stored out of line (TOAST): an update that leaves it alone does
#: not carry it.
LARGE_TEXT = 3000


class MigratingTable:
    """One table, its writer's steps and its migrations (see the module's description)."""

    def __init__(self, dsn: str, table: str, *, seed: int = 43) -> None:
        self.dsn, self.table = dsn, table
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")  # the change stream reads flushed WAL only
        self.extra: dict[str, str] = {}
        self.next_id = self.next_ver = 1
        self.names = 0
        self.migrations: list[str] = []

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.dsn)

    def close(self) -> None:
        self.conn.close()

    @property
    def ref(self) -> str:
        return f'"{self.table}"'

    def create(self, rows: int) -> None:
        with self.lock:
            self.conn.execute(f"DROP TABLE IF EXISTS {self.ref}")  # type: ignore[arg-type]  # test SQL
            extra = ", ".join(f"{name} {kind}" for name, kind in START_EXTRA.items())
            self.conn.execute(f"CREATE TABLE {self.ref} (id bigint PRIMARY KEY, ver bigint NOT NULL, {extra})")  # type: ignore[arg-type]
            self.extra = dict(START_EXTRA)
            for _ in range(rows):
                self._insert()

    # -- the writer ------------------------------------------------------------------------------------
    def _value(self, kind: str) -> Any:
        if kind in ("integer", "bigint"):
            return self.rng.randrange(-1000, 1000) if self.rng.random() > 0.1 else None
        if self.rng.random() < 0.15:
            return "".join(self.rng.choices(string.ascii_letters, k=LARGE_TEXT))
        return f"t{self.rng.randrange(10**6)}" if self.rng.random() > 0.1 else None

    def _insert(self, key: int | None = None) -> None:
        names = list(self.extra)
        values = [self._value(self.extra[n]) for n in names]
        key = self.next_id if key is None else key
        columns = ", ".join(["id", "ver", *names])
        marks = ", ".join(["%s"] * (len(names) + 2))
        self.conn.execute(f"INSERT INTO {self.ref} ({columns}) VALUES ({marks})", (key, self.next_ver, *values))  # type: ignore[arg-type]
        self.next_id = max(self.next_id, key + 1)
        self.next_ver += 1

    def _some_key(self) -> int:
        return self.rng.randrange(1, self.next_id)

    def write_some(self) -> None:
        """Two inserts, two updates, a delete, and now and then a key deleted and inserted again in one transaction."""
        with self.lock:
            for _ in range(2):
                self._insert()
            for _ in range(2):
                name = self.rng.choice([None, *self.extra])
                if name is None:  # only ver: a large text value is left alone (unchanged TOAST)
                    self.conn.execute(
                        f"UPDATE {self.ref} SET ver = %s WHERE id = %s", (self.next_ver, self._some_key())
                    )  # type: ignore[arg-type]
                else:
                    self.conn.execute(
                        f"UPDATE {self.ref} SET ver = %s, {name} = %s WHERE id = %s",  # type: ignore[arg-type]
                        (self.next_ver, self._value(self.extra[name]), self._some_key()),
                    )
                self.next_ver += 1
            self.conn.execute(f"DELETE FROM {self.ref} WHERE id = %s", (self._some_key(),))  # type: ignore[arg-type]
            if self.rng.random() < 0.2:
                key = self._some_key()
                with self.conn.transaction():
                    self.conn.execute(f"DELETE FROM {self.ref} WHERE id = %s", (key,))  # type: ignore[arg-type]
                    self._insert(key)

    # -- the migrator ----------------------------------------------------------------------------------
    def _new_name(self) -> str:
        self.names += 1
        return f"m{self.names}"

    def migrate(self) -> str:
        """One migration of the extra columns, chosen at random among those the table allows now."""
        with self.lock:
            integers = [n for n, kind in self.extra.items() if kind == "integer"]
            allowed = {"add_constant", "add_plain", "rename"}
            if len(self.extra) > 2:
                allowed |= {"drop", "drop_and_add"}
            if integers:
                allowed.add("promote")
            # Every kind in turn (the target at random), so a minute of them holds each kind several times.
            wanted = CYCLE[len(self.migrations) % len(CYCLE)]
            change = wanted if wanted in allowed else self.rng.choice(sorted(allowed))
            t = self.ref
            if change == "add_constant":
                name = self._new_name()
                self._ddl(f"ALTER TABLE {t} ADD COLUMN {name} integer DEFAULT {self.rng.randrange(100)}")
                self.extra[name] = "integer"
            elif change == "add_plain":
                name = self._new_name()
                self._ddl(f"ALTER TABLE {t} ADD COLUMN {name} text")
                self.extra[name] = "text"
            elif change == "rename":
                old, new = self.rng.choice(list(self.extra)), self._new_name()
                self._ddl(f"ALTER TABLE {t} RENAME COLUMN {old} TO {new}")
                self.extra = {new if n == old else n: kind for n, kind in self.extra.items()}
            elif change == "drop":
                name = self.rng.choice(list(self.extra))
                self._ddl(f"ALTER TABLE {t} DROP COLUMN {name}")
                del self.extra[name]
            elif change == "drop_and_add":  # the same name, another column
                name = self.rng.choice(list(self.extra))
                kind = self.rng.choice(["text", "integer"])  # the same type as before, or another
                self._ddl(f"ALTER TABLE {t} DROP COLUMN {name}")
                self._ddl(f"ALTER TABLE {t} ADD COLUMN {name} {kind}")
                self.extra[name] = kind
            else:
                name = self.rng.choice(integers)
                self._ddl(f"ALTER TABLE {t} ALTER COLUMN {name} TYPE bigint")
                self.extra[name] = "bigint"
            self.migrations.append(change)
            return change

    def _ddl(self, sql: str) -> None:
        self.conn.execute(sql)  # type: ignore[arg-type]  # test DDL built from names this class chose

    # -- what the lake must hold -----------------------------------------------------------------------
    def columns(self) -> list[str]:
        with self.lock:
            return ["id", "ver", *self.extra]

    def rows(self, columns: list[str]) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(f"SELECT {', '.join(columns)} FROM {self.ref}").fetchall())  # type: ignore[arg-type]


class Busy(threading.Thread):
    """Calls ``step`` every ``every`` seconds until stopped; a step that fails (a lock timeout, a column renamed under
    it) is counted and the next one tried."""

    def __init__(self, name: str, step: Any, every: float) -> None:
        super().__init__(name=name, daemon=True)
        self.step, self.every = step, every
        self.steps = self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.step()
                self.steps += 1
            except Exception:
                self.failures += 1

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=60)
