"""PostgreSQL stream groups: one slot and one publication for many tables, the reader writing each table's changes
to the group's change log, each table applying its own. Real PostgreSQL 15, real pyiceberg; the lake is read back by
key with pyiceberg and the Parquet files (and DuckDB), never with code under test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_stream_reader
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore, JsonFileStreamStateStore
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_reader import GroupReader, ReaderRun
from testbed.changing_table import ChangingTable, assert_lake_equals_hot
from testbed.pg_server import PostgresServer
from testbed.rounds import connections, round_parts

NAMESPACE = "sg"


def group_spec(name: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "conn_id": "hot", "change_log": {"namespace": NAMESPACE}, **options}


def member_spec(table: str, group: dict[str, Any]) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {"kind": "postgres_cdc", "conn_id": "hot", "table": table, "stream": group},
            "lake": {"namespace": NAMESPACE, "table": table},
        }
    )


class Group:
    """A stream group of ``ChangingTable`` tables, its reader and its tables' rounds, run without Airflow."""

    def __init__(self, server: PostgresServer, tmp_path: Path, catalog: dict[str, str], name: str, tables: int,
                 writer: Any, **options: Any) -> None:  # fmt: skip
        self.server, self.tmp_path, self.catalog, self.writer = server, tmp_path, catalog, writer
        self.group = group_spec(name, **options)
        self.hot: dict[str, ChangingTable] = {}
        for number in range(tables):
            self.add(f"{name}_t{number:02d}", rows=20 + number)

    def add(self, table: str, rows: int) -> ChangingTable:
        hot = ChangingTable(self.server.dsn, table, seed=len(self.hot) + 1)
        hot.create()
        hot.insert(rows)
        self.hot[table] = hot
        return hot

    def specs(self) -> list[TableSpec]:
        return [member_spec(table, self.group) for table in self.hot]

    def reader(self) -> GroupReader:
        specs = self.specs()
        return build_stream_reader(
            StreamGroupSpec.parse(self.group), specs, connections(self.connection(), self.catalog),
            JsonFileStreamStateStore(self.tmp_path / f"{self.group['name']}.json"),
        )  # fmt: skip

    def connection(self) -> Any:
        return next(iter(self.hot.values())).connection()

    def read(self) -> ReaderRun:
        return self.reader().run()

    def tier(self, table: str) -> RoundResult:
        spec = member_spec(table, self.group)
        with round_parts(spec, self.hot[table], self.catalog, writer=self.writer) as parts:
            return parts.run(JsonFileStateStore(self.tmp_path / f"{table}.json"))

    def tier_all(self) -> dict[str, RoundResult]:
        return {table: self.tier(table) for table in self.hot}

    def check(self, *, duckdb: bool = False) -> None:
        for table, hot in self.hot.items():
            assert_lake_equals_hot(hot, self.catalog, (NAMESPACE, table), duckdb=duckdb)

    def close(self) -> None:
        for hot in self.hot.values():
            hot.close()
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (StreamGroupSpec.parse(self.group).slot(),),
            )


@pytest.fixture
def group(pg_server: PostgresServer, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any,
          request: pytest.FixtureRequest) -> Iterator[Group]:  # fmt: skip
    name = request.node.name.removeprefix("test_")[:12]
    found = Group(pg_server, tmp_path, catalog_properties, name, 20, local_writer)
    yield found
    found.close()


def qualified(tables: Any) -> set[str]:
    return {f"public.{table}" for table in tables}


def slots_of(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0])


def test_twenty_tables_read_through_one_slot_apply_updates_deletes_and_key_changes(group: Group) -> None:
    slots = slots_of(group.server.dsn)
    first = group.read()
    assert set(first.joined) == qualified(group.hot), first
    assert slots_of(group.server.dsn) == slots + 1, "one slot for the whole group"
    loads = group.tier_all()
    assert all(r.outcome is RoundOutcome.TIERED for r in loads.values()), loads
    group.check()

    busy = list(group.hot)[:6]
    for _ in range(3):
        for table in busy:
            group.hot[table].random_changes(30)
        run = group.read()
        assert set(run.changes) == qualified(busy), run
        rounds = group.tier_all()
        for table, result in rounds.items():
            expected = RoundOutcome.TIERED if table in busy else RoundOutcome.NOTHING_TO_TIER
            assert result.outcome is expected, (table, result)
        group.check()
    counts = {k: sum(group.hot[t].counts[k] for t in busy) for k in ("update", "key_update", "delete", "reinsert")}
    assert all(counts.values()), counts
    group.check(duckdb=True)


def test_a_table_joins_a_running_stream_with_a_writer_and_loses_no_change(group: Group) -> None:
    group.read()
    group.tier_all()
    late = group.add(f"{list(group.hot)[0][:-4]}_late", rows=200)
    writer = ChangingTable(group.server.dsn, late.table, seed=77)
    writer.next_id = 100_000
    stop = threading.Event()

    def keep_changing() -> None:
        while not stop.is_set():
            writer.random_changes(5)
            time.sleep(0.01)

    thread = threading.Thread(target=keep_changing, daemon=True)
    thread.start()
    try:
        run = group.read()
        assert f"public.{late.table}" in run.joined, run
        assert group.tier(late.table).outcome is RoundOutcome.TIERED  # the first load, the writer running
        for _ in range(3):
            group.read()
            group.tier(late.table)
    finally:
        stop.set()
        thread.join()
        writer.close()
    group.read()
    group.tier(late.table)
    assert_lake_equals_hot(late, group.catalog, (NAMESPACE, late.table))


def test_a_table_removed_from_the_group_stops_being_read_and_keeps_its_lake_table(group: Group) -> None:
    group.read()
    group.tier_all()
    gone = list(group.hot)[-1]
    hot = group.hot.pop(gone)
    try:
        run = group.read()
        assert run.left == (f"public.{gone}",), run
        with psycopg.connect(group.server.dsn) as conn:
            published = conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                (StreamGroupSpec.parse(group.group).publication(),),
            ).fetchall()
        assert gone not in {name for (name,) in published}
        hot.random_changes(10)
        assert f"public.{gone}" not in group.read().changes
        lake = load_catalog("default", **group.catalog).load_table((NAMESPACE, gone))
        assert lake.scan().to_arrow().num_rows > 0
    finally:
        hot.close()
