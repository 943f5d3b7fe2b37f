"""Eviction on a table tiered from its change stream: old rows leave the hot table and the lake keeps them (the
deletes run in sessions tagged with the table's replication origin, which the stream skips); a user's later update or
delete of a key still in the hot table reaches the lake, a re-inserted evicted key replaces the lake's row, a row
changed while eviction runs stays in the hot table until the lake holds it as it is, and a role that may not use
replication origins fails eviction loudly while the round stays tiered. Real PostgreSQL 15 with wal_level = logical;
the lake is read back with pyiceberg and compared row for row by key with what the hot table held."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundPhase
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.sources.postgres.change_stream_source import EVICTION_ORIGIN
from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn
from airflow_provider_tiering.sources.registry import build_source
from testbed.rounds import lake_of

COLUMNS = ("id", "name", "amount", "created_at")
NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=10)  # beyond the retention of a day
ORIGIN_FUNCTIONS = (
    "pg_replication_origin_create(text)",
    "pg_replication_origin_session_setup(text)",
    "pg_replication_origin_session_reset()",
)


def spec_of(name: str, *, evict: bool = True, batch_rows: int = 40) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"kind": "postgres_cdc", "conn_id": "hot", "table": name},
            "lake": {"namespace": "it", "table": name},
            "eviction": {
                "enabled": evict,
                "retention_seconds": 86400,
                "age_column": "created_at",
                "batch_rows": batch_rows,
            },
        }
    )


@pytest.fixture
def hot(pg_server, request):
    name = "ev_" + request.node.name.split("[")[0].removeprefix("test_")[:36]
    conn = psycopg.connect(pg_server.dsn, autocommit=True)
    conn.execute("SET synchronous_commit = on")  # a change stream reads only flushed WAL
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), "
            "created_at timestamptz NOT NULL)"
        ).format(sql.Identifier(name))
    )
    yield name, conn
    slot = f"tiering_public_{name}"
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
        (slot,),
    )
    conn.execute(
        "SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = %s",
        (f"{EVICTION_ORIGIN}_{slot}",),
    )
    conn.close()


def insert(conn: psycopg.Connection[Any], table: str, ids: range, created_at: datetime, tag: str = "row") -> None:
    with conn.transaction():
        for key in ids:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(sql.Identifier(table)),
                (key, f"{tag} {key}", Decimal(key) / 4, created_at + timedelta(seconds=key)),
            )


def hot_by_key(conn: psycopg.Connection[Any], table: str) -> dict[int, tuple[Any, ...]]:
    query = sql.SQL("SELECT id, name, amount, created_at FROM {}").format(sql.Identifier(table))
    return {row[0]: tuple(row) for row in conn.execute(query).fetchall()}


def lake_by_key(catalog_properties: dict[str, str], table: str) -> dict[int, tuple[Any, ...]]:
    """The lake's rows read with pyiceberg alone, by key (a key held twice fails)."""
    rows = load_catalog("default", **catalog_properties).load_table(("it", table)).scan().to_arrow().to_pylist()
    found: dict[int, tuple[Any, ...]] = {}
    for row in rows:
        assert row["id"] not in found, f"the lake holds key {row['id']} twice"
        found[row["id"]] = tuple(row[c] for c in COLUMNS)
    return found


def assert_same(found: dict[int, tuple[Any, ...]], expected: dict[int, tuple[Any, ...]]) -> None:
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    differ = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    assert not (missing or extra or differ), (
        f"missing keys {missing[:10]}, extra keys {extra[:10]}, differing rows {differ[:10]}"
        + ("" if not differ else f" (first: expected {expected[differ[0]]}, lake {found[differ[0]]})")
    )


def slot_lsn(conn: psycopg.Connection[Any], slot: str) -> int:
    query = "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s"
    return parse_lsn(conn.execute(query, (slot,)).fetchone()[0])


def tier(spec, dsn, catalog_properties, writer, store, **kwargs):
    source = build_source(spec.source, ConnectionInfo.from_uri(dsn))
    return run_round(spec, source, lake_of(spec, catalog_properties), writer, store, **kwargs)


def test_evicted_rows_stay_in_the_lake_and_later_changes_of_kept_keys_reach_it(
    pg_server, hot, tmp_path, catalog_properties, local_writer
):
    name, conn = hot
    spec = spec_of(name)
    store = JsonFileStateStore(tmp_path / "state.json")
    insert(conn, name, range(1, 201), OLD)
    insert(conn, name, range(201, 301), NOW)
    original = hot_by_key(conn, name)

    first = tier(spec, pg_server.dsn, catalog_properties, local_writer, store)
    assert first.outcome is RoundOutcome.TIERED and first.metrics.rows == 300
    assert first.metrics.evicted_rows == 200
    assert sorted(hot_by_key(conn, name)) == list(range(201, 301))
    assert_same(lake_by_key(catalog_properties, name), original)
    state = store.load()
    assert state.eviction_note is None and state.evicted_rows_total == 200

    # The stream since the lake's LSN holds eviction's transactions only: a round of no rows moves the lake's LSN
    # past them (the slot follows, never ahead of the lake).
    slot = f"tiering_public_{name}"
    moved = tier(spec, pg_server.dsn, catalog_properties, local_writer, store)
    assert moved.outcome is RoundOutcome.TIERED and moved.metrics.rows == 0 and moved.metrics.deleted_rows == 0
    assert parse_lsn(moved.end_offsets["lsn"]) > parse_lsn(first.end_offsets["lsn"])
    assert slot_lsn(conn, slot) == parse_lsn(moved.end_offsets["lsn"])
    assert_same(lake_by_key(catalog_properties, name), original)

    # The application carries on: changes of keys still hot, and of evicted keys.
    table = sql.Identifier(name)
    conn.execute(sql.SQL("UPDATE {} SET name = 'changed', amount = 1.5 WHERE id = 250").format(table))
    assert conn.execute(sql.SQL("DELETE FROM {} WHERE id = 260").format(table)).rowcount == 1
    assert conn.execute(sql.SQL("DELETE FROM {} WHERE id = 10").format(table)).rowcount == 0  # evicted: no-op
    assert conn.execute(sql.SQL("UPDATE {} SET name = 'x' WHERE id = 11").format(table)).rowcount == 0
    insert(conn, name, range(20, 21), NOW, tag="again")  # an evicted key inserted again
    insert(conn, name, range(301, 302), NOW)

    second = tier(spec, pg_server.dsn, catalog_properties, local_writer, store)
    assert second.outcome is RoundOutcome.TIERED
    # The round applied the user's changes only: eviction's 200 deletes were skipped by the stream.
    assert second.metrics.deleted_rows == 1
    assert second.metrics.inserted_rows + second.metrics.updated_rows == 3  # 301 new; 250 changed, 20 replaced
    assert second.metrics.evicted_rows == 0
    now_hot = hot_by_key(conn, name)
    assert now_hot[20][1] == "again 20" and 260 not in now_hot and now_hot[250][1] == "changed"
    expected = {k: v for k, v in original.items() if k <= 200 and k != 20} | now_hot
    lake = lake_by_key(catalog_properties, name)
    assert_same(lake, expected)
    assert lake[20][1] == "again 20" and 260 not in lake and lake[10] == original[10]
    assert len(lake) == 300  # 200 evicted (one replaced) + 101 hot - the deleted one

    # Later rounds keep it so, and evict what ages past the retention only (nothing here).
    conn.execute(sql.SQL("UPDATE {} SET amount = 2 WHERE id = 20").format(table))
    third = tier(spec, pg_server.dsn, catalog_properties, local_writer, store)
    assert third.outcome is RoundOutcome.TIERED and third.metrics.evicted_rows == 0
    assert_same(lake_by_key(catalog_properties, name), expected | hot_by_key(conn, name))


def test_a_row_changed_while_eviction_runs_stays_hot_until_the_lake_holds_it(
    pg_server, hot, tmp_path, catalog_properties, local_writer
):
    name, conn = hot
    spec = spec_of(name)
    store = JsonFileStateStore(tmp_path / "state.json")
    insert(conn, name, range(1, 101), OLD)
    table = sql.Identifier(name)
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def concurrent_update() -> None:
        try:
            with psycopg.connect(pg_server.dsn, autocommit=True) as other:
                other.execute("SET synchronous_commit = on")
                with other.transaction():
                    other.execute(sql.SQL("UPDATE {} SET name = 'during' WHERE id = 7").format(table))
                    locked.set()
                    release.wait(timeout=3)  # eviction's batch waits for this row's lock meanwhile
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            locked.set()

    thread = threading.Thread(target=concurrent_update, daemon=True)

    def between_commit_and_eviction(phase: RoundPhase) -> None:
        if phase is RoundPhase.CLEANED:
            # Committed after the lake's LSN: the lake holds the old version.
            conn.execute(sql.SQL("UPDATE {} SET name = 'before' WHERE id = 5").format(table))
            thread.start()
            assert locked.wait(timeout=10)
            threading.Timer(1.5, release.set).start()

    first = tier(spec, pg_server.dsn, catalog_properties, local_writer, store, observe=between_commit_and_eviction)
    thread.join(timeout=10)
    assert not errors, errors
    assert first.outcome is RoundOutcome.TIERED
    assert first.metrics.evicted_rows == 98
    left = hot_by_key(conn, name)
    assert sorted(left) == [5, 7] and left[5][1] == "before" and left[7][1] == "during"
    assert "2 row(s) older than the retention kept in the hot store" in store.load().eviction_note
    lake = lake_by_key(catalog_properties, name)
    assert len(lake) == 100 and lake[5][1] == "row 5" and lake[7][1] == "row 7"

    second = tier(spec, pg_server.dsn, catalog_properties, local_writer, store)
    assert second.outcome is RoundOutcome.TIERED and second.metrics.updated_rows == 2
    assert second.metrics.evicted_rows == 2 and hot_by_key(conn, name) == {}
    assert store.load().eviction_note is None
    expected = {k: (k, f"row {k}", Decimal(k) / 4, OLD + timedelta(seconds=k)) for k in range(1, 101)}
    expected[5] = (5, "before", *expected[5][2:])
    expected[7] = (7, "during", *expected[7][2:])
    assert_same(lake_by_key(catalog_properties, name), expected)


def test_a_role_that_may_not_use_replication_origins_fails_eviction_loudly(
    pg_server, hot, tmp_path, catalog_properties, local_writer
):
    name, conn = hot
    store = JsonFileStateStore(tmp_path / "state.json")
    insert(conn, name, range(1, 51), OLD)
    # The first round, as the superuser that owns the table, creates the slot and the publication.
    first = tier(spec_of(name, evict=False), pg_server.dsn, catalog_properties, local_writer, store)
    assert first.outcome is RoundOutcome.TIERED

    role = "cdc_evictor"
    dsn = pg_server.create_role(role, "evict-pw", grants=[f'SELECT, UPDATE, DELETE ON public."{name}"'])
    conn.execute(sql.SQL("ALTER ROLE {} WITH REPLICATION").format(sql.Identifier(role)))
    for function in ORIGIN_FUNCTIONS:
        conn.execute(sql.SQL(f"REVOKE EXECUTE ON FUNCTION {function} FROM {{}}").format(sql.Identifier(role)))

    insert(conn, name, range(51, 52), NOW)
    refused = tier(spec_of(name), dsn, catalog_properties, local_writer, store)
    assert refused.outcome is RoundOutcome.TIERED and refused.metrics.evicted_rows == 0
    note = store.load().eviction_note
    assert note.startswith("eviction failed:") and "GRANT EXECUTE ON FUNCTION" in note
    assert "pg_replication_origin_session_setup(text)" in note and "pg_replication_origin_create(text)" in note
    assert len(hot_by_key(conn, name)) == 51
    assert_same(lake_by_key(catalog_properties, name), hot_by_key(conn, name))

    for function in ORIGIN_FUNCTIONS:
        conn.execute(sql.SQL(f"GRANT EXECUTE ON FUNCTION {function} TO {{}}").format(sql.Identifier(role)))
    expected = hot_by_key(conn, name)
    insert(conn, name, range(52, 53), NOW)
    expected |= hot_by_key(conn, name)
    granted = tier(spec_of(name), dsn, catalog_properties, local_writer, store)
    assert granted.outcome is RoundOutcome.TIERED and granted.metrics.evicted_rows == 50
    assert store.load().eviction_note is None
    assert sorted(hot_by_key(conn, name)) == [51, 52]
    assert_same(lake_by_key(catalog_properties, name), expected)
    for function in ORIGIN_FUNCTIONS:
        conn.execute(sql.SQL(f"REVOKE EXECUTE ON FUNCTION {function} FROM {{}}").format(sql.Identifier(role)))
