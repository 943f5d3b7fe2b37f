"""An Iceberg SQL catalog on PostgreSQL (pyiceberg's ``sql`` catalog, ``postgresql+psycopg://``), the production
form of a JDBC catalog: concurrent rounds of several tables against it, each table raced by two attempts at once.

The catalog lives in a fresh database of the test PostgreSQL server, so the first rounds also race pyiceberg's
creation of the catalog's tables, and of the namespace. The lake is read back with pyiceberg alone and compared with
the hot tables row for row.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.errors import FencedError
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts
from testbed.tiering_env import postgres_catalog

TABLES = 4
ROUNDS = 3
RACERS = 2
ROWS_PER_ROUND = 1500


def spec_of(name: str) -> TableSpec:
    # One split per round: written by the task process, no Spark session in the threads.
    return TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "unused", "table": name, "cursor_column": "id"},
            "lake": {"namespace": "pgcat", "table": name},
            "target_rows_per_split": 100_000,
        }
    )


def test_concurrent_rounds_of_four_tables_on_a_postgresql_catalog_tier_each_row_exactly_once(tmp_path, pg_server):
    catalog = postgres_catalog(pg_server, f"file://{tmp_path}/warehouse")
    assert catalog["uri"].startswith("postgresql+psycopg://")
    hot = PostgresHot(pg_server.dsn)
    names = [f"pgcat{i}_{uuid.uuid4().hex[:6]}" for i in range(TABLES)]
    for name in names:
        hot.create(name)
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    def attempt(name: str, racer: int, barrier: threading.Barrier) -> str:
        store = JsonFileStateStore(tmp_path / "state" / f"{name}-{racer}.json")  # two workers, two views of state
        parts = round_parts(spec_of(name), hot, catalog, writer=writer)
        barrier.wait()
        try:
            return parts.run(store).outcome
        except FencedError:
            return "fenced"

    outcomes: dict[str, list[list[str]]] = {name: [] for name in names}
    with ThreadPoolExecutor(TABLES * RACERS) as pool:
        for round_number in range(ROUNDS):
            for i, name in enumerate(names):
                hot.insert(name, round_number * 10_000 + 1, ROWS_PER_ROUND + 100 * i)
            barrier = threading.Barrier(TABLES * RACERS, timeout=60)
            futures = {
                (name, racer): pool.submit(attempt, name, racer, barrier) for name in names for racer in range(RACERS)
            }
            for name in names:
                outcomes[name].append(sorted(futures[(name, racer)].result() for racer in range(RACERS)))

    lake = load_catalog("default", **catalog)
    for name in names:
        # Per round, one attempt tiered; the other was fenced at commit, or planned after it and found nothing.
        for pair in outcomes[name]:
            assert pair.count("tiered") == 1 and set(pair) <= {"tiered", "fenced", "nothing_to_tier"}, outcomes
        assert digest(lake_rows(catalog, ("pgcat", name), COLUMNS)) == digest(hot.rows(name))
        table = lake.load_table(("pgcat", name))
        epochs = [
            int(s.summary["tiering.epoch"])
            for s in table.snapshots()
            if s.summary is not None and "tiering.epoch" in s.summary.additional_properties
        ]
        assert len(epochs) == ROUNDS and epochs == sorted(set(epochs)), epochs
    # The catalog's rows are in PostgreSQL, under the catalog's name: one per table.
    database = catalog["uri"].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.dsn_for(database)) as conn:
        rows = conn.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables").fetchall()
    assert sorted(rows) == sorted(("default", "pgcat", name) for name in names)
    assert not list(Path(tmp_path).glob("*.db"))  # nothing fell back to a SQLite file
