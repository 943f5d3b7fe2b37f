"""The README's DAGs beyond one machine: Airflow's CeleryExecutor, Redis (Debian's) its broker, two workers each with
a home and a temporary directory of its own, beside today's LocalExecutor, on the same hot tables.

Four tables, each on its own clock (``build_table_dags``): appended (in splits, so each round starts a local Spark
session in the worker's task), merged by key (soft deletes), tiered from PostgreSQL's change stream, and one behind a
wrong password. Each deployment has its own metadata DB and its own lake
in production form (a SQL catalog on PostgreSQL, the warehouse on the S3 server); the Celery one keeps its
connections in its metadata DB, so its workers hold none in their environment, and their ambient AWS variables point
elsewhere. Both tier the same two rounds of the same hot rows. Afterwards each lake equals its hot table, and the
Celery deployment shows what the LocalExecutor's does: the task outcomes, every table's state, the status table's
rows, the history table's rounds and the Tiering page's REST API. Both workers ran tasks, each writing only into its
own home."""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.celery_workers import CeleryWorkers
from testbed.changing_table import ChangingTable, assert_lake_equals_hot
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.mutable_tables import MutableHot, assert_lake_equals_live_rows, postgres_mutable
from testbed.pg_server import drop_table_slot
from testbed.redis_server import RedisServer
from testbed.s3_server import wrong_aws_environment
from testbed.tiering_env import metadata_db, pg_conn, postgres_catalog
from tests.fixtures_servers import LAKE_BUCKET

GROUP = "cx"
APPENDED, MERGED, STREAMED, BROKEN = "cx_orders", "cx_accounts", "cx_ledger", "cx_broken"
TABLES = (APPENDED, MERGED, STREAMED, BROKEN)
WRONG_PASSWORD = "wrong-pw-celery-5e2b"
EXECUTORS = ("local", "celery")


def dag_file(slot: str) -> str:
    """The group's DAGs; each deployment streams the change-stream table through a slot of its own."""
    return textwrap.dedent(
        f'''
        """Four tables, each in its own DAG: appended, merged, from the change stream, behind a wrong password."""
        from airflow_provider_tiering.dag_factory import build_table_dags

        COMMON = {{"freshness_seconds": 3600, "retries": 0, "maintenance": {{"enabled": False}}}}


        def table(name, source, **options):
            lake = {{"namespace": "{GROUP}", "table": name}}
            return {{"name": name, "source": {{"table": name, **source}}, "lake": lake, **COMMON, **options}}


        build_table_dags(
            "{GROUP}",
            [
                table("{APPENDED}", {{"conn_id": "hot_pg", "cursor_column": "id"}}, target_rows_per_split=250),
                table("{MERGED}", {{"conn_id": "hot_pg", "cursor_column": "version"}},
                      merge={{"primary_key": ["id"], "soft_delete_column": "deleted_at"}}),
                table("{STREAMED}", {{"kind": "postgres_cdc", "conn_id": "hot_pg", "slot_name": "{slot}"}}),
                table("{BROKEN}", {{"conn_id": "hot_broken", "cursor_column": "id"}}),
            ],
            status_schedule=None,
        )
        '''
    )


class HotTables:
    """The four hot tables, changed between rounds the same way for both deployments."""

    def __init__(self, dsn: str) -> None:
        self.appended = PostgresHot(dsn)
        self.merged: MutableHot = postgres_mutable(dsn, MERGED, seed=11)
        self.streamed = ChangingTable(dsn, STREAMED, seed=12)
        self.next_id = 1

    def create(self) -> None:
        for name in (APPENDED, BROKEN):
            self.appended.create(name)
        self.merged.create()
        self.streamed.create()
        self.appended.insert(BROKEN, 1, 50)
        self.grow(first=True)

    def grow(self, *, first: bool = False) -> None:
        self.appended.insert(APPENDED, self.next_id, 700)
        self.next_id += 700
        if first:
            self.merged.insert(400)
            self.streamed.insert(400)
        else:
            self.merged.random_changes(inserts=30, updates=60, deletes=20, undeletes=5)
            self.streamed.random_changes(150)


def deployment_connections(pg_server: Any, catalog: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The deployment's connections, as REST bodies: the hot server, the same behind a wrong password, the catalog."""
    return {
        "hot_pg": json.loads(pg_conn(pg_server, pg_server.password)),
        "hot_broken": json.loads(pg_conn(pg_server, WRONG_PASSWORD)),
        "iceberg_default": {"conn_type": "iceberg", "extra": json.dumps({"name": "default", **catalog})},
    }


@pytest.fixture
def deployments(pg_server, s3_server, tmp_path: Path) -> Iterator[dict[str, tuple[AirflowCluster, dict[str, str]]]]:
    """Both deployments, started: a LocalExecutor on the embedded SQLite metadata DB (connections in its environment)
    and a CeleryExecutor on a PostgreSQL one (connections in its metadata DB), each with its own lake."""
    found: dict[str, tuple[AirflowCluster, dict[str, str]]] = {}
    started: list[AirflowCluster] = []
    with RedisServer(tmp_path / "redis") as redis:
        try:
            for executor in EXECUTORS:
                root = tmp_path / executor
                dags = root / "dags"
                dags.mkdir(parents=True)
                (dags / "tiering_dags.py").write_text(dag_file(slot_name(executor)))
                warehouse = f"s3://{LAKE_BUCKET}/{uuid.uuid4().hex[:12]}/warehouse"
                catalog = {**postgres_catalog(pg_server, warehouse), **s3_server.storage_properties()}
                connections = deployment_connections(pg_server, catalog)
                overrides: dict[str, dict[str, str]] = {
                    "core": {"dags_are_paused_at_creation": "True"},
                    "dag_processor": {"min_file_process_interval": "120"},  # the file never changes: parse it rarely
                }
                env = wrong_aws_environment()
                celery = None
                if executor == "local":
                    env.update({f"AIRFLOW_CONN_{c.upper()}": json.dumps(body) for c, body in connections.items()})
                else:
                    overrides.update(metadata_db("postgres", pg_server))
                    celery = CeleryWorkers(redis.url(0), redis.url(1), root)
                cluster = AirflowCluster(
                    home=root / "airflow", dags_folder=dags, extra_env=env, config_overrides=overrides, celery=celery,
                    expected_dag_ids=[f"{GROUP}.{t}" for t in TABLES] + [GROUP],
                )  # fmt: skip
                cluster.start()
                started.append(cluster)
                if executor == "celery":
                    for conn_id, body in connections.items():
                        cluster.post("/api/v2/connections", json={"connection_id": conn_id, **body})
                found[executor] = (cluster, catalog)
            yield found
        finally:
            for cluster in started:
                cluster.stop()
            for executor in EXECUTORS:
                drop_table_slot(pg_server.dsn, STREAMED, slot=slot_name(executor))


def slot_name(executor: str) -> str:
    return f"tiering_{STREAMED}_{executor}"


def dag_runs(af: AirflowCluster, dag_id: str) -> list[dict[str, Any]]:
    return list(af.get(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", params={"order_by": "run_after"})["dag_runs"])


def wait_for_runs(af: AirflowCluster, dag_ids: list[str], count: int, timeout: float = 420) -> dict[str, str]:
    """Wait until each DAG has ``count`` runs, its last one ended; the last run's state by DAG id."""
    deadline = time.monotonic() + timeout
    while True:
        ended = {}
        for dag_id in dag_ids:
            runs = dag_runs(af, dag_id)
            if len(runs) >= count and runs[-1]["state"] in ("success", "failed"):
                ended[dag_id] = runs[-1]["state"]
        if len(ended) == len(dag_ids):
            return ended
        if time.monotonic() > deadline:
            pending = sorted(set(dag_ids) - set(ended))
            raise AssertionError(f"runs of {pending} not ended after {timeout:.0f} s\n{af.diagnostics()}")
        time.sleep(1.0)


def tier_round(af: AirflowCluster, number: int) -> dict[str, str]:
    """Round ``number`` of every table: the first as its DAG's first scheduled run (once unpaused), the next ones
    as manual runs (the next scheduled one is an hour away). The run states by table."""
    dag_ids = [f"{GROUP}.{t}" for t in TABLES]
    for dag_id in dag_ids:
        if number == 1:
            af.unpause(dag_id)
        else:
            af.trigger_dag(dag_id)
    ended = wait_for_runs(af, dag_ids, number)
    return {dag_id.removeprefix(f"{GROUP}."): state for dag_id, state in ended.items()}


def state_view(state: dict[str, Any]) -> dict[str, Any]:
    """What a table's state says that does not depend on where or when its rounds ran (times, snapshot ids, the
    change stream's log positions, byte counts of files and the error's wording aside)."""
    last = state.get("last_round") or {}
    committed = state.get("committed") or {}
    return {
        "status": state["status"],
        "epoch": state["epoch"],
        "mode": state.get("mode"),
        "merge_key": state.get("merge_key"),
        "committed_epoch": committed.get("epoch"),
        "offsets": committed.get("end_offsets") if state.get("mode") != "change_stream" else None,
        "failed": state["last_error"] is not None,
        "consecutive_failures": state["consecutive_failures"],
        "quarantined": state["quarantined_since"] is not None,
        "last_round": {k: last.get(k) for k in ("rows", "splits", "inserted_rows", "updated_rows", "deleted_rows")},
    }


STATUS_COLUMNS = (
    "database_name", "table_name", "tiered_table", "status", "tiering_epoch", "airflow_asset", "airflow_dag_id",
    "quarantined", "consecutive_failures", "last_round_rows", "backlog_rows",
)  # fmt: skip
HISTORY_COLUMNS = (
    "tiered_table", "airflow_dag_id", "tiering_epoch", "outcome", "rows_in", "rows_inserted", "rows_updated",
    "rows_deleted",
)  # fmt: skip


def status_rows(catalog: dict[str, str]) -> dict[str, dict[str, Any]]:
    table = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_status"))
    rows = table.scan().to_arrow().to_pylist()
    return {
        r["tiered_table"]: {**{c: r[c] for c in STATUS_COLUMNS}, "failed": r["last_error"] is not None} for r in rows
    }


def history_rows(catalog: dict[str, str]) -> list[tuple[Any, ...]]:
    table = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_history"))
    rows = table.scan().to_arrow().to_pylist()
    return sorted((*(r[c] for c in HISTORY_COLUMNS), r["error"] is not None) for r in rows)


def page_view(af: AirflowCluster) -> dict[str, Any]:
    """What the Tiering page shows, from its REST API: every table's row, and each table's rounds in its data-age
    chart (read from the history table through the table's catalog connection)."""
    listed = af.get("/tiering/api/tables")["tables"]
    rows = {r["table"]: {k: r[k] for k in ("status", "epoch", "consecutive_failures", "mode")} for r in listed}
    ages = {}
    for table in TABLES:
        found = af.get(f"/tiering/api/tables/{table}/data-age")
        assert found["unavailable"] is None, found
        ages[table] = [(r["epoch"], r["outcome"], r["rows_in"]) for r in found["rounds"]]
    return {"tables": rows, "data_age": ages}


@pytest.mark.timeout(1500)
def test_the_celery_executor_with_two_workers_tiers_and_reports_as_the_local_executor(pg_server, deployments) -> None:
    hot = HotTables(pg_server.dsn)
    hot.create()
    outcomes: dict[str, list[dict[str, str]]] = {executor: [] for executor in EXECUTORS}
    try:
        for number in (1, 2):
            if number > 1:
                hot.grow()
            for executor in EXECUTORS:  # one after the other: both tier exactly the same hot rows
                af, catalog = deployments[executor]
                outcomes[executor].append(tier_round(af, number))
                assert digest(lake_rows(catalog, (GROUP, APPENDED), COLUMNS)) == digest(hot.appended.rows(APPENDED))
                assert_lake_equals_live_rows(hot.merged, catalog, (GROUP, MERGED))
                assert_lake_equals_hot(hot.streamed, catalog, (GROUP, STREAMED))
        expected_runs = {APPENDED: "success", MERGED: "success", STREAMED: "success", BROKEN: "failed"}
        assert outcomes["celery"] == outcomes["local"] == [expected_runs, expected_runs]

        views: dict[str, dict[str, Any]] = {}
        for executor in EXECUTORS:
            af, catalog = deployments[executor]
            af.unpause(GROUP)
            run_id = af.trigger_dag(GROUP)
            # No table is stale yet (an hour's freshness): the broken table's failures fail its own DAG's runs only.
            assert af.wait_for_run(GROUP, run_id, timeout=300) == "success", af.task_instances(GROUP, run_id)
            states = {t: af.asset_state_store(f"tiering/{GROUP}/{t}")["tiering_state"] for t in TABLES}
            assert "password authentication failed" in states[BROKEN]["last_error"]
            assert WRONG_PASSWORD not in json.dumps(states)
            views[executor] = {
                "states": {t: state_view(s) for t, s in states.items()},
                "status": status_rows(catalog),
                "history": history_rows(catalog),
                "page": page_view(af),
            }
        local, celery = views["local"], views["celery"]
        assert celery["states"] == local["states"]
        appended = celery["states"][APPENDED]
        assert appended["status"] == "TIERED" and appended["epoch"] == 2
        assert appended["last_round"]["splits"] > 1  # written on Spark, started in the worker's task
        assert celery["status"] == local["status"] and set(celery["status"]) == set(TABLES)
        assert celery["history"] == local["history"]
        assert celery["page"] == local["page"]
        assert [outcome for _, outcome, _ in celery["page"]["data_age"][BROKEN]] == ["failed", "failed"]
        assert [row[3] for row in celery["history"]].count("tiered") == 6  # three tables, two rounds each

        # Both workers ran tasks, each logging into its own home: 8 table rounds and the status task in all.
        af, _ = deployments["celery"]
        workers = af.celery
        assert workers is not None
        logs = {name: workers.task_logs(name) for name in workers.names}
        assert all(logs.values()), {name: len(found) for name, found in logs.items()}
        assert sum(len(found) for found in logs.values()) == 9, logs
        assert not list((af.home / "logs").glob("dag_id=*")), "a task logged into the scheduler's home"
    finally:
        hot.streamed.close()
