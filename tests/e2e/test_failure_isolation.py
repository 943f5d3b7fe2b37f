"""Under a real scheduler and LocalExecutor: one broken table fails alone, its state says why, and no surface
(state, events, logs, Tiering page and REST API, CLI) shows a password;
a run can tier a subset of the tables; a table that keeps failing is quarantined until it is reset."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import metadata_db, table_function, tiering_setup
from tests.e2e.test_cli import cli

DAG_ID = "tiering_isolation"
HEALTHY = ("alpha", "beta", "gamma")
WRONG_PASSWORD = "wrong-Secret-pw-8c1f"

DAG_FILE = table_function(
    "e2e", retries=0, target_rows_per_split=2000, max_consecutive_failures=1, freshness_seconds=1
) + textwrap.dedent(
    f'''
    """Four PostgreSQL tables, one of them behind a connection with a wrong password."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    dag = build_tiering_dag(
        "{DAG_ID}",
        [table("alpha", "hot_pg"), table("beta", "hot_pg"), table("gamma", "hot_pg", freshness_seconds=3600),
         table("broken", "hot_broken")],
    )
    '''
)


def assert_no_secret_anywhere(af: AirflowCluster, run_id: str, secrets: tuple[str, ...]) -> None:
    """Search every surface a user sees for the real secrets: state and events in Airflow's REST API, every
    task's log, the Tiering page and its REST API, and the CLI. The broken table's error must be shown on
    them (else the search proves nothing), its password on none."""
    tables = (*HEALTHY, "broken")
    surfaces: dict[str, str] = {
        "asset state store (REST)": json.dumps([af.asset_state_store(f"tiering/e2e/{t}") for t in tables]),
        "asset events (REST)": json.dumps(af.asset_events()),
        "Tiering page": af.request("GET", "/tiering/").text,
        "Tiering REST list": af.request("GET", "/tiering/api/tables").text,
        "Tiering REST table": af.request("GET", "/tiering/api/tables/broken").text,
        "Tiering REST history": af.request("GET", "/tiering/api/tables/broken/history").text,
    }
    for task in (*tables, "tiering_summary"):
        surfaces[f"task log of {task}"] = af.task_log(DAG_ID, run_id, task, 1)
    for args in (("status",), ("status", "broken", "-o", "json"), ("history", "broken", "-o", "json")):
        done = cli(af, *args)
        assert done.returncode == 0, done.stderr
        surfaces[f"CLI {' '.join(args)}"] = done.stdout + done.stderr
    for name in ("asset state store (REST)", "Tiering REST table", "task log of broken", "CLI status broken -o json"):
        assert "password authentication failed" in surfaces[name], name
    for name, text in surfaces.items():
        for secret in secrets:
            assert secret not in text, f"a password appears in the {name}"


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broken_table_fails_alone_under_the_real_scheduler(pg_server, tmp_path: Path) -> None:
    """On a PostgreSQL metadata DB (the same isolation on the embedded SQLite one: tests/e2e/test_scheduling.py)."""
    hot = PostgresHot(pg_server.dsn)
    for offset, name in enumerate((*HEALTHY, "broken")):
        hot.create(name)
        hot.insert(name, 1, 3000 + 1000 * offset)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, WRONG_PASSWORD)
    overrides = metadata_db("postgres", pg_server)
    with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env, config_overrides=overrides) as af:
        run_id = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, run_id, timeout=480) == "failed"
        states = af.task_instances(DAG_ID, run_id)
        assert states == {
            "alpha": "success",
            "beta": "success",
            "gamma": "success",
            "broken": "failed",
            "tiering_summary": "failed",
        }

        broken = af.asset_state_store("tiering/e2e/broken")["tiering_state"]
        assert broken["status"] == "FAILED"
        assert broken["consecutive_failures"] == 1 and broken["last_error_time"]
        assert "password authentication failed" in broken["last_error"]
        assert len(broken["last_error"].encode()) <= 2048
        summary_log = af.task_log(DAG_ID, run_id, "tiering_summary", 1)
        assert "1 of 4 table(s) failed: broken" in summary_log
        assert_no_secret_anywhere(af, run_id, (WRONG_PASSWORD, pg_server.password))

        for name in HEALTHY:
            state = af.asset_state_store(f"tiering/e2e/{name}")["tiering_state"]
            assert state["status"] == "TIERED" and state["epoch"] == 1 and state["last_error"] is None
            events = af.asset_events(f"tiering/e2e/{name}", source_run_id=run_id)
            assert len(events) == 1 and events[0]["extra"]["rows"] == len(hot.rows(name))
            assert events[0]["extra"]["snapshot_id"] == state["committed"]["snapshot_id"]
            assert digest(lake_rows(catalog, ("e2e", name), COLUMNS)) == digest(hot.rows(name))

        assert broken["quarantined_since"] is not None

        # A run for a subset of the tables tiers only those.
        hot.insert("alpha", 10_001, 500)
        hot.insert("beta", 10_001, 700)
        run_id = af.trigger_dag(DAG_ID, conf={"tables": ["alpha"]})
        assert af.wait_for_run(DAG_ID, run_id, timeout=300) == "success"
        assert af.task_instances(DAG_ID, run_id) == {
            "alpha": "success",
            "beta": "skipped",
            "gamma": "skipped",
            "broken": "skipped",
            "tiering_summary": "success",
        }
        assert af.asset_state_store("tiering/e2e/alpha")["tiering_state"]["last_round"]["rows"] == 500
        assert af.asset_state_store("tiering/e2e/beta")["tiering_state"]["epoch"] == 1

        # A full run: beta catches up, idle tables skip, gamma is not due (rows wait for its freshness
        # interval of an hour), the quarantined table skips with the reason.
        hot.insert("gamma", 10_001, 300)
        run_id = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, run_id, timeout=300) == "success"
        assert af.task_instances(DAG_ID, run_id) == {
            "alpha": "skipped",
            "beta": "success",
            "gamma": "skipped",
            "broken": "skipped",
            "tiering_summary": "success",
        }
        assert "is quarantined since" in af.task_log(DAG_ID, run_id, "broken", 1)
        assert af.asset_state_store("tiering/e2e/broken")["tiering_state"]["status"] == "FAILED"
        assert "not due until" in af.task_log(DAG_ID, run_id, "gamma", 1)
        assert af.asset_state_store("tiering/e2e/gamma")["tiering_state"]["status"] == "SCHEDULED"
        assert len(lake_rows(catalog, ("e2e", "gamma"), COLUMNS)) == len(hot.rows("gamma")) - 300

        # A reset (from a process with database access, as the CLI will be) lets it run again.
        reset = subprocess.run(
            [
                str(af.python_bin),
                "-c",
                "from airflow_provider_tiering.status import reset_table; print(reset_table('broken').note)",
            ],
            env=af.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "reset at" in reset.stdout
        assert af.asset_state_store("tiering/e2e/broken")["tiering_state"]["quarantined_since"] is None
        run_id = af.trigger_dag(DAG_ID, conf={"tables": ["broken", "gamma"]})  # named tables run, due or not
        assert af.wait_for_run(DAG_ID, run_id, timeout=300) == "failed"
        states = af.task_instances(DAG_ID, run_id)
        assert states["broken"] == "failed"  # it ran again (and still fails)
        assert states["gamma"] == "success"
        for name in HEALTHY:
            assert digest(lake_rows(catalog, ("e2e", name), COLUMNS)) == digest(hot.rows(name))
