"""A hot table dropped and created again under the same name, through the path a user runs: DAG runs under a real
scheduler, LocalExecutor and triggerer, on PostgreSQL 15. A due table at rest is probed before its round ("nothing
new?"); the probe compares the hot table's identity and shape with what the last round recorded, so a re-created
table runs its round, which refuses it, on the first run after the change: its task fails at once (no retry, though
it has retries), naming the change and both ways out, and the lake keeps what it had. In every mode (append, merge by
key, change stream: re-created empty, and with rows the old table's slot never sees), for the tier operator with its
probe and for the deferrable due sensor (whose trigger probes while the table changes under it). The two paths must
agree: the same table kinds end the same way with the same error."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.shape_tables import PostgresShapeTable
from testbed.tiering_env import tiering_setup

OPERATOR_DAG = "shape_operator"
SENSOR_DAG = "shape_sensor"
#: The tables of each DAG: mode, and whether the re-created table gets rows.
KINDS = {"append": ("append", False), "merge": ("merge", False), "cdc": ("change_stream", False),
         "cdc_rows": ("change_stream", True)}  # fmt: skip
PREFIX = {OPERATOR_DAG: "op", SENSOR_DAG: "sn"}

DAGS = textwrap.dedent(
    f'''
    """The same four tables twice: tiered by the tier operator alone, and behind the deferrable due sensor."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    KINDS = {KINDS!r}


    def table(prefix, kind):
        mode, _ = KINDS[kind]
        name = f"{{prefix}}_{{kind}}"
        if mode == "change_stream":
            source = {{"kind": "postgres_cdc", "conn_id": "hot_pg", "table": name}}
        else:
            source = {{"conn_id": "hot_pg", "table": name, "cursor_column": "id" if mode == "append" else "ver",
                       "max_watermark_wait_seconds": 5}}
        spec = {{"name": name, "source": source, "lake": {{"namespace": "reshaped", "table": name}},
                 "freshness_seconds": 1, "retries": 2, "retry_delay_seconds": 1,
                 "maintenance": {{"enabled": False}}}}
        if mode == "merge":
            spec["merge"] = {{"primary_key": ["id"]}}
        return spec


    operator = build_tiering_dag("{OPERATOR_DAG}", [table("op", kind) for kind in KINDS])
    sensor = build_tiering_dag("{SENSOR_DAG}", [table("sn", kind) for kind in KINDS], wait_until_due=True,
                               due_timeout=600, due_poke_interval=2)
    '''
)


def tier_task(dag_id: str, name: str) -> str:
    return f"{name}.tier" if dag_id == SENSOR_DAG else name


def snapshot_id(catalog: dict[str, str], name: str) -> int | None:
    snapshot = load_catalog("default", **catalog).load_table(("reshaped", name)).current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id


def try_numbers(af: AirflowCluster, dag_id: str, run_id: str) -> dict[str, Any]:
    found = af.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    return {ti["task_id"]: ti["try_number"] for ti in found}


@pytest.mark.timeout(1200)
def test_a_recreated_table_fails_its_task_at_once_through_the_operator_and_the_sensor(pg_server, tmp_path: Path):
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, "not-the-password-0c2e")
    hot: dict[str, PostgresShapeTable] = {}
    for prefix in PREFIX.values():
        for kind in KINDS:
            name = f"{prefix}_{kind}"
            hot[name] = PostgresShapeTable(pg_server.dsn, name)
            hot[name].create(50)
    try:
        with AirflowCluster(
            home=tmp_path / "airflow",
            dags_folder=dags,
            extra_env=env,
            expected_dag_ids=list(PREFIX),
            with_triggerer=True,
        ) as af:
            for dag_id in PREFIX:  # every table tiered once: the lake holds its rows, its state is at rest
                first = af.trigger_dag(dag_id)
                assert af.wait_for_run(dag_id, first, timeout=400) == "success", af.task_instances(dag_id, first)

            # The sensors' run starts before the change: each sensor finds nothing new and defers to its trigger,
            # which probes every 2 s; the tables are then re-created under it.
            waiting = af.trigger_dag(SENSOR_DAG)
            for kind in KINDS:
                af.wait_for_task(SENSOR_DAG, waiting, f"sn_{kind}.due", {"deferred"}, timeout=300)
            before = {name: snapshot_id(catalog, name) for name in hot}
            for name, table in hot.items():
                table.script(table.change_sql("recreate"))  # dropped and created again, empty
                if KINDS[name.split("_", 1)[1]][1]:
                    table.insert_full(300, start=1, salt="new-")  # rows the old table's slot never sees
            runs = {SENSOR_DAG: waiting, OPERATOR_DAG: af.trigger_dag(OPERATOR_DAG)}

            errors: dict[tuple[str, str], str] = {}
            for dag_id, run_id in runs.items():
                assert af.wait_for_run(dag_id, run_id, timeout=400) == "failed"
                states, tries = af.task_instances(dag_id, run_id), try_numbers(af, dag_id, run_id)
                for kind in KINDS:
                    name = f"{PREFIX[dag_id]}_{kind}"
                    task = tier_task(dag_id, name)
                    assert states[task] == "failed", (task, states)
                    assert tries[task] == 1, f"{task} was retried: a re-created table is refused for good"
                    log = af.task_log(dag_id, run_id, task, 1)
                    state = af.asset_state_store(f"tiering/reshaped/{name}")["tiering_state"]
                    error = state["last_error"] or ""
                    for words in ("dropped and created again", "drop lake table", "--adopt-hot-table"):
                        assert words in error, f"{name}: {words!r} not in {error!r}"
                        assert words in log, f"{name}: {words!r} not in its task log"
                    assert state["quarantined_since"] is not None and state["replaced_hot_table"] is not None
                    assert snapshot_id(catalog, name) == before[name]  # nothing committed
                    errors[(dag_id, kind)] = error.replace(name, "<table>")
                if dag_id == SENSOR_DAG:
                    # Deferred before the change, each sensor succeeded only because its trigger's probe saw the
                    # change (with nothing new it would have waited out due_timeout, past this run's wait).
                    assert all(states[f"sn_{kind}.due"] == "success" for kind in KINDS), (states, tries)
                log = af.task_log(dag_id, run_id, tier_task(dag_id, f"{PREFIX[dag_id]}_cdc"), 1)
                assert "its hot table changed since the last round" in log, log[-2000:]
            for kind in KINDS:  # the operator's probe and the sensor's path agree
                assert _without_ids(errors[(OPERATOR_DAG, kind)]) == _without_ids(errors[(SENSOR_DAG, kind)])
    finally:
        for table in hot.values():
            table.close()


def _without_ids(text: str) -> str:
    """An error without the table ids it names (each table has its own)."""
    import re

    return re.sub(r"\d+", "N", text)
