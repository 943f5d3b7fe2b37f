"""Benchmark B2: an incremental round costs in proportion to its new data, not to the table.

TPC-H ``lineitem`` at ``--sf`` is loaded into PostgreSQL as ``lineitem_b2`` (its own table, so the shared
``lineitem`` of other benchmarks is never touched) and fully tiered by one round (untimed set-up). Then,
``--repeat`` times, interleaved so that drifting machine load hits every measurement alike:

* ``incremental``  ``--fraction`` (1%) new rows are inserted into ``lineitem_b2`` (copies of its first rows;
                   ``l_id`` is an identity column, so they get new, higher cursor values) and the next round
                   is timed; afterwards the lake must hold exactly the table's rows (pyiceberg count, distinct
                   ``l_id`` count and max ``l_id`` against PostgreSQL);
* ``idle``         the round after that, with nothing new (it starts no Spark);
* ``small-first``  a FIRST round (fresh Iceberg table) of ``lineitem_b2_small``: a table holding just as many
                   rows as were inserted, same schema and identity cursor.

Every timed round is ``run_round`` as the operator runs it, in its own Python process: the figures include
the Spark session start-up when the round starts one, as a real Airflow task pays it (not the interpreter start
and imports). Incremental and small-first rounds are measured in two ``--modes``:

* ``operator``  the writer as the operator builds it: ``spark.local_single_split`` (default on) writes a round
                of one split (up to ``target_rows_per_split`` rows, 1M) in the task process, without Spark;
* ``spark``     ``local_single_split`` off: every round starts its own Spark JVM.

The table shows medians; the target is incremental / small-first <= 1.5x. The rows added are deleted again at
the end, so a later run against the same ``--dsn`` finds ``lineitem_b2`` loaded.

    python -m benchmarks.bench_incremental --sf 1
    python -m benchmarks.bench_incremental --sf 0.01 --repeat 1     # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_round import _catalog  # noqa: E402
from benchmarks.tpch_data import CURSOR_COLUMN, LINEITEM_COLUMNS  # noqa: E402

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "incremental.json"
TABLE = "lineitem_b2"
SMALL_TABLE = "lineitem_b2_small"
NAMESPACE = "bench"
KINDS = ("incremental", "idle", "small-first")
#: How the round's writer is built: as the operator builds it (a round of one split is written by the task
#: process, no Spark), or always on Spark (``local_single_split=False``, a JVM per round).
MODES = ("operator", "spark")
LOCAL_SINGLE_SPLIT = {"operator": None, "spark": False}
RATIO_TARGET = 1.5


# -- pieces shared with bench_memory ------------------------------------------------------------------
def table_spec(table: str) -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    return TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "bench", "table": table, "cursor_column": CURSOR_COLUMN},
            "lake": {"namespace": NAMESPACE, "table": table},
        }
    )


def tier_once(
    dsn: str,
    table: str,
    catalog: dict[str, str],
    state_path: Path,
    *,
    local_single_split: bool | None = None,
    before_stop: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """One round of ``table`` in this process, its parts built by ``build_round`` as the operator builds them,
    timed from before the parts (the writer among them) exist to the round's end. ``local_single_split``
    overrides the spec's ``spark`` default (a round of one split is written without starting Spark);
    ``before_stop`` gets the writer before its session is stopped (to look into the JVM)."""
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    spec = table_spec(table)
    if local_single_split is not None:
        spark = spec.spark.model_copy(update={"local_single_split": local_single_split})
        spec = spec.model_copy(update={"spark": spark})
    started = time.perf_counter()
    parts = round_parts(spec, ConnectionInfo.from_uri(dsn), catalog)
    with parts:
        result = parts.run(JsonFileStateStore(state_path))
        seconds = time.perf_counter() - started
        writer = parts.writer
        spark_session = writer._spark is not None
        if before_stop is not None:
            before_stop(writer)
    metrics = result.metrics
    return {
        "rows": metrics.rows if metrics else 0,
        "seconds": seconds,
        "outcome": result.outcome,
        "files": metrics.files if metrics else 0,
        "splits": metrics.splits if metrics else 0,
        "spark_session": spark_session,
    }


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}


def child_command(
    module: str, dsn: str, table: str, catalog: dict[str, str], state_path: Path, mode: str = "operator"
) -> list[str]:
    """The command line of a child that runs one round (``--child`` of ``module``) and prints ``RESULT {json}``."""
    command = [sys.executable, "-m", module, "--child", mode, "--dsn", dsn, "--table", table]
    return [*command, "--catalog", json.dumps(catalog), "--state", str(state_path)]


def add_child_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--catalog", help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)


def parse_child(name: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed ({returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def copy_table(conn: Any, source: str, target: str, rows: int) -> None:
    """(Re)create ``target`` as the first ``rows`` rows of ``source`` by cursor, with ``source``'s columns, an
    identity cursor and a primary key on it, in one transaction (``conn`` in autocommit mode)."""
    from psycopg import sql

    ident = sql.Identifier
    with conn.transaction():
        conn.execute(sql.SQL("drop table if exists {}").format(ident(target)))
        conn.execute(sql.SQL("create table {} (like {} including identity)").format(ident(target), ident(source)))
        conn.execute(
            sql.SQL("insert into {} overriding system value select * from {} order by {} limit {}").format(
                ident(target), ident(source), ident(CURSOR_COLUMN), sql.Literal(rows)
            )
        )
        conn.execute(sql.SQL("alter table {} add primary key ({})").format(ident(target), ident(CURSOR_COLUMN)))
    conn.execute(sql.SQL("analyze {}").format(ident(target)))


def lake_check(catalog: dict[str, str], table: str, dsn: str) -> dict[str, Any]:
    """The lake table against the hot table: row count, distinct cursor values, max cursor value."""
    import psycopg
    import pyarrow.compute as pc
    from psycopg import sql
    from pyiceberg.catalog import load_catalog

    cursors = (
        load_catalog("default", **catalog)
        .load_table((NAMESPACE, table))
        .scan(selected_fields=(CURSOR_COLUMN,))
        .to_arrow()[CURSOR_COLUMN]
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("select count(*), max({}) from {}").format(sql.Identifier(CURSOR_COLUMN), sql.Identifier(table))
        row = conn.execute(query).fetchone()
    assert row is not None
    check = {
        "lake_rows": len(cursors),
        "lake_distinct_ids": pc.count_distinct(cursors).as_py(),
        "lake_max_id": pc.max(cursors).as_py(),
        "table_rows": int(row[0]),
        "table_max_id": int(row[1]),
    }
    check["ok"] = (
        check["lake_rows"] == check["lake_distinct_ids"] == check["table_rows"]
        and check["lake_max_id"] == check["table_max_id"]
    )
    return check


# -- this benchmark --------------------------------------------------------------------------------------
def run_round_child(
    dsn: str, table: str, catalog: dict[str, str], state_path: Path, mode: str = "operator"
) -> dict[str, Any]:
    started = time.perf_counter()
    command = child_command("benchmarks.bench_incremental", dsn, table, catalog, state_path, mode)
    proc = subprocess.run(command, env=child_env(), capture_output=True, text=True, cwd=REPO)
    result = parse_child(f"round of {table}", proc.returncode, proc.stdout, proc.stderr)
    result["process_seconds"] = time.perf_counter() - started
    return result


def insert_new_rows(dsn: str, table: str, rows: int) -> int:
    """Insert copies of the table's first ``rows`` rows; the identity column numbers them after every other."""
    import psycopg
    from psycopg import sql

    columns = sql.SQL(", ").join(sql.Identifier(name) for name, _ in LINEITEM_COLUMNS)
    query = sql.SQL("insert into {t} ({c}) select {c} from {t} order by {k} limit {n}").format(
        t=sql.Identifier(table), c=columns, k=sql.Identifier(CURSOR_COLUMN), n=sql.Literal(rows)
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).rowcount


def restore_table(dsn: str, table: str, max_id: int) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("delete from {} where {} > {}").format(
                sql.Identifier(table), sql.Identifier(CURSOR_COLUMN), sql.Literal(max_id)
            )
        )
        conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier(table)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    parser.add_argument("--fraction", type=float, default=0.01, help="new rows per incremental round, of the table")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="writer modes to measure: operator, spark")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    add_child_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        local = LOCAL_SINGLE_SPLIT[args.child]
        result = tier_once(args.dsn, args.table, json.loads(args.catalog), args.state, local_single_split=local)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    modes = [m for m in MODES if m in args.modes.split(",")]
    if not modes:
        parser.error(f"--modes: choose from {', '.join(MODES)}")

    import psycopg

    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem_timed

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-b2-") as (workdir, dsn):
        began = time.perf_counter()
        base_rows = load_lineitem_timed(dsn, args.sf, workdir, table=TABLE).rows
        new_rows = max(1, round(base_rows * args.fraction))
        with psycopg.connect(dsn, autocommit=True) as conn:
            copy_table(conn, TABLE, SMALL_TABLE, new_rows)
            row = conn.execute(f"select max({CURSOR_COLUMN}) from {TABLE}").fetchone()
        assert row is not None
        base_max_id = int(row[0])
        print(f"{TABLE}: {base_rows:,} rows at SF {args.sf}, {SMALL_TABLE}: {new_rows:,} rows", end="")
        print(f" (ready in {time.perf_counter() - began:.1f}s)", flush=True)
        catalog = _catalog(workdir, "b2-lake")
        state = workdir / "b2-lake" / "state.json"
        samples: dict[str, list[dict[str, Any]]] = {}
        checks: list[dict[str, Any]] = []

        def sample(name: str, repeat: int, result: dict[str, Any]) -> None:
            samples.setdefault(name, []).append(result)
            spark = "Spark" if result["spark_session"] else "no Spark"
            print(f"  run {repeat + 1} {name:<22} {result['seconds']:8.2f}s {result['rows']:>10,} rows  {spark}")

        try:
            full = run_round_child(dsn, TABLE, catalog, state)
            if full["rows"] != base_rows:
                raise AssertionError(f"the full round tiered {full['rows']} rows of {base_rows}")
            print(f"  full round (set-up)          {full['seconds']:8.2f}s {full['rows']:>10,} rows", flush=True)
            for repeat in range(args.repeat):
                for mode in modes:
                    inserted = insert_new_rows(dsn, TABLE, new_rows)
                    incremental = run_round_child(dsn, TABLE, catalog, state, mode)
                    check = lake_check(catalog, TABLE, dsn)
                    checks.append(check)
                    if incremental["rows"] != inserted or not check["ok"]:
                        raise AssertionError(f"incremental round of {inserted} new rows: {incremental}, lake {check}")
                    sample(f"incremental/{mode}", repeat, incremental)
                    small_catalog = _catalog(workdir, "b2-small-lake")
                    small_state = workdir / "b2-small-lake" / "state.json"
                    small = run_round_child(dsn, SMALL_TABLE, small_catalog, small_state, mode)
                    if small["rows"] != new_rows:
                        raise AssertionError(f"the first round of {SMALL_TABLE} tiered {small['rows']} of {new_rows}")
                    sample(f"small-first/{mode}", repeat, small)
                idle = run_round_child(dsn, TABLE, catalog, state)
                if idle["outcome"] != "nothing_to_tier":
                    raise AssertionError(f"the idle round did something: {idle}")
                sample("idle", repeat, idle)
        finally:
            restore_table(dsn, TABLE, base_max_id)
        report = summarize(samples, modes)
        print_report(report, args.sf, base_rows, new_rows)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "sf": args.sf,
            "table_rows": base_rows,
            "new_rows": new_rows,
            "modes": modes,
            "full_round": full,
            "results": report["rounds"],
            "ratios": report["ratios"],
            "ratio_incremental_to_small": report["ratios"][modes[0]],
            "ratio_target": RATIO_TARGET,
            "lake_checks": checks,
        }
        args.output.write_text(json.dumps(document, indent=2))
    return 0


def summarize(samples: dict[str, list[dict[str, Any]]], modes: list[str]) -> dict[str, Any]:
    rounds = {}
    for name, runs in samples.items():
        rounds[name] = {
            "median_seconds": statistics.median(r["seconds"] for r in runs),
            "all_seconds": [r["seconds"] for r in runs],
            "median_process_seconds": statistics.median(r["process_seconds"] for r in runs),
            "rows": runs[-1]["rows"],
            "spark_session": runs[-1]["spark_session"],
            "last": runs[-1],
        }
    ratios = {
        mode: rounds[f"incremental/{mode}"]["median_seconds"] / rounds[f"small-first/{mode}"]["median_seconds"]
        for mode in modes
    }
    return {"rounds": rounds, "ratios": ratios}


def print_report(report: dict[str, Any], sf: float, table_rows: int, new_rows: int) -> None:
    print(f"\nB2, TPC-H lineitem SF {sf} ({table_rows:,} rows), {new_rows:,} new rows a round: median of runs")
    print("(seconds: the round in its process, Spark start-up included; process: the whole child process)")
    print(f"{'round':<24} {'rows':>10} {'seconds':>9} {'process':>9}  spark")
    for name, r in report["rounds"].items():
        spark = "yes" if r["spark_session"] else "no"
        print(f"{name:<24} {r['rows']:>10,} {r['median_seconds']:>9.2f} {r['median_process_seconds']:>9.2f}  {spark}")
    for mode, ratio in report["ratios"].items():
        verdict = "ok" if ratio <= RATIO_TARGET else "MISSED"
        print(f"incremental / small-first ({mode}): {ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})")


if __name__ == "__main__":
    sys.exit(main())
