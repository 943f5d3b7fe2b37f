"""Benchmark: a change-stream table under a steady writer — changes applied to the lake per second, and how far
behind the lake stays; on PostgreSQL (``postgres_cdc``), MariaDB (``mysql_cdc``, from the binlog), or both in one run.

TPC-H ``orders`` at ``--sf`` is loaded into each hot store as ``lag_orders`` and tiered once (the first round loads
it: in the slot's snapshot, or in the binlog position's). Then for ``--seconds``:

* ``--writers`` Python threads, pgbench-style, in a process of their own, each on its own connection (PostgreSQL:
  ``synchronous_commit = on``), commit transactions as fast as they can (or together about ``--rate`` changes a
  second): 3 updates of random keys and 1 insert each, and every 10th one a delete of a random key;
* a monitor samples, every 0.1 s, the log's end (PostgreSQL's WAL insert position, the binlog's end) and how many
  changes the writers committed;
* this process runs the table's rounds back to back (built as the operator builds them, in this process: a round
  of changes is one split, no Spark) and after each reads the lake's position from the snapshot's offsets; with
  ``--maintain-every``, the table's maintenance runs between two rounds at most that often, as the DAG's maintain
  task does after the tier task.

Per round: how far the lake is behind at the round's end, in log bytes and in seconds (now minus when the log
passed the lake's position, from the monitor's samples), how many changes the round brought (the writers' count when
the log passed the lake's position), and the task process's CPU (a binlog is read and decoded in it; PostgreSQL's
slot is decoded by the server). Then the writers stop, the rounds catch up, and the lake is compared with the table
(rows, keys, sum of prices). ``--hot postgres,mariadb`` runs both stores one after the other and compares their
changes per CPU-second of the task.

    python -m benchmarks.bench_cdc_lag                     # PostgreSQL, SF 0.1, 2 writers, 60 s
    python -m benchmarks.bench_cdc_lag --hot postgres,mariadb --writers 4 --seconds 120   # both, side by side
    python -m benchmarks.bench_cdc_lag --writers 4 --seconds 120 --rate 6000   # paced: does the lake keep up?
    python -m benchmarks.bench_cdc_lag --writers 4 --seconds 240 --maintain-every 30   # unpaced, maintained
    python -m benchmarks.bench_cdc_lag --sf 0.01 --seconds 10 --writers 1 --hot mariadb   # smoke run
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "cdc_lag.json"
TABLE = "lag_orders"
NAMESPACE = "bench"
COLUMNS = (
    "o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate, o_orderpriority, o_clerk, "
    "o_shippriority, o_comment"
)
KINDS = {"postgres": "postgres_cdc", "mariadb": "mysql_cdc"}


def spec(hot: str = "postgres") -> dict[str, Any]:
    return {
        "name": TABLE,
        "source": {"kind": KINDS[hot], "conn_id": "bench", "table": TABLE},
        "lake": {"namespace": NAMESPACE, "table": TABLE},
    }


class Store:
    """A hot store the benchmark runs on: its table loaded, the writers' and the monitor's connections, where its log
    ends, where the lake stands in it."""

    hot = "postgres"

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def load(self, sf: float, workdir: Path) -> int:
        from benchmarks.tpch_data import load_lineitem_timed

        return load_lineitem_timed(self.uri, sf, workdir, table=TABLE, tpch_table="orders", force=True).rows

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.uri, autocommit=True)

    def log_end(self, conn: Any) -> int:
        """Where the log ends now (the monitor's sample: every change counted before it is at or before it)."""
        from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

        (lsn,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone() or ("0/0",)
        return parse_lsn(lsn)

    def lake_position(self, offsets: dict[str, Any]) -> int:
        from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

        return parse_lsn(offsets["lsn"])

    def behind_bytes(self, conn: Any, lake: int) -> int:
        from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

        (current,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("0/0",)
        return max(0, parse_lsn(current) - lake)

    def hot_summary(self) -> tuple[int, int, float]:
        with self.connect() as conn:
            found = conn.execute(f"SELECT count(*), count(DISTINCT o_id), sum(o_totalprice) FROM {TABLE}").fetchone()
        return int(found[0]), int(found[1]), float(found[2])

    def clean_up(self) -> None:
        from benchmarks.scratch import drop_change_stream

        drop_change_stream(self.uri, spec(self.hot))


class MariaDBStore(Store):
    """MariaDB with its binlog on: positions are the binlog's file number and offset packed into one."""

    hot = "mariadb"

    def __init__(self, server: Any) -> None:
        super().__init__(server.url)
        self.server = server

    def load(self, sf: float, workdir: Path) -> int:
        from benchmarks.mariadb_orders import load_orders

        return load_orders(self.server, (TABLE,), "o_id", "o_ver", sf, workdir)

    def connect(self) -> Any:
        return self.server.connect(autocommit=True)

    def log_end(self, conn: Any) -> int:
        from airflow_provider_tiering.sources.mysql.binlog_positions import pack

        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, offset = cur.fetchone()[:2]
        return pack(str(file), int(offset))

    def lake_position(self, offsets: dict[str, Any]) -> int:
        from airflow_provider_tiering.sources.mysql.binlog_positions import pack

        return pack(offsets["binlog_file"], int(offsets["binlog_pos"]))

    def behind_bytes(self, conn: Any, lake: int) -> int:
        from airflow_provider_tiering.sources.mysql.binlog_positions import file_number, log_bytes

        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            sizes = {file_number(str(row[0])): int(row[1]) for row in cur.fetchall()}
        return log_bytes(lake, self.log_end(conn), sizes)

    def hot_summary(self) -> tuple[int, int, float]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT count(*), count(DISTINCT o_id), sum(o_totalprice) FROM {TABLE}")
            found = cur.fetchone()
        return int(found[0]), int(found[1]), float(found[2])

    def clean_up(self) -> None:
        pass  # the stream holds nothing on the server


@contextmanager
def store_of(hot: str, workdir: Path, dsn: str | None) -> Iterator[Store]:
    """The hot store's throw-away server under ``workdir`` (PostgreSQL: or ``dsn``), stopped afterwards."""
    if hot == "postgres":
        from benchmarks.scratch import postgres_scratch

        with postgres_scratch(str(workdir / "postgres"), dsn, "tiering-bench-cdc-lag-") as (_, uri):
            yield Store(uri)
    else:
        from benchmarks.mariadb_orders import mariadb_scratch

        with mariadb_scratch(workdir) as server:
            yield MariaDBStore(server)


class Writers:
    """pgbench-style writer threads in a process of their own (an application's, not the task's: they do not
    contend for this process's interpreter); ``changes`` counts committed row changes."""

    def __init__(self, hot: str, uri: str, threads: int, max_id: int, rate: float = 0) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.count = threads
        self._changes = context.Value("q", 0)
        self._transactions = context.Value("q", 0)
        self._stop = context.Event()
        self._process = context.Process(
            target=_write,
            args=(hot, uri, threads, max_id, rate, self._changes, self._transactions, self._stop),
            daemon=True,
        )

    @property
    def changes(self) -> int:
        return int(self._changes.value)

    @property
    def transactions(self) -> int:
        return int(self._transactions.value)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._stop.set()
        self._process.join()
        if self._process.exitcode != 0:
            raise RuntimeError(f"the writers' process failed (exit code {self._process.exitcode})")


def _writer_session(hot: str, uri: str) -> tuple[Any, Any, Any]:
    """A writer's connection, and how it runs a statement (its rows changed) and commits."""
    if hot == "postgres":
        import psycopg

        conn = psycopg.connect(uri)
        conn.execute("SET synchronous_commit = on")
        return conn, lambda sql, params: conn.execute(sql, params).rowcount, conn.commit
    import pymysql

    from airflow_provider_tiering.core.connections import ConnectionInfo

    info = ConnectionInfo.from_uri(uri)
    conn = pymysql.connect(
        host=info.host, port=info.port, user=info.login, password=info.password or "", database=info.schema,
        autocommit=False,
    )  # fmt: skip
    cursor = conn.cursor()
    return conn, cursor.execute, conn.commit


def _write(
    hot: str, uri: str, threads: int, max_id: int, rate: float, changes: Any, transactions: Any, stop: Any
) -> None:
    """The writers' process: ``threads`` threads committing transactions until ``stop`` is set, together about
    ``rate`` changes a second (0: as fast as they can)."""
    # A transaction changes 4.1 rows on average (3 updates and an insert, a delete every 10th).
    interval = threads * 4.1 / rate if rate else 0.0

    def run(number: int) -> None:
        rng = random.Random(number)
        next_at = time.monotonic()
        conn, execute, commit = _writer_session(hot, uri)
        with conn:
            done = 0
            while not stop.is_set():
                if interval:
                    next_at += interval
                    time.sleep(max(0.0, next_at - time.monotonic()))
                count = 0
                # a key deleted before changes nothing: counted by rowcount
                for _ in range(3):
                    count += execute(
                        f"UPDATE {TABLE} SET o_totalprice = o_totalprice + 1 WHERE o_id = %s", (rng.randint(1, max_id),)
                    )
                count += execute(
                    f"INSERT INTO {TABLE} ({COLUMNS}) SELECT {COLUMNS} FROM {TABLE} WHERE o_id = %s",
                    (rng.randint(1, max_id),),
                )
                if done % 10 == 9:
                    count += execute(f"DELETE FROM {TABLE} WHERE o_id = %s", (rng.randint(1, max_id),))
                commit()
                done += 1
                with changes.get_lock():
                    changes.value += count
                with transactions.get_lock():
                    transactions.value += 1

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


class Monitor:
    """Samples (time, the log's end, writers' changes) every ``interval`` seconds."""

    def __init__(self, store: Store, writers: Writers, interval: float = 0.1) -> None:
        self.store = store
        self.writers = writers
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with self.store.connect() as conn:
            while not self._stop.is_set():
                # changes read before the log's end: every change counted is at or before it
                changes = self.writers.changes
                self.samples.append((time.monotonic(), self.store.log_end(conn), changes))
                self._stop.wait(self.interval)

    def passed(self, position: int) -> tuple[float, int] | None:
        """When the log first reached ``position`` and the writers' count then (None: before the first sample)."""
        positions = [s[1] for s in self.samples]
        index = bisect.bisect_left(positions, position)
        if index >= len(self.samples):
            return None
        sampled_at, _, changes = self.samples[index]
        return sampled_at, changes


def lake_offsets(catalog: dict[str, str]) -> dict[str, Any]:
    from pyiceberg.catalog import load_catalog

    snapshot = load_catalog("default", **catalog).load_table((NAMESPACE, TABLE)).current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    found: dict[str, Any] = json.loads(str(snapshot.summary["tiering.end-offsets"]))
    return found


def tier(store: Store, catalog: dict[str, str], state: Path) -> Any:
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    with round_parts(TableSpec.parse(spec(store.hot)), ConnectionInfo.from_uri(store.uri), catalog) as parts:
        return parts.run(JsonFileStateStore(state))


class Maintenance:
    """The table's maintenance as its DAG's maintain task runs it after a tier task, at most every ``every``
    seconds (``maintenance.interval_seconds``), in this process between two rounds."""

    def __init__(self, hot: str, catalog: dict[str, str], every: float) -> None:
        from airflow_provider_tiering.build import build_maintenance, build_writer
        from airflow_provider_tiering.core.spec import TableSpec
        from airflow_provider_tiering.spark.session import SparkSettings
        from testbed.rounds import catalog as catalog_config

        writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
        self.parts = build_maintenance(TableSpec.parse(spec(hot)), catalog_config(catalog), writer=writer)
        self.every = every
        self.last = time.monotonic()
        self.status: Any = None
        self.runs: list[dict[str, Any]] = []

    def load(self) -> Any:
        return self.status

    def save(self, status: Any) -> None:
        self.status = status

    def due(self) -> bool:
        return self.every > 0 and time.monotonic() - self.last >= self.every

    def run(self, at: float) -> dict[str, Any]:
        from datetime import UTC, datetime

        started = time.monotonic()
        status = self.parts.run(self, now=datetime.now(UTC))
        self.last = time.monotonic()
        check = status.last_check
        found = {
            "at": at,
            "seconds": self.last - started,
            "outcome": None if check is None else str(check.outcome),
            "files_rewritten": None if check is None else check.rewritten_files,
            "delete_files_left": status.delete_files,
        }
        self.runs.append(found)
        return found


def compare(store: Store, catalog: dict[str, str]) -> dict[str, Any]:
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog

    rows = (
        load_catalog("default", **catalog)
        .load_table((NAMESPACE, TABLE))
        .scan(selected_fields=("o_id", "o_totalprice"))
        .to_arrow()
    )
    hot = store.hot_summary()
    lake = (rows.num_rows, pc.count_distinct(rows["o_id"]).as_py(), pc.sum(rows["o_totalprice"]).as_py())
    if hot[:2] != lake[:2] or abs(hot[2] - float(lake[2])) > 0.01:
        raise AssertionError(f"the lake differs from {TABLE}: hot {hot}, lake {lake}")
    return {"rows": lake[0], "keys": lake[1]}


def run_rounds(store: Store, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The benchmark on one hot store (see the module's description): its document."""
    rows = store.load(args.sf, workdir)
    root = workdir / f"lake-{store.hot}"
    root.mkdir(parents=True, exist_ok=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    state = workdir / f"state-{store.hot}.json"
    started = time.perf_counter()
    tier(store, catalog, state)
    print(f"{store.hot} {TABLE}: {rows:,} rows, first round {time.perf_counter() - started:.1f}s", flush=True)

    maintenance = Maintenance(store.hot, catalog, args.maintain_every)
    writers = Writers(store.hot, store.uri, args.writers, rows, args.rate)
    monitor = Monitor(store, writers)
    monitor.start()
    writers.start()
    began = time.monotonic()
    rounds: list[dict[str, Any]] = []
    with store.connect() as conn:
        while time.monotonic() - began < args.seconds:
            round_started, cpu_started = time.monotonic(), time.process_time()
            result = tier(store, catalog, state)
            ended, cpu = time.monotonic(), time.process_time() - cpu_started
            lake = store.lake_position(lake_offsets(catalog))
            passed = monitor.passed(lake)
            rounds.append(
                {
                    "at": ended - began,
                    "seconds": ended - round_started,
                    "cpu_seconds": cpu,
                    "outcome": str(result.outcome),
                    "keys": result.metrics.rows if result.metrics else 0,
                    "lag_bytes": store.behind_bytes(conn, lake),
                    "lag_seconds": None if passed is None else max(0.0, ended - passed[0]),
                    "applied_changes": None if passed is None else passed[1],
                }
            )
            r = rounds[-1]
            print(
                f"  t={r['at']:5.1f}s round {r['seconds']:5.2f}s {r['keys']:>6} keys  lake behind "
                f"{r['lag_bytes'] / 1024:8.0f} KiB, {r['lag_seconds'] or 0:5.2f}s  writers {writers.changes:,}",
                flush=True,
            )
            if maintenance.due():
                m = maintenance.run(time.monotonic() - began)
                print(
                    f"  t={m['at']:5.1f}s maintenance {m['seconds']:5.2f}s: {m['outcome']}, "
                    f"{m['files_rewritten']} files rewritten, {m['delete_files_left']} delete files left",
                    flush=True,
                )
    writers.stop()
    elapsed = time.monotonic() - began
    monitor.stop()
    written = writers.changes
    catch_up_started = time.perf_counter()
    tier(store, catalog, state)
    catch_up = time.perf_counter() - catch_up_started
    final = compare(store, catalog)
    return summary(store.hot, args, rows, rounds, writers, written, elapsed, catch_up, final, maintenance.runs)


def summary(
    hot: str, args: argparse.Namespace, rows: int, rounds: list[dict[str, Any]], writers: Writers, written: int,
    elapsed: float, catch_up: float, final: dict[str, Any], maintenance_runs: list[dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    measured = [r for r in rounds if r["applied_changes"] is not None]
    applied = measured[-1]["applied_changes"] if measured else 0
    applied_at = measured[-1]["at"] if measured else elapsed
    lags = sorted(r["lag_seconds"] for r in measured)
    p95 = lags[min(len(lags) - 1, math.ceil(0.95 * len(lags)) - 1)] if lags else None
    third = max(1, len(measured) // 3)
    early, late = ([r["lag_seconds"] for r in part] for part in (measured[:third], measured[-third:]))
    # Keeping up: the lag stays short and does not grow over the run (a lake falling behind lags more each round).
    keeps_up = bool(lags) and p95 is not None and p95 < 10 and statistics.median(late) <= statistics.median(early) + 2
    cpu = sum(r["cpu_seconds"] for r in rounds)
    changes_per_cpu = applied / sum(r["cpu_seconds"] for r in measured) if measured else 0
    document = {
        "hot": hot,
        "sf": args.sf,
        "table_rows": rows,
        "writers": args.writers,
        "rate": args.rate,
        "seconds": elapsed,
        "writer_changes": written,
        "writer_transactions": writers.transactions,
        "writer_changes_per_second": written / elapsed,
        "applied_changes": applied,
        "applied_changes_per_second": applied / applied_at if applied_at else 0,
        "applied_x_offered": (applied / applied_at) / (written / elapsed) if applied_at and written else 0,
        "keeps_up": keeps_up,
        "rounds_cpu_seconds": cpu,
        "changes_per_task_cpu_second": changes_per_cpu,
        "task_cpu_us_per_change": 1e6 / changes_per_cpu if changes_per_cpu else None,
        "rounds": rounds,
        "maintain_every": args.maintain_every,
        "maintenance_runs": maintenance_runs,
        "round_median_seconds": statistics.median(r["seconds"] for r in rounds) if rounds else None,
        "lag_bytes_median": statistics.median(r["lag_bytes"] for r in rounds) if rounds else None,
        "lag_bytes_max": max((r["lag_bytes"] for r in rounds), default=None),
        "lag_seconds_median": statistics.median(r["lag_seconds"] for r in measured) if measured else None,
        "lag_seconds_max": max((r["lag_seconds"] for r in measured), default=None),
        "lag_seconds_p95": p95,
        "catch_up_seconds": catch_up,
        "final_check": final,
        "load_average": list(os.getloadavg()),
    }
    print(
        f"\n{hot}: writers: {written:,} changes in {elapsed:.0f}s = {document['writer_changes_per_second']:,.0f}/s "
        f"({args.writers} threads); lake: {applied:,} applied by t={applied_at:.0f}s = "
        f"{document['applied_changes_per_second']:,.0f}/s in {len(rounds)} rounds (median "
        f"{document['round_median_seconds'] or 0:.2f}s); behind at round ends: median "
        f"{(document['lag_bytes_median'] or 0) / 1024:,.0f} KiB / {document['lag_seconds_median'] or 0:.2f}s, max "
        f"{(document['lag_bytes_max'] or 0) / 1024:,.0f} KiB / {document['lag_seconds_max'] or 0:.2f}s; "
        f"catch-up round {catch_up:.2f}s; lake equals the table ({final['rows']:,} rows)\n"
        f"applied / offered {document['applied_x_offered']:.3f}, lag p95 {p95 or 0:.2f}s: "
        f"{'keeps up' if keeps_up else 'falls behind'}; the task process spent {cpu:.1f} CPU-s on its rounds "
        f"({changes_per_cpu:,.0f} changes per CPU-second)",
        flush=True,
    )
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hot", default="postgres", help="postgres, mariadb, or both (comma-separated, in order)")
    parser.add_argument("--sf", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0, help="changes per second the writers offer (0: unpaced)")
    parser.add_argument("--dsn", help="PostgreSQL DSN (wal_level = logical); default: a throw-away server")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--maintain-every",
        type=float,
        default=0,
        help="run the table's maintenance between two rounds at most every this many seconds, as its DAG's "
        "maintain task with that maintenance.interval_seconds would (0: never)",
    )
    args = parser.parse_args(argv)
    stores = [hot.strip() for hot in args.hot.split(",") if hot.strip()]
    unknown = sorted(set(stores) - set(KINDS))
    if unknown or not stores:
        parser.error(f"--hot: {unknown or 'none'}; choose among {sorted(KINDS)}")

    import shutil
    import tempfile

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tiering-bench-cdc-lag-"))
    workdir.mkdir(parents=True, exist_ok=True)
    documents: dict[str, dict[str, Any]] = {}
    try:
        for hot in stores:
            with store_of(hot, workdir / hot, args.dsn) as store:
                try:
                    documents[hot] = run_rounds(store, args, workdir / hot)
                finally:
                    store.clean_up()
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    document: dict[str, Any] = documents[stores[0]] if len(stores) == 1 else {"stores": documents}
    if len(stores) > 1:
        rates = {hot: d["changes_per_task_cpu_second"] for hot, d in documents.items()}
        first, *others = stores
        for other in others:
            ratio = rates[other] / rates[first] if rates[first] else 0
            document[f"{other}_x_{first}_changes_per_cpu"] = ratio
            print(f"changes per CPU-second of the task: {other} {rates[other]:,.0f}, {first} {rates[first]:,.0f} "
                  f"({ratio:.2f}×)")  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
