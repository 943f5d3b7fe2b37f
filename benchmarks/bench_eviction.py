"""Benchmark B9: evicting tiered rows from PostgreSQL, verified against the lake, next to an unverified delete.

Two identical tables of ``--rows`` rows are created and each tiered once into a local Iceberg catalog (untimed).
Then, ``--repeat`` times (alternating which goes first, so machine load hits both alike):

* ``verified``    ``evict_tiered_rows`` as a round runs it after its commit: batches of ``--batch-rows`` rows are
                  read as tiered and locked, compared value by value with the lake's rows of their cursor range,
                  and deleted by ``ctid`` in the same transaction;
* ``unverified``  the same batches deleted by cursor range only (``DELETE … WHERE id > a AND id <= b``), what a
                  TTL job that trusts the offsets would do.

The table gives median seconds, rows/s and the verified/unverified ratio; both must leave the hot table empty.

    python -m benchmarks.bench_eviction --dsn postgresql://user:pw@127.0.0.1:5432/db
    python -m benchmarks.bench_eviction --dsn … --rows 3000 --batch-rows 500 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "eviction.json"
NAMESPACE = "bench"
VARIANTS = ("verified", "unverified")


def table_spec(table: str, batch_rows: int) -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    return TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "bench", "table": table, "cursor_column": "id", "max_watermark_wait_seconds": 1},
            "lake": {"namespace": NAMESPACE, "table": table},
            "eviction": {
                "enabled": True,
                "retention_seconds": 0,
                "age_column": "created_at",
                "batch_rows": batch_rows,
                "max_rows_per_round": 100_000_000,
            },
        }
    )


def load_and_tier(
    dsn: str, table: str, rows: int, catalog: Any, handle: Any, work: Path, batch_rows: int
) -> tuple[Any, Any, int]:
    """(Re)create ``table`` with ``rows`` rows and tier it in one round without eviction, on the lake's catalog
    (``CatalogConfig``; ``handle``: its catalog, loaded once for all tables); returns (source, lake, epoch)."""
    import psycopg

    from airflow_provider_tiering.build import TableConnections, build_round
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.state_store import JsonFileStateStore

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(
            f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2), '
            "created_at timestamp NOT NULL, note text)"
        )
        conn.execute(
            f"""INSERT INTO "{table}" SELECT i, (ARRAY['eu','us','apac'])[1 + i %% 3], (i %% 100000) / 100.0,
                TIMESTAMP '2026-01-01' + i * INTERVAL '1 second', 'row ' || i FROM generate_series(1, %s) AS i""",
            (rows,),
        )
    spec = table_spec(table, batch_rows)
    no_eviction = spec.model_copy(update={"eviction": spec.eviction.model_copy(update={"enabled": False})})
    try:
        handle.get().drop_table((NAMESPACE, table))
    except Exception:  # not there yet
        pass
    # The spec's Spark part: a round of one split is written by this process, without Spark.
    parts = build_round(no_eviction, TableConnections(ConnectionInfo.from_uri(dsn), catalog), catalog=handle)
    with parts:
        result = parts.run(JsonFileStateStore(work / f"{table}.state.json"))
    (work / f"{table}.state.json").unlink()
    if result.metrics is None or result.metrics.rows != rows:
        raise RuntimeError(f"{table}: the set-up round tiered {result.metrics}")
    return parts.source, parts.lake, result.epoch


def verified(dsn: str, table: str, source: Any, lake: Any, epoch: int, batch_rows: int) -> int:
    from airflow_provider_tiering.core.eviction import evict_tiered_rows

    spec = table_spec(table, batch_rows)
    evictor = source.evictor()
    return evict_tiered_rows(spec.eviction, "id", evictor, lake, epoch=epoch, now=datetime.now(UTC)).rows


def unverified(dsn: str, table: str, source: Any, lake: Any, epoch: int, batch_rows: int) -> int:
    import psycopg

    upto = lake.committed().end_offsets["cursor"]
    deleted = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lower in range(0, upto, batch_rows):
            upper = min(lower + batch_rows, upto)
            sql = f'DELETE FROM "{table}" WHERE id > %s AND id <= %s AND created_at < now()'
            deleted += conn.execute(sql, (lower, upper)).rowcount
    return deleted


def remaining(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    from testbed.rounds import catalog as catalog_config

    runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    functions = {"verified": verified, "unverified": unverified}
    with tempfile.TemporaryDirectory(prefix="bench-eviction-") as tmp:
        work = Path(tmp)
        catalog = catalog_config(
            {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/warehouse"}
        )
        handle = catalog.handle()
        for r in range(args.repeat):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                table = f"evict_{variant}"
                source, lake, epoch = load_and_tier(args.dsn, table, args.rows, catalog, handle, work, args.batch_rows)
                started = time.perf_counter()
                deleted = functions[variant](args.dsn, table, source, lake, epoch, args.batch_rows)
                runs[variant].append(time.perf_counter() - started)
                if deleted != args.rows or remaining(args.dsn, table) != 0:
                    raise RuntimeError(f"{variant}: deleted {deleted} of {args.rows} rows")

    medians = {v: statistics.median(s) for v, s in runs.items()}
    report = {
        "rows": args.rows,
        "batch_rows": args.batch_rows,
        "repeat": args.repeat,
        "results": {
            v: {"median_seconds": medians[v], "rows_per_second": args.rows / medians[v], "seconds": runs[v]}
            for v in VARIANTS
        },
        "ratio_verified_to_unverified": medians["verified"] / medians["unverified"],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"\nevicting {args.rows:,} tiered rows in batches of {args.batch_rows:,} (medians of {args.repeat})\n")
    header = f"{'variant':<44} {'seconds':>9} {'rows/s':>10}"
    print(header + "\n" + "-" * len(header))
    labels = {
        "verified": "verified against the lake (ours)",
        "unverified": "unverified DELETE by cursor range (baseline)",
    }
    for v in VARIANTS:
        print(f"{labels[v]:<44} {medians[v]:>9.2f} {args.rows / medians[v]:>10,.0f}")
    print(f"\nverified / unverified: {report['ratio_verified_to_unverified']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
