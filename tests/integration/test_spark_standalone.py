"""A round on a real Spark standalone cluster: a master and two one-core workers on 127.0.0.1
(scripts/spark_standalone.sh, from the virtualenv's pyspark), a real PostgreSQL hot table, a local Iceberg
warehouse that the driver and the executors share (one machine).

The driver runs in a child process (testbed.spark_standalone): one JVM holds one SparkContext, and this test
session may already hold a local one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.spark_standalone import (
    StandaloneCluster,
    group_members,
    is_loopback,
    listening_addresses,
    round_in_child,
    running_cluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1g each), all ALIVE; every process group killed at teardown."""
    with running_cluster(tmp_path_factory.mktemp("spark-standalone"), workers=2) as cluster:
        yield cluster


def test_a_round_on_a_standalone_cluster_runs_on_both_workers_and_tiers_the_table_row_for_row(
    standalone: StandaloneCluster, pg_server, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    workers = [w for w in standalone.status()["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2 and all(w["host"] == "127.0.0.1" and w["cores"] == 1 for w in workers)

    table = "orders_standalone"
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 4000)
    config = {
        "master": standalone.master_url,
        "status_url": f"http://127.0.0.1:{standalone.webui_port}/json/",
        "executors": 2,
        "dsn": pg_server.dsn,
        "table": table,
        "cursor_column": "id",
        "target_rows_per_split": 500,
        "catalog": catalog_properties,
        "state_path": str(tmp_path / "state.json"),
        "conf": {"spark.executor.memory": "512m"},
    }
    report = round_in_child(config)

    # (b) the lake holds exactly the hot table.
    assert report["outcome"] == "tiered" and report["rows"] == 4000 and report["splits"] >= 4
    assert digest(lake_rows(catalog_properties, ("cluster", table), COLUMNS)) == digest(hot.rows(table))
    assert unreferenced_data_files(catalog_properties, ("cluster", table)) == []

    # (a) one executor on each worker, and each ran split tasks.
    executors = report["executors"]
    assert {e["worker"] for e in executors} == {w["id"] for w in workers}, executors
    assert all(e["tasks"] >= 1 for e in executors), executors
    assert sum(e["tasks"] for e in executors) >= report["splits"]
    deadline = time.monotonic() + 30  # the master moves the app to completedapps once the driver has unregistered
    while report["app_id"] not in (completed := {a["id"]: a for a in standalone.status()["completedapps"]}):
        assert time.monotonic() < deadline, standalone.status()
        time.sleep(0.5)
    assert completed[report["app_id"]]["state"] == "FINISHED"

    # Nothing listened beyond 127.0.0.1: the driver (while it ran), the master, the workers, their executors.
    assert report["driver_listening"] and all(is_loopback(host) for host, _ in report["driver_listening"])
    cluster_listening = listening_addresses(group_members(standalone.process_groups()))
    assert cluster_listening and all(is_loopback(host) for host, _ in cluster_listening), cluster_listening
