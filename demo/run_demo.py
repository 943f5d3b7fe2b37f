"""``make demo``: tier three SQLite tables into Iceberg with Airflow, twice, and print their statuses.

Everything is embedded: Airflow with its SQLite metadata DB, Spark in local mode, a pyiceberg SQL
catalog on SQLite with a local warehouse, and a SQLite hot store. All state lives under ``.demo/``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_tiering.core.units import count, duration

REPO = Path(__file__).resolve().parent.parent
DEMO = Path(os.environ.get("TIERING_DEMO_HOME", REPO / ".demo")).resolve()
HOT_DB = DEMO / "hot.db"
CATALOG = {
    "name": "demo",
    "type": "sql",
    "uri": f"sqlite:///{DEMO}/catalog.db",
    "warehouse": f"file://{DEMO}/warehouse",
}
REGIONS = ("eu", "us", "apac")


def demo_environment() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        {
            "PATH": f"{bin_dir}:{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(DEMO / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW_CONN_TIERING_DEMO_HOT": json.dumps({"conn_type": "sqlite", "host": str(HOT_DB)}),
            "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": CATALOG}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


def insert_rows(first_order: int, orders: int, first_view: datetime, views: int, customers: int = 0) -> None:
    rng = random.Random(first_order)
    with sqlite3.connect(HOT_DB) as conn:
        conn.executemany(
            "INSERT INTO orders (order_id, customer_id, region, amount, ordered_at) VALUES (?, ?, ?, ?, ?)",
            [
                (
                    i,
                    rng.randint(1, 500),
                    rng.choice(REGIONS),
                    f"{rng.uniform(1, 500):.2f}",
                    f"2026-11-0{1 + i % 9} 10:00:00",
                )
                for i in range(first_order, first_order + orders)
            ],
        )
        conn.executemany(
            "INSERT INTO page_views (viewed_at, path, user_agent) VALUES (?, ?, ?)",
            [
                ((first_view + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S.%f"), f"/p/{i % 37}", "demo")
                for i in range(views)
            ],
        )
        start = conn.execute("SELECT coalesce(max(customer_id), 0) FROM customers").fetchone()[0]
        conn.executemany(
            "INSERT INTO customers (customer_id, name, signed_up) VALUES (?, ?, ?)",
            [(start + i, f"customer {start + i}", "2026-10-01") for i in range(1, customers + 1)],
        )


def create_hot_store() -> None:
    with sqlite3.connect(HOT_DB) as conn:
        conn.executescript(
            """
            CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, region TEXT NOT NULL,
                                 amount DECIMAL(10,2), ordered_at TIMESTAMP);
            CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, signed_up DATE);
            CREATE TABLE page_views (viewed_at TIMESTAMP NOT NULL, path TEXT, user_agent TEXT);
            CREATE INDEX page_views_viewed_at ON page_views (viewed_at);
            """
        )
    insert_rows(1, 20_000, datetime(2026, 11, 1, tzinfo=UTC), 5_000, customers=500)


class Progress:
    """One line per step: what it did, and how long it took."""

    def __init__(self, steps: int) -> None:
        self.steps, self.step, self.started = steps, 0, time.monotonic()

    def run(self, what: str, action: Callable[[], str | None]) -> None:
        self.step += 1
        print(f"[{self.step}/{self.steps}] {what} ...", end="", flush=True)
        began = time.monotonic()
        outcome = action()
        print(f" {outcome + ' ' if outcome else ''}({duration(time.monotonic() - began)})", flush=True)

    def total(self) -> str:
        return duration(time.monotonic() - self.started)


def airflow(env: dict[str, str], *args: str) -> str:
    """Run ``airflow ARGS``; its output is shown only if it fails (Airflow's own warnings are not the demo's)."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args], env=env, cwd=DEMO, capture_output=True, text=True
    )
    if result.returncode != 0:
        print(f"\n`airflow {' '.join(args)}` failed with exit code {result.returncode}:", file=sys.stderr)
        print(result.stdout + result.stderr, file=sys.stderr)
        raise SystemExit(result.returncode)
    return result.stdout


def table_states() -> dict[str, Any]:
    from airflow_provider_tiering.status import list_tiering_statuses

    return {s.table: s.state for s in list_tiering_statuses()}


def tier_round(env: dict[str, str]) -> str:
    """One run of the demo DAG; what each table's round did."""
    before = table_states()
    airflow(env, "dags", "test", "tiering_demo")
    parts = []
    for table, state in sorted(table_states().items()):
        previous = before.get(table)
        if state.status.value == "FAILED":
            parts.append(f"{table} FAILED ({(state.last_error or '').splitlines()[0][:80]})")
        elif previous is None or state.epoch > previous.epoch:
            rows = state.last_round.rows if state.last_round else 0
            parts.append(f"{table} {count(rows)} rows")
        else:
            parts.append(f"{table} nothing new")
    return ", ".join(parts)


def print_statuses() -> bool:
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.status import list_tiering_statuses

    properties = dict(CATALOG)
    catalog = load_catalog(properties.pop("name"), **properties)
    statuses = list_tiering_statuses()
    print("\nThe lake, read back with pyiceberg, next to the hot store:\n")
    header = f"{'table':<12} {'status':<8} {'epoch':>5} {'last rows':>9} {'lake rows':>9} {'hot rows':>9}  offsets"
    print(header + "\n" + "-" * 78)
    all_ok = True
    with sqlite3.connect(HOT_DB) as conn:
        for status in statuses:
            state = status.state
            lake_rows = catalog.load_table((status.namespace, status.lake_table)).scan().count()
            hot_rows = conn.execute(f'SELECT count(*) FROM "{status.lake_table}"').fetchone()[0]
            offsets = json.dumps(state.committed.end_offsets) if state.committed else "-"
            rows = state.last_round.rows if state.last_round else 0
            print(
                f"{state.table:<12} {state.status.value:<8} {state.epoch:>5} {count(rows):>9} {count(lake_rows):>9} "
                f"{count(hot_rows):>9}  {offsets}"
            )
            all_ok &= state.status.value == "TIERED" and lake_rows == hot_rows
    return all_ok and len(statuses) == 3


STATUS_SQL = (
    "SELECT table_name, status, tiering_epoch, last_tiered_time, last_round_rows, last_error\n"
    "FROM sys.lake_tiering_status ORDER BY table_name"
)


def print_status_in_sql() -> bool:
    """The lake's status table (``sys.lake_tiering_status``, written by each run's summary task), read back in SQL
    with DuckDB's Iceberg reader: where dashboards and alerts written in SQL read it."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg
    from pyiceberg.catalog import load_catalog

    properties = dict(CATALOG)
    catalog = load_catalog(properties.pop("name"), **properties)
    metadata = catalog.load_table(("sys", "lake_tiering_status")).metadata_location.removeprefix("file://")
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for package in (duckdb_extension_avro, duckdb_extension_iceberg):  # loaded from their packages: no network
            connection.execute(f"LOAD '{next(Path(package.__file__).parent.rglob('*.duckdb_extension'))}'")
        connection.execute("CREATE SCHEMA sys")
        connection.execute(f"CREATE VIEW sys.lake_tiering_status AS SELECT * FROM iceberg_scan('{metadata}')")
        result = connection.execute(STATUS_SQL)
        names = [column[0] for column in result.description]
        rows = [["-" if v is None else str(v)[:19] for v in row] for row in result.fetchall()]
    finally:
        connection.close()
    sql = STATUS_SQL.replace("\n", "\n  ")
    print(f"\nThe same in SQL, where the lake is queried (DuckDB reading the lake's status table):\n\n  {sql}\n")
    widths = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(names)]
    for line in (names, ["-" * w for w in widths], *rows):
        print(("  " + "  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True))).rstrip())
    return len(rows) == 3 and all(row[1] == "TIERED" for row in rows)


def freshness_seconds() -> float:
    """The longest freshness interval of the demo DAG's tables."""
    sys.path.insert(0, str(REPO / "dags"))
    from tiering_demo import TABLES

    return max(float(table["freshness_seconds"]) for table in TABLES)


def main() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    env = demo_environment()
    os.environ.update(env)  # Airflow is imported here too (the DAG's tables, the statuses): same home and DB
    print(f"Tiering three SQLite tables into Iceberg with Airflow, Spark (local) and pyiceberg; state in {DEMO}")
    progress = Progress(steps=4)
    create_hot_store()
    progress.run("Airflow metadata database (SQLite)", lambda: airflow(env, "db", "migrate") and None)
    progress.run("round 1", lambda: tier_round(env))
    round_1_done = time.monotonic()

    def new_rows() -> str:
        insert_rows(20_001, 2_500, datetime(2026, 11, 2, tzinfo=UTC), 1_000)
        # A table is due again only once its freshness interval has passed since its last round; on a fast machine
        # round 2 would otherwise start early enough to find some tables not due.
        wait = freshness_seconds() - (time.monotonic() - round_1_done)
        if wait > 0:
            time.sleep(wait)
        return "2,500 orders and 1,000 page views, then a wait until the tables are due again"

    progress.run("new rows arrive", new_rows)
    progress.run("round 2", lambda: tier_round(env))
    ok = print_statuses()
    print(
        f"\nAll tables TIERED and the lake matches the hot store ({progress.total()} in all)."
        if ok
        else "\nSOME TABLES ARE NOT TIERED"
    )
    print("\n$ airflow tiering status\n" + airflow(env, "tiering", "status"), end="")
    ok &= print_status_in_sql()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
