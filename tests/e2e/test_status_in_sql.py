"""Every table's status in SQL, where the lake is queried: ``sys.lake_tiering_status`` under a real scheduler and
LocalExecutor. Two DAGs run at once (three tables, one of them behind a wrong password, and two more); their summary
tasks refresh the catalog's status table, whatever the runs' outcomes, without losing each other's rows. Read back
with DuckDB's Iceberg reader and with pyiceberg: the broken table FAILED with its masked error and its time, the
others TIERED at their epochs. A reset from the CLI shows in it without another DAG run. A refresh that cannot write
(the status table's data directory blocked) leaves every task's outcome as it was, and the next one catches up.
``sys.lake_tiering_history`` holds a row per round, the failed one included, read back by both readers; a round whose
row cannot be appended (the history table's data directory blocked) tiers all the same, and the next round appends
both rows."""

from __future__ import annotations

import shutil
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import PostgresHot
from testbed.lake_check import duckdb_lake_rows
from testbed.tiering_env import table_function, tiering_setup
from tests.e2e.test_cli import cli

DAG_A, DAG_B = "status_sql_a", "status_sql_b"
WRONG_PASSWORD = "wrong-Status-pw-47d2"
STATUS = ("sys", "lake_tiering_status")
HISTORY = ("sys", "lake_tiering_history")
HISTORY_COLUMNS = ["tiered_table", "tiering_epoch", "outcome", "rows_in", "airflow_dag_id", "airflow_run_id", "error",
                   "started_at", "ended_at", "data_age_after_seconds"]  # fmt: skip
COLUMNS = ["table_name", "database_name", "status", "tiering_epoch", "last_tiered_time", "last_error",
           "last_error_time", "quarantined", "consecutive_failures", "airflow_dag_id", "as_of"]  # fmt: skip

DAGS = table_function("sqlstatus", retries=0, max_consecutive_failures=1, freshness_seconds=1) + textwrap.dedent(
    f'''
    """Two DAGs of one catalog: three tables (one behind a wrong password), and two more."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    first = build_tiering_dag("{DAG_A}", [table("sa_one"), table("sa_two"), table("sa_broken", "hot_broken")])
    second = build_tiering_dag("{DAG_B}", [table("sb_one"), table("sb_two")])
    '''
)


def status_rows(catalog: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The status table by table name, read with DuckDB, checked equal to what pyiceberg reads."""
    by_duckdb = {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in duckdb_lake_rows(catalog, STATUS, COLUMNS)}
    table = load_catalog("default", **catalog).load_table(STATUS)
    by_pyiceberg = {r["table_name"]: {c: r[c] for c in COLUMNS} for r in table.scan().to_arrow().to_pylist()}
    assert by_duckdb == by_pyiceberg
    return by_duckdb


def history_rows(catalog: dict[str, str]) -> list[dict[str, Any]]:
    """The history table's rows in round order per table, read with DuckDB, checked equal to what pyiceberg reads."""
    by_duckdb = [dict(zip(HISTORY_COLUMNS, row, strict=True)) for row in duckdb_lake_rows(catalog, HISTORY,
                                                                                          HISTORY_COLUMNS)]  # fmt: skip
    table = load_catalog("default", **catalog).load_table(HISTORY)
    by_pyiceberg = [{c: r[c] for c in HISTORY_COLUMNS} for r in table.scan().to_arrow().to_pylist()]
    order = lambda r: (r["tiered_table"], r["started_at"])  # noqa: E731
    assert sorted(by_duckdb, key=order) == sorted(by_pyiceberg, key=order)
    return sorted(by_duckdb, key=order)


@pytest.mark.timeout(900)
def test_the_status_table_shows_every_table_of_runs_at_once_and_a_reset(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for offset, name in enumerate(("sa_one", "sa_two", "sa_broken", "sb_one", "sb_two")):
        hot.create(name)
        hot.insert(name, 1, 100 + 10 * offset)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, WRONG_PASSWORD)
    with AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_A, DAG_B]
    ) as af:
        runs = {DAG_A: af.trigger_dag(DAG_A), DAG_B: af.trigger_dag(DAG_B)}  # both summaries refresh the table
        assert af.wait_for_run(DAG_A, runs[DAG_A], timeout=480) == "failed"
        assert af.wait_for_run(DAG_B, runs[DAG_B], timeout=480) == "success"

        rows = status_rows(catalog)
        assert sorted(rows) == ["sa_broken", "sa_one", "sa_two", "sb_one", "sb_two"]
        broken = rows["sa_broken"]
        assert broken["status"] == "FAILED" and broken["quarantined"] is True
        assert "password authentication failed" in broken["last_error"]
        assert WRONG_PASSWORD not in broken["last_error"] and pg_server.password not in broken["last_error"]
        assert isinstance(broken["last_error_time"], datetime) and broken["airflow_dag_id"] == DAG_A
        for name in ("sa_one", "sa_two", "sb_one", "sb_two"):
            row = rows[name]
            assert row["status"] == "TIERED" and row["tiering_epoch"] == 1, row
            assert isinstance(row["last_tiered_time"], datetime) and row["last_error"] is None, row
            assert row["database_name"] == "sqlstatus"
        history = history_rows(catalog)
        assert [(h["tiered_table"], h["tiering_epoch"], h["outcome"], h["rows_in"]) for h in history] == [
            ("sa_broken", 0, "failed", None), ("sa_one", 1, "tiered", 100), ("sa_two", 1, "tiered", 110),
            ("sb_one", 1, "tiered", 130), ("sb_two", 1, "tiered", 140),
        ]  # fmt: skip
        failed_round = history[0]
        assert "password authentication failed" in failed_round["error"] and WRONG_PASSWORD not in failed_round["error"]
        assert all(h["airflow_run_id"] == runs[h["airflow_dag_id"]] for h in history)
        for h in history:  # a round that caught up: the lake holds what the hot store had when the round read it
            took = (h["ended_at"] - h["started_at"]).total_seconds()
            assert took >= 0 and (h["outcome"] == "failed" or 0 <= h["data_age_after_seconds"] <= took), h

        # A reset from the CLI shows at once, without another DAG run.
        done = cli(af, "reset", "sa_broken")
        assert done.returncode == 0, done.stderr
        after_reset = status_rows(catalog)["sa_broken"]
        assert after_reset["quarantined"] is False and after_reset["consecutive_failures"] == 0
        assert after_reset["as_of"] > broken["as_of"]
        assert len(af.get(f"/api/v2/dags/{DAG_A}/dagRuns")["dag_runs"]) == 1

        # The status table cannot be written (its data directory blocked): the run ends as it would, its summary
        # says so, and the table keeps its rows; the next refresh catches up.
        data = Path(load_catalog("default", **catalog).load_table(STATUS).location().removeprefix("file://")) / "data"
        shutil.move(data, data.with_name("data-aside"))
        data.write_text("blocks the status table's data files")
        blocked = af.trigger_dag(DAG_B)
        assert af.wait_for_run(DAG_B, blocked, timeout=480) == "success"
        assert set(af.task_instances(DAG_B, blocked).values()) <= {"success", "skipped"}
        assert "not refreshed (the next refresh catches up)" in af.task_log(DAG_B, blocked, "tiering_summary", 1)
        data.unlink()
        shutil.move(data.with_name("data-aside"), data)
        assert status_rows(catalog)["sb_one"]["as_of"] == rows["sb_one"]["as_of"]
        time.sleep(1)
        caught_up = af.trigger_dag(DAG_B)
        assert af.wait_for_run(DAG_B, caught_up, timeout=480) == "success"
        assert status_rows(catalog)["sb_one"]["as_of"] > rows["sb_one"]["as_of"]

        # The history table cannot be appended to (its data directory blocked): the round tiers all the same, and
        # the table's next round appends its row with its own.
        hot.insert("sb_one", 131, 5)
        history_data = (
            Path(load_catalog("default", **catalog).load_table(HISTORY).location().removeprefix("file://")) / "data"
        )
        shutil.move(history_data, history_data.with_name("data-aside"))
        history_data.write_text("blocks the history table's data files")
        unrecorded = af.trigger_dag(DAG_B)
        assert af.wait_for_run(DAG_B, unrecorded, timeout=480) == "success"
        assert af.task_instances(DAG_B, unrecorded)["sb_one"] == "success"
        assert "round(s) not appended (the next round appends them)" in af.task_log(DAG_B, unrecorded, "sb_one", 1)
        history_data.unlink()
        shutil.move(history_data.with_name("data-aside"), history_data)
        hot.insert("sb_one", 136, 5)
        recorded = af.trigger_dag(DAG_B)
        assert af.wait_for_run(DAG_B, recorded, timeout=480) == "success"
        sb_one = [(h["tiering_epoch"], h["rows_in"], h["airflow_run_id"]) for h in history_rows(catalog)
                  if h["tiered_table"] == "sb_one"]  # fmt: skip
        assert sb_one == [(1, 130, runs[DAG_B]), (2, 5, unrecorded), (3, 5, recorded)], sb_one
