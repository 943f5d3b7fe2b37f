"""Under a real scheduler and LocalExecutor: each table's maintenance task runs after its tier task, compacts its
small files and expires old snapshots without changing what the lake holds or its committed offsets, shows in the
status (asset state, Tiering REST API, CLI, Tiering page), and when it fails it fails alone: the table's tiering, its
state and the DAG run are unaffected. With Airflow's OpenLineage integration configured (a file transport), each
round reports its hot table as input and its Iceberg table as output, with schema and row counts."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.browser import chromium, log_in, wait_for
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import table_function, tiering_setup
from tests.e2e.test_cli import cli

DAG_ID = "tiering_maintained"
MAINTENANCE = {"interval_seconds": 0, "max_small_files": 2, "snapshot_retention_seconds": 1}

DAG_FILE = table_function(
    "maint", retries=0, freshness_seconds=1, maintenance={"enabled": True, **MAINTENANCE}
) + textwrap.dedent(
    f'''
    """Two PostgreSQL tables with lake maintenance after each round."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    dag = build_tiering_dag("{DAG_ID}", [table("m_ok"), table("m_damaged")])
    '''
)
TABLES = ("m_ok", "m_damaged")


def data_files(catalog: dict[str, str], name: str) -> list[str]:
    table = load_catalog("default", **catalog).load_table(("maint", name))
    return [task.file.file_path for task in table.scan().plan_files()]


@pytest.mark.timeout(900)
def test_maintenance_compacts_after_rounds_and_its_failure_fails_only_itself(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for name in TABLES:
        hot.create(name)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, "unused-pw-1b2c")
    events_file = tmp_path / "openlineage.jsonl"
    lineage = {
        "openlineage": {"transport": json.dumps({"type": "file", "log_file_path": str(events_file), "append": True})}
    }
    with AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID], config_overrides=lineage
    ) as af:
        next_id = 1
        for run in range(3):
            for name in TABLES:
                hot.insert(name, next_id, 200)
            next_id += 200
            if run == 2:
                # A storage incident: one data file of m_damaged's current snapshot is gone. Its rounds only
                # append (they still work); its compaction must read every small file, and fails.
                lost = data_files(catalog, "m_damaged")[0]
                Path(lost.removeprefix("file://")).unlink()
            run_id = af.trigger_dag(DAG_ID)
            assert af.wait_for_run(DAG_ID, run_id, timeout=400) == "success"  # a maintenance failure fails no run
            states = af.task_instances(DAG_ID, run_id)
            assert states == {
                "m_ok": "success",
                "m_ok.maintain": "success",
                "m_damaged": "success",
                "m_damaged.maintain": "failed" if run == 2 else "success",
                "tiering_summary": "success",
            }, f"run {run}"

        ok_doc = af.asset_state_store("tiering/maint/m_ok")
        state, maintenance = ok_doc["tiering_state"], ok_doc["tiering_maintenance"]
        assert state["status"] == "TIERED" and state["epoch"] == 3 and state["note"] is None
        # Three rounds left three small files (more than max_small_files=2): compacted into one, in one snapshot that
        # carries the last round's offsets on.
        compaction = maintenance["last_compaction"]
        assert (compaction["outcome"], compaction["files_before"], compaction["files_after"]) == ("compacted", 3, 1)
        assert maintenance["data_files"] == 1 == len(data_files(catalog, "m_ok"))
        assert maintenance["snapshots_expired_total"] >= 2 and maintenance["consecutive_failures"] == 0
        table = load_catalog("default", **catalog).load_table(("maint", "m_ok"))
        head = table.current_snapshot()
        assert head.summary["tiering.operation"] == "compaction"
        assert json.loads(head.summary["tiering.end-offsets"]) == state["committed"]["end_offsets"]
        assert digest(lake_rows(catalog, ("maint", "m_ok"), COLUMNS)) == digest(hot.rows("m_ok"))

        damaged_doc = af.asset_state_store("tiering/maint/m_damaged")
        state, maintenance = damaged_doc["tiering_state"], damaged_doc["tiering_maintenance"]
        assert state["status"] == "TIERED" and state["epoch"] == 3 and state["last_error"] is None
        assert maintenance["last_outcome"] == "failed" and maintenance["consecutive_failures"] == 1
        assert maintenance["last_error"].startswith("compaction: ") and Path(lost).name in maintenance["last_error"]
        assert "Traceback" not in maintenance["last_error"] and len(maintenance["last_error"].encode()) <= 2048
        damaged = load_catalog("default", **catalog).load_table(("maint", "m_damaged"))
        assert damaged.current_snapshot().summary["tiering.operation"] is None  # the round's own snapshot is the head
        assert not list((Path(damaged.location().removeprefix("file://")) / "data" / "compaction").rglob("*.parquet"))
        summary_log = af.task_log(DAG_ID, run_id, "tiering_summary", 1)
        assert "m_damaged.maintain  maintenance failed" in summary_log

        # The status surfaces show it: the Tiering REST API and the CLI.
        listed = {t["table"]: t for t in af.get("/tiering/api/tables")["tables"]}
        assert listed["m_ok"]["maintenance"]["files_after_compaction"] == 1
        assert listed["m_damaged"]["maintenance"]["last_error"] == maintenance["last_error"]
        shown = cli(af, "status", "m_damaged", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["maintenance"]["last_outcome"] == "failed"
        table_view = cli(af, "status")
        assert "maintenance failed: compaction" in table_view.stdout  # m_damaged's own round has no error
        one = cli(af, "status", "m_ok").stdout.splitlines()
        assert any(line.startswith("maintenance ") and "maintained: 1 files" in line for line in one), one

        # And the Tiering page, in a browser: each table's detail has its maintenance facts.
        with chromium() as driver:
            log_in(driver, af.base_url, "admin", "admin")

            def maintenance_text(d: Any) -> str:  # queried afresh: the page re-renders as it refreshes
                return str(
                    d.execute_script("const m = document.getElementById('maintenance'); return m ? m.textContent : ''")
                )

            for name, expected in (("m_ok", "3 \u2192 1 data files"), ("m_damaged", "compaction: ")):
                driver.get(f"{af.base_url}/plugin/tiering?table={name}")
                wait_for(driver, lambda d, e=expected: e in maintenance_text(d), 60, f"{name}: {expected}")

        # Lineage: each round's COMPLETE event names the hot table as input and the Iceberg table as output.
        events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
        completes = [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.m_ok"]
        assert len(completes) == 3, [e["job"]["name"] for e in events]
        for event in completes:
            (source,), (target,) = event["inputs"], event["outputs"]
            assert (source["namespace"], source["name"]) == (
                f"postgres://127.0.0.1:{pg_server.port}",
                f"{pg_server.dbname}.public.m_ok",
            )
            assert [f["name"] for f in source["facets"]["schema"]["fields"]] == list(COLUMNS)
            assert source["inputFacets"]["inputStatistics"]["rowCount"] == 200
            assert (target["namespace"], target["name"]) == ("file", table.location().removeprefix("file://"))
            assert target["facets"]["symlinks"]["identifiers"][0]["name"] == "maint.m_ok"
            assert target["outputFacets"]["outputStatistics"]["rowCount"] == 200
            assert pg_server.password not in json.dumps(event)
