"""MariaDB tables tiered from the server's row binlog (source kind ``mysql_cdc``): after rounds, rounds killed at every
phase, binlog rotations and a server restart, the lake holds the hot table row for row by key (read back with
pyiceberg, with pyarrow's Parquet reader and with DuckDB, never with code under test). What the stream cannot carry
fails its table loudly: a purged position, a missing setting or privilege, a table without a key, a TRUNCATE, a
table dropped or swapped, a change logged as a statement. Real MariaDB 10.11 with its binlog on, real pyiceberg,
real processes killed with SIGKILL."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.errors import (
    ChangeStreamUnavailable,
    HotTableReplaced,
    MergeKeyUnusable,
    TableTruncated,
)
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.changing_table import ChangingMariaDBTable, assert_lake_equals_hot
from testbed.crash_round import crash_round
from testbed.lake_check import unreferenced_data_files
from testbed.mariadb_server import MariaDBServer
from testbed.rounds import round_parts

NAMESPACE = "binlog"


def cdc_spec(name: str, **source: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"kind": "mysql_cdc", "conn_id": "hot", "table": name, **source},
        "lake": {"namespace": NAMESPACE, "table": name},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A server of this module's own (its binlog on), so purging, reconfiguring and restarting it leave the session's
    server alone."""
    with MariaDBServer(tmp_path_factory.mktemp("binlog") / "data", binlog=True, buffer_pool_size="256M") as found:
        yield found


def admin(server: MariaDBServer, *statements: str) -> list[Any]:
    found: list[Any] = []
    with server.admin_connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
            found.append(cur.fetchall())
    return found


@pytest.fixture
def changing(server: MariaDBServer, request: pytest.FixtureRequest) -> Iterator[ChangingMariaDBTable]:
    name = request.node.name.split("[")[0].removeprefix("test_")[:40]
    hot = ChangingMariaDBTable(server.url, name)
    hot.create()
    yield hot
    hot.close()


def rounds_of(
    spec: TableSpec, hot: Any, catalog_properties: dict[str, str], writer: Any, store: Any
) -> Callable[[], RoundResult]:
    """A round of ``spec`` each time it is called, as a task runs it (a source built from the connection)."""

    def tier() -> RoundResult:
        return round_parts(spec, hot.connection(), catalog_properties, writer=writer).run(store)

    return tier


def lake_position(catalog_properties: dict[str, str], name: str) -> dict[str, Any] | None:
    table = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name))
    snapshot = table.current_snapshot()
    return None if snapshot is None else json.loads(snapshot.summary["tiering.end-offsets"])


def test_random_changes_while_rounds_run_leave_the_lake_equal_to_the_table(
    changing: ChangingMariaDBTable, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(300)
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    first = tier()
    assert first.outcome is RoundOutcome.TIERED and first.metrics is not None and first.metrics.rows == 300
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name))
    schema = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name)).schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id"]

    # A writer keeps changing the table while rounds run; each round tiers what was committed before it.
    writer = ChangingMariaDBTable(changing.url, name, seed=99)
    writer.next_id = 100_000
    stop = threading.Event()

    def keep_changing() -> None:
        while not stop.is_set():
            writer.random_changes(8)
            time.sleep(0.02)

    thread = threading.Thread(target=keep_changing, daemon=True)
    thread.start()
    try:
        for number in range(6):
            changing.random_changes(40)
            assert tier().outcome is RoundOutcome.TIERED, number
    finally:
        stop.set()
        thread.join()
        writer.close()
    tier()  # everything committed before it
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name), duckdb=True)
    counts = {kind: changing.counts[kind] + writer.counts[kind] for kind in changing.counts}
    assert all(counts[kind] for kind in ("update", "key_update", "delete", "reinsert", "toast")), counts
    assert unreferenced_data_files(catalog_properties, (NAMESPACE, name)) == []
    state = store.load()
    assert state is not None and state.mode == "change_stream" and state.merge_key == ["id"]
    stream = state.change_stream or {}
    assert stream["position"] == "{binlog_file}:{binlog_pos}".format(**lake_position(catalog_properties, name))
    assert stream["log_needed_bytes"] == 0 and stream["binlog_files"] >= 1


def test_each_kind_of_change_is_applied_and_counted(
    changing: ChangingMariaDBTable, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    name, t = changing.table, changing.ref
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(10)
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    assert tier().outcome is RoundOutcome.TIERED
    with changing._atomic():
        changing._run(f"INSERT INTO {t} VALUES (100, 'new', 1.00, 'd', '[]')")
        changing._run(f"UPDATE {t} SET name = 'updated' WHERE id = 1")
        changing._run(f"UPDATE {t} SET name = 'twice' WHERE id = 1")
        changing._run(f"UPDATE {t} SET id = 200 WHERE id = 2")  # the key changes: 2 is gone, 200 is new
        changing._run(f"DELETE FROM {t} WHERE id = 3")
        changing._run(f"DELETE FROM {t} WHERE id = 4")
        changing._run(f"INSERT INTO {t} VALUES (4, 'again', 4.00, 'd', '[]')")  # deleted and inserted again
        changing._run(f"INSERT INTO {t} VALUES (300, 'short-lived', 0, 'd', '[]')")
        changing._run(f"DELETE FROM {t} WHERE id = 300")  # inserted and deleted in one round: never in the lake
    result = tier()
    assert result.outcome is RoundOutcome.TIERED and result.metrics is not None
    assert (result.metrics.inserted_rows, result.metrics.updated_rows, result.metrics.deleted_rows) == (2, 2, 2)
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name), duckdb=True)
    assert tier().outcome is RoundOutcome.NOTHING_TO_TIER


def test_rounds_killed_at_every_phase_and_a_server_restart_lose_nothing_and_apply_nothing_twice(
    server: MariaDBServer, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    changing = ChangingMariaDBTable(server.url, "killed_rounds")
    changing.create()
    name = changing.table
    spec_json = cdc_spec(name)
    spec = TableSpec.parse(spec_json)
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(200)
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)

    def killed(phase: str) -> None:
        done = crash_round(tmp_path, catalog_properties, phase, spec_json, hot_uri=server.url, local_writer=True)
        assert f"phase {phase}" in done.stdout and done.returncode == -9, (done.stdout, done.stderr[-3000:])

    # The first load killed as it writes: the next round takes a new snapshot.
    killed("writing")
    changing.random_changes(20)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name))

    for phase in ("planned", "writing", "written", "committed", "recorded"):
        changing.random_changes(30)
        killed(phase)
        if phase == "written":
            server.restart()  # the binlog goes on in a new file
            changing.reconnect()
        result = tier()
        assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name))
        if phase in ("committed", "recorded"):
            # The killed round's commit holds every change: they are read again and skipped, not applied again.
            assert result.outcome is RoundOutcome.NOTHING_TO_TIER, phase
        else:
            assert result.outcome is RoundOutcome.TIERED, phase
    changing.random_changes(5)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name), duckdb=True)
    assert unreferenced_data_files(catalog_properties, (NAMESPACE, name)) == []
    changing.close()


def test_rotations_between_and_during_rounds_are_followed_and_a_purged_position_fails_the_table(
    server: MariaDBServer, changing: ChangingMariaDBTable, tmp_path: Path, catalog_properties: dict[str, str],
    local_writer: Any,
) -> None:  # fmt: skip
    name = changing.table
    spec = TableSpec.parse(cdc_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")
    changing.insert(50)
    tier = rounds_of(spec, changing, catalog_properties, local_writer, store)
    assert tier().outcome is RoundOutcome.TIERED
    for _ in range(3):  # changes spread over several binlog files
        changing.random_changes(20)
        admin(server, "FLUSH BINARY LOGS")
    changing.random_changes(20)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_hot(changing, catalog_properties, (NAMESPACE, name))
    held = lake_position(catalog_properties, name)
    assert held is not None and held["gtid"]

    # The lake's file purged (its changes read already: nothing lost, but the next ones cannot be read from it).
    changing.random_changes(10)
    admin(server, "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    current = admin(server, "SHOW MASTER STATUS")[0][0][0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the server keeps a file its InnoDB checkpoint still needs: until it passes
        admin(server, f"PURGE BINARY LOGS TO '{current}'")
        if held["binlog_file"] not in {row[0] for row in admin(server, "SHOW BINARY LOGS")[0]}:
            break
        time.sleep(0.5)
    with pytest.raises(ChangeStreamUnavailable, match="purged.*Load the table again"):
        tier()
    state = store.load()
    assert state is not None and state.status is TableStatus.FAILED and state.quarantined_since is not None
    assert "purged" in (state.last_error or "")
    assert lake_position(catalog_properties, name) == held  # nothing committed


def test_set_up_problems_fail_the_first_round_naming_what_to_change(
    server: MariaDBServer, changing: ChangingMariaDBTable, tmp_path: Path, catalog_properties: dict[str, str],
    local_writer: Any,
) -> None:  # fmt: skip
    name = changing.table
    changing.insert(5)

    def first_round(spec: dict[str, Any], url: str | None = None) -> None:
        connection = changing.connection() if url is None else type(changing.connection()).from_uri(url)
        store = JsonFileStateStore(tmp_path / f"state-{time.monotonic_ns()}.json")
        round_parts(TableSpec.parse(spec), connection, catalog_properties, writer=local_writer).run(store)

    for setting, value, named in (
        ("binlog_row_image", "MINIMAL", "binlog_row_image = FULL"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata = FULL"),
        ("binlog_format", "MIXED", "binlog_format = ROW"),
        ("log_bin_compress", "ON", "log_bin_compress = OFF"),  # compressed events' rows cannot be read
    ):
        admin(server, f"SET GLOBAL {setting} = '{value}'")
        try:
            with pytest.raises(ChangeStreamUnavailable, match=named):
                first_round(cdc_spec(name))
        finally:
            fixed = {"binlog_format": "ROW", "log_bin_compress": "OFF"}.get(setting, "FULL")
            admin(server, f"SET GLOBAL {setting} = '{fixed}'")
    reader = server.create_user("no_replication", "pw-1", [f"SELECT ON {server.database}.*", "BINLOG MONITOR ON *.*"])
    with pytest.raises(ChangeStreamUnavailable, match="REPLICATION SLAVE") as raised:
        first_round(cdc_spec(name), reader)
    assert "pw-1" not in str(raised.value)
    changing._run(f"CREATE TABLE IF NOT EXISTS {name}_other (a INT PRIMARY KEY)")
    blind = server.create_user(
        "no_select", "pw-2", ["REPLICATION SLAVE, BINLOG MONITOR ON *.*", f"SELECT ON {server.database}.{name}_other"]
    )
    with pytest.raises(ChangeStreamUnavailable, match="GRANT SELECT"):
        first_round(cdc_spec(name), blind)
    with pytest.raises(ChangeStreamUnavailable, match="server's own id"):
        first_round(cdc_spec(name, server_id=1))
    changing._run(f"CREATE TABLE {name}_nokey (a INT NOT NULL, b INT)")
    with pytest.raises(MergeKeyUnusable, match="no primary key"):
        first_round(cdc_spec(f"{name}_nokey"))
    with pytest.raises(ChangeStreamUnavailable, match="no primary key nor a unique key"):
        first_round({**cdc_spec(f"{name}_nokey"), "merge": {"primary_key": ["a"]}})


def test_a_truncate_a_swap_and_a_statement_fail_the_table_without_touching_the_lake(
    server: MariaDBServer, tmp_path: Path, catalog_properties: dict[str, str], local_writer: Any
) -> None:
    for kind in ("truncate", "swap", "statement", "drop"):
        hot = ChangingMariaDBTable(server.url, f"refused_{kind}")
        hot.create()
        hot.insert(20)
        spec = TableSpec.parse(cdc_spec(hot.table))
        store = JsonFileStateStore(tmp_path / f"{kind}.json")
        tier = rounds_of(spec, hot, catalog_properties, local_writer, store)
        assert tier().outcome is RoundOutcome.TIERED
        held = lake_position(catalog_properties, hot.table)
        hot.random_changes(5)
        if kind == "truncate":
            hot._run(f"TRUNCATE TABLE {hot.ref}")
            error: type[Exception] = TableTruncated
        elif kind == "swap":
            hot._run(f"CREATE TABLE {hot.table}_new LIKE {hot.ref}")
            hot._run(f"RENAME TABLE {hot.ref} TO {hot.table}_old, {hot.table}_new TO {hot.ref}")
            error = HotTableReplaced
        elif kind == "drop":
            hot._run(f"DROP TABLE {hot.ref}")
            hot.create()
            hot.insert(3)
            error = HotTableReplaced
        else:  # a session that logs its changes as statements (setting it takes BINLOG ADMIN)
            with server.admin_connect(database=server.database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                cur.execute(f"UPDATE {hot.ref} SET name = 'by statement' WHERE id < 5")
            error = ChangeStreamUnavailable
        with pytest.raises(error):
            tier()
        assert lake_position(catalog_properties, hot.table) == held, kind
        state = store.load()
        assert state is not None and state.quarantined_since is not None, kind
        hot.close()
