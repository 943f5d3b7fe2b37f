"""One attempt per split: when Spark runs a split task more than once -- a retry after the first attempt failed
having written its files, or a speculative copy of a slow attempt -- exactly one attempt's files are committed and
the others' are deleted.

A real Spark standalone cluster (scripts/spark_standalone.sh) of two one-core workers that advertise different
loopback host names, 127.0.0.1 and localhost: Spark never runs a speculative copy on the host of the original
attempt, so two hosts are what speculation needs (and the reason ``local[...]`` masters never speculate). The
faults are real task attempts (testbed/split_faults.py); the lake is checked against the PostgreSQL table with
pyiceberg, and the warehouse for files no snapshot references.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.spark_standalone import REPO, StandaloneCluster, round_in_child, running_cluster
from testbed.split_faults import attempts

ROWS = 4000
_SPLIT_FILE = re.compile(r"split-(\d+)-task-(\d+)")


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    directory = tmp_path_factory.mktemp("spark-two-hosts")
    with running_cluster(directory, workers=2, hosts=("127.0.0.1", "localhost")) as cluster:
        yield cluster


def _hot_table(dsn: str, prefix: str) -> tuple[str, PostgresHot]:
    table = f"{prefix}_{uuid.uuid4().hex[:8]}"
    hot = PostgresHot(dsn)
    hot.create(table)
    hot.insert(table, 1, ROWS)
    return table, hot


def _round_with_faults(
    cluster: StandaloneCluster,
    dsn: str,
    table: str,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    faults: dict[str, Any],
    conf: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[int, list[dict[str, Any]]]]:
    record_dir = tmp_path / f"attempts-{table}"
    record_dir.mkdir()
    config = {
        "master": cluster.master_url,
        "status_url": f"http://127.0.0.1:{cluster.webui_port}/json/",
        "executors": 2,
        "dsn": dsn,
        "table": table,
        "cursor_column": "id",
        "target_rows_per_split": ROWS // 4,
        "catalog": catalog_properties,
        "state_path": str(tmp_path / f"state-{table}.json"),
        "conf": {
            "spark.executor.memory": "512m",
            "spark.executorEnv.PYTHONPATH": str(REPO),  # the executors import testbed.split_faults
            **(conf or {}),
        },
        "faults": {
            "record_dir": str(record_dir),
            "lake_dir": catalog_properties["warehouse"].removeprefix("file://"),
            **faults,
        },
    }
    return round_in_child(config), attempts(record_dir)


def _committed_attempts(catalog_properties: dict[str, str], table: str) -> dict[int, set[int]]:
    """Split index -> the Spark task attempt ids whose data files the lake's current snapshot holds."""
    lake = load_catalog("default", **catalog_properties).load_table(("cluster", table))
    found: dict[int, set[int]] = {}
    for path in lake.inspect.data_files().column("file_path").to_pylist():
        match = _SPLIT_FILE.search(path)
        assert match, path
        found.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return found


def _assert_one_attempt_per_split(
    catalog_properties: dict[str, str], hot: PostgresHot, table: str, report: dict[str, Any]
) -> dict[int, set[int]]:
    assert report["outcome"] == "tiered" and report["rows"] == ROWS, report
    lake = lake_rows(catalog_properties, ("cluster", table), COLUMNS)
    assert len({row[0] for row in lake}) == len(lake)
    assert digest(lake) == digest(hot.rows(table))
    committed = _committed_attempts(catalog_properties, table)
    assert sorted(committed) == list(range(report["splits"])), committed
    assert all(len(ids) == 1 for ids in committed.values()), committed
    assert unreferenced_data_files(catalog_properties, ("cluster", table)) == []
    return committed


def test_a_split_whose_first_attempt_fails_after_writing_commits_only_the_retry(
    two_hosts: StandaloneCluster, pg_server: Any, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table, hot = _hot_table(pg_server.dsn, "retried")

    report, seen = _round_with_faults(two_hosts, pg_server.dsn, table, catalog_properties, tmp_path, {"fail": [0]})

    assert report["splits"] >= 2
    first, retry = seen[0][0], seen[0][-1]
    assert (first["attempt"], retry["attempt"]) == (0, 1), seen[0]
    assert first["files"], "the failing attempt had written no file before it failed"
    assert sorted(t["status"] for t in report["tasks"] if t["index"] == 0) == ["FAILED", "SUCCESS"], report["tasks"]
    committed = _assert_one_attempt_per_split(catalog_properties, hot, table, report)
    assert committed[0] == {retry["task_attempt_id"]}
    assert not any(Path(path).exists() for path in first["files"]), "the failed attempt's files were left behind"


def test_a_speculative_copy_of_a_slow_split_commits_exactly_one_attempt(
    two_hosts: StandaloneCluster, pg_server: Any, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table, hot = _hot_table(pg_server.dsn, "speculated")
    speculation = {
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.quantile": "0.5",
        # Only the stall (60 s) is slow enough: a copy started while the first attempt was still writing, slowed by
        # a loaded machine, won before that attempt recorded itself (seen once with 500 ms and 1.5x).
        "spark.speculation.multiplier": "3",
        "spark.speculation.minTaskRuntime": "10s",
        # Speculate by run time alone (the efficiency check weighs input records, which parallelize has none of).
        "spark.speculation.efficiency.enabled": "false",
    }

    report, seen = _round_with_faults(
        two_hosts, pg_server.dsn, table, catalog_properties, tmp_path, {"stall": {"1": 60}}, speculation
    )

    split_one = [t for t in report["tasks"] if t["index"] == 1]
    assert any(t["speculative"] for t in split_one), report["tasks"]
    assert len({t["host"] for t in split_one}) == 2, split_one  # the copy ran on the other host
    original = next(r for r in seen[1] if r["attempt"] == 0)
    assert original["files"], "the stalled attempt had written no file"
    committed = _assert_one_attempt_per_split(catalog_properties, hot, table, report)
    (winner,) = committed[1]
    assert winner != original["task_attempt_id"], "the stalled attempt's files were committed, not the copy's"
    assert not any(Path(path).exists() for path in original["files"]), "the overtaken attempt's files were left behind"


def test_a_split_whose_executor_is_killed_after_writing_commits_only_the_rerun(
    two_hosts: StandaloneCluster, pg_server: Any, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table, hot = _hot_table(pg_server.dsn, "lost_executor")

    report, seen = _round_with_faults(
        two_hosts, pg_server.dsn, table, catalog_properties, tmp_path, {"kill_executor": [0]}
    )

    first = next(r for r in seen[0] if r["attempt"] == 0)
    assert first["files"], "the attempt on the killed executor had written no file"
    assert len(seen[0]) >= 2 and any(t["status"] != "SUCCESS" for t in report["tasks"] if t["index"] == 0)
    committed = _assert_one_attempt_per_split(catalog_properties, hot, table, report)
    assert committed[0] != {first["task_attempt_id"]}
    assert not any(Path(path).exists() for path in first["files"]), "the lost executor's files were left behind"
