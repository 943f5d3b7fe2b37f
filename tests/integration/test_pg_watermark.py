"""The PostgreSQL safe high watermark: a row committed out of cursor order still reaches the lake, whatever role
reads the hot table, and only transactions that can write the table hold it back."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed import hot_writers
from testbed.hot_tables import COLUMNS, PostgresHot, make_rows
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.rounds import round_parts


def spec_for(table: str, wait: float, **source: Any) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {
                "conn_id": "unused",
                "table": table,
                "cursor_column": "id",
                "max_watermark_wait_seconds": wait,
                **source,
            },
            "lake": {"namespace": "it", "table": table},
        }
    )


def select_only_role(pg_server, *tables: str, grants: tuple[str, ...] = ()) -> PostgresHot:
    """The hot tables as seen by a role that may only SELECT them (no superuser, no pg_read_all_stats)."""
    password = "tierer-" + uuid.uuid4().hex[:8]
    selects = [f'SELECT ON public."{table}"' for table in tables]
    return PostgresHot(pg_server.create_role("tierer", password, [*selects, *grants]))


def open_insert(dsn: str, table: str, row_id: int) -> psycopg.Connection:
    """A transaction that has inserted a row (a small cursor value) and has not committed yet."""
    conn = psycopg.connect(dsn)
    conn.execute(f'INSERT INTO "{table}" VALUES (%s, %s, %s, %s, %s)', make_rows(row_id, 1)[0])
    return conn


def rounds_of(table: str, wait: float, pg_server, catalog_properties, spark_writer, state_path):
    """A fresh hot table with rows 1..10, and a function that runs one round of it."""
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 10)
    spec = spec_for(table, wait)
    state = JsonFileStateStore(state_path)

    def round_():
        return round_parts(spec, hot, catalog_properties, writer=spark_writer).run(state)

    return hot, state, round_


def test_row_committed_out_of_order_is_not_lost(pg_server, catalog_properties, spark_writer, tmp_path):
    table = "out_of_order"
    hot, state, round_ = rounds_of(table, 1.0, pg_server, catalog_properties, spark_writer, tmp_path / "s.json")
    assert round_().end_offsets == {"cursor": 10}
    slow = open_insert(pg_server.dsn, table, 11)  # takes cursor 11, commits late
    hot.insert(table, 12, 1)  # cursor 12 commits first
    blocked = round_()
    # A naive max(cursor) round would tier up to 12 now and never see 11.
    assert blocked.outcome == "nothing_to_tier"
    assert blocked.blockers and blocked.blockers[0]["pid"] == slow.info.backend_pid
    assert 0 < state.load().watermark_blockers[0]["age_seconds"] < 300  # opened before the round, seconds ago
    slow.commit()
    slow.close()
    caught_up = round_()
    assert caught_up.outcome == "tiered" and caught_up.end_offsets == {"cursor": 12}
    assert caught_up.metrics.rows == 2
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))
    assert state.load().watermark_blockers == []


def test_round_waits_for_a_transaction_that_ends_within_the_wait(pg_server, catalog_properties, spark_writer, tmp_path):
    table = "late_commit"
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 10)
    slow = open_insert(pg_server.dsn, table, 11)
    hot.insert(table, 12, 1)
    threading.Timer(1.5, lambda: (slow.commit(), slow.close())).start()
    spec = spec_for(table, wait=30.0)
    parts = round_parts(spec, hot, catalog_properties, writer=spark_writer)
    started = time.monotonic()
    result = parts.run(JsonFileStateStore(tmp_path / "s.json"))
    assert time.monotonic() - started >= 1.0
    assert result.end_offsets == {"cursor": 12} and result.metrics.rows == 12
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_long_transaction_lets_the_round_tier_up_to_the_last_safe_point(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    table = "last_safe_point"
    hot, state, round_ = rounds_of(table, 0.5, pg_server, catalog_properties, spark_writer, tmp_path / "s.json")
    assert round_().end_offsets == {"cursor": 10}

    first_blocker = open_insert(pg_server.dsn, table, 11)
    hot.insert(table, 12, 3)
    assert round_().outcome == "nothing_to_tier"  # observes 14 while the first blocker is open
    first_blocker.commit()
    first_blocker.close()
    long_running = psycopg.connect(pg_server.dsn)
    # A transaction that has written the table (it holds a lock to write it) and never ends during the test.
    long_running.execute(f'UPDATE "{table}" SET note = note WHERE id = 1')
    hot.insert(table, 15, 5)
    result = round_()
    # 19 cannot be proven safe (the long transaction may still write below it), but 14 can:
    # every transaction open when 14 was observed has ended.
    assert result.outcome == "tiered" and result.end_offsets == {"cursor": 14}
    assert result.blockers and result.blockers[0]["pid"] == long_running.info.backend_pid
    long_running.rollback()
    long_running.close()
    assert round_().end_offsets == {"cursor": 19}
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_another_roles_late_commit_reaches_the_lake_through_a_select_only_role(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    """The reproduction: another role's transaction takes id 3 and commits after id 4; every row is tiered."""
    table = "select_only"
    admin = PostgresHot(pg_server.dsn)
    admin.create(table)
    admin.insert(table, 1, 2)
    tierer = select_only_role(pg_server, table)
    spec = spec_for(table, 0.5)
    state = JsonFileStateStore(tmp_path / "s.json")

    def round_():
        return round_parts(spec, tierer, catalog_properties, writer=spark_writer).run(state)

    assert round_().end_offsets == {"cursor": 2}
    slow = open_insert(pg_server.dsn, table, 3)
    admin.insert(table, 4, 1)
    held = round_()
    assert held.outcome == "nothing_to_tier"
    assert held.blockers and held.blockers[0]["pid"] == slow.info.backend_pid
    slow.commit()
    slow.close()
    assert round_().end_offsets == {"cursor": 4}
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(admin.rows(table))


def test_concurrent_late_commits_of_another_role_all_reach_the_lake(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    """A steady writer and a laggard (transactions held open up to 8 s) of another role, while a SELECT-only role
    runs round after round: every acknowledged row ends in the lake exactly once."""
    table = "select_only_writers"
    hot_writers.create_hot_table(pg_server.dsn, table)
    tierer = select_only_role(pg_server, table)
    spec = spec_for(table, 1.0)
    state = JsonFileStateStore(tmp_path / "s.json")
    writers = hot_writers.Writers(pg_server.dsn, [table], seed=random.randrange(10**6))
    writers.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            round_parts(spec, tierer, catalog_properties, writer=spark_writer).run(state)
    finally:
        writers.stop()
    for _ in range(3):  # the last laggard has committed: the next round is free to catch up
        result = round_parts(spec, tierer, catalog_properties, writer=spark_writer).run(state)
        if not result.blockers:
            break
    lake = lake_rows(catalog_properties, ("it", table), hot_writers.COLUMNS)
    acknowledged = writers.acknowledged(table)
    assert len(acknowledged) > 100 and writers.outcomes()["committed"] > 10
    lake_ids = [row[0] for row in lake]
    assert len(lake_ids) == len(set(lake_ids)), "a row was tiered twice"
    assert set(acknowledged) <= set(lake_ids), f"{len(set(acknowledged) - set(lake_ids))} rows lost"
    assert digest(lake) == digest(postgres_rows(pg_server.dsn, table, hot_writers.COLUMNS))


def test_an_idle_transaction_that_only_read_does_not_hold_the_table_back(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    table, other = "idle_reader", "idle_reader_other"
    hot, state, round_ = rounds_of(table, 30.0, pg_server, catalog_properties, spark_writer, tmp_path / "s.json")
    hot.create(other)
    reader = psycopg.connect(pg_server.dsn)  # idle in transaction for the whole round
    reader.execute(f'SELECT count(*) FROM "{other}"')
    reader.execute(f'SELECT count(*) FROM "{table}"')
    try:
        hot.insert(table, 11, 5)
        started = time.monotonic()
        result = round_()
        # Waiting for the reader would have taken the whole 30 s wait and tiered nothing.
        assert result.outcome == "tiered" and result.end_offsets == {"cursor": 15}
        assert result.blockers == [] and time.monotonic() - started < 30
    finally:
        reader.rollback()
        reader.close()
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_a_prepared_transaction_holds_the_watermark_until_it_commits(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    table = "prepared"
    hot, state, round_ = rounds_of(table, 0.5, pg_server, catalog_properties, spark_writer, tmp_path / "s.json")
    gid = f"tier-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as two_phase:
        two_phase.execute("BEGIN")
        two_phase.execute(f'INSERT INTO "{table}" VALUES (%s, %s, %s, %s, %s)', make_rows(11, 1)[0])
        two_phase.execute(f"PREPARE TRANSACTION '{gid}'")
    # The session is gone; only the prepared transaction (and its lock) is left.
    try:
        hot.insert(table, 12, 1)
        held = round_()
        assert held.outcome == "nothing_to_tier"
        assert held.blockers == [
            {
                "pid": None,
                "transaction_start": held.blockers[0]["transaction_start"],
                "age_seconds": held.blockers[0]["age_seconds"],
                "prepared": gid,
            }
        ]
        assert held.blockers[0]["transaction_start"] is not None
    finally:
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            conn.execute(f"COMMIT PREPARED '{gid}'")
    result = round_()
    assert result.outcome == "tiered" and result.end_offsets == {"cursor": 12} and result.metrics.rows == 12
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_an_app_assigned_timestamp_committed_late_within_the_settle_lag_is_tiered(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    """The application stamps ``created_at`` itself, before its transaction begins: no open transaction tells the
    round that an earlier stamp is still on its way, only the settle lag covers it."""
    table = "app_stamped"
    lag = 4.0
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 10)  # stamped weeks ago: settled
    spec = spec_for(table, 0.5, cursor_column="created_at", settle_lag_seconds=lag)
    state = JsonFileStateStore(tmp_path / "s.json")

    def round_():
        return round_parts(spec, hot, catalog_properties, writer=spark_writer).run(state)

    def insert_stamped(row_id: int, stamp: datetime) -> None:
        row = (*make_rows(row_id, 1)[0][:3], stamp, "stamped by the app")
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            conn.execute(f'INSERT INTO "{table}" VALUES (%s, %s, %s, %s, %s)', row)

    assert round_().metrics.rows == 10
    late_stamp = datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as the column holds
    insert_stamped(12, late_stamp + timedelta(milliseconds=300))  # stamped later, committed first
    early = round_()
    assert early.outcome == "nothing_to_tier", "a stamp younger than the settle lag was tiered"
    insert_stamped(11, late_stamp)  # stamped earlier, committed later: below the newest visible stamp
    time.sleep(max(0.0, lag + 0.5 - (datetime.now(UTC).replace(tzinfo=None) - late_stamp).total_seconds()))
    settled = round_()
    assert settled.outcome == "tiered" and settled.metrics.rows == 2
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_a_time_cursor_read_by_a_role_that_cannot_see_transaction_starts_fails_naming_the_grant(
    pg_server, catalog_properties, spark_writer, tmp_path
):
    table = "time_cursor_narrow"
    admin = PostgresHot(pg_server.dsn)
    admin.create(table)
    admin.insert(table, 1, 5)
    spec = spec_for(table, 0.5, cursor_column="created_at")
    state = JsonFileStateStore(tmp_path / "s.json")
    narrow = select_only_role(pg_server, table)
    with pytest.raises(SourceError, match="GRANT pg_read_all_stats"):
        round_parts(spec, narrow, catalog_properties, writer=spark_writer).run(state)
    failed = state.load()
    assert failed.status is TableStatus.FAILED and "pg_read_all_stats" in (failed.last_error or "")
    granted = select_only_role(pg_server, table, grants=("pg_read_all_stats",))
    result = round_parts(spec, granted, catalog_properties, writer=spark_writer).run(state)
    assert result.outcome == "tiered" and result.metrics.rows == 5
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(admin.rows(table))
