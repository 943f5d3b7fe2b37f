"""A missing pip extra, for real: the table's task runs in a Python process where the extra's driver cannot be
imported (an import hook refuses it, as an installation without the extra would), against a real PostgreSQL.

The task fails with the extra to install, the table's status shows it, and however often it fails it does not
count towards the quarantine; once the driver is importable again the next round tiers the table (lake equals
hot). The same for a SQL catalog on PostgreSQL without its driver (``[sql-postgres]``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.pg_server import PostgresServer

REPO = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: the refused modules must not have been imported before the hook is installed.
TASK = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def __init__(self, names):
            self.names = set(names)

        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None

    refuse = Refuse(json.loads(sys.argv[1]))
    sys.meta_path.insert(0, refuse)

    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context

    operator = TierTableOperator(table=json.loads(sys.argv[2]))
    context = task_context(operator.table_asset, None)
    results = []
    for attempt in range(int(sys.argv[3])):
        try:
            operator.execute(context)
            outcome = "success"
        except BaseException as exc:  # the task's outcome, whatever it is
            outcome = f"{type(exc).__name__}: {exc}"
        state = saved_state(context, operator.table_asset)
        results.append({"outcome": outcome, "state": state.to_json()})
    sys.meta_path.remove(refuse)  # the extra is installed now
    try:
        operator.execute(context)
        outcome = "success"
    except BaseException as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    results.append({"outcome": outcome, "state": saved_state(context, operator.table_asset).to_json()})
    print(json.dumps(results))
    """
)


def run_task(refused: list[str], spec: dict, attempts: int, env: dict[str, str]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", TASK, json.dumps(refused), json.dumps(spec), str(attempts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("refused", "catalog_on_postgres", "extra"),
    [
        (["adbc_driver_postgresql"], False, "postgres"),
        (["psycopg2"], True, "sql-postgres"),
    ],
    ids=["hot-store-driver", "catalog-driver"],
)
def test_missing_extra_names_the_extra_and_does_not_quarantine(
    pg_server: PostgresServer, tmp_path: Path, refused: list[str], catalog_on_postgres: bool, extra: str
) -> None:
    name = f"noextra_{uuid.uuid4().hex[:8]}"
    hot = PostgresHot(pg_server.dsn)
    hot.create(name)
    hot.insert(name, 1, 40)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/w"}
    refused_catalog = {
        "type": "sql",
        "uri": f"postgresql+psycopg2://{pg_server.user}:{pg_server.password}@127.0.0.1:{pg_server.port}/x",
        "warehouse": f"file://{tmp_path}/w",
    }
    hot_conn = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": pg_server.port,
        "login": pg_server.user,
        "password": pg_server.password,
        "schema": pg_server.dbname,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW_CONN_HOT_NOEXTRA": json.dumps(hot_conn),
            "AIRFLOW_CONN_ICEBERG_NOEXTRA": json.dumps(
                {"conn_type": "iceberg", "extra": {**catalog, "name": "default"}}
            ),
            "AIRFLOW_CONN_ICEBERG_NOEXTRA_PG": json.dumps({"conn_type": "iceberg", "extra": refused_catalog}),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        }
    )
    spec = {
        "name": name,
        "source": {"conn_id": "hot_noextra", "table": name, "cursor_column": "id"},
        "lake": {
            "namespace": "noextra",
            "table": name,
            "catalog_conn_id": "iceberg_noextra_pg" if catalog_on_postgres else "iceberg_noextra",
        },
        "retries": 3,
        "max_consecutive_failures": 2,
    }
    results = run_task(refused, spec, 3, env)
    install = f"pip install 'airflow-provider-tiering[{extra}]'"
    for failed in results[:-1]:
        # Failed without Airflow's retries (they run on the same installation), naming the extra.
        assert failed["outcome"].startswith("AirflowFailException: ") and install in failed["outcome"], failed
        state = failed["state"]
        assert state["status"] == "FAILED" and install in state["last_error"]
        assert state["consecutive_failures"] == 0 and state["quarantined_since"] is None
        assert state["next_retry_at"] is None
        assert pg_server.password not in state["last_error"]
    last = results[-1]
    if catalog_on_postgres:
        if importlib.util.find_spec("psycopg2") is None:  # not installed here either: still not counted
            assert install in last["outcome"] and last["state"]["consecutive_failures"] == 0
        else:  # the driver loads, and this catalog's database does not exist: an ordinary, counted failure
            assert install not in last["state"]["last_error"] and last["state"]["consecutive_failures"] == 1
        return
    assert last["outcome"] == "success", last
    assert last["state"]["status"] == "TIERED" and last["state"]["consecutive_failures"] == 0
    assert last["state"]["last_round"]["rows"] == 40
    lake = lake_rows(catalog, ("noextra", name), COLUMNS)
    assert len(lake) == 40 and digest(lake) == digest(hot.rows(name))
