"""Under a real scheduler and LocalExecutor: retries back off and end in quarantine, overlapping runs never run
two rounds of one table at once while unrelated tables run in parallel, and a DAG scheduled on a table's asset
receives the round's metadata."""

from __future__ import annotations

import json
import textwrap
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed.airflow_cluster import AirflowCluster, task_span
from testbed.hot_tables import PostgresHot
from testbed.tiering_env import table_function, tiering_setup

DAG_ID = "tiering_scheduling"
CONSUMER = "tiering_consumer"

DAGS = table_function("sched", freshness_seconds=1) + textwrap.dedent(
    f'''
    """Two healthy tables and one that keeps failing with back-off; a consumer of one table's asset."""
    from airflow.sdk import DAG, task

    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.dag_factory import build_tiering_dag
    from airflow_provider_tiering.assets import table_asset

    TABLES = [
        table("s_alpha", "hot_pg", retries=0),
        table("s_beta", "hot_pg", retries=0),
        table("s_flaky", "hot_broken", retries=2, retry_delay_seconds=2, retry_exponential_backoff=2,
              max_consecutive_failures=3),
    ]
    tiering = build_tiering_dag("{DAG_ID}", TABLES, max_active_runs=2)

    ALPHA = table_asset(TableSpec.parse(TABLES[0]))

    with DAG(dag_id="{CONSUMER}", schedule=[ALPHA], catchup=False):

        @task(inlets=[ALPHA])
        def read_round(triggering_asset_events=None):
            return [dict(event.extra) for event in triggering_asset_events[ALPHA]]

        read_round()
    '''
)


def tis(af: AirflowCluster, run_id: str) -> dict[str, dict]:
    body = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")
    return {ti["task_id"]: ti for ti in body["task_instances"]}


def overlaps(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.timeout(900)
def test_retries_quarantine_overlapping_runs_and_downstream_asset(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for name in ("s_alpha", "s_beta", "s_flaky"):
        hot.create(name)
        hot.insert(name, 1, 4000)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, "not-the-password-5d2e")
    with AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID, CONSUMER]
    ) as af:
        first = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, first, timeout=600) == "failed"
        run1 = tis(af, first)
        assert {t: ti["state"] for t, ti in run1.items()} == {
            "s_alpha": "success",
            "s_beta": "success",
            "s_flaky": "failed",
            "tiering_summary": "failed",
        }
        assert overlaps(task_span(run1["s_alpha"]), task_span(run1["s_beta"]))  # unrelated tables in parallel

        # Three tries with growing waits (Airflow's back-off: at least 2 s, then at least 4 s), and the
        # table is quarantined by the last one, which fails without retrying further.
        tries = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(first, safe='')}/taskInstances/s_flaky/tries")
        tries = sorted(tries["task_instances"], key=lambda ti: ti["try_number"])
        assert [ti["try_number"] for ti in tries] == [1, 2, 3]
        waits = [(task_span(b)[0] - task_span(a)[1]).total_seconds() for a, b in zip(tries, tries[1:])]
        assert waits[0] >= 2 and waits[1] >= 4, waits
        flaky = af.asset_state_store("tiering/sched/s_flaky")["tiering_state"]
        assert flaky["status"] == "FAILED" and flaky["consecutive_failures"] == 3 and flaky["quarantined_since"]
        assert flaky["next_retry_at"] is None

        # Two overlapping runs: never two rounds of one table at once; the quarantined table skips.
        hot.insert("s_alpha", 4001, 1000)
        hot.insert("s_beta", 4001, 1000)
        second = af.trigger_dag(DAG_ID)
        third = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, second, timeout=600) == "success"
        assert af.wait_for_run(DAG_ID, third, timeout=600) == "success"
        run2, run3 = tis(af, second), tis(af, third)
        for table in ("s_alpha", "s_beta", "s_flaky"):
            assert not overlaps(task_span(run2[table]), task_span(run3[table])), table
        for table in ("s_alpha", "s_beta"):  # one of the runs tiered the new rows, the other found nothing
            assert sorted([run2[table]["state"], run3[table]["state"]]) == ["skipped", "success"], table
            assert af.asset_state_store(f"tiering/sched/{table}")["tiering_state"]["committed"]["end_offsets"] == {
                "cursor": 5000
            }
        assert run2["s_flaky"]["state"] == run3["s_flaky"]["state"] == "skipped"
        assert "is quarantined since" in af.task_log(DAG_ID, second, "s_flaky", 1)

        # The consumer DAG ran on s_alpha's asset event and read the round's metadata.
        deadline = time.monotonic() + 120
        runs: list[dict] = []
        while time.monotonic() < deadline:
            runs = af.get(f"/api/v2/dags/{CONSUMER}/dagRuns", params={"order_by": "run_after"})["dag_runs"]
            if runs and all(r["state"] in ("success", "failed") for r in runs):
                break
            time.sleep(2)
        assert runs and all(r["state"] == "success" for r in runs)
        extra = af.get(
            f"/api/v2/dags/{CONSUMER}/dagRuns/{quote(runs[0]['dag_run_id'], safe='')}"
            "/taskInstances/read_round/xcomEntries/return_value"
        )["value"]
        extra = extra if isinstance(extra, list) else json.loads(extra)
        first_event = af.asset_events("tiering/sched/s_alpha", source_run_id=first)[0]["extra"]
        assert extra[0]["rows"] == 4000 and extra[0]["epoch"] == 1
        assert extra[0]["snapshot_id"] == first_event["snapshot_id"]
        assert extra[0]["start_offsets"] is None and extra[0]["end_offsets"] == {"cursor": 4000}
