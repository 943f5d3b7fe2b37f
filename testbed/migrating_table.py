"""A change-stream table whose columns keep changing under a writer, for the tests of a change stream that follows its
table's migrations: ``(id bigint primary key, ver bigint not null, <extra columns>)``, on PostgreSQL
(``MigratingTable``) or MariaDB (``MigratingMariaDBTable``, whose migrations follow a plan a spec can declare).

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


#: MariaDB's migrations: none reuses a name (it keeps no column ids: a name that comes back is another column).
MARIADB_CYCLE = ("add_constant", "rename", "add_plain", "promote", "drop", "rename", "add_constant", "drop")


class MigratingMariaDBTable:
    """The same table on MariaDB, ``(id BIGINT PRIMARY KEY, ver BIGINT NOT NULL, <extra columns>)``, its migrations
    a plan fixed ahead (``plan``) so that a spec can declare its renames and drops before they happen: MariaDB keeps
    no column ids, and a column gone while another is new is refused until declared. No name is ever used twice."""

    def __init__(self, url: str, table: str, *, seed: int = 43, migrations: int = 40) -> None:
        self.url, self.table = url, table
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.conn = self._connect()
        self.extra: dict[str, str] = {}
        self.next_id = self.next_ver = 1
        self.migrations: list[str] = []
        self.plan = self._planned(migrations)

    def _connect(self) -> Any:
        import pymysql

        info = ConnectionInfo.from_uri(self.url)
        return pymysql.connect(
            host=info.host, port=info.port, user=info.login, password=info.password or "", database=info.schema,
            charset="utf8mb4", autocommit=True,
        )  # fmt: skip

    def connection(self) -> ConnectionInfo:
        return ConnectionInfo.from_uri(self.url)

    def close(self) -> None:
        self.conn.close()

    def _planned(self, count: int) -> list[tuple[str, str, str]]:
        """``(migration, column, new name or type)`` for each migration, simulated on the column names."""
        rng = random.Random(self.rng.random())
        columns = dict(START_EXTRA)
        renamed: set[str] = set()
        plan: list[tuple[str, str, str]] = []
        for number in range(count):
            wanted = MARIADB_CYCLE[number % len(MARIADB_CYCLE)]
            integers = [n for n, kind in columns.items() if kind == "integer"]
            unrenamed = [n for n in columns if n not in renamed]
            if wanted == "promote" and not integers or wanted == "drop" and len(columns) <= 2:
                wanted = "add_plain"
            if wanted == "rename" and not unrenamed:
                wanted = "add_constant"
            if wanted in ("add_constant", "add_plain"):
                name, kind = f"m{number}", "integer" if wanted == "add_constant" else "text"
                plan.append((wanted, name, kind))
                columns[name] = kind
            elif wanted == "rename":
                old = rng.choice(unrenamed)
                plan.append((wanted, old, f"{old}_r"))
                columns = {f"{old}_r" if n == old else n: kind for n, kind in columns.items()}
                renamed.add(f"{old}_r")
            elif wanted == "drop":
                name = rng.choice(list(columns))
                plan.append((wanted, name, ""))
                del columns[name]
            else:
                name = rng.choice(integers)
                plan.append((wanted, name, "bigint"))
                columns[name] = "bigint"
        return plan

    def declared(self) -> dict[str, Any]:
        """The spec's declarations of the plan's renames and drops."""
        renamed = {old: new for kind, old, new in self.plan if kind == "rename"}
        dropped = [name for kind, name, _ in self.plan if kind == "drop"]
        return {"renamed_columns": renamed, "dropped_columns": dropped}

    def create(self, rows: int) -> None:
        with self.lock, self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{self.table}`")
            extra = ", ".join(f"`{name}` {kind}" for name, kind in START_EXTRA.items())
            cur.execute(f"CREATE TABLE `{self.table}` (id BIGINT PRIMARY KEY, ver BIGINT NOT NULL, {extra})")
            self.extra = dict(START_EXTRA)
            for _ in range(rows):
                self._insert(cur)

    def _value(self, kind: str) -> Any:
        if kind in ("integer", "bigint"):
            return self.rng.randrange(-1000, 1000) if self.rng.random() > 0.1 else None
        return f"t{self.rng.randrange(10**6)}" if self.rng.random() > 0.1 else None

    def _insert(self, cur: Any, key: int | None = None) -> None:
        names = list(self.extra)
        key = self.next_id if key is None else key
        columns = ", ".join(["id", "ver", *(f"`{n}`" for n in names)])
        marks = ", ".join(["%s"] * (len(names) + 2))
        values = (key, self.next_ver, *(self._value(self.extra[n]) for n in names))
        cur.execute(f"INSERT INTO `{self.table}` ({columns}) VALUES ({marks})", values)
        self.next_id = max(self.next_id, key + 1)
        self.next_ver += 1

    def write_some(self) -> None:
        """Two inserts, two updates, a delete, and now and then a key deleted and inserted again in one transaction."""
        with self.lock, self.conn.cursor() as cur:
            for _ in range(2):
                self._insert(cur)
            for _ in range(2):
                name = self.rng.choice([None, *self.extra])
                key = self.rng.randrange(1, self.next_id)
                if name is None:
                    cur.execute(f"UPDATE `{self.table}` SET ver = %s WHERE id = %s", (self.next_ver, key))
                else:
                    value = self._value(self.extra[name])
                    cur.execute(
                        f"UPDATE `{self.table}` SET ver = %s, `{name}` = %s WHERE id = %s", (self.next_ver, value, key)
                    )
                self.next_ver += 1
            cur.execute(f"DELETE FROM `{self.table}` WHERE id = %s", (self.rng.randrange(1, self.next_id),))
            if self.rng.random() < 0.2:
                key = self.rng.randrange(1, self.next_id)
                self.conn.begin()
                cur.execute(f"DELETE FROM `{self.table}` WHERE id = %s", (key,))
                self._insert(cur, key)
                self.conn.commit()

    def migrate(self) -> str:
        """The plan's next migration."""
        with self.lock, self.conn.cursor() as cur:
            kind, name, other = self.plan[len(self.migrations)]
            t = f"`{self.table}`"
            if kind == "add_constant":
                cur.execute(f"ALTER TABLE {t} ADD COLUMN `{name}` INT DEFAULT {self.rng.randrange(100)}")
                self.extra[name] = "integer"
            elif kind == "add_plain":
                cur.execute(f"ALTER TABLE {t} ADD COLUMN `{name}` TEXT")
                self.extra[name] = "text"
            elif kind == "rename":
                cur.execute(f"ALTER TABLE {t} RENAME COLUMN `{name}` TO `{other}`")
                self.extra = {other if n == name else n: k for n, k in self.extra.items()}
            elif kind == "drop":
                cur.execute(f"ALTER TABLE {t} DROP COLUMN `{name}`")
                del self.extra[name]
            else:
                cur.execute(f"ALTER TABLE {t} MODIFY COLUMN `{name}` BIGINT")
                self.extra[name] = "bigint"
            self.migrations.append(kind)
            return kind

    def columns(self) -> list[str]:
        with self.lock:
            return ["id", "ver", *self.extra]

    def rows(self, columns: list[str]) -> list[tuple[Any, ...]]:
        with self.lock, self.conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM `{self.table}`")
            return list(cur.fetchall())
