from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures_servers import mariadb_server, pg_server, s3_server  # noqa: F401

pytest_plugins = ["testbed.cpu_report"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a cancelled CI job, the suite script's trap) ends the run as Ctrl-C does, so every fixture's teardown
    # runs: it stops the Airflow clusters and unmounts the chaos run's tmpfs, which the default action leaves behind.
    signal.signal(signal.SIGTERM, _interrupted)


@pytest.fixture(scope="session")
def spark_writer() -> Iterator[object]:
    """One local Spark session for the in-process integration tests (it costs seconds to start)."""
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.spark.session import SparkSettings

    writer = build_writer(SparkSettings(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    yield writer
    writer.stop()


@pytest.fixture(scope="module")
def local_writer() -> Iterator[object]:
    """Writes one-split rounds in the test process: no Spark starts (a round of several splits would start one)."""
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.spark.session import SparkSettings

    writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
    yield writer
    writer.stop()


@pytest.fixture
def catalog_properties(tmp_path: Path) -> dict[str, str]:
    """An embedded Iceberg SQL catalog on SQLite with a local warehouse, fresh for each test."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}
