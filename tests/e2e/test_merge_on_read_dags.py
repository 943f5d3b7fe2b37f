"""Merge-on-read through the path a user runs: DAG runs under a real scheduler and LocalExecutor tier a PostgreSQL
table merged by key and one from its change stream, with scattered updates and deletes between runs. The rounds
leave position-delete files (the status shows them, through the CLI), each table's maintenance task applies them once
enough pile up, and after every run the lake equals the hot table by key through pyiceberg, the Parquet files with
their deletes applied, and DuckDB's Iceberg reader."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.changing_table import ChangingTable, assert_lake_equals_hot
from testbed.mutable_tables import assert_lake_equals_live_rows_in_files, postgres_mutable
from testbed.pg_server import drop_table_slot
from testbed.tiering_env import tiering_setup
from tests.e2e.test_cli import cli

DAG_ID = "tiering_mutable"
MERGED, STREAMED = "mor_accounts", "mor_ledger"
#: Maintenance after every round, compacting a file once three delete files apply to it.
MAINTENANCE = {"enabled": True, "interval_seconds": 0, "max_delete_files": 3, "snapshot_retention_seconds": 1}
#: The change stream's rounds hold more keys than this: the plan types them in chunks kept on local disk, which the
#: round writes without reading the slot again.
KEYS_IN_MEMORY = 100

DAG_FILE = textwrap.dedent(
    f'''
    """A table merged by key and one tiered from its change stream, each with its maintenance task."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    COMMON = {{"freshness_seconds": 1, "retries": 0, "maintenance": {MAINTENANCE!r}}}

    dag = build_tiering_dag(
        "{DAG_ID}",
        [
            {{"name": "{MERGED}", "lake": {{"namespace": "mor", "table": "{MERGED}"}},
              "source": {{"conn_id": "hot_pg", "table": "{MERGED}", "cursor_column": "version"}},
              "merge": {{"primary_key": ["id"], "soft_delete_column": "deleted_at"}}, **COMMON}},
            {{"name": "{STREAMED}", "lake": {{"namespace": "mor", "table": "{STREAMED}"}},
              "source": {{"kind": "postgres_cdc", "conn_id": "hot_pg", "table": "{STREAMED}",
                          "keys_in_memory": {KEYS_IN_MEMORY}}}, **COMMON}},
        ],
    )
    '''
)


def live_delete_files(catalog: dict[str, str], name: str) -> int:
    table = load_catalog("default", **catalog).load_table(("mor", name))
    return len(table.inspect.delete_files())


@pytest.mark.timeout(1200)
def test_scattered_changes_through_dag_runs_delete_by_position_and_maintenance_applies_them(
    pg_server, tmp_path: Path
) -> None:
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, "not-the-password-44aa")
    merged = postgres_mutable(pg_server.dsn, MERGED, seed=3)
    merged.create()
    merged.insert(2000)
    streamed = ChangingTable(pg_server.dsn, STREAMED, seed=4)
    streamed.create()
    streamed.insert(2000)
    seen_deletes = {MERGED: 0, STREAMED: 0}
    run_ids: list[str] = []
    try:
        cluster = AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID])
        with cluster as af:
            for run in range(5):
                if run:
                    merged.random_changes(inserts=10, updates=40, deletes=10, undeletes=3)
                    streamed.random_changes(3 * KEYS_IN_MEMORY)
                run_id = af.trigger_dag(DAG_ID)
                run_ids.append(run_id)
                assert af.wait_for_run(DAG_ID, run_id, timeout=400) == "success", af.task_instances(DAG_ID, run_id)
                assert set(af.task_instances(DAG_ID, run_id).values()) == {"success"}
                assert_lake_equals_live_rows_in_files(merged, catalog, ("mor", MERGED), duckdb=True)
                assert_lake_equals_hot(streamed, catalog, ("mor", STREAMED), duckdb=True)
                for name in (MERGED, STREAMED):
                    seen_deletes[name] = max(seen_deletes[name], live_delete_files(catalog, name))

            # The change rounds were typed in chunks while planned, and written from them: the slot read once.
            logs = [af.task_log(DAG_ID, run_id, STREAMED) for run_id in run_ids[1:]]
            assert all("chunks while planning" in log for log in logs), logs[0][-3000:]

            # Rounds of scattered changes wrote delete files; maintenance compacted the files three applied to.
            for name in (MERGED, STREAMED):
                doc = af.asset_state_store(f"tiering/mor/{name}")
                state, maintenance = doc["tiering_state"], doc["tiering_maintenance"]
                merge = state["last_round"]["merge"]
                assert merge["files_given_deletes"] >= 1 and merge["rows_deleted_by_position"] >= 1, merge
                assert seen_deletes[name] >= 2, (name, seen_deletes)
                assert maintenance["last_compaction"] is not None, maintenance
                assert maintenance["last_compaction"]["outcome"] == "compacted", maintenance
                now = live_delete_files(catalog, name)
                assert maintenance["delete_files"] == now < seen_deletes[name] + 1, (maintenance, now)

                # The status a person reads: the CLI's JSON and its text view.
                shown = cli(af, "status", name, "-o", "json")
                assert shown.returncode == 0, shown.stderr
                record = json.loads(shown.stdout)
                assert record["lake_delete_files"] == now and record["lake_deleted_rows"] is not None
                assert record["maintenance"]["delete_files"] == now
                text = cli(af, "status", name).stdout
                assert "delete files (lake)" in text and "rows deleted by position (last round)" in text, text
    finally:
        streamed.close()
        drop_table_slot(pg_server.dsn, STREAMED)
