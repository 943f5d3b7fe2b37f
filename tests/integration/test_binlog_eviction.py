"""Eviction and reads across tiers on a MariaDB table tiered from its binlog. Eviction's transactions write the
table's row in a marker table first: the change stream skips them, so the lake keeps the evicted rows, while the
binlog still carries their deletes to the server's replicas (read here with the binlog library itself, as a replica
would). A user's later update or delete of a key still hot reaches the lake; an evicted key inserted again replaces the
lake's row. Without eviction, a read across tiers is the whole hot table. Real MariaDB 10.11 with its binlog on."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.changing_table import COLUMNS as CDC_COLUMNS
from testbed.changing_table import ChangingMariaDBTable, _normal_value
from testbed.mariadb_server import MariaDBServer
from testbed.rounds import round_parts

NOW = datetime.utcnow().replace(microsecond=0)
OLD = NOW - timedelta(days=10)  # beyond the retention of a day


def spec_of(name: str) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"kind": "mysql_cdc", "conn_id": "hot", "table": name},
            "lake": {"namespace": "ev", "table": name},
            "eviction": {"enabled": True, "retention_seconds": 86400, "age_column": "created_at", "batch_rows": 40},
        }
    )


def lake_by_key(catalog_properties: dict[str, str], table: str) -> dict[int, tuple[Any, ...]]:
    """The lake's rows read with pyiceberg alone, by key (a key held twice fails)."""
    rows = load_catalog("default", **catalog_properties).load_table(("ev", table)).scan().to_arrow().to_pylist()
    found: dict[int, tuple[Any, ...]] = {}
    for row in rows:
        assert row["id"] not in found, f"the lake holds key {row['id']} twice"
        found[row["id"]] = (row["id"], row["name"], row["amount"], row["created_at"])
    return found


def hot_by_key(server: MariaDBServer, table: str) -> dict[int, tuple[Any, ...]]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, name, amount, created_at FROM `{table}`")
        return {row[0]: tuple(row) for row in cur.fetchall()}


def deletes_in_binlog(server: MariaDBServer, table: str, start: tuple[str, int]) -> tuple[set[int], int]:
    """The keys of ``table`` the binlog deletes after ``start``, and the marker rows written beside them, read as a
    replica would read them (the library, its own decoding)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    reader = BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user,
                             "password": server.password},
        server_id=0, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        only_events=[DeleteRowsEvent, WriteRowsEvent, UpdateRowsEvent], only_tables=[table, "tiering_evictions"],
    )  # fmt: skip
    deleted, marks = set(), 0
    try:
        for event in reader:
            if event.table == table and isinstance(event, DeleteRowsEvent):
                deleted |= {row["values"]["id"] for row in event.rows}
            elif event.table == "tiering_evictions":
                marks += len(event.rows)
    finally:
        reader.close()
    return deleted, marks


def test_eviction_keeps_the_evicted_rows_in_the_lake_and_its_deletes_in_the_binlog_for_replicas(
    mariadb_server: MariaDBServer, catalog_properties: dict[str, str], local_writer: Any, tmp_path: Path
) -> None:
    name = "evicted_from_binlog"
    with mariadb_server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(
            f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, amount DECIMAL(12,2), "
            "created_at DATETIME(6) NOT NULL)"
        )
        rows = [
            (k, f"row {k}", Decimal(k) / 4, (OLD if k <= 100 else NOW) + timedelta(seconds=k)) for k in range(1, 151)
        ]
        cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s, %s, %s)", rows)
        cur.execute("SHOW MASTER STATUS")
        start = tuple(cur.fetchone()[:2])
    tiered = hot_by_key(mariadb_server, name)
    spec = spec_of(name)
    store = JsonFileStateStore(tmp_path / "state.json")
    connection = ConnectionInfo.from_uri(mariadb_server.url)

    def tier() -> Any:
        return round_parts(spec, connection, catalog_properties, writer=local_writer).run(store)

    first = tier()
    assert first.outcome is RoundOutcome.TIERED and first.metrics is not None and first.metrics.evicted_rows == 100
    assert set(hot_by_key(mariadb_server, name)) == set(range(101, 151))
    second = tier()  # the stream reads eviction's transactions and skips them: the lake keeps every row
    assert lake_by_key(catalog_properties, name) == tiered
    assert second.metrics is None or second.metrics.rows == 0
    deleted, marks = deletes_in_binlog(mariadb_server, name, start)  # type: ignore[arg-type]
    assert deleted == set(range(1, 101)) and marks == 3  # 100 rows in batches of 40: three marked transactions

    with mariadb_server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{name}` SET name = 'changed' WHERE id = 120")
        cur.execute(f"DELETE FROM `{name}` WHERE id = 130")
        cur.execute(f"DELETE FROM `{name}` WHERE id = 7")  # evicted already: deletes nothing hot, nothing in the lake
        cur.execute(f"INSERT INTO `{name}` VALUES (5, 'again', 1.25, %s)", (NOW,))  # an evicted key inserted again
    tier()
    expected = {**tiered, **hot_by_key(mariadb_server, name)}
    del expected[130]
    assert lake_by_key(catalog_properties, name) == expected
    state = store.load()
    assert state is not None and state.evicted_rows_total == 100 and state.eviction_note is None


def test_a_change_stream_table_reads_its_whole_hot_table_across_tiers(
    mariadb_server: MariaDBServer, catalog_properties: dict[str, str], tmp_path: Path, local_writer: Any,
    monkeypatch: Any,
) -> None:  # fmt: skip
    from airflow_provider_tiering.across_tiers import read_table_across_tiers

    name = "across_binlog"
    data = {
        "name": name,
        "source": {"kind": "mysql_cdc", "conn_id": "hot_across_binlog", "table": name},
        "lake": {"namespace": "ev", "table": name, "catalog_conn_id": "iceberg_across_binlog"},
    }
    info = ConnectionInfo.from_uri(mariadb_server.url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_HOT_ACROSS_BINLOG",
        json.dumps({"conn_type": "mysql", "host": info.host, "port": info.port, "login": info.login,
                    "password": info.password, "schema": info.schema}),
    )  # fmt: skip
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_ACROSS_BINLOG",
        json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}}),
    )
    hot = ChangingMariaDBTable(mariadb_server.url, name, seed=3)
    try:
        hot.create()
        hot.insert(150)
        spec = TableSpec.parse(data)
        assert (
            round_parts(spec, info, catalog_properties, writer=local_writer)
            .run(JsonFileStateStore(tmp_path / "state.json"))
            .outcome
            is RoundOutcome.TIERED
        )
        hot.random_changes(60)  # updates, key updates, deletes, re-inserts: not tiered yet
        assert hot.counts["delete"] and hot.counts["key_update"], hot.counts
        view = read_table_across_tiers(data)
        assert view.snapshot_id is not None and view.lake_files == () and view.lake().num_rows == 0
        found = {r["id"]: tuple(_normal_value(r[c]) for c in CDC_COLUMNS) for r in view.to_arrow().to_pylist()}
        assert found == hot.hot_by_key()
    finally:
        hot.close()
