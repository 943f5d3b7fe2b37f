"""Self-test of the e2e harness: a real scheduler runs a DAG that writes to the asset state store."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.spark_standalone import descendants, is_loopback, listening_addresses
from testbed.tiering_env import metadata_db

DAG_ID = "e2e_harness_selftest"
ASSET_NAME = "e2e_harness_selftest_asset"

DAG_FILE = textwrap.dedent(
    f'''
    """Harness self-test DAG (written by tests/e2e/test_airflow_cluster.py)."""
    from __future__ import annotations

    import os
    from datetime import datetime

    from airflow.sdk import DAG, Asset, task

    ASSET = Asset(name="{ASSET_NAME}", uri="file:///tmp/e2e-harness/selftest")

    with DAG(
        dag_id="{DAG_ID}",
        schedule=None,
        start_date=datetime(2025, 1, 1),
        catchup=False,
        default_args={{"retries": 0}},
    ):

        @task(outlets=[ASSET])
        def produce(asset_state_store=None, outlet_events=None, dag_run=None):
            asset_state_store[ASSET].set("doc", {{"rows": 42, "run_id": dag_run.run_id}})
            outlet_events[ASSET].extra = {{"rows": 42, "producer": "produce"}}
            # The harness must hand extra_env to tasks.
            return os.environ["E2E_HARNESS_MARKER"]

        @task(inlets=[ASSET])
        def consume_then_fail(asset_state_store=None):
            seen = asset_state_store[ASSET].get("doc")
            asset_state_store[ASSET].set("seen_by_consumer", seen)
            asset_state_store[ASSET].set("written_before_raise", {{"ok": True}})
            raise RuntimeError("e2e-harness-intentional-failure")

        produce() >> consume_then_fail()
    '''
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("metadata", ["sqlite", "postgres"])
def test_real_cluster_runs_dag_with_asset_state_store(tmp_path: Path, pg_server, metadata: str) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "selftest_dag.py").write_text(DAG_FILE)

    t0 = time.monotonic()
    with AirflowCluster(
        home=tmp_path / "airflow-home",
        dags_folder=dags,
        extra_env={"E2E_HARNESS_MARKER": "marker-from-extra-env"},
        config_overrides=metadata_db(metadata, pg_server),
    ) as af:
        print(f"cluster ready: {af.timings}")

        run_id = af.trigger_dag(DAG_ID, conf={"purpose": "selftest"})
        state = af.wait_for_run(DAG_ID, run_id, timeout=90)
        print(f"run finished after {time.monotonic() - t0:.1f}s total")

        assert state == "failed"
        assert af.task_instances(DAG_ID, run_id) == {
            "produce": "success",
            "consume_then_fail": "failed",
        }

        # Values written by both tasks, including the one written right before the raise.
        store = af.asset_state_store(ASSET_NAME)
        assert store == {
            "doc": {"rows": 42, "run_id": run_id},
            "seen_by_consumer": {"rows": 42, "run_id": run_id},
            "written_before_raise": {"ok": True},
        }
        entries = {e["key"]: e for e in af.asset_state_store_entries(ASSET_NAME)}
        assert entries["doc"]["last_updated_by"]["task_id"] == "produce"
        assert entries["doc"]["last_updated_by"]["run_id"] == run_id
        assert entries["written_before_raise"]["last_updated_by"]["task_id"] == "consume_then_fail"

        # Asset event with the extra set through outlet_events; the failed task emits none.
        events = af.asset_events(ASSET_NAME, source_run_id=run_id)
        assert len(events) == 1, events
        assert events[0]["source_task_id"] == "produce"
        assert events[0]["extra"] == {"rows": 42, "producer": "produce"}
        assert events[0]["name"] == ASSET_NAME

        # extra_env reaches the task; task logs are readable through the API.
        xcom = af.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/produce/xcomEntries/return_value"
        )
        assert "marker-from-extra-env" in str(xcom["value"])
        assert "e2e-harness-intentional-failure" in af.task_log(DAG_ID, run_id, "consume_then_fail", 1)

        pids = [p.pid for p in af.processes.values()]
        # Nothing listens beyond loopback: every Airflow daemon (and its children) and the PostgreSQL server.
        postmaster = pg_server._postmaster_pid()
        assert postmaster is not None
        listening = listening_addresses([pid for root in (*pids, postmaster) for pid in descendants(root)])
        assert any(port == af.port for _, port in listening), listening  # the api-server is among them
        assert any(port == pg_server.port for _, port in listening), listening
        assert all(is_loopback(address) for address, _ in listening), listening

    # Every component is gone and logs stay on disk.
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (tmp_path / "airflow-home" / "proc-logs" / "scheduler.log").stat().st_size > 0
    print(f"self-test total {time.monotonic() - t0:.1f}s")
