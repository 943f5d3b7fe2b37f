"""PostgreSQL tables tiered from their change stream (logical replication, pgoutput): after rounds, and after
rounds killed at every phase and a server restart, the lake holds the hot table row for row by key (read back with
pyiceberg and with pyarrow's Parquet reader, never with code under test); the slot is never ahead of the lake.
Real PostgreSQL 15 with wal_level = logical, real pyiceberg, real processes killed with SIGKILL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import (
    ChangeStreamUnavailable,
    HotTableReplaced,
    SchemaConflict,
    TableTruncated,
)
from airflow_provider_tiering.core.maintenance import CompactionResult
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import retained_wal_alert
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.sources.postgres.pgoutput import format_lsn, parse_lsn
from airflow_provider_tiering.sources.registry import build_source
from testbed.changing_table import ChangingTable, assert_lake_equals_hot
from testbed.crash_round import crash_round
from testbed.lake_check import digest, unreferenced_data_files
from testbed.pg_server import PostgresServer, drop_table_slot
from testbed.rounds import lake_of

MB = 1024 * 1024


def cdc_spec(name: str, **source) -> dict:
    return {
        "name": name,
        "source": {"kind": "postgres_cdc", "conn_id": "hot", "table": name, **source},
        "lake": {"namespace": "it", "table": name},
    }


@pytest.fixture
def changing(pg_server, request):
    name = request.node.name.split("[")[0].removeprefix("test_")[:40]
    hot = ChangingTable(pg_server.dsn, name)
    hot.create()
    yield hot
    hot.close()
    drop_table_slot(pg_server.dsn, name)


def rounds_of(spec: TableSpec, hot: ChangingTable, catalog_properties, writer, store) -> Callable[[], RoundResult]:
    """A round of ``spec`` each time it is called, as a task runs it (a source built from the connection)."""

    def tier() -> RoundResult:
        source = build_source(spec.source, hot.connection())
        return run_round(spec, source, lake_of(spec, catalog_properties), writer, store)

    return tier


def slot_lsn(dsn: str, slot: str) -> int | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        found = row.fetchone()
    return None if found is None else parse_lsn(found[0])


def assert_record_boundary(dsn: str, lsn: int) -> None:
    """The lake's LSN must be where a WAL record starts: a commit record straddling it would be skipped by the slot
    once advanced there (pg_walinspect finds the first record at or after an LSN)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute("CREATE TABLE IF NOT EXISTS boundary_probe (v int)")
        conn.execute("INSERT INTO boundary_probe VALUES (1)")  # a flushed record at or after it
        (start,) = conn.execute("SELECT start_lsn::text FROM pg_get_wal_record_info(%s)", (format_lsn(lsn),)).fetchone()
    assert parse_lsn(start) == lsn, f"the lake's LSN {format_lsn(lsn)} is inside a WAL record (next starts {start})"


def lake_lsn(catalog_properties, name: str) -> int | None:
    import json

    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    snapshot = table.current_snapshot()
    if snapshot is None:
        return None
    return parse_lsn(json.loads(snapshot.summary["tiering.end-offsets"])["lsn"])


def test_random_changes_while_rounds_run_leave_the_lake_equal_to_the_table(
    changing, tmp_path, catalog_properties, local_writer
):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(300)

    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    first = tier()
    assert first.outcome is RoundOutcome.TIERED and first.metrics.rows == 300
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    schema = load_catalog("default", **catalog_properties).load_table(("it", name)).schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id"]

    # A writer keeps changing the table while rounds run; each round tiers what was committed before it.
    writer = ChangingTable(changing.dsn, name, seed=99)
    writer.next_id = 100_000
    stop = threading.Event()

    def keep_changing():
        while not stop.is_set():
            writer.random_changes(8)
            time.sleep(0.02)

    thread = threading.Thread(target=keep_changing, daemon=True)
    thread.start()
    try:
        for number in range(6):
            changing.random_changes(40)
            result = tier()
            assert result.outcome is RoundOutcome.TIERED, number
            if number == 2:
                compacted = compact(
                    lake_of(spec, catalog_properties),
                    local_writer,
                    target_file_bytes=128 * MB,
                    small_file_bytes=8 * MB,
                    max_small_files=1,  # a merge writes its rewrites together: the table has few files
                    table_name=name,
                )
                assert compacted.outcome is CompactionResult.COMPACTED, compacted
    finally:
        stop.set()
        thread.join()
        writer.close()
    tier()  # everything committed before it
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    assert all(changing.counts[kind] for kind in ("update", "key_update", "delete", "reinsert", "toast")), (
        changing.counts
    )
    assert slot_lsn(changing.dsn, f"tiering_public_{name}") <= lake_lsn(catalog_properties, name)
    assert_record_boundary(changing.dsn, lake_lsn(catalog_properties, name))
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []

    state = store.load()
    assert state.mode == "change_stream" and state.merge_key == ["id"]
    assert state.change_stream["slot"] == f"tiering_public_{name}"
    assert state.change_stream["exists"] is True
    assert isinstance(state.change_stream["retained_wal_bytes"], int)


def test_each_kind_of_change_is_applied_and_counted(changing, tmp_path, catalog_properties, local_writer):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(10)
    big = "Z" * 10 + "".join(str(i % 97) for i in range(4000))
    table = f'"{name}"'
    changing.conn.execute(f"UPDATE {table} SET doc = %s WHERE id = 3", (big,))

    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    tier()
    conn = changing.conn
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} VALUES (11, 'new', 1, 'n', NULL)")  # inserted
        conn.execute(f"UPDATE {table} SET name = 'a' WHERE id = 1")  # updated three times: one update
        conn.execute(f"UPDATE {table} SET name = 'b' WHERE id = 1")
        conn.execute(f"UPDATE {table} SET name = 'c' WHERE id = 1")
        conn.execute(f"UPDATE {table} SET id = 20 WHERE id = 2")  # key 2 deleted, key 20 inserted
        conn.execute(f"DELETE FROM {table} WHERE id = 4")  # deleted
        conn.execute(f"DELETE FROM {table} WHERE id = 5")  # deleted, then inserted again: one update
        conn.execute(f"INSERT INTO {table} VALUES (5, 'again', 2, 'd', '{{a,b}}')")
        conn.execute(f"INSERT INTO {table} VALUES (12, 'brief', 2, 'd', NULL)")  # inserted, then deleted: nothing
        conn.execute(f"DELETE FROM {table} WHERE id = 12")
    conn.execute(f"UPDATE {table} SET amount = 7 WHERE id = 3")  # the stored-out-of-line doc is left alone
    result = tier()
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    assert (result.metrics.inserted_rows, result.metrics.updated_rows, result.metrics.deleted_rows) == (2, 3, 2)
    extra = result.event_extra()
    assert (extra["inserted_rows"], extra["updated_rows"], extra["deleted_rows"]) == (2, 3, 2)
    lake = load_catalog("default", **catalog_properties).load_table(("it", name)).scan().to_arrow().to_pylist()
    assert {r["id"]: r["doc"] for r in lake}[3] == big

    # Nothing changed: nothing to tier, the re-read changes are not applied again.
    assert tier().outcome is RoundOutcome.NOTHING_TO_TIER
    # A column added on the hot table mid-stream arrives in the lake with the rows that carry it.
    conn.execute(f"ALTER TABLE {table} ADD COLUMN note text")
    conn.execute(f"UPDATE {table} SET note = 'noted' WHERE id = 1")
    tier()
    lake = load_catalog("default", **catalog_properties).load_table(("it", name)).scan().to_arrow().to_pylist()
    assert {r["id"]: r["note"] for r in lake}[1] == "noted"
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))


@pytest.mark.parametrize(
    ("key_type", "key_values", "changed"),
    [
        ("timestamptz", ("2026-11-02 09:30:00+00", "2026-11-02 10:30:00+02"), "k + interval '1 day'"),
        ("boolean", ("true",), "NOT k"),
        ("bytea", ("\\x00ff", "\\x0102"), "k || '\\x99'::bytea"),
    ],
    ids=["timestamptz", "boolean", "bytea"],
)
def test_an_unchanged_toast_value_follows_a_key_update_whatever_the_keys_type(
    key_type, key_values, changed, pg_server, tmp_path, catalog_properties, local_writer
):
    """An update of the key that leaves a value stored out of line (TOAST) unchanged: the value comes from the lake's
    row of the old key, matched by the key as the lake types it (pgoutput's text of a timestamptz, boolean or
    bytea is not Python's)."""
    name = f"toast_key_{key_type}"
    conn = psycopg.connect(pg_server.dsn, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.execute(f'CREATE TABLE "{name}" (k {key_type} PRIMARY KEY, amount int, doc text)')
    big = "".join(str(i % 89) for i in range(6000))  # compresses badly: stored out of line
    for number, value in enumerate(key_values):
        conn.execute(f'INSERT INTO "{name}" VALUES (%s::{key_type}, %s, %s)', (value, number, f"{number}-{big}"))
    hot = ChangingTable(pg_server.dsn, name)
    spec = TableSpec.parse(cdc_spec(name))
    tier = rounds_of(spec, hot, catalog_properties, local_writer, JsonFileStateStore(tmp_path / "state.json"))
    tier()
    first = key_values[0]
    conn.execute(f'UPDATE "{name}" SET k = {changed} WHERE k = %s::{key_type}', (first,))
    conn.execute(f'UPDATE "{name}" SET amount = amount + 10 WHERE amount = 0')  # doc left alone twice
    result = tier()
    assert result.outcome is RoundOutcome.TIERED
    lake = load_catalog("default", **catalog_properties).load_table(("it", name)).scan().to_arrow()
    expected = conn.execute(f'SELECT k, amount, doc FROM "{name}"').fetchall()
    assert digest(zip(*(lake.column(c).to_pylist() for c in ("k", "amount", "doc")))) == digest(expected)
    conn.close()


@pytest.fixture
def own_server(tmp_path_factory):
    """A server of this test's own, so restarting it leaves the session's server alone."""
    with PostgresServer(tmp_path_factory.mktemp("pg-restarted") / "data") as server:
        yield server


def test_rounds_killed_at_every_phase_and_a_server_restart_lose_nothing_and_apply_nothing_twice(
    own_server, tmp_path, catalog_properties, local_writer
):
    pg_server = own_server
    changing = ChangingTable(pg_server.dsn, "killed_rounds")
    changing.create()
    name = changing.table
    spec_json = cdc_spec(name)
    spec = TableSpec.parse(spec_json)
    store = JsonFileStateStore(tmp_path / "state.json")
    slot = f"tiering_public_{name}"
    changing.insert(200)

    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    def killed(phase: str) -> None:
        done = crash_round(tmp_path, catalog_properties, phase, spec_json, hot_uri=changing.dsn, local_writer=True)
        assert f"phase {phase}" in done.stdout and done.returncode == -9, (done.stdout, done.stderr[-3000:])
        slot_at, lake_at = slot_lsn(changing.dsn, slot), lake_lsn(catalog_properties, name)
        if lake_at is not None and slot_at is not None:
            assert slot_at <= lake_at, f"killed at {phase}: the slot is ahead of the lake"

    # The first load killed after the slot was created: the next round drops that slot and takes a new snapshot.
    killed("planned")
    changing.random_changes(20)
    tier()
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))

    for phase in ("planned", "writing", "written", "committed", "recorded"):
        changing.random_changes(30)
        killed(phase)
        if phase == "written":
            pg_server.restart()
            changing.conn = psycopg.connect(changing.dsn, autocommit=True)
            changing.conn.execute("SET synchronous_commit = on")
        result = tier()
        assert_lake_equals_hot(changing, catalog_properties, ("it", name))
        if phase in ("committed", "recorded"):
            # The killed round's commit holds every change: the re-delivered ones are skipped, not applied again.
            assert result.outcome is RoundOutcome.NOTHING_TO_TIER, phase
        else:
            assert result.outcome is RoundOutcome.TIERED, phase
        assert slot_lsn(changing.dsn, slot) <= lake_lsn(catalog_properties, name)
    # The killed attempts' staged files go with the next committed round's cleanup.
    changing.random_changes(5)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []
    changing.close()


def test_a_quiet_table_keeps_its_slot_at_the_lake_while_other_tables_write(
    changing, tmp_path, catalog_properties, local_writer
):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    slot = f"tiering_public_{name}"
    changing.insert(10)
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    assert tier().outcome is RoundOutcome.TIERED
    changing.conn.execute("CREATE TABLE IF NOT EXISTS quiet_neighbour (v text)")
    # Rounds with nothing of this table to tier while another table's writes move the WAL on: the slot may not
    # pass the lake's LSN (the next round could not tell that from changes lost).
    for _ in range(3):
        changing.conn.execute("INSERT INTO quiet_neighbour SELECT md5(g::text) FROM generate_series(1, 500) g")
        assert tier().outcome is RoundOutcome.NOTHING_TO_TIER
        assert slot_lsn(changing.dsn, slot) <= lake_lsn(catalog_properties, name)
    assert store.load().change_stream["retained_wal_bytes"] > 0
    changing.random_changes(20)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    assert slot_lsn(changing.dsn, slot) == lake_lsn(catalog_properties, name)

    # A round killed between the lake's commit and the slot's advance leaves the slot behind the lake: changes
    # committed after the lake's LSN are still found, by the probe and by the next round.
    changing.random_changes(5)
    done = crash_round(
        tmp_path, catalog_properties, "recorded", cdc_spec(name), hot_uri=changing.dsn, local_writer=True
    )
    assert done.returncode == -9, (done.stdout, done.stderr[-3000:])
    assert slot_lsn(changing.dsn, slot) < lake_lsn(catalog_properties, name)
    changing.random_changes(5)
    lake = lake_of(spec, catalog_properties)
    assert build_source(spec.source, changing.connection()).has_rows_after(lake.committed().end_offsets)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    assert slot_lsn(changing.dsn, slot) == lake_lsn(catalog_properties, name)


def test_a_truncate_fails_the_table_without_touching_the_lake(changing, tmp_path, catalog_properties, local_writer):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    changing.insert(20)
    tier()
    lake = lake_of(spec, catalog_properties)
    before = lake.committed()
    changing.conn.execute(f'TRUNCATE "{name}"')
    changing.insert(3)
    with pytest.raises(TableTruncated, match="was truncated"):
        tier()
    assert lake.committed().snapshot_id == before.snapshot_id
    state = store.load()
    assert state.quarantined_since is not None and "drop the lake table" in state.last_error


def test_set_up_problems_fail_the_first_round_naming_what_to_change(
    pg_server, tmp_path, tmp_path_factory, catalog_properties, local_writer
):
    conn = psycopg.connect(pg_server.dsn, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS no_identity; CREATE TABLE no_identity (id int PRIMARY KEY, v text)")
    conn.execute("ALTER TABLE no_identity REPLICA IDENTITY NOTHING")
    conn.execute("DROP TABLE IF EXISTS plain_role_table; CREATE TABLE plain_role_table (id int PRIMARY KEY)")
    conn.execute("DROP ROLE IF EXISTS no_replication")
    conn.execute("CREATE ROLE no_replication LOGIN PASSWORD 'pw-no-replication'")
    conn.execute("ALTER TABLE plain_role_table OWNER TO no_replication")

    def first_round(table: str, dsn: str):
        store = JsonFileStateStore(tmp_path / f"{table}.json")
        spec = TableSpec.parse(cdc_spec(table))
        source = build_source(spec.source, ConnectionInfo.from_uri(dsn))
        return run_round(spec, source, lake_of(spec, catalog_properties), local_writer, store)

    with pytest.raises(ChangeStreamUnavailable, match="REPLICA IDENTITY USING INDEX"):
        first_round("no_identity", pg_server.dsn)
    other = pg_server.dsn.replace(f"{pg_server.user}:{pg_server.password}", "no_replication:pw-no-replication")
    with pytest.raises(ChangeStreamUnavailable, match="WITH REPLICATION"):
        first_round("plain_role_table", other)
    last_error = JsonFileStateStore(tmp_path / "plain_role_table.json").load().last_error
    assert "WITH REPLICATION" in last_error and "pw-no-replication" not in last_error

    replica = PostgresServer(tmp_path_factory.mktemp("pg-replica") / "data", settings={"wal_level": "replica"})
    with replica:
        with psycopg.connect(replica.dsn, autocommit=True) as other_conn:
            other_conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        with pytest.raises(ChangeStreamUnavailable, match="wal_level = logical"):
            first_round("t", replica.dsn)
    conn.close()


def test_a_dropped_slot_fails_the_table_asking_for_a_new_load(changing, tmp_path, catalog_properties, local_writer):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    changing.insert(5)
    tier()
    changing.conn.execute("SELECT pg_drop_replication_slot(%s)", (f"tiering_public_{name}",))
    changing.insert(2)
    with pytest.raises(ChangeStreamUnavailable, match="is gone"):
        tier()


def test_wal_held_by_a_quarantined_table_shows_in_its_status_and_alerts(
    changing, tmp_path, catalog_properties, local_writer
):
    name = changing.table
    spec = TableSpec.parse({**cdc_spec(name, max_retained_wal_mb=1), "max_consecutive_failures": 1})
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(5)

    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    tier()
    assert retained_wal_alert(spec, store.load()) is None
    # The table's rounds start failing (its column gets a type the lake cannot follow), while the server writes
    # WAL for other tables: the slot holds it back.
    changing.insert(1)
    changing.conn.execute(f'ALTER TABLE "{name}" ALTER COLUMN amount TYPE text')
    changing.conn.execute("CREATE TABLE IF NOT EXISTS wal_filler (v text)")
    changing.conn.execute("INSERT INTO wal_filler SELECT repeat(md5(g::text), 40) FROM generate_series(1, 3000) g")
    with pytest.raises(SchemaConflict):
        tier()
    state = store.load()
    assert state.quarantined_since is not None
    assert state.change_stream["retained_wal_bytes"] > MB
    alert = retained_wal_alert(spec, state)
    assert alert is not None and f"tiering_public_{name}" in alert and "holds back" in alert
    assert "quarantined since" in alert  # and why the slot is not advanced
    # The quarantined table keeps its slot (a fix and a reset resume the stream without a new load).
    assert slot_lsn(changing.dsn, f"tiering_public_{name}") is not None


def test_an_idle_table_follows_other_tables_wal_without_the_slot_passing_the_lake(
    changing, tmp_path, catalog_properties, local_writer
):
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name, max_retained_wal_mb=1))  # idle rounds move the LSN past 256 KiB of WAL
    store = JsonFileStateStore(tmp_path / "state.json")
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    slot = f"tiering_public_{name}"
    changing.insert(5)
    tier()
    conn = changing.conn
    conn.execute("CREATE TABLE IF NOT EXISTS other_writes (v text)")
    conn.execute("INSERT INTO other_writes VALUES ('a little')")
    # A little WAL of another table: nothing to tier, and neither the lake's LSN nor the slot moves.
    before = lake_lsn(catalog_properties, name)
    assert tier().outcome is RoundOutcome.NOTHING_TO_TIER
    assert lake_lsn(catalog_properties, name) == before and slot_lsn(changing.dsn, slot) <= before
    changing.insert(1)  # the table's next change is tiered as usual after an idle round
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))
    # Much WAL of another table: a round of no rows moves the lake's LSN, and the slot follows it.
    conn.execute("INSERT INTO other_writes SELECT repeat(md5(g::text), 30) FROM generate_series(1, 2000) g")
    before = lake_lsn(catalog_properties, name)
    moved = tier()
    assert moved.outcome is RoundOutcome.TIERED and moved.metrics.rows == 0
    after = lake_lsn(catalog_properties, name)
    assert after - before > 256 * 1024 and slot_lsn(changing.dsn, slot) == after
    assert_record_boundary(changing.dsn, after)
    # (The WAL the server keeps follows the slot's restart point, which moves at the server's next running-
    # transactions record, not at once.)
    assert store.load().change_stream["confirmed_flush_lsn"] == format_lsn(after)
    changing.insert(1)
    tier()
    assert_lake_equals_hot(changing, catalog_properties, ("it", name))


def test_changes_the_stream_would_leave_out_are_refused_not_lost(pg_server, tmp_path, catalog_properties, local_writer):
    conn = psycopg.connect(pg_server.dsn, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute(
        "DROP TABLE IF EXISTS gen_cols; CREATE TABLE gen_cols (id int PRIMARY KEY, a int, "
        "b int GENERATED ALWAYS AS (a * 2) STORED)"
    )
    conn.execute("INSERT INTO gen_cols (id, a) VALUES (1, 10), (2, 20)")
    conn.execute("DROP TABLE IF EXISTS partly_published; CREATE TABLE partly_published (id int PRIMARY KEY)")
    conn.execute("DROP PUBLICATION IF EXISTS inserts_only")
    conn.execute("CREATE PUBLICATION inserts_only FOR TABLE partly_published WITH (publish = 'insert')")
    connection = ConnectionInfo.from_uri(pg_server.dsn)

    def first_round(source: dict, table: str):
        spec = TableSpec.parse({**cdc_spec(table), "source": {**cdc_spec(table)["source"], **source}})
        store = JsonFileStateStore(tmp_path / f"{table}-{len(source)}.json")
        return run_round(
            spec, build_source(spec.source, connection), lake_of(spec, catalog_properties), local_writer, store
        )

    # A stored generated column never travels in pgoutput: refused, unless left out.
    with pytest.raises(ChangeStreamUnavailable, match=r"generated column\(s\) \['b'\]"):
        first_round({}, "gen_cols")
    assert first_round({"columns": ["id", "a"]}, "gen_cols").outcome is RoundOutcome.TIERED
    # A publication that leaves updates and deletes out.
    with pytest.raises(ChangeStreamUnavailable, match="does not publish every kind of change"):
        first_round({"publication_name": "inserts_only"}, "partly_published")
    # The table dropped and created again (its publication no longer publishes it): another table than the lake's.
    conn.execute("DROP TABLE gen_cols")
    conn.execute("CREATE TABLE gen_cols (id int PRIMARY KEY, a int)")
    conn.execute("INSERT INTO gen_cols VALUES (3, 30)")
    with pytest.raises(HotTableReplaced, match="dropped and created again"):
        first_round({"columns": ["id", "a"]}, "gen_cols")
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE %s",
        ("tiering_public_gen_cols%",),
    )
    conn.close()


def test_the_decoder_reads_the_bytes_postgresql_sends(pg_server):
    """``sources/postgres/pgoutput.py`` decodes a real PostgreSQL 15's pgoutput stream, not only messages the unit tests
    build: a transaction's Begin, Relation, Insert, key-changing Update, Delete and Commit, an unchanged TOAST value,
    a replication origin, and a Truncate, each with the values as PostgreSQL sent them."""
    from airflow_provider_tiering.sources.postgres.pgoutput import (
        UNCHANGED_TOAST,
        Begin,
        Change,
        Commit,
        Origin,
        PgRelation,
        Truncate,
        decode,
    )

    slot, publication = "decoder_bytes", "decoder_bytes_pub"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS decoder_bytes")
        conn.execute("CREATE TABLE decoder_bytes (id bigint PRIMARY KEY, name text, doc text, amount numeric(10, 2))")
        conn.execute("ALTER TABLE decoder_bytes ALTER COLUMN doc SET STORAGE EXTERNAL")  # TOASTed, not compressed
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE decoder_bytes")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            with conn.transaction():
                conn.execute("INSERT INTO decoder_bytes VALUES (1, 'one', repeat('x', 5000), 1.50), (2, NULL, 'd', 2)")
            with conn.transaction():
                conn.execute("UPDATE decoder_bytes SET id = 3, name = 'three' WHERE id = 1")  # doc left unchanged
                conn.execute("DELETE FROM decoder_bytes WHERE id = 2")
            conn.execute("SELECT pg_replication_origin_create('decoder_bytes_origin')")
            with conn.transaction():
                conn.execute("SELECT pg_replication_origin_session_setup('decoder_bytes_origin')")
                conn.execute("TRUNCATE decoder_bytes")
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', %s, 'messages', 'false')",
                (slot, publication),
            ).fetchall()
        finally:
            conn.execute("SELECT pg_replication_origin_session_reset()")
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute("SELECT pg_replication_origin_drop('decoder_bytes_origin')")
            conn.execute(f"DROP PUBLICATION {publication}")
    messages = [decode(bytes(row[0])) for row in rows]
    kinds = [type(m).__name__.removeprefix("Pg") + (f":{m.op}" if isinstance(m, Change) else "") for m in messages]
    assert kinds == [
        "Begin", "Relation", "Change:I", "Change:I", "Commit",
        "Begin", "Change:U", "Change:D", "Commit",  # the relation was described once in this session
        "Begin", "Origin", "Relation", "Truncate", "Commit",  # described again: a truncate gives it new storage
    ]  # fmt: skip
    relation = messages[1]
    assert isinstance(relation, PgRelation)
    assert (relation.namespace, relation.name, relation.columns) == (
        "public",
        "decoder_bytes",
        ("id", "name", "doc", "amount"),
    )
    assert relation.key_columns == ("id",) and relation.replica_identity == "d"
    first, second = messages[2], messages[3]
    assert isinstance(first, Change) and isinstance(second, Change)
    assert first.new == ("1", "one", "x" * 5000, "1.50") and second.new == ("2", None, "d", "2.00")
    update, delete = messages[6], messages[7]
    assert isinstance(update, Change) and isinstance(delete, Change)
    assert update.old == ("1", None, None, None) and not update.old_is_row  # the old key: the key changed
    assert update.new == ("3", "three", UNCHANGED_TOAST, "1.50")  # the TOASTed value was not sent again
    assert delete.old == ("2", None, None, None) and delete.new is None
    begins = [m for m in messages if isinstance(m, Begin)]
    commits = [m for m in messages if isinstance(m, Commit)]
    assert all(b.commit_at == c.commit_at and c.end > c.commit_at for b, c in zip(begins, commits, strict=True))
    assert [c.end for c in commits] == sorted(c.end for c in commits)
    origin, truncate = messages[10], messages[12]
    assert isinstance(origin, Origin) and origin.name == "decoder_bytes_origin"
    assert isinstance(truncate, Truncate) and truncate.relations == (relation.oid,)
