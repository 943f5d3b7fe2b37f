"""Baseline: a full load of a PostgreSQL table into Apache Iceberg on the local filesystem with dlt.

This is what a dlt user would write for "copy ``lineitem`` from PostgreSQL into Iceberg": dlt's
``sql_database`` source, the ``filesystem`` destination with ``table_format="iceberg"`` and a local
``bucket_url`` (``<workdir>/lake``), ``write_disposition="replace"``. It runs in the bench virtualenv
(``scripts/setup_bench_venv.sh``, pinned in ``benchmarks/requirements-bench.txt``), never in Airflow's,
and imports nothing from this repository, so ``benchmarks/bench_round.py`` runs it as::

    .venv-bench/bin/python benchmarks/alt_dlt.py --dsn postgresql://u:p@127.0.0.1:5432/db --workdir /tmp/w

and reads the one line it prints on stdout::

    RESULT {"rows": N, "seconds": S, "backend": "connectorx", "format": "iceberg", ...}

``seconds`` is wall time from just before the source is created (engine, table reflection) to the
return of ``pipeline.run`` (extract, normalize, load; for Iceberg the load reads the staged Parquet
files back and pyiceberg writes and commits the table). Importing dlt is not timed; everything dlt
imports lazily during the run is. The pipeline's working directory and the lake are deleted before
each run, so every run is a first, full load and nothing is appended.

Before printing, the load is checked independently of dlt: the Iceberg table is read back with
pyiceberg from its newest ``*.metadata.json`` (``--format parquet``: the Parquet files with
``pyarrow.dataset``), its rows counted, and the count compared with ``SELECT count(*)`` in PostgreSQL;
a mismatch exits with status 1 and a message on stderr.

Settings, and why (everything else is dlt's default):

* ``--backend connectorx`` (default; ``--backend pyarrow`` selectable): ConnectorX reads PostgreSQL's
  binary protocol straight into Arrow in Rust, where the ``pyarrow`` backend goes through SQLAlchemy and
  psycopg and builds Arrow from Python tuples. ConnectorX was the faster on this 2-core machine (into
  Iceberg, single noisy runs: SF 0.1 8.9 s against 10-16 s, SF 1 57 s against 79 s). It gets
  ``backend_kwargs={"conn": <dsn>, "return_type": "arrow_stream"}``: ``conn`` because ConnectorX wants the
  plain ``postgresql://`` URL, not SQLAlchemy's; ``arrow_stream`` is dlt's documented way to make ConnectorX
  stream batches of ``chunk_size`` rows instead of materialising the whole table as one Arrow table
  (memory grows with the table otherwise, and nothing overlaps).
* ``chunk_size``: dlt's default, 50,000 rows per Arrow batch. 50k, 100k, 250k and 600k made no difference
  beyond the noise at SF 0.1, so the default stays (``--chunk-size`` to try others).
* ``loader_file_format="parquet"``: the ``filesystem`` destination's default file format is jsonl;
  Iceberg needs Parquet, and for the ``--format parquet`` variant it is the only fair choice.
* ``RUNTIME__DLTHUB_TELEMETRY=false``: no anonymous usage pings (this machine has no network, and a
  blocked request must not land in the timing).
* No ``.parallelize()`` and no extra normalize/load workers: one table, one resource, two cores; dlt's
  worker pools only help with many tables or many files.

What dlt does with Iceberg, for reading the figures: extract writes the Arrow batches to local Parquet files,
then the load step reads all of them back into one in-memory Arrow table and hands it to pyiceberg's
``overwrite``, which writes the data files again and commits (peak RSS ~2.1 GB at SF 1). The catalog is
dlt's default, an in-memory SQLite one: the table's state lives only in its ``metadata/*.metadata.json``.
Types follow the backend: ConnectorX gives ``numeric(15,2)`` as ``decimal(38,10)``, ``pyarrow`` keeps
``decimal(15,2)``; both widen ``integer`` to ``long``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BACKENDS = ("connectorx", "pyarrow")
FORMATS = ("iceberg", "parquet")
DEFAULT_CHUNK_SIZE = 50_000  # dlt's default
PIPELINE_NAME = "alt_dlt"
DATASET = "bench"

os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")

import dlt  # noqa: E402  (after the telemetry switch)
from dlt.sources.sql_database import sql_database  # noqa: E402


def _split_table(table: str) -> tuple[str | None, str]:
    schema, _, name = table.rpartition(".")
    return schema or None, name


def _sqlalchemy_url(dsn: str) -> str:
    # SQLAlchemy 2 rejects libpq's alias ``postgres://``; ``postgresql://`` picks its default driver (psycopg 3).
    if dsn.startswith("postgres://"):
        return "postgresql://" + dsn.removeprefix("postgres://")
    return dsn


def load(dsn: str, table: str, workdir: Path, backend: str, table_format: str, chunk_size: int) -> dict[str, Any]:
    """Run the dlt pipeline once (fresh pipeline directory and lake): seconds, table directory, step times."""
    pipelines_dir = workdir / "pipelines"
    lake = workdir / "lake"
    for stale in (pipelines_dir, lake):
        shutil.rmtree(stale, ignore_errors=True)
    lake.mkdir(parents=True)
    schema, name = _split_table(table)
    backend_kwargs = None
    if backend == "connectorx":
        backend_kwargs = {"conn": _sqlalchemy_url(dsn), "return_type": "arrow_stream"}

    started = time.perf_counter()
    source = sql_database(
        _sqlalchemy_url(dsn),
        schema=schema,
        table_names=[name],
        backend=backend,
        chunk_size=chunk_size,
        backend_kwargs=backend_kwargs,
    )
    pipeline = dlt.pipeline(
        pipeline_name=PIPELINE_NAME,
        pipelines_dir=str(pipelines_dir),
        destination=dlt.destinations.filesystem(bucket_url=lake.as_uri()),
        dataset_name=DATASET,
    )
    info = pipeline.run(
        source,
        write_disposition="replace",
        loader_file_format="parquet",
        table_format="iceberg" if table_format == "iceberg" else None,
    )
    seconds = time.perf_counter() - started

    info.raise_on_failed_jobs()
    steps = {
        step.step: round((step.finished_at - step.started_at).total_seconds(), 3)
        for step in (pipeline.last_trace.steps if pipeline.last_trace else [])
        if step.finished_at and step.started_at
    }
    table_dir = lake / DATASET / name
    return {"seconds": seconds, "table_dir": table_dir, "steps": steps}


def iceberg_rows(table_dir: Path) -> tuple[int, int]:
    """Rows and data files of the Iceberg table at ``table_dir``, read with pyiceberg from its newest metadata."""
    from pyiceberg.table import StaticTable

    metadata = sorted((table_dir / "metadata").glob("*.metadata.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    if not metadata:
        raise SystemExit(f"alt_dlt: no Iceberg metadata under {table_dir}/metadata")
    iceberg = StaticTable.from_metadata(metadata[-1].as_uri())
    first_column = iceberg.schema().fields[0].name
    scan = iceberg.scan(selected_fields=(first_column,))
    files = len(list(scan.plan_files()))
    rows = sum(batch.num_rows for batch in scan.to_arrow_batch_reader())
    return rows, files


def parquet_rows(table_dir: Path) -> tuple[int, int]:
    """Rows and files of the plain Parquet table at ``table_dir``, read with ``pyarrow.dataset``."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(table_dir), format="parquet")
    return dataset.count_rows(), len(dataset.files)


def source_rows(dsn: str, table: str) -> int:
    import psycopg
    from psycopg import sql

    schema, name = _split_table(table)
    ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("select count(*) from {}").format(ident)).fetchone()
    return int(row[0]) if row else -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="PostgreSQL URI, postgresql://user:password@host:port/db")
    parser.add_argument("--table", default="lineitem", help="table to load, optionally schema-qualified")
    parser.add_argument("--workdir", type=Path, help="pipeline directory and lake (default: a temp dir, removed)")
    parser.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0])
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0], dest="table_format")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="rows per Arrow batch")
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="alt-dlt-"))
    try:
        run = load(args.dsn, args.table, workdir.resolve(), args.backend, args.table_format, args.chunk_size)
        counter = iceberg_rows if args.table_format == "iceberg" else parquet_rows
        rows, files = counter(run["table_dir"])
        expected = source_rows(args.dsn, args.table)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if rows != expected:
        print(
            f"alt_dlt: {args.table_format} table at {run['table_dir']} holds {rows} rows, "
            f"PostgreSQL {args.table} holds {expected}",
            file=sys.stderr,
        )
        return 1
    result = {
        "rows": rows,
        "seconds": run["seconds"],
        "backend": args.backend,
        "format": args.table_format,
        "files": files,
        "chunk_size": args.chunk_size,
        "steps": run["steps"],
        "dlt": dlt.__version__,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
