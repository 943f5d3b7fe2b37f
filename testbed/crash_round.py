"""Run one round in a child process and SIGKILL its whole process group at a chosen phase.

``crash_round(...)`` (in the test) runs ``python -m testbed.crash_round '<json config>'``, whose ``main`` runs the
round. The process group holds that driver, Spark's JVM and its Python workers, so nothing survives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.offsets import CursorValue
from airflow_provider_tiering.core.ports import VerifyRows
from airflow_provider_tiering.core.round_result import RoundPhase
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.sources.sqlite import SqliteSource
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.lake_faults import InterposedCatalog
from testbed.rounds import round_parts

REPO = Path(__file__).resolve().parent.parent


def crash_round(
    tmp_path: Path,
    catalog_properties: dict[str, str],
    kill_at: str,
    spec: dict[str, Any],
    *,
    hot_uri: str | None = None,
    local_writer: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a round of ``spec`` in a child process (hot store ``tmp_path/hot.db`` for a SQL spec, or the database
    at ``hot_uri``; state ``tmp_path/state.json``) and SIGKILL it at phase ``kill_at`` ("writing": once its first
    data file exists, in a local or an ``s3://`` warehouse; "swap": inside the commit, just before the catalog swaps
    the metadata, every file of the commit written; "none": not at all, the round runs to its end and the child
    exits 0). ``local_writer``: a round of one split is written by the round's process, without Spark. ``env`` is
    added to the child's environment (its driver, Spark JVM and Python workers)."""
    config = {
        "hot_uri": hot_uri,
        "local_writer": local_writer,
        "spec": spec,
        "kill_at": kill_at,
        "catalog": catalog_properties,
        "hot": str(tmp_path / "hot.db"),
        "state": str(tmp_path / "state.json"),
        "marker": str(tmp_path / "killed-with-files.json"),
    }
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, "-m", "testbed.crash_round", json.dumps(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,  # its own process group: driver, JVM and Python workers die together
    )


def kill_everything() -> None:
    sys.stdout.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def staged_files(catalog: Mapping[str, str], staging: str) -> set[str]:
    """The data files under a staging directory URI, local or ``s3://`` (listed with boto3)."""
    from testbed.lake_check import data_files_stored

    return data_files_stored(dict(catalog), staging)


def kill_when_files_appear(catalog: Mapping[str, str], staging: str, before: set[str], marker: Path) -> None:
    """Kill mid-write: as soon as the round's first data file exists, while other splits still run."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        files = sorted(staged_files(catalog, staging) - before)
        if files:
            marker.write_text(json.dumps(files))
            kill_everything()
        time.sleep(0.01)


class SqliteSourceKilledInItsSecondEvictionBatch(SqliteSource):
    """Dies inside the second eviction batch's transaction: its rows read and locked, none deleted yet."""

    batches = 0

    def evict_batch(
        self,
        after: CursorValue | None,
        upto: CursorValue,
        cutoff: datetime,
        age_column: str | None,
        limit: int,
        verify: VerifyRows,
    ) -> tuple[int, CursorValue | None]:
        self.batches += 1
        if self.batches < 2:
            return super().evict_batch(after, upto, cutoff, age_column, limit, verify)

        def die(rows: pa.Table) -> None:
            print(f"phase evicting (a batch of {rows.num_rows} rows in flight)", flush=True)
            kill_everything()

        return super().evict_batch(after, upto, cutoff, age_column, limit, die)


class CatalogThatDiesBeforeTheSwap(InterposedCatalog):
    """Once armed (the round's files are written), the next commit dies just before its metadata swap."""

    armed = False

    def before_swap(self) -> None:
        if self.armed:
            print("phase swap", flush=True)
            kill_everything()


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("log"):  # the round's account of itself, for a test that keeps each child's output
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    spec = TableSpec.parse(config["spec"])
    kill_at = config["kill_at"]
    warehouse = config["catalog"]["warehouse"].rstrip("/")
    staging = f"{warehouse}/{spec.lake.namespace}/{spec.lake.table}/data/tiering"
    before = staged_files(config["catalog"], staging)

    catalog_handle = None
    if kill_at == "swap":
        from pyiceberg.catalog import load_catalog

        dying = CatalogThatDiesBeforeTheSwap(load_catalog("default", **config["catalog"]))
        catalog_handle = CatalogHandle.of(dying)

    def observe(phase: RoundPhase) -> None:
        print(f"phase {phase}", flush=True)
        if phase == "written" and kill_at == "swap":
            dying.armed = True
        elif phase == kill_at == "writing":
            args = (config["catalog"], staging, before, Path(config["marker"]))
            threading.Thread(target=kill_when_files_appear, args=args, daemon=True).start()
        elif phase == kill_at:
            kill_everything()

    connection = None if spec.source.conn_id is None else ConnectionInfo("sqlite", host=config["hot"])
    if config.get("hot_uri"):
        connection = ConnectionInfo.from_uri(config["hot_uri"])
    source = None
    if kill_at == "evicting":
        source = SqliteSourceKilledInItsSecondEvictionBatch(spec.source, connection)  # type: ignore[arg-type]
    writer = build_writer(SparkSettings(master="local[2]"), local_single_split=bool(config.get("local_writer")))
    parts = round_parts(
        spec, connection, config["catalog"], writer=writer, source=source, catalog_handle=catalog_handle
    )
    parts.run(JsonFileStateStore(config["state"]), observe=observe)
    if kill_at == "none":
        print("round finished", flush=True)
        sys.exit(0)
    print("round finished without being killed", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
