"""Baseline for ``bench_merge``: pyiceberg's own ``Table.upsert`` applying a PostgreSQL table's changed rows to an
Iceberg table, the way a pyiceberg user would write it.

The rows whose version column (``--cursor``) is above ``--since`` are read from PostgreSQL into Arrow (psycopg's
binary COPY through ADBC, as the product's PostgreSQL reader does), cast to the lake table's schema; those whose
soft-delete flag (``--deleted``) is set are removed with ``Table.delete`` (a filter on their keys), the others upserted
by ``--key`` with ``Table.upsert`` (pyiceberg 0.12: it scans the table for the batch's keys, rewrites the files
holding them copy-on-write and appends the new rows; two commits). No fencing, no offsets: the baseline only moves
the rows.

Runs in the main virtualenv, in its own process (``bench_merge`` gives it a timeout). Prints::

    RESULT {"seconds": S, "rows_read": N, "upserted": U, "deleted": D, "snapshots": K, "added_bytes": B, ...}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def run(dsn: str, catalog: dict[str, str], identifier: tuple[str, str], table: str, key: str, cursor: str,
        deleted: str, since: int) -> dict[str, Any]:  # fmt: skip
    import adbc_driver_postgresql.dbapi as adbc
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog
    from pyiceberg.expressions import In

    lake = load_catalog("default", **catalog).load_table(identifier)
    before = {s.snapshot_id for s in lake.snapshots()}
    started = time.perf_counter()
    with adbc.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} WHERE {cursor} > $1", parameters=(since,))  # constants of this script
        rows = cur.fetch_arrow_table()
    schema = lake.schema().as_arrow()
    rows = rows.select(schema.names).cast(schema)
    gone = pc.fill_null(rows.column(deleted), False)
    removed = rows.filter(gone).column(key).to_pylist()
    live = rows.filter(pc.invert(gone))
    upserted = lake.upsert(live, join_cols=[key]) if live.num_rows else None
    if removed:
        lake.delete(In(key, removed))
    seconds = time.perf_counter() - started
    lake = lake.refresh()
    new = [s for s in lake.snapshots() if s.snapshot_id not in before]

    def total(name: str) -> int:
        return sum(int((s.summary or {}).get(name, 0) or 0) for s in new)

    return {
        "seconds": seconds,
        "rows_read": rows.num_rows,
        "upserted": live.num_rows,
        "updated": None if upserted is None else upserted.rows_updated,
        "inserted": None if upserted is None else upserted.rows_inserted,
        "deleted": len(removed),
        "snapshots": len(new),
        "added_files": total("added-data-files"),
        "added_bytes": total("added-files-size"),
        "removed_files": total("deleted-data-files"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--catalog", required=True, help="pyiceberg catalog properties, as JSON")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lake-table", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--cursor", required=True)
    parser.add_argument("--deleted", required=True)
    parser.add_argument("--since", type=int, required=True)
    args = parser.parse_args(argv)
    result = run(args.dsn, json.loads(args.catalog), (args.namespace, args.lake_table), args.table, args.key,
                 args.cursor, args.deleted, args.since)  # fmt: skip
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
