"""What key reconciliation (``merge.reconcile_keys_every_seconds``) costs a merge round, on a table of ``--rows`` rows.

A PostgreSQL table ``(id bigint PRIMARY KEY, name, amount, version)`` is created and tiered once, merged by ``id``
through the cursor ``version`` (untimed). Then, ``--repeat`` times, ``--changed`` rows are updated and a round
runs, alternately without and with reconciliation (so machine load hits both alike); the difference is what
reading every hot key and every lake key, and comparing them, adds. Finally ``--deleted`` rows are hard-deleted
and one reconciling round removes them (round time, lake files rewritten). The keys' reads are also timed alone:
``SELECT id`` of the whole table in the round's exported snapshot, and the lake's key column through pyiceberg.

    python -m benchmarks.bench_key_reconciliation                 # starts a throw-away PostgreSQL (testbed)
    python -m benchmarks.bench_key_reconciliation --dsn postgresql://user:pw@127.0.0.1:5432/db --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TABLE = "reconciled"


def spec(every: float | None) -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    merge: dict[str, Any] = {"primary_key": ["id"]}
    if every is not None:
        merge["reconcile_keys_every_seconds"] = every
    return TableSpec.parse(
        {
            "name": TABLE,
            "source": {"conn_id": "bench", "table": TABLE, "cursor_column": "version"},
            "lake": {"namespace": "bench", "table": TABLE},
            "merge": merge,
            "max_rows_per_round": 100_000_000,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a PostgreSQL to use (default: start a throw-away one)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--deleted", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import psycopg

    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.ports import MergeKey
    from airflow_provider_tiering.core.round import run_round
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.lake.merge_reduce import keys_absent
    from airflow_provider_tiering.sources.registry import build_source
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.pg_server import PostgresServer
    from testbed.rounds import lake_of

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        dsn = args.dsn or stack.enter_context(PostgresServer(work / "pg")).dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
            conn.execute(
                f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, name text, amount numeric(12,2), version bigint)"
            )
            conn.execute(
                f"INSERT INTO {TABLE} SELECT i, 'row ' || i, (i %% 100000) / 100.0, i FROM generate_series(1, %s) i",
                (args.rows,),
            )
            conn.execute(f"CREATE INDEX ON {TABLE} (version)")
            conn.execute(f"VACUUM ANALYZE {TABLE}")
        catalog = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/warehouse"}
        writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
        stack.callback(writer.stop)
        store = JsonFileStateStore(work / "state.json")
        connection = ConnectionInfo.from_uri(dsn)

        def tier(every: float | None) -> tuple[float, Any]:
            round_spec = spec(every)
            started = time.monotonic()
            result = run_round(
                round_spec, build_source(round_spec.source, connection), lake_of(round_spec, catalog), writer, store
            )
            return time.monotonic() - started, result

        load_seconds, _ = tier(None)
        version = args.rows
        timings: dict[str, list[float]] = {"without": [], "with": []}
        with psycopg.connect(dsn, autocommit=True) as conn:
            for number in range(args.repeat * 2):
                variant = ("without", "with")[(number + number // 2) % 2]
                version += 1
                conn.execute(
                    f"UPDATE {TABLE} SET amount = amount + 1, version = %s WHERE id IN "
                    f"(SELECT id FROM {TABLE} ORDER BY random() LIMIT %s)",
                    (version, args.changed),
                )
                seconds, result = tier(0 if variant == "with" else None)
                assert result.metrics.rows == args.changed, result.metrics
                timings[variant].append(seconds)
            conn.execute(
                f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} ORDER BY random() LIMIT %s)", (args.deleted,)
            )
        delete_seconds, deleted = tier(0)
        assert deleted.metrics.deleted_rows == args.deleted, deleted.metrics

        # The two reads alone.
        source = build_source(spec(0).source, connection)
        source.bind_key(MergeKey(("id",), "version"))
        source.schema()  # its catalog query is not the keys' read
        started = time.monotonic()
        with source.reading_one_snapshot(None, [], with_keys=True) as read:
            hot_keys = read.keys
        assert hot_keys is not None
        hot_read = time.monotonic() - started
        table = lake_of(spec(0), catalog).load_table()
        started = time.monotonic()
        absent = keys_absent(table, hot_keys, None, ["id"])
        lake_read = time.monotonic() - started
        assert absent.num_rows == 0

    report = {
        "rows": args.rows,
        "changed_rows_per_round": args.changed,
        "first_load_seconds": round(load_seconds, 2),
        "round_without_reconciliation_seconds": round(statistics.median(timings["without"]), 3),
        "round_with_reconciliation_seconds": round(statistics.median(timings["with"]), 3),
        "reconciling_round_removing_deleted_seconds": round(delete_seconds, 3),
        "deleted_rows": deleted.metrics.deleted_rows,
        "lake_files_after_delete_round": deleted.metrics.files,
        "hot_keys_read_seconds": round(hot_read, 3),
        "lake_keys_read_and_compare_seconds": round(lake_read, 3),
        "hot_keys": hot_keys.num_rows,
        "all_round_timings": {k: [round(v, 3) for v in vs] for k, vs in timings.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
