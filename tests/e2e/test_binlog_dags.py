"""MariaDB change streams through the path a user runs: DAG runs under a real scheduler, LocalExecutor and triggerer
tier MariaDB tables from the server's binlog, by the tier operator (its probe first) and behind the deferrable due
sensor, with inserts, updates, deletes, key changes and re-inserts between runs; after each run the lake equals the
hot table by key (pyiceberg, the Parquet files with their deletes, DuckDB). A table whose user may not read the binlog
fails its own task at once, naming the grant, its password masked, while its siblings tier and the summary fails the
run. A column added with a default and no row changed is seen by the sensor's probe (the table's shape), whose round
follows it. The CLI shows each table's binlog position and the binlog it still needs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.changing_table import ChangingMariaDBTable, assert_lake_equals_hot
from testbed.mariadb_server import MariaDBServer
from tests.e2e.test_cli import cli

OPERATOR_DAG, SENSOR_DAG = "binlog_operator", "binlog_sensor"
OPERATED, SENSED, BLIND = "bl_operated", "bl_sensed", "bl_blind"
BLIND_PASSWORD = "blind-pw-7f31c0"

DAGS = textwrap.dedent(
    f'''
    """MariaDB tables from their binlog: by the tier operator, and behind the deferrable due sensor."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag


    def table(name, conn_id="hot_maria"):
        return {{"name": name, "source": {{"kind": "mysql_cdc", "conn_id": conn_id, "table": name}},
                 "lake": {{"namespace": "binlog_dags", "table": name}}, "freshness_seconds": 1, "retries": 2,
                 "retry_delay_seconds": 1, "maintenance": {{"enabled": False}}}}


    operator = build_tiering_dag("{OPERATOR_DAG}", [table("{OPERATED}"), table("{BLIND}", "blind_maria")])
    sensor = build_tiering_dag("{SENSOR_DAG}", [table("{SENSED}")], wait_until_due=True, due_timeout=600,
                               due_poke_interval=2)
    '''
)


def maria_conn(server: MariaDBServer, user: str, password: str) -> str:
    return json.dumps(
        {"conn_type": "mysql", "host": server.host, "port": server.port, "login": user, "password": password,
         "schema": server.database}
    )  # fmt: skip


@pytest.mark.timeout(1200)
def test_binlog_tables_tier_through_dag_runs_and_a_table_without_the_grant_fails_alone(
    mariadb_server: MariaDBServer, tmp_path: Path
) -> None:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "binlog_dags.py").write_text(DAGS)
    mariadb_server.create_user("blind", BLIND_PASSWORD, [f"SELECT ON {mariadb_server.database}.*"])
    env = {
        "AIRFLOW_CONN_HOT_MARIA": maria_conn(mariadb_server, mariadb_server.user, mariadb_server.password),
        "AIRFLOW_CONN_BLIND_MARIA": maria_conn(mariadb_server, "blind", BLIND_PASSWORD),
        "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog}}),
    }
    hot = {name: ChangingMariaDBTable(mariadb_server.url, name, seed=seed)
           for seed, name in enumerate((OPERATED, SENSED, BLIND))}  # fmt: skip
    for table in hot.values():
        table.create()
        table.insert(300)
    try:
        with AirflowCluster(
            home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[OPERATOR_DAG, SENSOR_DAG],
            with_triggerer=True,
        ) as af:  # fmt: skip
            blind_failed: list[tuple[str, str]] = []  # (run id, the run's outcome) where the blind table's task failed
            for number in range(3):
                if number:
                    for name in (OPERATED, SENSED):
                        hot[name].random_changes(80)
                runs = {dag_id: af.trigger_dag(dag_id) for dag_id in (OPERATOR_DAG, SENSOR_DAG)}
                assert af.wait_for_run(SENSOR_DAG, runs[SENSOR_DAG], timeout=400) == "success"
                outcome = af.wait_for_run(OPERATOR_DAG, runs[OPERATOR_DAG], timeout=400)
                states = af.task_instances(OPERATOR_DAG, runs[OPERATOR_DAG])
                assert states[OPERATED] == "success", states  # its sibling's failure is not its own
                # The table that may not read the binlog fails its own task once, then stays quarantined (skipped).
                assert states[BLIND] in ("failed", "skipped"), states
                if states[BLIND] == "failed":
                    blind_failed.append((runs[OPERATOR_DAG], outcome))
                for name in (OPERATED, SENSED):
                    assert_lake_equals_hot(hot[name], catalog, ("binlog_dags", name), duckdb=True)
            counts = {k: sum(t.counts[k] for t in hot.values()) for k in hot[OPERATED].counts}
            assert all(counts[k] for k in ("update", "key_update", "delete", "reinsert")), counts

            blind = af.asset_state_store(f"tiering/binlog_dags/{BLIND}")["tiering_state"]
            assert "REPLICATION SLAVE" in (blind["last_error"] or "") and blind["quarantined_since"] is not None
            assert BLIND_PASSWORD not in json.dumps(blind)
            assert len(blind_failed) == 1, blind_failed  # the first run; the later ones skip it, quarantined
            run_id, outcome = blind_failed[0]
            assert outcome == "failed", "the summary fails the run a table failed in"
            found = af.get(f"/api/v2/dags/{OPERATOR_DAG}/dagRuns/{run_id}/taskInstances")["task_instances"]
            assert {ti["task_id"]: ti["try_number"] for ti in found}[BLIND] == 1, "a missing grant is not retried"
            log = af.task_log(OPERATOR_DAG, runs[OPERATOR_DAG], BLIND)
            assert "quarantined" in log, log[-2000:]

            # Nothing new: the operator's probe skips without a round; the binlog position is the lake's.
            quiet = af.trigger_dag(OPERATOR_DAG)
            af.wait_for_run(OPERATOR_DAG, quiet, timeout=400)
            assert af.task_instances(OPERATOR_DAG, quiet)[OPERATED] in ("skipped", "success")
            shown = cli(af, "status", OPERATED, "-o", "json")
            assert shown.returncode == 0, shown.stderr
            stream = json.loads(shown.stdout)["change_stream"]
            offsets = json.loads(
                load_catalog("default", **catalog).load_table(("binlog_dags", OPERATED)).current_snapshot()
                .summary["tiering.end-offsets"]
            )  # fmt: skip
            assert stream["position"] == f"{offsets['binlog_file']}:{offsets['binlog_pos']}", stream
            assert stream["log_needed_bytes"] is not None and stream["oldest_binlog_file"], stream
            text = cli(af, "status", OPERATED).stdout
            assert "binlog position" in text and "binlog needed" in text, text

            # A column added with a default, no row changed: the sensor's probe sees the shape and the round follows.
            waiting = af.trigger_dag(SENSOR_DAG)
            af.wait_for_task(SENSOR_DAG, waiting, f"{SENSED}.due", {"deferred"}, timeout=300)
            hot[SENSED]._run(f"ALTER TABLE {hot[SENSED].ref} ADD COLUMN region VARCHAR(10) NOT NULL DEFAULT 'eu'")
            assert af.wait_for_run(SENSOR_DAG, waiting, timeout=400) == "success"
            lake = load_catalog("default", **catalog).load_table(("binlog_dags", SENSED))
            assert lake.schema().find_field("region").initial_default == "eu"
            regions = set(lake.scan(selected_fields=("region",)).to_arrow().column("region").to_pylist())
            assert regions == {"eu"}
    finally:
        for table in hot.values():
            table.close()
