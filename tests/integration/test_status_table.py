"""The lake's status table (``sys.lake_tiering_status``, ``lake/status_table.py``, ``hooks/status_table.py``): real
pyiceberg SQL catalogs (on SQLite and on PostgreSQL), writers in separate processes refreshing at once, a catalog out
of reach, and the table read back with pyiceberg and DuckDB's Iceberg reader."""

from __future__ import annotations

import json
import logging
import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.state import CommittedSnapshot, RoundMetrics, TableState, TableStatus
from airflow_provider_tiering.core.status_rows import StatusRow, status_row
from airflow_provider_tiering.hooks.status_table import refresh_status_tables
from airflow_provider_tiering.lake import status_table
from airflow_provider_tiering.lake.status_table import LakeStatusTable
from testbed.lake_check import duckdb_lake_rows
from testbed.rounds import catalog
from testbed.tiering_env import postgres_catalog

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
IDENTIFIER = ("sys", "lake_tiering_status")


def rows_of(dag: str, tables: int, *, round_number: int = 1) -> list[StatusRow]:
    """A DAG's tables' rows: the first tiered, its last one failed and quarantined."""
    found = []
    for i in range(tables):
        state = TableState(table=f"{dag}_{i}", status=TableStatus.TIERED, epoch=round_number)
        state.last_tiered_time = NOW
        state.committed = CommittedSnapshot(1000 + i, round_number, {"cursor": 10 * round_number})
        state.last_round = RoundMetrics(rows=10, bytes=100, files=1, splits=1, duration_seconds=0.5)
        if i == tables - 1:
            state.status, state.consecutive_failures = TableStatus.FAILED, 1
            state.last_error, state.last_error_time, state.quarantined_since = "boom", NOW, NOW
        found.append(
            status_row(
                namespace="sales", table=f"{dag}_{i}", asset=f"tiering/sales/{dag}_{i}", dag_id=dag,
                tiered_table=f"{dag}_{i}", state=state, now=NOW + timedelta(seconds=round_number),
            )
        )  # fmt: skip
    return found


def _refresh_many(properties: dict[str, str], dag: str, times: int, ready: Any) -> None:
    ready.wait()
    for number in range(1, times + 1):
        LakeStatusTable(catalog(properties).handle()).refresh(rows_of(dag, 3, round_number=number))


@pytest.fixture(params=["sqlite", "postgres"])
def properties(request, tmp_path) -> dict[str, str]:
    if request.param == "sqlite":
        return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}
    return postgres_catalog(request.getfixturevalue("pg_server"), f"file://{tmp_path}/warehouse")


def test_writers_refreshing_at_once_keep_each_others_rows(properties):
    """Two DAGs' summaries (here: processes) refresh one catalog's status table at the same moment, ten times each:
    every commit lands on the snapshot it read or is done again, so both DAGs' rows are there at the end, each at
    its last refresh, once."""
    ready = multiprocessing.get_context("spawn").Event()
    writers = [
        multiprocessing.get_context("spawn").Process(target=_refresh_many, args=(properties, dag, 10, ready))
        for dag in ("dag_a", "dag_b")
    ]
    for writer in writers:
        writer.start()
    ready.set()
    for writer in writers:
        writer.join(timeout=300)
        assert writer.exitcode == 0
    table = load_catalog("default", **properties).load_table(IDENTIFIER)
    found = {r["table_name"]: r for r in table.scan().to_arrow().to_pylist()}
    assert sorted(found) == [f"{d}_{i}" for d in ("dag_a", "dag_b") for i in range(3)]
    assert {r["tiering_epoch"] for r in found.values()} == {10}
    assert table.properties["commit.retry.num-retries"] == "0"


def test_the_status_table_reads_the_same_with_pyiceberg_and_duckdb(tmp_path):
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    written = rows_of("dag_a", 3)
    assert LakeStatusTable(catalog(properties).handle()).refresh(written) == 3
    columns = ["table_name", "status", "tiering_epoch", "last_tiered_time", "last_error", "last_error_time",
               "quarantined", "consecutive_failures", "last_round_rows", "snapshot_id", "airflow_dag_id"]  # fmt: skip
    by_duckdb = {row[0]: row for row in duckdb_lake_rows(properties, IDENTIFIER, columns)}
    by_pyiceberg = {
        row["table_name"]: tuple(row[c] for c in columns)
        for row in load_catalog("default", **properties).load_table(IDENTIFIER).scan().to_arrow().to_pylist()
    }
    assert by_duckdb == by_pyiceberg
    healthy, failed = by_duckdb["dag_a_0"], by_duckdb["dag_a_2"]
    assert healthy[1:3] == ("TIERED", 1) and healthy[3] == NOW and healthy[4] is None and healthy[6] is False
    assert failed[1] == "FAILED" and failed[4] == "boom" and failed[5] == NOW and failed[6] is True
    assert healthy[8] == 10 and healthy[9] == 1000 and healthy[10] == "dag_a"


def test_a_catalog_out_of_reach_fails_no_refresh_caller_and_the_next_refresh_catches_up(
    tmp_path, monkeypatch, caplog, capsys
):
    """A refresh against a catalog that cannot be reached returns False, logs the reason with the catalog's secret
    masked, and raises nothing (a summary task or a reset goes on as it would); once the catalog is back, the next
    refresh writes every row."""
    secret = "catalog-Secret-91fe"
    out_of_reach = {"type": "sql", "uri": f"postgresql+psycopg://tiering:{secret}@127.0.0.1:9/nowhere",
                    "warehouse": f"file://{tmp_path}/wh"}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_STATUS", json.dumps({"conn_type": "iceberg", "extra": out_of_reach}))
    with caplog.at_level(logging.WARNING, logger="airflow_provider_tiering.hooks.status_table"):
        assert refresh_status_tables({"iceberg_status": rows_of("dag_a", 2)}) is False
    said = caplog.text + capsys.readouterr().out  # Airflow's logging, once configured, writes to stdout
    assert "not refreshed (the next refresh catches up)" in said and secret not in said
    reachable = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_STATUS", json.dumps({"conn_type": "iceberg", "extra": reachable}))
    assert refresh_status_tables({"iceberg_status": rows_of("dag_a", 2)}) is True
    table = load_catalog("iceberg_status", **reachable).load_table(IDENTIFIER)
    assert sorted(table.scan().to_arrow().column("table_name").to_pylist()) == ["dag_a_0", "dag_a_1"]


def test_old_snapshots_and_the_files_only_they_held_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(status_table, "KEEP_FOR", timedelta(0))
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    for number in range(1, 13):
        LakeStatusTable(catalog(properties).handle()).refresh(rows_of("dag_a", 2, round_number=number))
    table = load_catalog("default", **properties).load_table(IDENTIFIER)
    assert len(table.snapshots()) <= status_table.KEEP_SNAPSHOTS + 1
    data = list((tmp_path / "wh").rglob("*.parquet"))
    assert len(data) <= len(table.snapshots()) + 1, data
    assert {r["tiering_epoch"] for r in table.scan().to_arrow().to_pylist()} == {12}
