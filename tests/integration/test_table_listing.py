"""A declared database's listing on a real PostgreSQL (and SQLite): one query for every table, its columns and key,
and a fingerprint that moves with every change a round must see, committed after the listing or not yet flushed to
the statistics when it ran; and never with a rolled-back read."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.discovery import ColumnKind, Listing
from airflow_provider_tiering.sources.registry import build_table_lister

SCHEMA = "listing_s"


@pytest.fixture
def pg(pg_server: Any) -> Iterator[Any]:
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.orders (id bigint PRIMARY KEY, note text, updated_at timestamptz)")
        conn.execute(f"CREATE TABLE {SCHEMA}.events (id int NOT NULL, at date, body jsonb)")
        conn.execute(f"CREATE TABLE {SCHEMA}.parts (id bigint, day date) PARTITION BY RANGE (day)")
        conn.execute(f"CREATE TABLE {SCHEMA}.parts_1 PARTITION OF {SCHEMA}.parts FOR VALUES FROM ('2020-01-01') "
                     "TO ('2030-01-01')")  # fmt: skip
    yield pg_server
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def listing(server: Any) -> Listing:
    return build_table_lister(
        "d", ConnectionInfo.from_uri(server.dsn.replace("postgresql://", "postgres://"))
    ).list_tables([SCHEMA])


def fingerprints(server: Any) -> dict[str, str | None]:
    return {t.table: t.fingerprint for t in listing(server).tables}


def settled_fingerprints(server: Any, before: dict[str, str | None], table: str) -> dict[str, str | None]:
    """The listing once ``table``'s fingerprint has moved (the statistics reach shared memory within seconds)."""
    deadline = time.monotonic() + 15
    while True:
        found = fingerprints(server)
        if found[table] != before[table] or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_one_query_lists_tables_columns_keys_and_not_the_partitions(pg: Any) -> None:
    found = {t.table: t for t in listing(pg).tables}
    assert set(found) == {"orders", "events", "parts"}  # a partition is its parent's
    orders, events = found["orders"], found["events"]
    assert orders.schema == SCHEMA and orders.primary_key == ("id",)
    assert [(c.name, c.kind) for c in orders.columns] == [
        ("id", ColumnKind.INTEGER), ("note", ColumnKind.OTHER), ("updated_at", ColumnKind.TEMPORAL),
    ]  # fmt: skip
    assert events.primary_key == () and events.columns[0].not_null and events.columns[1].kind is ColumnKind.TEMPORAL
    assert found["parts"].fingerprint is None  # its rows are counted on its partitions: always "maybe"


@pytest.mark.parametrize(
    "change",
    [
        "INSERT INTO {t} VALUES (1, 'a', now())",
        "UPDATE {t} SET note = 'b' WHERE id = 0",
        "DELETE FROM {t} WHERE id = 0",
        "TRUNCATE {t}",
        "ALTER TABLE {t} ADD COLUMN extra int DEFAULT 7",
        "ALTER TABLE {t} RENAME COLUMN note TO remark",
    ],
)
def test_every_change_a_round_must_see_moves_the_fingerprint(pg: Any, change: str) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SCHEMA}.orders VALUES (0, 'z', now())")
    before = settled_fingerprints(pg, {"orders": None}, "orders")
    time.sleep(1.2)  # past the statistics' flush interval: the listing has seen the insert above
    assert fingerprints(pg) == before
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(change.format(t=f"{SCHEMA}.orders"))
    after = settled_fingerprints(pg, before, "orders")
    assert after["orders"] != before["orders"]
    assert after["events"] == before["events"]  # a sibling's change leaves this table idle


def test_a_transaction_open_during_the_listing_moves_a_later_one(pg: Any) -> None:
    before = fingerprints(pg)
    with psycopg.connect(pg.dsn) as writer:
        writer.execute(f"INSERT INTO {SCHEMA}.orders VALUES (5, 'in flight', now())")
        assert fingerprints(pg)["orders"] == before["orders"]  # not committed: nothing a round could read yet
        writer.commit()
    assert settled_fingerprints(pg, before, "orders")["orders"] != before["orders"]


def test_a_table_the_role_cannot_read_is_listed_as_such_not_left_out(pg: Any) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS listing_reader")
        conn.execute("CREATE ROLE listing_reader LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO listing_reader")
        conn.execute(f"GRANT SELECT ON {SCHEMA}.orders TO listing_reader")
    try:
        uri = f"postgres://listing_reader:pw@127.0.0.1:{pg.port}/{pg.dbname}"
        found = {t.table: t for t in build_table_lister("d", ConnectionInfo.from_uri(uri)).list_tables([SCHEMA]).tables}
        assert found["orders"].unreadable is None
        assert found["events"].unreadable == "the connection's role may not SELECT it"
    finally:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON SCHEMA {SCHEMA} FROM listing_reader")
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM listing_reader")
            conn.execute("DROP ROLE listing_reader")


def test_sqlite_lists_its_tables_blind(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, updated_at TIMESTAMP, note TEXT)")
        conn.execute("CREATE TABLE notes (body TEXT)")
    found = build_table_lister("d", ConnectionInfo("sqlite", host=str(path))).list_tables(None)
    assert found.blind is not None and "no change counters" in found.blind
    tables = {t.table: t for t in found.tables}
    assert tables["orders"].primary_key == ("id",) and tables["orders"].fingerprint is None
    assert [c.kind for c in tables["orders"].columns] == [ColumnKind.INTEGER, ColumnKind.TEMPORAL, ColumnKind.OTHER]


def test_mariadb_lists_its_tables_with_a_fingerprint_that_moves_with_each_commit(mariadb_server: Any) -> None:
    import pymysql

    def run(sql: str) -> None:
        with pymysql.connect(host=mariadb_server.host, port=mariadb_server.port, user=mariadb_server.user,
                             password=mariadb_server.password, database=mariadb_server.database,
                             autocommit=True) as conn, conn.cursor() as cursor:  # fmt: skip
            cursor.execute(sql)

    run("DROP TABLE IF EXISTS lst_orders, lst_notes")
    run("CREATE TABLE lst_orders (id BIGINT PRIMARY KEY, note TEXT, updated_at DATETIME(6))")
    run("CREATE TABLE lst_notes (body TEXT)")
    lister = build_table_lister("d", ConnectionInfo.from_uri(mariadb_server.url))

    def orders() -> Any:
        return next(t for t in lister.list_tables(None).tables if t.table == "lst_orders")

    found = orders()
    assert found.schema is None and found.primary_key == ("id",)
    assert [c.kind for c in found.columns] == [ColumnKind.INTEGER, ColumnKind.OTHER, ColumnKind.TEMPORAL]
    run("INSERT INTO lst_orders VALUES (1, 'a', NOW(6))")
    assert orders().fingerprint is None  # stamped within the last seconds: "maybe"
    time.sleep(3.5)  # UPDATE_TIME counts whole seconds: past the two the listing cannot tell
    settled = orders().fingerprint
    assert settled is not None and orders().fingerprint == settled
    run("UPDATE lst_orders SET note = 'b'")
    time.sleep(3.5)  # UPDATE_TIME counts whole seconds: past the two the listing cannot tell
    assert orders().fingerprint not in (None, settled)
    assert lister.list_tables(None).stream_kind == "mysql_cdc"
    run("DROP TABLE lst_orders, lst_notes")
