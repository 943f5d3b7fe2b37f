"""One snapshot per round: every split of a PostgreSQL round reads the snapshot exported after the watermark, so a
row updated while the round runs is read exactly once per version; SQLite and MariaDB read a round as one split."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_provider_tiering.core.planner import RangePlan, cut_splits
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.sources.postgres.cursor_source import PostgresSource
from testbed.concurrent_updates import UpdatesBeforeEachSplit, updated_ids
from testbed.hot_tables import PostgresHot, SqliteHot
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.rounds import round_parts

COLUMNS = ["id", "version", "payload", "updated_at"]
ROWS = 4000


def create_versioned_table(dsn: str, table: str) -> None:
    """Rows 1..ROWS at version 1, each with its own update time in the past (the cursor)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{table}" (id int PRIMARY KEY, version int NOT NULL, payload text, '
            "updated_at timestamptz NOT NULL)"
        )
        conn.execute(
            f'INSERT INTO "{table}" SELECT g, 1, md5(g::text), '
            "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 millisecond' FROM generate_series(1, %s) g",
            (ROWS,),
        )


def spec_for(table: str, consistent: bool) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {
                "conn_id": "unused",
                "table": table,
                "cursor_column": "updated_at",
                "max_watermark_wait_seconds": 5,
                "consistent_snapshot": consistent,
            },
            "lake": {"namespace": "it", "table": table},
            "target_rows_per_split": ROWS // 4,
        }
    )


@pytest.mark.parametrize("consistent", [True, False], ids=["one-snapshot", "snapshot-per-split"])
def test_a_row_updated_during_a_multi_split_round_is_read_once_per_version(
    consistent: bool, pg_server: Any, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table = f"versions_{uuid.uuid4().hex[:8]}"
    create_versioned_table(pg_server.dsn, table)
    before = postgres_rows(pg_server.dsn, table, COLUMNS)
    spec = spec_for(table, consistent)
    state = JsonFileStateStore(tmp_path / "state.json")
    record_dir = tmp_path / "updates"
    record_dir.mkdir()
    parts = round_parts(spec, PostgresHot(pg_server.dsn), catalog_properties, writer=spark_writer)
    assert isinstance(parts.source, PostgresSource)
    racing = replace(parts, source=UpdatesBeforeEachSplit(parts.source, record_dir))

    first = racing.run(state)
    moved = updated_ids(record_dir)
    assert first.outcome == "tiered" and first.metrics.splits >= 4 and len(moved) == first.metrics.splits - 1
    after_first = lake_rows(catalog_properties, ("it", table), COLUMNS)
    if consistent:
        # Every split read the table as it was when the round's snapshot was taken: the moved rows' old versions.
        assert digest(after_first) == digest(before)
    else:
        # Each split read its own snapshot: the old versions of the rows moved before their split read are lost.
        assert digest(after_first) == digest(r for r in before if r[0] not in moved)

    second = replace(parts).run(state)
    assert second.outcome == "tiered" and second.metrics.rows == len(moved)
    # Every version the table held at a round's snapshot is in the lake exactly once.
    now = postgres_rows(pg_server.dsn, table, COLUMNS)
    versions = [*before, *(r for r in now if r[0] in moved)] if consistent else now
    lake = lake_rows(catalog_properties, ("it", table), COLUMNS)
    assert len({(r[0], r[1]) for r in lake}) == len(lake)
    assert digest(lake) == digest(versions)


def test_sqlite_reads_a_round_as_one_split_unless_told_its_rows_never_change(tmp_path: Path) -> None:
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    plan = RangePlan(lower=0, upper=10_000, estimated_rows=10_000, capped=False, quantiles=list(range(0, 10_001, 100)))
    for consistent, expected in [(True, 1), (False, len(cut_splits(plan, 1000, 2)))]:
        spec = TableSpec.parse(
            {
                "name": "orders",
                "source": {
                    "conn_id": "unused",
                    "table": "orders",
                    "cursor_column": "id",
                    "consistent_snapshot": consistent,
                },
                "lake": {"namespace": "it", "table": "orders"},
            }
        )
        splits = hot.source(spec.source).cut_splits(plan, 1000, 2)  # type: ignore[arg-type]
        assert len(splits) == expected and (consistent or expected > 1)
        assert (splits[0].lower, splits[-1].upper) == (0, 10_000)
