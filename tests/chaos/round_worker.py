"""The process that runs tiering rounds during a chaos run; the harness SIGKILLs its whole process group at will.

``python -m tests.chaos.round_worker '<json config>'`` runs rounds of every table in turn (cursor tables, and the
change-stream tables the config lists under ``cdc_tables``), each one like a tiering task would (its own catalog,
source and state store; the Spark session is kept between rounds, as a worker's would be); once the idle file
exists, it stops after each table has had a round with nothing to tier.
It reports on stdout, one JSON object per line::

    {"event": "phase", "table": "t1", "phase": "written", "epoch": 7}   (also "swapping": see GatedCatalog)
    {"event": "round", "table": "t1", "outcome": "tiered" | "nothing_to_tier" | "failed" | "fenced", ...}
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.errors import FencedError
from airflow_provider_tiering.core.ports import SplitWriter
from airflow_provider_tiering.core.round_result import RoundPhase
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.lake_faults import InterposedCatalog
from testbed.rounds import catalog, round_parts

NAMESPACE = "chaos"


def table_spec(table: str, change_stream: bool = False) -> TableSpec:
    """A cursor table's spec, or (``change_stream``) a table tiered from its PostgreSQL change stream, keyed by its
    primary key."""
    source: dict[str, Any] = (
        {"kind": "postgres_cdc", "conn_id": "chaos_pg", "table": table}
        if change_stream
        else {"conn_id": "chaos_pg", "table": table, "cursor_column": "id", "max_watermark_wait_seconds": 2}
    )
    return TableSpec.parse(
        {
            "name": table,
            "source": source,
            "lake": {"namespace": NAMESPACE, "table": table},
            "target_rows_per_split": 400,  # rounds of a few thousand rows run as several Spark tasks
            "max_rows_per_round": 20_000,
            "max_consecutive_failures": 1000,  # chaos fails rounds on purpose; quarantine is tested elsewhere
        }
    )


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


class CommitRetries(logging.Handler):
    """Counts commit retries after a lost catalog swap (another writer committed in between): pyiceberg's own
    (each re-checking the fence) and the lake's."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "lost the catalog swap" in message or "Commit failed due to a concurrent update" in message:
            self.count += 1


class GatedCatalog(InterposedCatalog):
    """A pyiceberg catalog whose first ``commit_table`` of a round stops at the swap gate while its file exists
    (and is empty or names the round's table).

    The harness's handle on the instant between a round's fence check and its catalog swap: it creates the gate,
    and when a round reports phase ``swapping`` it commits to the same table as another writer and removes the
    gate, so the round's swap is lost for sure (pyiceberg then retries it, through the fence). Without a gate file
    this is the plain catalog.
    """

    def __init__(self, catalog: Any, gate: Path, table: str, epoch: dict[str, int]) -> None:
        super().__init__(catalog)
        self._gate = gate
        self._table = table
        self._epoch = epoch
        self._stopped = False

    def before_swap(self) -> None:
        if not self._stopped and self._gate_names_this_table():
            self._stopped = True
            emit(event="phase", table=self._table, phase="swapping", epoch=self._epoch.get("value"))
            deadline = time.monotonic() + 20  # the harness removes the gate within a second; never hang a round
            while self._gate.exists() and time.monotonic() < deadline:
                time.sleep(0.02)

    def _gate_names_this_table(self) -> bool:
        try:
            named = self._gate.read_text().strip()
        except FileNotFoundError:
            return False
        return named in ("", self._table)


def run_one(table: str, config: dict[str, Any], writer: SplitWriter, retries: CommitRetries) -> str:
    spec = table_spec(table, change_stream=table in config.get("cdc_tables", ()))
    epoch: dict[str, int] = {}
    gate = Path(config["swap_gate"])

    def gated_catalog() -> Any:
        return GatedCatalog(catalog(config["catalog"]).handle().get(), gate, table, epoch)

    # Built as a task builds its round, with the catalog instrumented (loaded inside the round, like a task's).
    parts = round_parts(
        spec,
        ConnectionInfo.from_uri(config["dsn"]),
        config["catalog"],
        writer=writer,
        catalog_handle=CatalogHandle(gated_catalog, "default"),
    )
    state = JsonFileStateStore(Path(config["state_dir"]) / f"{table}.json")
    retries.count = 0
    began = time.monotonic()

    def observe(phase: RoundPhase) -> None:
        loaded = state.load() if phase == "acquired" else None
        if loaded is not None:
            epoch["value"] = loaded.epoch
        emit(event="phase", table=table, phase=phase, epoch=epoch.get("value"))

    emit(event="start", table=table)
    try:
        result = parts.run(state, observe=observe)
    except FencedError as exc:
        emit(event="round", table=table, outcome="fenced", error=str(exc), seconds=time.monotonic() - began)
        return "fenced"
    except Exception as exc:
        emit(
            event="round",
            table=table,
            outcome="failed",
            error_type=type(exc).__name__,
            error=describe_error(exc, [config["password"]]),
            commit_retries=retries.count,
            seconds=time.monotonic() - began,
        )
        return "failed"
    emit(
        event="round",
        table=table,
        outcome=result.outcome,
        epoch=result.epoch,
        snapshot_id=result.snapshot_id,
        end=result.end_offsets,
        rows=result.metrics.rows if result.metrics else 0,
        splits=result.metrics.splits if result.metrics else 0,
        blockers=len(result.blockers),
        cleaned=result.cleaned_files,
        commit_retries=retries.count,
        seconds=time.monotonic() - began,
    )
    return result.outcome


def round_order(tables: list[str], cdc_tables: list[str]) -> list[str]:
    """One turn of rounds: a change-stream table's round before each cursor table's (its rounds are short, and
    faults aimed at it need not wait for every other table's round)."""
    cursor = [t for t in tables if t not in cdc_tables]
    if not cdc_tables or not cursor:
        return list(tables)
    return [t for i, table in enumerate(cursor) for t in (cdc_tables[i % len(cdc_tables)], table)]


def main() -> None:
    config = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    retries = CommitRetries()
    logging.getLogger("airflow_provider_tiering.lake.iceberg").addHandler(retries)
    logging.getLogger("pyiceberg.table").addHandler(retries)
    writer = build_writer(SparkSettings(master="local[2]"))
    # A change-stream round is one split: written by this process, as a task would by default
    # (spark.local_single_split), without waiting for the Spark session.
    single_split_writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
    cdc_tables = set(config.get("cdc_tables", ()))
    idle_file = Path(config["idle_file"])
    idle: set[str] = set()
    rounds_until_idle = 0
    order = round_order(config["tables"], config.get("cdc_tables", []))
    try:
        while idle != set(config["tables"]):
            for table in order:
                until_idle = idle_file.exists()  # checked before each round: the harness may create it any time
                if table in idle:
                    continue
                outcome = run_one(table, config, single_split_writer if table in cdc_tables else writer, retries)
                if until_idle:
                    rounds_until_idle += 1
                    if outcome == "nothing_to_tier":
                        idle.add(table)
                    if rounds_until_idle > 20 * len(config["tables"]):
                        raise RuntimeError(f"tables still not idle after {rounds_until_idle} final rounds")
                if outcome == "failed":
                    time.sleep(config.get("pause_after_failure", 0.5))  # a task's retry delay, shortened
    except Exception:
        traceback.print_exc()
        raise
    finally:
        writer.stop()
        single_split_writer.stop()


if __name__ == "__main__":
    main()
