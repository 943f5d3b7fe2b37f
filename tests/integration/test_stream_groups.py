"""Stream groups on PostgreSQL (one slot and one publication for many tables) and on MariaDB (one binlog dump): the
reader writes each table's changes to the group's change log, each table applies its own. Real PostgreSQL 15 and
MariaDB 10.11, real pyiceberg; the lake is read back by key with pyiceberg and the Parquet files (and DuckDB), never
with code under test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from testbed.changing_table import assert_lake_equals_hot
from testbed.rounds import round_parts
from testbed.stream_groups import NAMESPACE, Group, member_spec


@pytest.fixture(params=["postgres", "mariadb"])
def group(request: pytest.FixtureRequest, tmp_path: Path, catalog_properties: dict[str, str],
          local_writer: Any) -> Iterator[Group]:  # fmt: skip
    """A stream group of 20 tables, on PostgreSQL or on MariaDB."""
    mariadb = request.param == "mariadb"
    server = request.getfixturevalue("mariadb_server" if mariadb else "pg_server")
    name = request.node.name.removeprefix("test_")[:10] + ("_m" if mariadb else "_p")
    found = Group(server, tmp_path, catalog_properties, name, 20, local_writer, mariadb=mariadb)
    yield found
    found.close()


def slots_of(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0])


def test_twenty_tables_read_through_one_log_apply_updates_deletes_and_key_changes(group: Group) -> None:
    slots = None if group.mariadb else slots_of(group.server.dsn)
    first = group.read()
    assert set(first.joined) == group.qualified(group.hot), first
    if slots is not None:
        assert slots_of(group.server.dsn) == slots + 1, "one slot for the whole group"
    loads = group.tier_all()
    assert all(r.outcome is RoundOutcome.TIERED for r in loads.values()), loads
    group.check()

    busy = list(group.hot)[:6]
    for _ in range(3):
        for table in busy:
            group.hot[table].random_changes(30)
        run = group.read()
        assert set(run.changes) == group.qualified(busy), run
        rounds = group.tier_all()
        for table, result in rounds.items():
            expected = RoundOutcome.TIERED if table in busy else RoundOutcome.NOTHING_TO_TIER
            assert result.outcome is expected, (table, result)
        group.check()
    counts = {k: sum(group.hot[t].counts[k] for t in busy) for k in ("update", "key_update", "delete", "reinsert")}
    assert all(counts.values()), counts
    group.check(duckdb=True)


def test_a_reader_run_keeps_one_connection_for_its_steps(group: Group, monkeypatch: pytest.MonkeyPatch) -> None:
    group.read()
    group.tier_all()
    if group.mariadb:
        from airflow_provider_tiering.sources.mysql import connections as driver
    else:
        driver = psycopg  # type: ignore[assignment]
    opened: list[object] = []
    real = driver.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "connect", connect)
    for table in list(group.hot)[:3]:
        group.hot[table].random_changes(10)
    run = group.read()
    assert run.changes and run.snapshot_id is not None, run
    # Its checks, positions, slot and status on one (it was seven, one a step); MariaDB's binlog dump has its own.
    assert len(opened) == (2 if group.mariadb else 1), opened


def test_a_table_joins_a_running_stream_with_a_writer_and_loses_no_change(group: Group) -> None:
    group.read()
    group.tier_all()
    late = group.add(f"{list(group.hot)[0][:-4]}_late", rows=200)
    writer = group.new_table(late.table, seed=77)
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
        assert group.qualified([late.table]) <= set(run.joined), run
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
        assert set(run.left) == group.qualified([gone]), run
        if not group.mariadb:
            with psycopg.connect(group.server.dsn) as conn:
                published = conn.execute(
                    "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                    (StreamGroupSpec.parse(group.group).publication(),),
                ).fetchall()
            assert gone not in {name for (name,) in published}
        hot.random_changes(10)
        assert not group.qualified([gone]) & set(group.read().changes)
        lake = load_catalog("default", **group.catalog).load_table((NAMESPACE, gone))
        assert lake.scan().to_arrow().num_rows > 0
    finally:
        hot.close()


def test_a_table_with_a_stream_of_its_own_moves_into_the_group_without_a_new_load(group: Group) -> None:
    mover = group.add(f"{list(group.hot)[0][:-4]}_mover", rows=50)
    own = member_spec(mover.table, group.group, group.kind)
    own = own.model_copy(update={"source": own.source.model_copy(update={"stream": None})})  # its own slot or dump
    store = JsonFileStateStore(group.tmp_path / f"{mover.table}.json")

    def own_round() -> RoundOutcome:
        with round_parts(own, mover, group.catalog, writer=group.writer) as parts:
            return parts.run(store).outcome

    assert own_round() is RoundOutcome.TIERED  # its first load, through its own stream
    mover.random_changes(20)
    assert own_round() is RoundOutcome.TIERED
    mover.random_changes(20)  # committed before it joins: only its own log holds these
    run = group.read()
    assert group.qualified([mover.table]) <= set(run.joined), run
    mover.random_changes(20)  # after: the change log holds these
    group.read()
    first, second = group.tier(mover.table), group.tier(mover.table)
    assert first.outcome is RoundOutcome.TIERED and first.epoch > 2, "no new load: the lake went on from its offsets"
    assert second.outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(mover, group.catalog, (NAMESPACE, mover.table))
    if not group.mariadb:
        with psycopg.connect(group.server.dsn) as conn:
            left = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                (own.source.slot(),)).fetchone()[0]  # fmt: skip
        assert left == 0, "its own slot is dropped once the change log holds it"
    mover.random_changes(10)
    group.read()
    assert group.tier(mover.table).outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(mover, group.catalog, (NAMESPACE, mover.table))


def test_a_table_dropped_and_created_again_fails_alone_and_loads_again_with_no_change_lost(group: Group) -> None:
    from airflow_provider_tiering.core.errors import HotTableReplaced

    group.read()
    group.tier_all()
    table = list(group.hot)[3]
    hot = group.hot[table]
    hot.create()  # DROP TABLE, then CREATE TABLE under the same name: another table
    hot.insert(15)
    run = group.read()
    if not group.mariadb:  # the publication lost the dropped table: the reader adds the new one, from now on
        assert group.qualified([table]) <= set(run.joined), run
    with pytest.raises(HotTableReplaced):
        group.tier(table)
    sibling = list(group.hot)[4]
    group.hot[sibling].random_changes(10)
    group.read()
    assert group.tier(sibling).outcome is RoundOutcome.TIERED, "its sibling goes on"
    # A new load of the new table (its lake table dropped, its state reset), a writer changing it meanwhile.
    load_catalog("default", **group.catalog).drop_table((NAMESPACE, table))
    (group.tmp_path / f"{table}.json").unlink()
    hot.random_changes(10)
    assert group.tier(table).outcome is RoundOutcome.TIERED
    hot.random_changes(10)
    group.read()
    group.tier(table)
    assert_lake_equals_hot(hot, group.catalog, (NAMESPACE, table))
    group.check([sibling])
