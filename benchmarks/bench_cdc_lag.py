"""Benchmark: a change-stream table under a steady writer — changes applied to the lake per second, and how far
behind the lake stays.

TPC-H ``orders`` at ``--sf`` is loaded into PostgreSQL as ``lag_orders`` and tiered once (source kind
``postgres_cdc``: the first round loads it in the slot's snapshot). Then for ``--seconds``:

* ``--writers`` Python threads, pgbench-style, in a process of their own, each on its own connection with
  ``synchronous_commit = on``, commit transactions as fast as they can (or together about ``--rate`` changes a
  second): 3 updates of random keys and 1 insert each, and every 10th one a delete of a random key;
* a monitor samples, every 0.1 s, the server's WAL insert position and how many changes the writers committed;
* this process runs the table's rounds back to back (built as the operator builds them, in this process: a round
  of changes is one split, no Spark) and after each reads the lake's LSN from the snapshot's offsets; with
  ``--maintain-every``, the table's maintenance runs between two rounds at most that often, as the DAG's maintain
  task does after the tier task.

Per round: how far the lake is behind at the round's end, in WAL bytes (``pg_current_wal_lsn() - lake LSN``)
and in seconds (now minus when the WAL passed the lake's LSN, from the monitor's samples), and how many changes the
round brought (the writers' count when the WAL passed the lake's LSN, from the samples). Then the writers stop,
the rounds catch up, and the lake is compared with the table (rows, keys, sum of prices).

    python -m benchmarks.bench_cdc_lag                     # SF 0.1, 2 writers, 60 s
    python -m benchmarks.bench_cdc_lag --writers 4 --seconds 120 --rate 6000   # paced: does the lake keep up?
    python -m benchmarks.bench_cdc_lag --writers 4 --seconds 240 --maintain-every 30   # unpaced, maintained
    python -m benchmarks.bench_cdc_lag --sf 0.01 --seconds 10 --writers 1   # smoke run
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import statistics
import sys
import threading
import time
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


def spec() -> dict[str, Any]:
    return {
        "name": TABLE,
        "source": {"kind": "postgres_cdc", "conn_id": "bench", "table": TABLE},
        "lake": {"namespace": NAMESPACE, "table": TABLE},
    }


class Writers:
    """pgbench-style writer threads in a process of their own (an application's, not the task's: they do not
    contend for this process's interpreter); ``changes`` counts committed row changes."""

    def __init__(self, dsn: str, threads: int, max_id: int, rate: float = 0) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.count = threads
        self._changes = context.Value("q", 0)
        self._transactions = context.Value("q", 0)
        self._stop = context.Event()
        self._process = context.Process(
            target=_write, args=(dsn, threads, max_id, rate, self._changes, self._transactions, self._stop), daemon=True
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


def _write(dsn: str, threads: int, max_id: int, rate: float, changes: Any, transactions: Any, stop: Any) -> None:
    """The writers' process: ``threads`` threads committing transactions until ``stop`` is set, together about
    ``rate`` changes a second (0: as fast as they can)."""
    # A transaction changes 4.1 rows on average (3 updates and an insert, a delete every 10th).
    interval = threads * 4.1 / rate if rate else 0.0

    def run(number: int) -> None:
        import psycopg

        rng = random.Random(number)
        next_at = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            done = 0
            while not stop.is_set():
                if interval:
                    next_at += interval
                    time.sleep(max(0.0, next_at - time.monotonic()))
                count = 0
                # a key deleted before changes nothing: counted by rowcount
                with conn.transaction():
                    for _ in range(3):
                        count += conn.execute(
                            f"UPDATE {TABLE} SET o_totalprice = o_totalprice + 1 WHERE o_id = %s",
                            (rng.randint(1, max_id),),
                        ).rowcount
                    count += conn.execute(
                        f"INSERT INTO {TABLE} ({COLUMNS}) SELECT {COLUMNS} FROM {TABLE} WHERE o_id = %s",
                        (rng.randint(1, max_id),),
                    ).rowcount
                    if done % 10 == 9:
                        count += conn.execute(
                            f"DELETE FROM {TABLE} WHERE o_id = %s", (rng.randint(1, max_id),)
                        ).rowcount
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
    """Samples (time, WAL insert LSN, writers' changes) every ``interval`` seconds."""

    def __init__(self, dsn: str, writers: Writers, interval: float = 0.1) -> None:
        self.dsn = dsn
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
        import psycopg

        from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                # changes read before the LSN: every change counted is at or before that LSN
                changes = self.writers.changes
                (lsn,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone() or ("0/0",)
                self.samples.append((time.monotonic(), parse_lsn(lsn), changes))
                self._stop.wait(self.interval)

    def passed(self, lsn: int) -> tuple[float, int] | None:
        """When the WAL first reached ``lsn`` and the writers' count then (None: before the first sample)."""
        positions = [s[1] for s in self.samples]
        index = bisect.bisect_left(positions, lsn)
        if index >= len(self.samples):
            return None
        sampled_at, _, changes = self.samples[index]
        return sampled_at, changes


def lake_lsn(catalog: dict[str, str]) -> int:
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

    snapshot = load_catalog("default", **catalog).load_table((NAMESPACE, TABLE)).current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return parse_lsn(json.loads(snapshot.summary["tiering.end-offsets"])["lsn"])


def tier(dsn: str, catalog: dict[str, str], state: Path) -> Any:
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    with round_parts(TableSpec.parse(spec()), ConnectionInfo.from_uri(dsn), catalog) as parts:
        return parts.run(JsonFileStateStore(state))


class Maintenance:
    """The table's maintenance as its DAG's maintain task runs it after a tier task, at most every ``every``
    seconds (``maintenance.interval_seconds``), in this process between two rounds."""

    def __init__(self, catalog: dict[str, str], every: float) -> None:
        from airflow_provider_tiering.build import build_maintenance, build_writer
        from airflow_provider_tiering.core.spec import TableSpec
        from airflow_provider_tiering.spark.session import SparkSettings
        from testbed.rounds import catalog as catalog_config

        writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
        self.parts = build_maintenance(TableSpec.parse(spec()), catalog_config(catalog), writer=writer)
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


def compare(dsn: str, catalog: dict[str, str]) -> dict[str, Any]:
    import psycopg
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog

    rows = (
        load_catalog("default", **catalog)
        .load_table((NAMESPACE, TABLE))
        .scan(selected_fields=("o_id", "o_totalprice"))
        .to_arrow()
    )
    with psycopg.connect(dsn) as conn:
        hot = conn.execute(f"SELECT count(*), count(DISTINCT o_id), sum(o_totalprice) FROM {TABLE}").fetchone()
    assert hot is not None
    lake = (rows.num_rows, pc.count_distinct(rows["o_id"]).as_py(), pc.sum(rows["o_totalprice"]).as_py())
    if (int(hot[0]), int(hot[1])) != lake[:2] or abs(float(hot[2]) - float(lake[2])) > 0.01:
        raise AssertionError(f"the lake differs from {TABLE}: hot {hot}, lake {lake}")
    return {"rows": lake[0], "keys": lake[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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

    import psycopg

    from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn
    from benchmarks.scratch import drop_change_stream, postgres_scratch
    from benchmarks.tpch_data import load_lineitem_timed

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-cdc-lag-") as (workdir, dsn):
        try:
            rows = load_lineitem_timed(dsn, args.sf, workdir, table=TABLE, tpch_table="orders", force=True).rows
            root = workdir / "lake"
            root.mkdir(parents=True, exist_ok=True)
            catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
            state = workdir / "state.json"
            started = time.perf_counter()
            tier(dsn, catalog, state)
            print(f"{TABLE}: {rows:,} rows, first round {time.perf_counter() - started:.1f}s", flush=True)

            maintenance = Maintenance(catalog, args.maintain_every)
            writers = Writers(dsn, args.writers, rows, args.rate)
            monitor = Monitor(dsn, writers)
            monitor.start()
            writers.start()
            began = time.monotonic()
            rounds: list[dict[str, Any]] = []
            with psycopg.connect(dsn, autocommit=True) as conn:
                while time.monotonic() - began < args.seconds:
                    round_started, cpu_started = time.monotonic(), time.process_time()
                    result = tier(dsn, catalog, state)
                    ended, cpu = time.monotonic(), time.process_time() - cpu_started
                    (current,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("0/0",)
                    lsn = lake_lsn(catalog)
                    passed = monitor.passed(lsn)
                    rounds.append(
                        {
                            "at": ended - began,
                            "seconds": ended - round_started,
                            "cpu_seconds": cpu,
                            "outcome": str(result.outcome),
                            "keys": result.metrics.rows if result.metrics else 0,
                            "lag_bytes": max(0, parse_lsn(current) - lsn),
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
            tier(dsn, catalog, state)
            catch_up = time.perf_counter() - catch_up_started
            final = compare(dsn, catalog)

        finally:
            drop_change_stream(dsn, spec())
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
        "rounds": rounds,
        "maintain_every": args.maintain_every,
        "maintenance_runs": maintenance.runs,
        "round_median_seconds": statistics.median(r["seconds"] for r in rounds) if rounds else None,
        "lag_bytes_median": statistics.median(r["lag_bytes"] for r in rounds) if rounds else None,
        "lag_bytes_max": max((r["lag_bytes"] for r in rounds), default=None),
        "lag_seconds_median": statistics.median(r["lag_seconds"] for r in measured) if measured else None,
        "lag_seconds_max": max((r["lag_seconds"] for r in measured), default=None),
        "lag_seconds_p95": p95,
        "catch_up_seconds": catch_up,
        "final_check": final,
    }
    print(
        f"\nwriters: {written:,} changes in {elapsed:.0f}s = {document['writer_changes_per_second']:,.0f}/s "
        f"({args.writers} threads); lake: {applied:,} applied by t={applied_at:.0f}s = "
        f"{document['applied_changes_per_second']:,.0f}/s in {len(rounds)} rounds (median "
        f"{document['round_median_seconds'] or 0:.2f}s); behind at round ends: median "
        f"{(document['lag_bytes_median'] or 0) / 1024:,.0f} KiB / {document['lag_seconds_median'] or 0:.2f}s, max "
        f"{(document['lag_bytes_max'] or 0) / 1024:,.0f} KiB / {document['lag_seconds_max'] or 0:.2f}s; "
        f"catch-up round {catch_up:.2f}s; lake equals the table ({final['rows']:,} rows)\n"
        f"applied / offered {document['applied_x_offered']:.3f}, lag p95 {p95 or 0:.2f}s: "
        f"{'keeps up' if keeps_up else 'falls behind'}; the task process spent {cpu:.1f} CPU-s on its rounds "
        f"({changes_per_cpu:,.0f} changes per CPU-second)"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
