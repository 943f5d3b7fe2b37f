"""The PostgreSQL safe high watermark: a row committed out of cursor order still reaches the lake."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.hot_tables import COLUMNS, PostgresHot, make_rows
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def spec_for(table: str, wait: float) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "unused", "table": table, "cursor_column": "id", "max_watermark_wait_seconds": wait},
            "lake": {"namespace": "it", "table": table},
        }
    )


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
    assert state.load().watermark_blockers[0]["age_seconds"] >= 0
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
    long_running.execute("SELECT 1")  # an open (idle in transaction) session that never ends during the test
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
