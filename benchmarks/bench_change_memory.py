"""Benchmark: a change-stream round's peak memory against the number of changes it applies.

For each size in ``--sizes`` (rows), a PostgreSQL table of that many rows (1 KiB of text each) is tiered as a
change-stream table (``postgres_cdc``; its first load here, in this process), then one transaction updates every
row, and the next rounds run in a child process (``testbed/change_rounds.py``) until nothing is left: once with
``keys_in_memory`` at its default (100,000: a larger round is read and written in chunks of that many keys) and once
with it above the transaction (the round held whole in memory, as before chunks existed). Reported per size and
mode: the child's peak resident memory (VmHWM) growth from before its first round to the end of writing the round's
changes (before the merge, which rewrites the lake's files in tasks of ``target_file_size_mb`` each, here 16 MiB, on
Spark ``local[1]``), and the round's seconds.

    python -m benchmarks.bench_change_memory                       # 50k, 200k, 400k rows (about 6 minutes here)
    python -m benchmarks.bench_change_memory --sizes 20000         # smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "change_memory.json"
MIB = 1024 * 1024
MODES = {"chunked": 100_000, "held": 100_000_000}


def spec(table: str, keys_in_memory: int) -> dict[str, Any]:
    return {
        "name": table,
        "source": {"kind": "postgres_cdc", "conn_id": "bench", "table": table, "keys_in_memory": keys_in_memory},
        "lake": {"namespace": "bench", "table": table},
        "target_file_size_mb": 16,
        "max_rows_per_round": 10_000_000,
    }


def measure(dsn: str, workdir: Path, rows: int, mode: str) -> dict[str, Any]:
    import psycopg

    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from benchmarks.scratch import drop_change_stream
    from testbed.change_rounds import rounds_in_child
    from testbed.rounds import round_parts

    table = f"mem_{mode}_{rows}"
    spec_dict = spec(table, MODES[mode])
    root = workdir / table
    root.mkdir(parents=True, exist_ok=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    state = root / "state.json"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2))")
        conn.execute(
            f"INSERT INTO {table} SELECT g, (SELECT string_agg(md5(g::text || i::text), '') "
            "FROM generate_series(1, 32) i), g %% 1000 FROM generate_series(1, %s) g",
            (rows,),
        )
    try:
        parts = round_parts(TableSpec.parse(spec_dict), ConnectionInfo.from_uri(dsn), catalog)
        with parts:
            parts.run(JsonFileStateStore(state))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(f"UPDATE {table} SET name = upper(name), amount = amount + 1")
        started = time.perf_counter()
        report = rounds_in_child({"spec": spec_dict, "uri": dsn, "catalog": catalog, "state_path": str(state)})
        seconds = time.perf_counter() - started
    finally:
        drop_change_stream(dsn, spec_dict)
    tiered = [r for r in report["rounds"] if r["outcome"] == "tiered"]
    return {
        "rows": rows,
        "mode": mode,
        "rounds": len(tiered),
        "seconds": seconds,
        "round_seconds": [r["metrics"]["duration_seconds"] for r in tiered],
        "growth_written": report["peak_rss_written"] - report["peak_rss_before"],
        "growth_after": report["peak_rss_after"] - report["peak_rss_before"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50000,200000,400000")
    parser.add_argument("--dsn", help="PostgreSQL DSN (wal_level = logical); default: a throw-away server")
    parser.add_argument("--workdir")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    from benchmarks.scratch import postgres_scratch

    results = []
    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-memory-") as (workdir, dsn):
        for rows in (int(s) for s in args.sizes.split(",") if s):
            for mode in MODES:
                found = measure(dsn, workdir, rows, mode)
                results.append(found)
                print(
                    f"{rows:>9,} changes  {mode:<8} growth {found['growth_written'] / MIB:7.1f} MiB while "
                    f"writing ({found['growth_after'] / MIB:7.1f} MiB with the merge)  {found['seconds']:6.1f}s "
                    f"in {found['rounds']} round(s)",
                    flush=True,
                )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
