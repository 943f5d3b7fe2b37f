"""Under a real scheduler, triggerer and LocalExecutor with ONE worker slot: a table waiting for its freshness
interval is deferred to the triggerer, so other tasks run meanwhile; it tiers once due; and a
``TableTieredSensor`` in another DAG waits, deferred, until the lake reaches a cursor value."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed.airflow_cluster import AirflowCluster, task_span
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import table_function, tiering_setup

DAG_ID = "tiering_when_due"
WAITER = "lake_waiter"
#: Long enough for the quick table's round and the lake waiter to take the one worker slot, and the waiter to defer,
#: before the slow table is due, on a machine busy with other tests (scripts/run_tests.sh runs this beside them).
SLOW_FRESHNESS = 150
TARGET = 3000

DAGS = table_function("due", retries=0) + textwrap.dedent(
    f'''
    """Two tables whose rounds wait, deferred, until due; a DAG waiting for the slow table's lake."""
    from airflow.sdk import DAG

    from airflow_provider_tiering.dag_factory import build_tiering_dag
    from airflow_provider_tiering.sensors.table_tiered import TableTieredSensor

    TABLES = [table("d_slow", freshness_seconds={SLOW_FRESHNESS}), table("d_quick", freshness_seconds=1)]
    tiering = build_tiering_dag("{DAG_ID}", TABLES, wait_until_due=True, due_timeout=600, due_poke_interval=2)

    with DAG(dag_id="{WAITER}", schedule=None, catchup=False):
        TableTieredSensor(task_id="wait_for_slow", table=TABLES[0], cursor_value="{{{{ params.cursor }}}}",
                          poke_interval=2, timeout=600, params={{"cursor": 0}})
    '''
)


def states(af: AirflowCluster, dag_id: str, run_id: str) -> dict[str, str | None]:
    return af.task_instances(dag_id, run_id)


def tier_interval(af: AirflowCluster, run_id: str, table: str) -> tuple[datetime, datetime]:
    ti = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/{table}.tier")
    return task_span(ti)


@pytest.mark.timeout(900)
def test_waiting_tables_are_deferred_and_hold_no_worker_slot(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for name in ("d_slow", "d_quick"):
        hot.create(name)
        hot.insert(name, 1, 2000)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, "not-the-password-4f1a")
    with AirflowCluster(
        home=tmp_path / "airflow",
        dags_folder=dags,
        extra_env=env,
        expected_dag_ids=[DAG_ID, WAITER],
        with_triggerer=True,
        config_overrides={"core": {"parallelism": "1"}},  # one worker slot: a waiting task must not hold it
    ) as af:
        # Round 1 of d_slow alone (a run naming it does not wait): its freshness clock starts now.
        first = af.trigger_dag(DAG_ID, conf={"tables": ["d_slow"]})
        assert af.wait_for_run(DAG_ID, first, timeout=400) == "success"
        assert states(af, DAG_ID, first) == {
            "d_slow.due": "success",
            "d_slow.tier": "success",
            "d_quick.due": "skipped",
            "d_quick.tier": "skipped",
            "tiering_summary": "success",
        }

        hot.insert("d_slow", 2001, 1000)
        hot.insert("d_quick", 2001, 1000)
        second = af.trigger_dag(DAG_ID)

        # d_slow is not due for a while: its sensor defers to the triggerer. The only worker slot is free,
        # so the lake waiter runs (and defers in turn) while d_slow's sensor is still deferred.
        af.wait_for_task(DAG_ID, second, "d_slow.due", {"deferred"}, timeout=SLOW_FRESHNESS)
        waiter_run = af.trigger_dag(WAITER, conf={"cursor": TARGET})
        af.wait_for_task(WAITER, waiter_run, "wait_for_slow", {"deferred"}, timeout=SLOW_FRESHNESS)
        assert states(af, DAG_ID, second)["d_slow.due"] == "deferred"
        slow = af.asset_state_store("tiering/due/d_slow")["tiering_state"]
        assert slow["status"] == "SCHEDULED" and slow["committed"]["end_offsets"] == {"cursor": 2000}
        af.wait_for_task(DAG_ID, second, "d_quick.tier", {"success"}, timeout=300)  # never tiered: due
        quick = af.asset_state_store("tiering/due/d_quick")["tiering_state"]
        assert quick["status"] == "TIERED" and quick["committed"]["end_offsets"] == {"cursor": 3000}
        due_log = af.task_log(DAG_ID, second, "d_slow.due", 1)
        assert "not due until" in due_log and "waiting in the triggerer" in due_log

        # Once its freshness interval has passed, d_slow tiers; then the waiter's lake poll succeeds.
        assert af.wait_for_run(DAG_ID, second, timeout=400) == "success"
        assert af.wait_for_run(WAITER, waiter_run, timeout=120) == "success"
        tiered_before, tiered_now = tier_interval(af, first, "d_slow"), tier_interval(af, second, "d_slow")
        assert (tiered_now[0] - tiered_before[1]).total_seconds() >= SLOW_FRESHNESS - 10
        reached = af.get(
            f"/api/v2/dags/{WAITER}/dagRuns/{quote(waiter_run, safe='')}"
            "/taskInstances/wait_for_slow/xcomEntries/return_value"
        )["value"]
        reached = reached if isinstance(reached, dict) else json.loads(reached)
        assert reached["end_offsets"] == {"cursor": TARGET}
        event = af.asset_events("tiering/due/d_slow", source_run_id=second)[0]["extra"]
        assert reached["snapshot_id"] == event["snapshot_id"]
        for name in ("d_slow", "d_quick"):
            assert digest(lake_rows(catalog, ("due", name), COLUMNS)) == digest(hot.rows(name))
