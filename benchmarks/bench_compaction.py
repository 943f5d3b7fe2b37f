"""Benchmark B8: reading a table after many small rounds, before and after compaction.

A SQLite hot table receives ``--rows-per-round`` rows, then a round tiers them, ``--rounds`` times (500 by
default: a day of rounds every three minutes). Each round is ``run_round`` as the operator runs it (a round of one
split is written by this process, without Spark). Then ``compact`` (lake/compaction.py) rewrites the small files.

Reads are timed with pyiceberg (plan + read into Arrow) on the snapshot before compaction (time travel) and on the
snapshot after it, interleaved ``--repeat`` times so machine load hits both alike:

* ``full scan``        every row;
* ``selective``        ``id`` in a 1% range (what file statistics can prune);
* ``count``            ``scan().count()`` (plans files, reads only their metadata where it can).

The table gives file counts and median seconds before / after, and the ratio. Correctness is checked too: both
snapshots return every hot row (count and the sum of ``id``).

    python -m benchmarks.bench_compaction                        # 500 rounds
    python -m benchmarks.bench_compaction --rounds 20 --max-small-files 10 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "compaction.json"
TABLE = "events"
NAMESPACE = "bench"
MB = 1024 * 1024


def create_hot(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            f'CREATE TABLE "{TABLE}" (id INTEGER PRIMARY KEY, region TEXT NOT NULL, amount REAL, '
            "created_at TIMESTAMP, note TEXT)"
        )


def insert(path: Path, start: int, count: int) -> None:
    regions = ("eu", "us", "apac", "latam")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            f'INSERT INTO "{TABLE}" VALUES (?, ?, ?, ?, ?)',
            [
                (i, regions[i % 4], round(i * 0.37, 2), f"2026-01-01 00:00:{i % 60:02d}", f"event {i}")
                for i in range(start, start + count)
            ],
        )


def tier_small_rounds(work: Path, rounds: int, rows_per_round: int) -> tuple[Any, Any, float]:
    """Create the hot table, run ``rounds`` rounds of ``rows_per_round`` rows; return (lake, writer, seconds)."""
    from dataclasses import replace

    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.sources.registry import build_source
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.hot_tables import SqliteHot
    from testbed.rounds import catalog, round_parts

    hot = work / "hot.db"
    create_hot(hot)
    spec = TableSpec.parse(
        {
            "name": TABLE,
            "source": {"conn_id": "unused", "table": TABLE, "cursor_column": "id"},
            "lake": {"namespace": NAMESPACE, "table": TABLE},
        }
    )
    properties = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/warehouse"}
    handle = catalog(properties).handle()
    handle.get()  # the catalog is loaded before the rounds are timed
    connection = SqliteHot(hot).connection()
    # One lake and one writer (``local[2]``; the spec's ``local_single_split``: a round of one split is written
    # without Spark) for every round and the compaction; a fresh source per round, as each task builds its own.
    parts = round_parts(spec, connection, properties, catalog_handle=handle, spark=SparkSettings(master="local[2]"))
    state = JsonFileStateStore(work / "state.json")
    started = time.perf_counter()
    for i in range(rounds):
        insert(hot, 1 + i * rows_per_round, rows_per_round)
        result = replace(parts, source=build_source(spec.source, connection)).run(state)
        if result.outcome != "tiered":
            raise RuntimeError(f"round {i}: {result.outcome}")
    return parts.lake, parts.writer, time.perf_counter() - started


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--rows-per-round", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-small-files", type=int, default=50, help="the compaction threshold (spec default)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    from airflow_provider_tiering.lake.compaction import compact
    from airflow_provider_tiering.lake.live_files import live_data_files

    total_rows = args.rounds * args.rows_per_round
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        work = Path(tmp)
        lake, writer, tier_seconds = tier_small_rounds(work, args.rounds, args.rows_per_round)
        table = lake.load_table()
        before_id = table.current_snapshot().snapshot_id
        files_before = len(live_data_files(table))
        compaction_seconds, outcome = timed(
            lambda: compact(
                lake,
                writer,
                target_file_bytes=128 * MB,
                small_file_bytes=32 * MB,
                max_small_files=args.max_small_files,
                table_name=TABLE,
            )
        )
        writer.stop()
        if outcome.outcome != "compacted":
            raise RuntimeError(f"compaction did not happen: {outcome}")
        table = lake.load_table()
        after_id = table.current_snapshot().snapshot_id
        files_after = len(live_data_files(table))

        low = total_rows // 2
        selective = And(GreaterThanOrEqual("id", low), LessThan("id", low + max(1, total_rows // 100)))
        queries: dict[str, Callable[[int], Any]] = {
            "full scan": lambda snap: table.scan(snapshot_id=snap).to_arrow(),
            "selective (1% id range)": lambda snap: table.scan(row_filter=selective, snapshot_id=snap).to_arrow(),
            "count": lambda snap: table.scan(snapshot_id=snap).count(),
        }
        seconds: dict[str, dict[str, list[float]]] = {q: {"before": [], "after": []} for q in queries}
        results: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for name, query in queries.items():
                for label, snap in (("before", before_id), ("after", after_id)):
                    elapsed, value = timed(lambda query=query, snap=snap: query(snap))
                    seconds[name][label].append(elapsed)
                    results.setdefault(name, {})[label] = value if isinstance(value, int) else value.num_rows
                    if name == "full scan":
                        ids = value.column("id").to_pylist()
                        if len(ids) != total_rows or sum(ids) != total_rows * (total_rows + 1) // 2:
                            raise RuntimeError(f"{label}: the lake does not hold every hot row once")
        for name, by_label in results.items():
            if by_label["before"] != by_label["after"]:
                raise RuntimeError(f"{name}: {by_label['before']} rows before compaction, {by_label['after']} after")

    report = {
        "rounds": args.rounds,
        "rows_per_round": args.rows_per_round,
        "rows": total_rows,
        "tier_seconds": round(tier_seconds, 2),
        "compaction_seconds": round(compaction_seconds, 2),
        "files_before": files_before,
        "files_after": files_after,
        "queries": {
            name: {
                "rows": results[name]["after"],
                "before_seconds": statistics.median(by["before"]),
                "after_seconds": statistics.median(by["after"]),
                "speedup": statistics.median(by["before"]) / statistics.median(by["after"]),
            }
            for name, by in seconds.items()
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(
        f"\n{args.rounds} rounds of {args.rows_per_round} rows tiered in {tier_seconds:.1f} s "
        f"({args.rounds / tier_seconds:.1f} rounds/s); compaction {files_before} -> {files_after} data files "
        f"in {compaction_seconds:.2f} s\n"
    )
    header = f"{'query (pyiceberg -> Arrow)':<26} {'rows':>8} {'before (s)':>11} {'after (s)':>10} {'speed-up':>9}"
    print(header + "\n" + "-" * len(header))
    for name, q in report["queries"].items():
        before, after = q["before_seconds"], q["after_seconds"]
        print(f"{name:<26} {q['rows']:>8} {before:>11.3f} {after:>10.3f} {q['speedup']:>8.1f}x")
    print(f"\n(medians of {args.repeat}; files: {files_before} before, {files_after} after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
