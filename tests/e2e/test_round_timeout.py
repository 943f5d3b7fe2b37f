"""A round that runs past its ``round_timeout_seconds`` (Airflow's ``execution_timeout``), under a real scheduler and
LocalExecutor: the task fails, the table's state is FAILED with a clear error, the Spark job reading the hot store
is gone (no query of it is left running in PostgreSQL), and the next round tiers normally, leaving no stray file."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from testbed.airflow_cluster import AirflowCluster, task_span
from testbed.hot_tables import PostgresHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.tiering_env import table_function, tiering_setup

DAG_ID = "tiering_timeout"
TIMEOUT = 120  # seconds: the recovering round, with Spark's start-up, must fit in it on a machine at load 20
COLUMNS = ("id", "region", "amount", "created_at", "checked")

DAG_FILE = table_function("slow", freshness_seconds=1, retries=0) + textwrap.dedent(
    f'''
    """A view whose rows take a second each to read: its round runs past the timeout."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    dag = build_tiering_dag(
        "{DAG_ID}",
        [table("slow_orders", round_timeout_seconds={TIMEOUT}, spark={{"local_single_split": False}})],
    )
    '''
)


def set_row_delay(dsn: str, seconds: float) -> None:
    """Reading a row of the view sleeps ``seconds`` (only its ``checked`` column does: planning never reads it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION slow_check(x bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS "
            f"$$ BEGIN PERFORM pg_sleep({seconds}); RETURN x; END $$"
        )


def running_reads(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
            "AND query LIKE '%slow_orders%'"
        ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.timeout(1500)
def test_a_round_past_its_timeout_fails_clearly_its_job_is_gone_and_the_next_round_tiers(
    pg_server, tmp_path: Path
) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create("slow_base")
    hot.insert("slow_base", 1, 4000)
    set_row_delay(pg_server.dsn, 1.0)  # 4,000 s to read every row (2,000 s in its two splits)
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE VIEW slow_orders AS "
            "SELECT id, region, amount, created_at, slow_check(id) AS checked FROM slow_base"
        )
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, "unused-password")
    with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID]) as af:
        timed_out = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, timed_out, timeout=700) == "failed"
        # The task's own span, not the test's clock (a loaded machine delays the task's start): reading every row
        # would take 2,000 s; stopped at its timeout, the task ends 120 s after its round began, plus
        # start-up and cancelling (minutes on a machine at load 20).
        ti = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(timed_out, safe='')}/taskInstances/slow_orders")
        started, ended = task_span(ti)
        ran = ended - started
        assert ran.total_seconds() < 500, f"the round was not stopped at its timeout: its task ran {ran}"
        state = af.asset_state_store("tiering/slow/slow_orders")["tiering_state"]
        assert state["status"] == "FAILED"
        assert f"ran past its timeout of {TIMEOUT} s (round_timeout_seconds)" in state["last_error"]
        assert "Spark job cancelled" in state["last_error"]
        deadline = time.monotonic() + 120
        while running_reads(pg_server.dsn) and time.monotonic() < deadline:
            time.sleep(1)
        assert running_reads(pg_server.dsn) == [], "the timed-out round's Spark job still reads the hot store"

        set_row_delay(pg_server.dsn, 0)
        recovered = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, recovered, timeout=400) == "success"
        state = af.asset_state_store("tiering/slow/slow_orders")["tiering_state"]
        assert state["status"] == "TIERED" and state["epoch"] == 2
    expected = [(i, region, amount, at, i) for i, region, amount, at, _ in hot.rows("slow_base")]
    assert digest(lake_rows(catalog, ("slow", "slow_orders"), COLUMNS)) == digest(expected)
    assert unreferenced_data_files(catalog, ("slow", "slow_orders")) == []
