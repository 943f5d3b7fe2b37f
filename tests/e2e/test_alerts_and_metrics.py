"""Where alerts fire and what metrics say, under a real scheduler and LocalExecutor with Airflow's StatsD backend
sending to a UDP socket this test listens on (127.0.0.1): a table held back by an open transaction past its
staleness bound fails its task and the run's summary, naming the blocker; every task sends the table's metrics."""

from __future__ import annotations

import re
import socket
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import COLUMNS, PostgresHot, make_rows
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import table_function, tiering_setup

# Alone, after the parallel pass: its table must stay fresh for its staleness bound while a run ends, which a
# loaded machine overran.
pytestmark = pytest.mark.serial

DAG_ID = "tiering_alerts"
TABLE = "m_orders"
BOUND = 25

DAG_FILE = table_function("alerts", freshness_seconds=1, retries=0) + textwrap.dedent(
    f'''
    """One table whose lake goes stale while an open transaction holds its watermark back."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    source = {{"conn_id": "hot_pg", "table": "{TABLE}", "cursor_column": "id", "max_watermark_wait_seconds": 1}}
    dag = build_tiering_dag("{DAG_ID}", [table("{TABLE}", source=source, staleness_alert_seconds={BOUND})])
    '''
)


class StatsdListener:
    """A UDP socket on 127.0.0.1 that keeps every StatsD line it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def values(self, metric: str) -> list[tuple[float, str]]:
        """``(value, type)`` of each line sent for ``tiering.<metric>`` of the table, in order."""
        name = f"airflow.tiering.{metric}.{DAG_ID}.{TABLE}"
        found = []
        for line in list(self.lines):
            match = re.fullmatch(rf"{re.escape(name)}:([-0-9.e]+)\|(c|g|ms)(?:\|.*)?", line)
            if match:
                found.append((float(match.group(1)), match.group(2)))
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.mark.timeout(900)
def test_a_stale_table_fails_its_task_and_the_summary_naming_the_blocker_and_metrics_arrive(
    pg_server, tmp_path: Path
) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create(TABLE)
    hot.insert(TABLE, 1, 1000)
    statsd = StatsdListener()
    metrics = {"statsd_on": "True", "statsd_host": "127.0.0.1", "statsd_port": str(statsd.port)}
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAG_FILE, "unused-password")
    try:
        with AirflowCluster(
            home=tmp_path / "airflow",
            dags_folder=dags,
            extra_env=env,
            expected_dag_ids=[DAG_ID],
            config_overrides={"metrics": {**metrics, "statsd_prefix": "airflow"}},
        ) as af:
            first = af.trigger_dag(DAG_ID)
            assert af.wait_for_run(DAG_ID, first, timeout=400) == "success"
            caught_up = time.monotonic()
            wait_for(lambda: statsd.values("rows"))
            assert statsd.values("rows") == [(1000, "c")] and statsd.values("rounds.tiered") == [(1, "c")]
            ((duration, kind),) = statsd.values("round_duration")
            assert kind == "ms" and 0 < duration < 300_000
            assert statsd.values("bytes")[0][0] > 0 and statsd.values("backlog_rows") == [(0, "g")]
            assert statsd.values("consecutive_failures") == [(0, "g")] and statsd.values("quarantined") == [(0, "g")]
            assert statsd.values("held_back_seconds") == [(0, "g")]

            # An open transaction of another session takes id 1001 and holds it; 1002 commits.
            blocker = psycopg.connect(pg_server.dsn)
            blocker.execute(f'INSERT INTO "{TABLE}" VALUES (%s, %s, %s, %s, %s)', make_rows(1001, 1)[0])
            pid = blocker.info.backend_pid
            hot.insert(TABLE, 1002, 1)
            try:
                held = af.trigger_dag(DAG_ID)
                assert af.wait_for_run(DAG_ID, held, timeout=400) == "success"  # held back, not stale yet
                assert af.task_instances(DAG_ID, held)[TABLE] == "skipped"
                assert time.monotonic() - caught_up < BOUND, "the machine was too slow for this test's bound"
                wait_for(lambda: any(v > 0 for v, _ in statsd.values("held_back_seconds")))

                time.sleep(max(0.0, BOUND + 2 - (time.monotonic() - caught_up)))
                stale = af.trigger_dag(DAG_ID)
                assert af.wait_for_run(DAG_ID, stale, timeout=400) == "failed"
                tasks = af.task_instances(DAG_ID, stale)
                assert tasks[TABLE] == "failed" and tasks["tiering_summary"] == "failed"
                task_log = af.task_log(DAG_ID, stale, TABLE, 1)
                assert f"table '{TABLE}' is stale: the lake last caught up with the hot store" in task_log
                assert f"(staleness bound {BOUND} s): held back by open transactions" in task_log
                assert f"pid {pid}" in task_log
                summary_log = af.task_log(DAG_ID, stale, "tiering_summary", 1)
                assert "1 table(s) stale" in summary_log and f"pid {pid}" in summary_log
            finally:
                blocker.rollback()
                blocker.close()

            recovered = af.trigger_dag(DAG_ID)
            assert af.wait_for_run(DAG_ID, recovered, timeout=400) == "success"
            wait_for(lambda: len(statsd.values("rows")) == 2)
            assert statsd.values("rows")[-1] == (1, "c")
            assert statsd.values("held_back_seconds")[-1] == (0, "g")
    finally:
        statsd.close()
    assert digest(lake_rows(catalog, ("alerts", TABLE), COLUMNS)) == digest(hot.rows(TABLE))


def wait_for(condition, timeout: float = 30.0) -> None:
    """StatsD is fire-and-forget over UDP: give the last packets a moment."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("metrics did not arrive")
        time.sleep(0.2)
