"""A whole PostgreSQL schema of 50 tables declared once, tiered through DAG runs under a real scheduler and
LocalExecutor: append and merge tables found by the rules, change-stream tables named by overrides (read through the
database's one slot), tables skipped with their reasons (no cursor, excluded), one broken table that fails only its
own mapped task instance, tables created and dropped between runs. Only tables with changes start a task, each forked
with the round's modules already imported (the scheduler's preload); after each run the lake equals the hot table for
every tiered table (pyiceberg and DuckDB, by key for merge tables), and the CLI shows the database's tables with their
reasons."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from testbed.airflow_cluster import AirflowCluster, task_span
from testbed.lake_check import assert_lake_equals_rows
from testbed.tiering_env import embedded_setup
from tests.e2e.test_cli import cli

SCHEMA, DAG_ID, DATABASE = "shop", "shop_tiering", "shop"
APPEND = [f"a_{n:02d}" for n in range(18)]
MERGE = [f"m_{n:02d}" for n in range(17)]
STREAMED = [f"c_{n}" for n in range(5)]
NO_CURSOR = [f"n_{n}" for n in range(5)]
EXCLUDED = [f"tmp_{n}" for n in range(4)]
BROKEN = "b_wide"
COLUMNS = {"append": ["id", "payload"], "merge": ["id", "name", "deleted", "updated_at"], "stream": ["id", "name"]}

DECLARATION = {
    "name": DATABASE,
    "conn_id": "hot_pg",
    "schemas": [SCHEMA],
    "exclude": ["tmp_*"],
    "lake": {"namespace": "shop_lake"},
    "merge": {"soft_delete_column": "deleted"},
    "table_defaults": {"freshness_seconds": 1, "retries": 0, "maintenance": {"enabled": False}},
    "tables": {table: {"mode": "change_stream"} for table in STREAMED},
    "change_stream": {"stream": {"retries": 0}},
    "probe_every_seconds": 3600,
}

#: What the scheduler's listener imports for its LocalExecutor's task processes (plugins/preload.py), none of which the
#: DAG file imports: a task finds them imported only if it was forked from a preloaded worker.
PRELOADED = ["airflow_provider_tiering.build", "pyiceberg.io.pyarrow", "pandas", "psycopg"]
PROBE_DAG_ID = "preload_probe"

DAG_FILE = textwrap.dedent(
    f"""
    import sys

    from airflow.sdk import dag, task

    from airflow_provider_tiering.dag_factory import build_database_dag

    dag_ = build_database_dag({DAG_ID!r}, {DECLARATION!r}, schedule=None)


    @dag(dag_id={PROBE_DAG_ID!r}, schedule=None)
    def preload_probe():
        @task
        def imported_at_start() -> list[str]:
            return [name for name in {PRELOADED!r} if name in sys.modules]

        imported_at_start()


    preload_probe()
    """
)


class Shop:
    """The hot schema, as the test changes it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.modes: dict[str, str] = {}

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, params or None)

    def create(self, table: str, mode: str, rows: int = 50) -> None:
        ref = f'"{SCHEMA}"."{table}"'
        if mode == "append":
            self.run(f"CREATE TABLE {ref} (id bigint PRIMARY KEY, payload text)")
            self.run(f"INSERT INTO {ref} SELECT g, md5(g::text) FROM generate_series(1, %s) g", (rows,))
        elif mode == "merge":
            self.run(f"CREATE TABLE {ref} (id bigint PRIMARY KEY, name text, deleted boolean NOT NULL DEFAULT false, "
                     "updated_at timestamptz NOT NULL DEFAULT clock_timestamp())")  # fmt: skip
            self.run(f"INSERT INTO {ref} (id, name) SELECT g, 'n' || g FROM generate_series(1, %s) g", (rows,))
        elif mode == "stream":
            self.run(f"CREATE TABLE {ref} (id bigint PRIMARY KEY, name text)")
            self.run(f"INSERT INTO {ref} SELECT g, 'n' || g FROM generate_series(1, %s) g", (rows,))
        elif mode == "wide":  # a column no Iceberg type holds: its rounds fail, loudly
            self.run(f"CREATE TABLE {ref} (id bigint PRIMARY KEY, amount numeric(50, 2))")
            self.run(f"INSERT INTO {ref} SELECT g, g FROM generate_series(1, 5) g")
        else:
            self.run(f"CREATE TABLE {ref} (body text)")
        self.modes[table] = mode

    def append(self, table: str, rows: int) -> None:
        self.run(f'INSERT INTO "{SCHEMA}"."{table}" SELECT max_id + g, md5(g::text) FROM generate_series(1, %s) g, '
                 f'(SELECT max(id) AS max_id FROM "{SCHEMA}"."{table}") m', (rows,))  # fmt: skip

    def change(self, table: str) -> None:
        """Update some rows, soft-delete others (each change moves the merge cursor)."""
        ref = f'"{SCHEMA}"."{table}"'
        self.run(f"UPDATE {ref} SET name = name || '!', updated_at = clock_timestamp() WHERE id % 7 = 0")
        self.run(f"UPDATE {ref} SET deleted = true, updated_at = clock_timestamp() WHERE id % 11 = 0")

    def stream_changes(self, table: str) -> None:
        """Update, delete (hard: the stream sees it) and insert."""
        ref = f'"{SCHEMA}"."{table}"'
        self.run(f"UPDATE {ref} SET name = name || '?' WHERE id % 5 = 0")
        self.run(f"DELETE FROM {ref} WHERE id % 13 = 0")
        self.run(f"INSERT INTO {ref} SELECT g, 'late' || g FROM generate_series(1001, 1010) g")

    def drop(self, table: str) -> None:
        self.run(f'DROP TABLE "{SCHEMA}"."{table}"')
        self.modes.pop(table)

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        mode = self.modes[table]
        where = " WHERE NOT deleted" if mode == "merge" else ""
        with psycopg.connect(self.dsn) as conn:
            columns = ", ".join(COLUMNS[mode])
            return conn.execute(f'SELECT {columns} FROM "{SCHEMA}"."{table}"{where}').fetchall()

    def assert_lake_equals_hot(self, catalog: dict[str, str], tables: list[str]) -> None:
        for table in tables:
            mode = self.modes[table]
            columns = COLUMNS[mode] if mode != "merge" else COLUMNS[mode][:2]  # merge: compared by key and value
            rows = [row[: len(columns)] for row in self.rows(table)]
            assert_lake_equals_rows(catalog, ("shop_lake", table), columns, rows, by_key=True)


def mapped(af: AirflowCluster, run_id: str) -> dict[str, str | None]:
    """The run's tier task instances by the table each one tiered."""
    body = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
    return {
        ti["rendered_map_index"]: ti["state"]
        for ti in body["task_instances"]
        if ti["task_id"] == "tier" and ti["map_index"] >= 0
    }


def spans(af: AirflowCluster, run_id: str) -> dict[str, tuple[datetime, datetime]]:
    """When each of the run's tier task instances started and ended, by the table it tiered."""
    body = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
    return {
        ti["rendered_map_index"]: task_span(ti)
        for ti in body["task_instances"]
        if ti["task_id"] == "tier" and ti["map_index"] >= 0
    }


def run(af: AirflowCluster) -> tuple[str, dict[str, str | None]]:
    run_id = af.trigger_dag(DAG_ID)
    state = af.wait_for_run(DAG_ID, run_id, timeout=900)
    return state, mapped(af, run_id)


@pytest.fixture
def slot_dropped(pg_server: Any) -> Iterator[None]:
    """The database's slot does not outlive the test (it would hold WAL on the shared server)."""
    yield
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = 'tiering_group_shop'")  # fmt: skip


@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("slot_dropped")
def test_a_schema_of_fifty_tables_declared_once(pg_server: Any, tmp_path: Path) -> None:
    shop = Shop(pg_server.dsn)
    shop.run(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    shop.run(f'CREATE SCHEMA "{SCHEMA}"')
    for table in APPEND:
        shop.create(table, "append")
    for table in MERGE:
        shop.create(table, "merge")
    for table in STREAMED:
        shop.create(table, "stream")
    for table in NO_CURSOR + EXCLUDED:
        shop.create(table, "none" if table in NO_CURSOR else "append")
    shop.create(BROKEN, "wide")
    assert len(shop.modes) == 50
    tiered = APPEND + MERGE + STREAMED
    dags, catalog, env = embedded_setup(tmp_path, pg_server, DAG_FILE)
    with AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID, PROBE_DAG_ID]
    ) as af:
        # A task process finds the round's modules imported: the scheduler's listener imported them before it forked
        # its LocalExecutor's workers.
        probe_run = af.trigger_dag(PROBE_DAG_ID)
        assert af.wait_for_run(PROBE_DAG_ID, probe_run) == "success"
        xcom = af.get(f"/api/v2/dags/{PROBE_DAG_ID}/dagRuns/{quote(probe_run, safe='')}/taskInstances/"
                      "imported_at_start/xcomEntries/return_value")  # fmt: skip
        assert xcom["value"] == PRELOADED

        # The first run loads every table the rules tier; the broken one fails its own task (and the run).
        state, first = run(af)
        assert state == "failed"
        assert set(first) == {f"{SCHEMA}.{t}" for t in [*tiered, BROKEN]}
        assert first.pop(f"{SCHEMA}.{BROKEN}") == "failed"
        assert set(first.values()) == {"success"}
        shop.assert_lake_equals_hot(catalog, tiered)

        # Between runs: rows appended and changed in a few tables, a table created in each mode, one dropped.
        for table in APPEND[:3]:
            shop.append(table, 25)
        for table in MERGE[:3]:
            shop.change(table)
        for table in STREAMED[:2]:
            shop.stream_changes(table)
        shop.create("a_new", "append")
        shop.create("m_new", "merge")
        shop.drop(APPEND[-1])
        tiered = [*APPEND[:-1], *MERGE, *STREAMED, "a_new", "m_new"]
        state, second = run(af)
        assert state == "success", second
        changed = {f"{SCHEMA}.{t}" for t in [*APPEND[:3], *MERGE[:3], *STREAMED[:2], "a_new", "m_new"]}
        assert set(second) == changed  # the idle tables started no task; the quarantined one neither
        assert set(second.values()) == {"success"}
        shop.assert_lake_equals_hot(catalog, tiered)

        # Nothing changed: no table starts a task.
        state, third = run(af)
        assert state == "success" and third == {}

        # One table changes: it alone runs, then rests again.
        shop.append(APPEND[0], 5)
        state, fourth = run(af)
        assert state == "success" and fourth == {f"{SCHEMA}.{APPEND[0]}": "success"}
        state, fifth = run(af)
        assert state == "success" and fifth == {}
        shop.assert_lake_equals_hot(catalog, [APPEND[0]])

        # The status: every tiered table, and the database's skipped and dropped tables with their reasons.
        done = cli(af, "status", "-o", "json")
        assert done.returncode == 0, done.stderr
        records = {r["table"]: r for r in json.loads(done.stdout)}
        assert {f"{SCHEMA}.{t}" for t in tiered} <= set(records)
        assert records[f"{SCHEMA}.{BROKEN}"]["status"] == "FAILED"
        assert "numeric(50,2)" in (records[f"{SCHEMA}.{BROKEN}"]["last_error"] or "")
        done = cli(af, "database", DATABASE, "-o", "json")
        assert done.returncode == 0, done.stderr
        listed = {r["table"]: r for r in json.loads(done.stdout)}
        for table in NO_CURSOR:
            assert listed[f"{SCHEMA}.{table}"]["discovery"] == "skipped"
            assert "no cursor column" in listed[f"{SCHEMA}.{table}"]["reason"]
        for table in EXCLUDED:
            assert listed[f"{SCHEMA}.{table}"]["reason"] == "excluded by the glob 'tmp_*'"
        gone = listed[f"{SCHEMA}.{APPEND[-1]}"]
        assert gone["discovery"] == "dropped" and f"shop_lake.{APPEND[-1]} is kept" in gone["reason"]
        assert {listed[f"{SCHEMA}.{t}"]["mode"] for t in STREAMED} == {"change_stream"}
        with psycopg.connect(pg_server.dsn) as conn:  # one slot for the database's streamed tables
            slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'tiering%'")
            assert [r[0] for r in slots.fetchall()] == ["tiering_group_shop"]
        assert listed[f"{SCHEMA}.m_new"]["discovery"] == "tiered" and listed[f"{SCHEMA}.m_new"]["mode"] == "merge"

        # `airflow tiering trigger` names a discovered table: its DAG runs it alone (its mapped instance followed).
        shop.append(APPEND[1], 7)
        done = cli(af, "trigger", f"{SCHEMA}.{APPEND[1]}", "--wait", "-o", "json", timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout) == [{"table": f"{SCHEMA}.{APPEND[1]}", "state": "success", "outcome": "tiered"}]
        shop.assert_lake_equals_hot(catalog, [APPEND[1]])

        # Two runs at once (max_active_runs=2): the second's discovery finds the tables the first dispatched still
        # running there, and starts no second task beside any of them.
        busy = APPEND[4:10]
        for name in busy:
            shop.append(name, 11)
        first_run = af.trigger_dag(DAG_ID)
        second_run = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, first_run, timeout=900) == "success"
        assert af.wait_for_run(DAG_ID, second_run, timeout=900) == "success"
        ran_first, ran_second = spans(af, first_run), spans(af, second_run)
        assert set(ran_first) == {f"{SCHEMA}.{t}" for t in busy}
        flying = re.search(r"(\d+) still running in an earlier run", af.task_log(DAG_ID, second_run, "discover"))
        assert flying is not None and int(flying.group(1)) >= 1
        for name, (started, _) in ran_second.items():  # one that had finished may run again: after, not beside
            assert ran_first[name][1] <= started, name
        shop.assert_lake_equals_hot(catalog, busy)
