"""Rounds through a real Spark Connect server (scripts/spark_connect_server.sh, 127.0.0.1 only).

The split tasks (mapInArrow over split ids) run in the server's Python workers, which import this package
and unpickle the Source; this process starts no JVM of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.ports import find_free_port
from testbed.rounds import round_parts
from tests.integration.test_spark_class_data_sharing import run_with_archive_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "spark_connect_server.sh"


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory) -> Iterator[str]:
    """A Spark Connect server for this module, started by the project's script; stopped at teardown."""
    port = find_free_port()
    env = {
        **os.environ,
        "VENV": str(Path(sys.executable).parent.parent),
        "SPARK_CONNECT_PORT": str(port),
        "SPARK_CONNECT_MASTER": "local[2]",
        "SPARK_CONNECT_DIR": str(tmp_path_factory.mktemp("spark-connect")),
    }
    env.pop("SPARK_CONNECT_TOKEN", None)  # the writer below sends no token
    started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        log = (Path(env["SPARK_CONNECT_DIR"]) / "server.log").read_text()
        assert f"Spark Connect server started at: 127.0.0.1:{port}" in log
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("partition_by", [(), ("region",)], ids=["plain", "identity-partitioned"])
def test_rounds_through_spark_connect_tier_the_table_row_for_row(
    spark_connect, partition_by, catalog_properties, tmp_path
):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    table = f"orders_connect_{len(partition_by)}"
    spec = TableSpec.parse(
        {
            "name": table,
            # Append-only rows: the round may be read in several splits (a consistent snapshot is one on SQLite).
            "source": {"conn_id": "unused", "table": table, "cursor_column": "id", "consistent_snapshot": False},
            "lake": {"namespace": "it", "table": table, "partition_by": list(partition_by)},
            "target_rows_per_split": 700,
        }
    )
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create(table)
    writer = build_writer(SparkSettings(remote=spark_connect))
    state_path = tmp_path / "state.json"
    try:
        for start, count in [(1, 3000), (3001, 1500)]:
            hot.insert(table, start, count)
            result = round_parts(spec, hot, catalog_properties, writer=writer).run(JsonFileStateStore(state_path))
            assert result.outcome == "tiered"
            assert result.metrics.rows == count and result.metrics.splits > 1
            assert result.end_offsets == {"cursor": start + count - 1}
            assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))
        assert isinstance(writer.spark, ConnectSession)  # the split tasks ran on the server, not in a local JVM
    finally:
        writer.stop()
    assert unreferenced_data_files(catalog_properties, ("it", table)) == []
    idle = round_parts(spec, hot, catalog_properties, spark=SparkSettings(remote=spark_connect)).run(
        JsonFileStateStore(state_path)
    )
    assert idle.outcome == "nothing_to_tier"


def test_a_process_may_use_a_local_session_and_spark_connect_in_turn(
    spark_connect, spark_writer, catalog_properties, tmp_path
):
    """pyspark's classic builder refuses Connect next to a local session and leaves Connect mode set in the
    environment (breaking later local sessions and child processes); the writer's sessions must not."""
    hot = SqliteHot(tmp_path / "hot.db")
    for table, writer in [
        ("mixed_local", spark_writer),
        ("mixed_connect", build_writer(SparkSettings(remote=spark_connect))),
        ("mixed_local_again", spark_writer),
    ]:
        spec = TableSpec.parse(
            {
                "name": table,
                "source": {"conn_id": "unused", "table": table, "cursor_column": "id"},
                "lake": {"namespace": "it", "table": table},
            }
        )
        hot.create(table)
        hot.insert(table, 1, 500)
        parts = round_parts(spec, hot, catalog_properties, writer=writer)
        result = parts.run(JsonFileStateStore(tmp_path / f"{table}.json"))
        if writer is not spark_writer:
            writer.stop()
        assert result.metrics.rows == 500
        assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))
        assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


RECORDING_THEN_CONNECT = """
import sys
from airflow_provider_tiering.spark.session import SparkSettings, create_spark_session, stop_spark_session
from airflow_provider_tiering.spark import session

local = create_spark_session(SparkSettings(master="local[1]"))
assert session._recording is not None, "a fresh archive directory: this JVM records"
remote = create_spark_session(SparkSettings(remote=sys.argv[1]))
assert remote.range(3).count() == 3
stop_spark_session(remote)
assert local.range(5).count() == 5, "the local session still runs"
stop_spark_session(local)
print("ok")
"""


def test_stopping_a_connect_session_leaves_the_recording_local_session_running(spark_connect, tmp_path) -> None:
    """Stopping a Connect session once also ended this process's local JVM, when that JVM was recording the class
    data sharing archive (its session then failed with 'Connection refused')."""
    result = run_with_archive_dir(RECORDING_THEN_CONNECT, spark_connect, archive_dir=tmp_path / "cds", cwd=REPO)
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]
    assert list((tmp_path / "cds").glob("*.jsa")), "the recording was published when the local session stopped"
