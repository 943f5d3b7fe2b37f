"""What a change of the hot table's shape costs the lake, on TPC-H ``lineitem`` (SF 1: 6,001,215 rows) tiered from
PostgreSQL: the round after each change, its time and the bytes it writes.

Three lake tables are tiered from the one hot table (first loads untimed): an append table (cursor ``l_id``), the
same with ``lake.backfill_added_columns``, and a merge table (key ``l_orderkey, l_linenumber``, cursor ``l_id``).
Then, one at a time, each followed by one round of every lake table:

* ``RENAME COLUMN l_comment TO l_remark``: an Iceberg rename, metadata only;
* ``ADD COLUMN l_flag integer NOT NULL DEFAULT 7``: the field's initial default (metadata only), or a backfill that
  rewrites every data file (on Spark, ``local[2]``);
* ``ADD COLUMN l_token uuid DEFAULT gen_random_uuid()`` (every row its own value): the append tables refuse it (time
  to the refusal), the merge table reads the whole table again and merges it (a reload).

Bytes written are the data files the round's snapshots added (their summaries' ``added-files-size``) and the
metadata file each commit wrote.

    python -m benchmarks.bench_shape_changes              # a throw-away PostgreSQL, SF 1
    python -m benchmarks.bench_shape_changes --sf 0.01
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TABLE = "lineitem_shape"  # a copy of its own: the changes of shape are left on it, and it is dropped after
VARIANTS = {
    "append, initial default": {},
    "append, backfill": {"lake": {"backfill_added_columns": True}},
    "merge": {"merge": {"primary_key": ["l_orderkey", "l_linenumber"]}},
}
CHANGES = {
    "rename": f"ALTER TABLE {TABLE} RENAME COLUMN l_comment TO l_remark",
    "add column, constant default": f"ALTER TABLE {TABLE} ADD COLUMN l_flag integer NOT NULL DEFAULT 7",
    "add column, volatile default": f"ALTER TABLE {TABLE} ADD COLUMN l_token uuid DEFAULT gen_random_uuid()",
}


def spec(name: str, options: dict[str, Any]) -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    lake = {"namespace": "bench", "table": name, **options.get("lake", {})}
    document = {
        "name": name,
        "source": {"conn_id": "bench", "table": TABLE, "cursor_column": "l_id", "max_watermark_wait_seconds": 5},
        "lake": lake,
        "max_rows_per_round": 100_000_000,
        "target_rows_per_split": 1_000_000,
        **{k: v for k, v in options.items() if k != "lake"},
    }
    return TableSpec.parse(document)


def written(catalog: dict[str, str], identifier: tuple[str, str], since_ms: int) -> dict[str, int]:
    """Data bytes and files the snapshots since ``since_ms`` added, and the metadata files written meanwhile."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog("default", **catalog).load_table(identifier)
    data = files = 0
    for snapshot in table.snapshots():
        if snapshot.timestamp_ms >= since_ms and snapshot.summary is not None:
            data += int(snapshot.summary.get("added-files-size") or 0)
            files += int(snapshot.summary.get("added-data-files") or 0)
    metadata_dir = Path(table.location().removeprefix("file://")) / "metadata"
    metadata = [p for p in metadata_dir.glob("*.metadata.json") if p.stat().st_mtime * 1000 >= since_ms]
    return {
        "data_bytes": data,
        "data_files": files,
        "metadata_files": len(metadata),
        "metadata_bytes": sum(p.stat().st_size for p in metadata),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a PostgreSQL to use (default: start a throw-away one)")
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--output", type=Path, help="also write the report here (JSON)")
    args = parser.parse_args(argv)

    import psycopg

    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.errors import SchemaConflict
    from airflow_provider_tiering.core.round import run_round
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.sources.registry import build_source
    from airflow_provider_tiering.spark.session import SparkSettings
    from benchmarks.tpch_data import load_lineitem_timed
    from testbed.pg_server import PostgresServer
    from testbed.rounds import lake_of

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        dsn = args.dsn or stack.enter_context(PostgresServer(work / "pg")).dsn
        rows = load_lineitem_timed(dsn, args.sf, work, table=TABLE, tpch_table="lineitem").rows
        stack.callback(_drop, dsn)
        catalog = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/warehouse"}
        writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
        stack.callback(writer.stop)
        connection = ConnectionInfo.from_uri(dsn)
        specs = {label: spec(f"shape_{i}", options) for i, (label, options) in enumerate(VARIANTS.items())}

        def tier(label: str) -> dict[str, Any]:
            round_spec = specs[label]
            store = JsonFileStateStore(work / f"{round_spec.name}.json")
            since = int(time.time() * 1000)
            started = time.monotonic()
            try:
                result = run_round(
                    round_spec, build_source(round_spec.source, connection), lake_of(round_spec, catalog), writer, store
                )
                outcome = result.outcome.value
            except SchemaConflict as exc:
                outcome = f"refused: {type(exc).__name__}"
            seconds = round(time.monotonic() - started, 2)
            return {"outcome": outcome, "seconds": seconds, **written(catalog, ("bench", round_spec.name), since)}

        first_loads = {label: tier(label) for label in specs}
        report: dict[str, Any] = {"rows": rows, "sf": args.sf, "first_loads": first_loads, "changes": {}}
        for change, ddl in CHANGES.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(ddl)  # type: ignore[arg-type]  # a constant
            report["changes"][change] = {label: tier(label) for label in specs}
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


def _drop(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")  # type: ignore[arg-type]  # a constant


if __name__ == "__main__":
    raise SystemExit(main())
