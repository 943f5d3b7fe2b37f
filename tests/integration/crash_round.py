"""Run one round in this process and SIGKILL the whole process group at a chosen phase.

Used by test_crash_recovery.py: ``python -m tests.integration.crash_round '<json config>'``.
The process group holds this driver, Spark's JVM and its Python workers, so nothing survives.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.iceberg import IcebergLake, load_catalog
from airflow_provider_tiering.sources.files import FileSource
from airflow_provider_tiering.sources.sqlite import SqliteSource
from airflow_provider_tiering.spark.session import SparkSettings
from airflow_provider_tiering.spark.write_job import SparkSplitWriter


def kill_everything() -> None:
    sys.stdout.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def kill_when_files_appear(staging: Path, before: set[str], marker: Path) -> None:
    """Kill mid-write: as soon as the round's first data file exists, while other splits still run."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        files = sorted(str(p) for p in staging.rglob("*.parquet") if str(p) not in before) if staging.exists() else []
        if files:
            marker.write_text(json.dumps(files))
            kill_everything()
        time.sleep(0.01)


class SqliteSourceKilledInItsSecondEvictionBatch(SqliteSource):
    """Dies inside the second eviction batch's transaction: its rows read and locked, none deleted yet."""

    batches = 0

    def evict_batch(self, after, upto, cutoff, age_column, limit, verify):  # type: ignore[no-untyped-def]
        self.batches += 1
        if self.batches < 2:
            return super().evict_batch(after, upto, cutoff, age_column, limit, verify)

        def die(rows) -> None:  # type: ignore[no-untyped-def]
            print(f"phase evicting (a batch of {rows.num_rows} rows in flight)", flush=True)
            kill_everything()

        return super().evict_batch(after, upto, cutoff, age_column, limit, die)


def main() -> None:
    config = json.loads(sys.argv[1])
    spec = TableSpec.parse(config["spec"])
    kill_at = config["kill_at"]
    lake = IcebergLake(load_catalog("default", config["catalog"]), spec.lake.namespace, spec.lake.table)
    staging = Path(config["warehouse"]) / spec.lake.namespace / spec.lake.table / "data" / "tiering"
    before = {str(p) for p in staging.rglob("*.parquet")} if staging.exists() else set()

    def observe(phase: str) -> None:
        print(f"phase {phase}", flush=True)
        if phase == kill_at == "writing":
            args = (staging, before, Path(config["marker"]))
            threading.Thread(target=kill_when_files_appear, args=args, daemon=True).start()
        elif phase == kill_at:
            kill_everything()

    writer = SparkSplitWriter(SparkSettings(master="local[2]"))
    if spec.source.kind == "files":
        source = FileSource(spec.source)
    elif kill_at == "evicting":
        source = SqliteSourceKilledInItsSecondEvictionBatch(spec.source, config["hot"])
    else:
        source = SqliteSource(spec.source, config["hot"])
    run_round(
        spec,
        source,
        lake,
        writer,
        JsonFileStateStore(config["state"]),
        observe=observe,
    )
    print("round finished without being killed", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
