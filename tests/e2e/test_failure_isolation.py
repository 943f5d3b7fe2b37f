"""Under a real scheduler and LocalExecutor, on a PostgreSQL metadata DB: one broken table fails alone, its state says
why, and no surface (state, events, logs, Tiering page and REST API, CLI) shows a password; a run can tier a subset of
the tables; a table that keeps failing is quarantined until it is reset. In the same deployment, four tables are tiered
at once into a lake in production form: a SQL catalog on PostgreSQL (a database of its own), the warehouse on an
S3-compatible server (moto's), reached with the catalog connection's properties while the workers' ambient AWS
variables point elsewhere."""

from __future__ import annotations

import json
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog
from sqlalchemy.engine import make_url

from testbed.airflow_cluster import AirflowCluster, task_span
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, s3_objects
from testbed.s3_server import wrong_aws_environment
from testbed.tiering_env import metadata_db, postgres_catalog, table_function, tiering_setup
from tests.e2e.test_cli import cli
from tests.fixtures_servers import LAKE_BUCKET

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

PG_CATALOG_DAG_ID = "tiering_pg_catalog"
PG_CATALOG_TABLES = tuple(f"pgcat_{n}" for n in ("one", "two", "three", "four"))
PG_CATALOG_DAG_FILE = table_function(
    "e2e_pgcat", retries=0, target_rows_per_split=100_000, freshness_seconds=1
) + textwrap.dedent(
    f'''
    """Four PostgreSQL tables whose lake tables live behind a SQL catalog on PostgreSQL (connection iceberg_pg)."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    dag = build_tiering_dag(
        "{PG_CATALOG_DAG_ID}",
        [table(name, lake={{"namespace": "e2e_pgcat", "table": name, "catalog_conn_id": "iceberg_pg"}})
         for name in {PG_CATALOG_TABLES!r}],
    )
    '''
)


@pytest.fixture(scope="module")
def deployment(pg_server, s3_server, tmp_path_factory) -> Iterator[tuple[AirflowCluster, PostgresHot, dict[str, Any]]]:
    """One Airflow on a PostgreSQL metadata DB for the module: the isolation DAG (SQLite catalog ``iceberg_default``)
    and the DAG whose catalog is ``iceberg_pg`` (a SQL catalog in a fresh database of the same server, its warehouse
    on the S3 server). Every Airflow process has wrong AWS variables in its environment."""
    tmp_path = tmp_path_factory.mktemp("isolation")
    hot = PostgresHot(pg_server.dsn)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, WRONG_PASSWORD)
    warehouse = f"s3://{LAKE_BUCKET}/{uuid.uuid4().hex[:12]}/warehouse"
    pg_catalog = {**postgres_catalog(pg_server, warehouse), **s3_server.storage_properties()}
    (dags / "tiering_pg_catalog.py").write_text(PG_CATALOG_DAG_FILE)
    env["AIRFLOW_CONN_ICEBERG_PG"] = json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **pg_catalog}})
    env.update(wrong_aws_environment())
    overrides = metadata_db("postgres", pg_server)
    with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env, config_overrides=overrides) as af:
        yield af, hot, {"sqlite": catalog, "postgres": pg_catalog}


def assert_no_secret_anywhere(af: AirflowCluster, run_id: str, secrets: tuple[str, ...]) -> None:
    """Search every surface a user sees for the real secrets: state and events in Airflow's REST API, every
    task's log, the Tiering REST API (all the Tiering page shows comes from it), and the CLI. The broken table's
    error must be shown on them (else the search proves nothing), its password on none."""
    tables = (*HEALTHY, "broken")
    surfaces: dict[str, str] = {
        "asset state store (REST)": json.dumps([af.asset_state_store(f"tiering/e2e/{t}") for t in tables]),
        "asset events (REST)": json.dumps(af.asset_events()),
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


@pytest.mark.timeout(900)
def test_broken_table_fails_alone_under_the_real_scheduler(pg_server, deployment) -> None:
    """On a PostgreSQL metadata DB (the same isolation on the embedded SQLite one: tests/e2e/test_scheduling.py)."""
    af, hot, catalogs = deployment
    catalog = catalogs["sqlite"]
    for offset, name in enumerate((*HEALTHY, "broken")):
        hot.create(name)
        hot.insert(name, 1, 3000 + 1000 * offset)
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


@pytest.mark.timeout(900)
def test_four_tables_tiered_at_once_behind_a_sql_catalog_on_postgresql_with_the_lake_on_s3(deployment) -> None:
    """The catalog's database is new: the four tasks' first loads also race to create the catalog's tables."""
    af, hot, catalogs = deployment
    catalog = catalogs["postgres"]
    for offset, name in enumerate(PG_CATALOG_TABLES):
        hot.create(name)
        hot.insert(name, 1, 2000 + 500 * offset)

    for round_number, added in enumerate((0, 700), start=1):
        for name in PG_CATALOG_TABLES if added else ():
            hot.insert(name, 100_001, added)
        run_id = af.trigger_dag(PG_CATALOG_DAG_ID)
        assert af.wait_for_run(PG_CATALOG_DAG_ID, run_id, timeout=480) == "success"
        body = af.get(f"/api/v2/dags/{PG_CATALOG_DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        tis = {ti["task_id"]: ti for ti in body["task_instances"]}
        assert {t: tis[t]["state"] for t in PG_CATALOG_TABLES} == dict.fromkeys(PG_CATALOG_TABLES, "success")
        spans = sorted(task_span(tis[t]) for t in PG_CATALOG_TABLES)
        assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), spans  # rounds of different tables overlapped

        for name in PG_CATALOG_TABLES:
            state = af.asset_state_store(f"tiering/e2e_pgcat/{name}")["tiering_state"]
            assert state["status"] == "TIERED" and state["epoch"] == round_number and state["last_error"] is None
            expected_rows = added or len(hot.rows(name))
            assert state["last_round"]["rows"] == expected_rows
            assert digest(lake_rows(catalog, ("e2e_pgcat", name), COLUMNS)) == digest(hot.rows(name))

    # The data files are objects under the warehouse prefix of the bucket.
    for name in PG_CATALOG_TABLES:
        table = load_catalog("default", **catalog).load_table(("e2e_pgcat", name))
        files = [task.file.file_path for task in table.scan().plan_files()]
        assert files and all(f.startswith(catalog["warehouse"]) for f in files)
        assert set(files) <= set(s3_objects(catalog, table.location() + "/data/"))

    # The lake tables are registered in the PostgreSQL catalog's own database (and in no SQLite file).
    url = make_url(catalog["uri"])
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database
    ) as conn:
        rows = conn.execute("SELECT table_namespace, table_name FROM iceberg_tables ORDER BY 2").fetchall()
    # and beside them the catalog's status table, which every run's summary refreshed, and its history table, which
    # every round appended to (their files on S3 too).
    status_tables = {("sys", "lake_tiering_status"), ("sys", "lake_tiering_history")}
    assert [r for r in rows if r not in status_tables] == sorted(("e2e_pgcat", n) for n in PG_CATALOG_TABLES)
    assert status_tables <= set(rows)
    history = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_history"))
    assert history.location().startswith(catalog["warehouse"])
    tiered = {r["table_name"] for r in history.scan().to_arrow().to_pylist() if r["outcome"] == "tiered"}
    assert tiered == set(PG_CATALOG_TABLES)
    status = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_status"))
    assert {r["table_name"]: r["status"] for r in status.scan().to_arrow().to_pylist()} == dict.fromkeys(
        PG_CATALOG_TABLES, "TIERED"
    )
    assert status.location().startswith(catalog["warehouse"])
