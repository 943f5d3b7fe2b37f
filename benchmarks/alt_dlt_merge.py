"""Baseline for ``bench_merge``: dlt's ``merge`` write disposition into Apache Iceberg, on a PostgreSQL table whose
rows change, the way a dlt user would write it.

dlt's ``sql_database`` source reads the table incrementally by its version column (``--cursor``, an open range:
rows whose version is above the last one loaded), with the table's key as ``primary_key``; the ``filesystem``
destination with ``table_format="iceberg"`` and ``write_disposition={"disposition": "merge", "strategy":
"upsert"}`` (dlt 1.31's only merge strategy for Iceberg) merges it into a local Iceberg table. Each call is one
``pipeline.run``; the pipeline's directory under ``--workdir`` is kept between calls, so later calls merge what
changed since the one before (dlt keeps the cursor in its pipeline state).

The first call (``--initial``) loads the table with ``write_disposition="replace"``: a first load by ``merge``
upserts every row in the 1,000-row commits described below (on TPC-H orders SF 1 it had made over 200 of the
1,500 after 4 minutes on this 2-core machine, when it was stopped).

What dlt does with it (dlt/common/libs/pyiceberg.py, ``merge_iceberg_table``): it cuts the changed rows into
batches of 1,000 and calls pyiceberg's ``Table.upsert`` once per batch, each one its own commit (scan for the
batch's keys, copy-on-write overwrite of the files holding them, append). Deletes are not applied: the Iceberg
merge honours no ``hard_delete`` hint (only the Delta one does), so a soft-deleted row stays in the lake with its
flag set.

Runs in the bench virtualenv (``scripts/setup_bench_venv.sh``); imports nothing from this repository. Prints::

    RESULT {"seconds": S, "rows_extracted": N, "snapshots": K, "added_files": F, "added_bytes": B, ...}

``seconds`` is the wall time of ``pipeline.run`` (extract, normalize, load). The snapshot figures are summed over
the Iceberg snapshots the call committed (read from the table's newest ``*.metadata.json`` with pyiceberg).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")

import dlt  # after the telemetry switch
from dlt.sources.sql_database import sql_database

PIPELINE_NAME = "alt_dlt_merge"
DATASET = "bench"


def _table(table_dir: Path) -> Any:
    from pyiceberg.table import StaticTable

    metadata = sorted((table_dir / "metadata").glob("*.metadata.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    return StaticTable.from_metadata(metadata[-1].as_uri()) if metadata else None


def _snapshot_ids(table_dir: Path) -> set[int]:
    table = _table(table_dir)
    return set() if table is None else {s.snapshot_id for s in table.snapshots()}


def run(dsn: str, table: str, key: str, cursor: str, workdir: Path, initial: bool = False) -> dict[str, Any]:
    lake = workdir / "lake"
    lake.mkdir(parents=True, exist_ok=True)
    table_dir = lake / DATASET / table
    before = _snapshot_ids(table_dir)
    url = "postgresql://" + dsn.removeprefix("postgres://").removeprefix("postgresql://")
    started = time.perf_counter()
    source = sql_database(
        url,
        table_names=[table],
        backend="connectorx",
        backend_kwargs={"conn": url, "return_type": "arrow_stream"},
    )
    getattr(source, table).apply_hints(
        primary_key=key,
        incremental=dlt.sources.incremental(cursor, range_start="open"),
        write_disposition="replace" if initial else {"disposition": "merge", "strategy": "upsert"},
    )
    pipeline = dlt.pipeline(
        pipeline_name=PIPELINE_NAME,
        pipelines_dir=str(workdir / "pipelines"),
        destination=dlt.destinations.filesystem(bucket_url=lake.as_uri()),
        dataset_name=DATASET,
    )
    info = pipeline.run(source, loader_file_format="parquet", table_format="iceberg")
    seconds = time.perf_counter() - started
    info.raise_on_failed_jobs()
    extracted = 0
    trace = pipeline.last_trace
    if trace is not None and trace.last_normalize_info is not None:
        extracted = sum(trace.last_normalize_info.row_counts.get(t, 0) for t in (table,))
    iceberg = _table(table_dir)
    new = [s for s in iceberg.snapshots() if s.snapshot_id not in before]

    def total(name: str) -> int:
        return sum(int((s.summary or {}).get(name, 0) or 0) for s in new)

    live = iceberg.scan(selected_fields=(key, cursor)).to_arrow()
    return {
        "seconds": seconds,
        "rows_extracted": extracted,
        "snapshots": len(new),
        "added_files": total("added-data-files"),
        "added_bytes": total("added-files-size"),
        "removed_files": total("deleted-data-files"),
        "lake_rows": live.num_rows,
        "lake_cursor_sum": int(sum(v for v in live.column(cursor).to_pylist() if v is not None)),
        "dlt": dlt.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--cursor", required=True)
    parser.add_argument("--workdir", type=Path, required=True, help="pipeline directory and lake, kept between calls")
    parser.add_argument("--initial", action="store_true", help="the first load, by replace (see above)")
    args = parser.parse_args(argv)
    result = run(args.dsn, args.table, args.key, args.cursor, args.workdir.resolve(), args.initial)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
