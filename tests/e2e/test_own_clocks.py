"""Tables on their own clocks (``build_table_dags``) under a real scheduler and LocalExecutor: while a sibling's round
is held (its hot table locked) and another sibling keeps failing, a fresh table goes on being tiered round after
round; once released, every lake equals its hot table, the history holds every round (failed ones included), the
group's status DAG keeps ``sys.lake_tiering_status`` current, and the CLI's trigger runs a table's own DAG."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.tiering_env import table_function, tiering_setup
from tests.e2e.test_cli import cli

GROUP = "clocks"
FRESH, SLOW, BROKEN = "c_fresh", "c_slow", "c_broken"
WRONG_PASSWORD = "wrong-pw-clocks-41d7"
FRESH_ROUNDS = 3  # rounds of the fresh table that must end while its sibling's round is held

DAGS = table_function("clocks", retries=0, freshness_seconds=5) + textwrap.dedent(
    f'''
    """Three tables, each in its own DAG: one fresh, one whose round the test holds (due hourly: that round is its
    only scheduled one, so none races the CLI's round at the end), one behind a wrong password."""
    from datetime import timedelta

    from airflow_provider_tiering.dag_factory import build_table_dags

    build_table_dags(
        "{GROUP}",
        [table("{FRESH}"), table("{SLOW}", freshness_seconds=3600),
         table("{BROKEN}", "hot_broken", retries=1, retry_delay_seconds=2, max_consecutive_failures=50)],
        status_schedule=timedelta(seconds=20),
    )
    '''
)


def when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def task_tries(af: AirflowCluster, table: str) -> list[dict[str, Any]]:
    """Every task instance of the table's own DAG, oldest run first."""
    dag_id = f"{GROUP}.{table}"
    runs = af.get(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", params={"order_by": "run_after"})["dag_runs"]
    found = []
    for run in runs:
        path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run['dag_run_id'], safe='')}/taskInstances"
        found += af.get(path)["task_instances"]
    return found


def wait_for(what: str, check: Any, timeout: float, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class FreshWriter(threading.Thread):
    """Inserts 10 rows a second into the fresh table until stopped."""

    def __init__(self, hot: PostgresHot, start_id: int) -> None:
        super().__init__(daemon=True)
        self.hot, self.next_id, self.stop = hot, start_id, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.hot.insert(FRESH, self.next_id, 10)
            self.next_id += 10


@pytest.mark.timeout(900)
def test_a_held_or_failing_table_never_delays_a_fresh_siblings_rounds(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for name in (FRESH, SLOW, BROKEN):
        hot.create(name)
        hot.insert(name, 1, 100)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, WRONG_PASSWORD)
    table_dags = [f"{GROUP}.{name}" for name in (FRESH, SLOW, BROKEN)]
    holder = psycopg.connect(pg_server.dsn)
    holder.execute(f'LOCK TABLE "{SLOW}" IN ACCESS EXCLUSIVE MODE')  # the slow table's round waits on it
    writer = FreshWriter(hot, 101)
    try:
        with AirflowCluster(
            home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[*table_dags, GROUP]
        ) as af:
            for dag_id in [*table_dags, GROUP]:
                af.unpause(dag_id)
            writer.start()
            held = wait_for(
                "the slow table's round to start",
                lambda: [ti for ti in task_tries(af, SLOW) if ti["state"] == "running"],
                timeout=300,
            )[0]
            held_since = when(held["start_date"])
            assert held_since is not None

            def fresh_rounds_since_held() -> list[dict[str, Any]]:
                events = af.asset_events(f"tiering/clocks/{FRESH}")
                return [e for e in events if datetime.fromisoformat(e["timestamp"]) > held_since]

            rounds = wait_for(f"{FRESH_ROUNDS} rounds of the fresh table", lambda: len(
                fresh_rounds_since_held()) >= FRESH_ROUNDS and fresh_rounds_since_held(), timeout=420)  # fmt: skip
            # The slow table's round is still held, in the same task instance: the fresh one did not wait for it.
            still = {ti["id"]: ti for ti in task_tries(af, SLOW)}[held["id"]]
            assert still["state"] == "running" and still["end_date"] is None, still
            assert all(e["source_dag_id"] == f"{GROUP}.{FRESH}" for e in rounds)
            failed = wait_for(
                "the broken table's failed tries",
                lambda: [ti for ti in task_tries(af, BROKEN) if ti["state"] in ("failed", "up_for_retry")],
                timeout=300,
            )
            assert failed

            holder.commit()  # the slow table's round goes on
            writer.stop.set()
            writer.join()

            def caught_up(name: str) -> bool:
                try:
                    lake = lake_rows(catalog, ("clocks", name), COLUMNS)
                except Exception:  # not created yet
                    return False
                return digest(lake) == digest(postgres_rows(pg_server.dsn, name, COLUMNS))

            wait_for("both lakes to equal their hot tables", lambda: caught_up(FRESH) and caught_up(SLOW), timeout=300)
            assert len(lake_rows(catalog, ("clocks", FRESH), COLUMNS)) == writer.next_id - 1

            history = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_history"))
            rows = history.scan().to_arrow().to_pylist()
            outcomes = {n: [r["outcome"] for r in rows if r["tiered_table"] == n] for n in (FRESH, SLOW, BROKEN)}
            assert outcomes[FRESH].count("tiered") >= FRESH_ROUNDS, outcomes  # its first round may be among them
            assert outcomes[SLOW].count("tiered") == 1 and set(outcomes[BROKEN]) == {"failed"}, outcomes
            assert {r["airflow_dag_id"] for r in rows} <= set(table_dags)

            def status_rows() -> dict[str, dict[str, Any]]:
                try:
                    table = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_status"))
                except Exception:
                    return {}
                return {r["tiered_table"]: r for r in table.scan().to_arrow().to_pylist()}

            status = wait_for(
                "the status DAG to show the slow table tiered",
                lambda: (found := status_rows()) and found.get(SLOW, {}).get("status") in ("TIERED", "SCHEDULED")
                and found,
                timeout=180,
            )  # fmt: skip
            assert set(status) == {FRESH, SLOW, BROKEN} and status[BROKEN]["status"] == "FAILED"
            assert WRONG_PASSWORD not in (status[BROKEN]["last_error"] or "")
            assert all(r["airflow_dag_id"] == f"{GROUP}.{name}" for name, r in status.items()), status

            # The CLI finds a table's own DAG: paused, it is unpaused and runs the requested round.
            slow_dag = quote(f"{GROUP}.{SLOW}", safe="")
            af.patch(f"/api/v2/dags/{slow_dag}", json={"is_paused": True})
            # A pause stops no run in flight: the last one ends first, so that the CLI's round is what tiers the row.
            wait_for(
                "the paused DAG's run in flight to end",
                lambda: (
                    not af.get(f"/api/v2/dags/{slow_dag}/dagRuns", params={"state": ["queued", "running"]})["dag_runs"]
                ),
                timeout=180,
            )
            hot.insert(SLOW, 101, 7)
            done = cli(af, "trigger", SLOW, "--wait", "--unpause", "--timeout", "300", "-o", "json", timeout=400)
            assert done.returncode == 0, done.stderr + done.stdout
            assert json.loads(done.stdout) == [{"table": SLOW, "state": "success", "outcome": "tiered"}]
            assert len(lake_rows(catalog, ("clocks", SLOW), COLUMNS)) == 107
    finally:
        writer.stop.set()
        holder.close()
