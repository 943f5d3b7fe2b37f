"""Benchmark B3 (and B1's Airflow-task figure): the 8 TPC-H tables tiered by one DAG run under a real Airflow,
their tasks in parallel, next to the same DAG with its tasks one after another, in the same Airflow, same run.

Airflow is the e2e harness ``testbed.airflow_cluster.AirflowCluster`` (api-server, scheduler, dag-processor,
LocalExecutor) with ``[core] parallelism`` = ``--parallelism`` (default 2: one task per core here). The hot tables
are the TPC-H tables in a PostgreSQL on 127.0.0.1 (``benchmarks.tpch_data.load_tpch``, a surrogate identity
cursor per table); the lake is a pyiceberg SQL catalog on SQLite with a local warehouse. DAGs, each run once per
repeat, each with its own Iceberg namespace and assets so every run tiers everything from scratch:

* ``tpch_parallel_<r>``    ``build_tiering_dag`` over the 8 tables (tasks run as slots allow);
* ``tpch_sequential_<r>``  the same 8 tables with ``max_active_tasks=1``: one table after another;
* ``tpch_lineitem_<r>``    lineitem alone: the duration of its task instance is "TierTableOperator as an Airflow
                           task" for B1 (task process start, DAG parse, round with its own Spark session, record).

Run wall time = the DAG run's start to end (REST). After each run every lake table is read back with pyiceberg
and must hold exactly the hot table's row count. Writes ``benchmarks/results/tpch_tables.json``.

    python -m benchmarks.bench_tpch_tables --sf 1
    python -m benchmarks.bench_tpch_tables --sf 0.01 --repeat 1     # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.tpch_data import TPCH_TABLES  # noqa: E402

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "tpch_tables.json"
HOT_CONN, CATALOG_CONN = "tpch_hot", "iceberg_default"

DAG_FILE = textwrap.dedent(
    """
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    CURSORS = {cursors!r}


    def tables(namespace, names):
        return [
            {{
                "name": name,
                "source": {{"conn_id": {conn!r}, "table": name, "cursor_column": CURSORS[name]}},
                "lake": {{"namespace": namespace, "table": name}},
                "retries": 0,
            }}
            for name in names
        ]


    # Tiering only (maintenance=False), comparable with earlier results.
    for r in range({repeat}):
        globals()[f"par{{r}}"] = build_tiering_dag(
            f"tpch_parallel_{{r}}", tables(f"par{{r}}", list(CURSORS)), maintenance=False
        )
        globals()[f"seq{{r}}"] = build_tiering_dag(
            f"tpch_sequential_{{r}}", tables(f"seq{{r}}", list(CURSORS)), max_active_tasks=1, maintenance=False
        )
        globals()[f"li{{r}}"] = build_tiering_dag(
            f"tpch_lineitem_{{r}}", tables(f"li{{r}}", ["lineitem"]), maintenance=False
        )
    """
)


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def run_dag(af: Any, dag_id: str, timeout: float) -> dict[str, Any]:
    from urllib.parse import quote

    run_id = af.trigger_dag(dag_id)
    state = af.wait_for_run(dag_id, run_id, timeout=timeout)
    run = af.dag_run(dag_id, run_id)
    path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
    tis = af.get(path, params={"limit": 100})["task_instances"]
    return {
        "dag_id": dag_id,
        "state": state,
        "run_seconds": _seconds(run["start_date"], run["end_date"]),
        "tasks": {
            ti["task_id"]: {"state": ti["state"], "seconds": _seconds(ti["start_date"], ti["end_date"])} for ti in tis
        },
    }


def check_lake(catalog_properties: dict[str, str], namespace: str, expected: dict[str, int]) -> None:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **catalog_properties)
    for table, rows in expected.items():
        held = catalog.load_table((namespace, table)).scan(selected_fields=(TPCH_TABLES[table][0],)).to_arrow()
        if held.num_rows != rows:
            raise AssertionError(f"{namespace}.{table}: the lake holds {held.num_rows} rows, the hot table {rows}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--parallelism", type=int, default=2, help="Airflow [core] parallelism")
    parser.add_argument("--tables", default=",".join(TPCH_TABLES), help="TPC-H tables to tier (smoke: fewer)")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--run-timeout", type=float, default=1800)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_tpch
    from testbed.airflow_cluster import AirflowCluster, benchmark_config

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-many-") as (workdir, dsn):
        started = time.perf_counter()
        names = [t for t in TPCH_TABLES if t in args.tables.split(",")]
        if "lineitem" not in names:
            names.append("lineitem")
        rows = load_tpch(dsn, args.sf, workdir, tuple(names))
        took = time.perf_counter() - started
        print(f"TPC-H SF {args.sf}: {sum(rows.values()):,} rows in {len(rows)} tables (ready in {took:.1f}s)")
        dags = workdir / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        cursors = {name: TPCH_TABLES[name][0] for name in names}
        (dags / "tpch.py").write_text(DAG_FILE.format(cursors=cursors, conn=HOT_CONN, repeat=args.repeat))
        warehouse = workdir / "lake"
        properties = {
            "type": "sql",
            "uri": f"sqlite:///{warehouse}/catalog.db",
            "warehouse": f"file://{warehouse}/warehouse",
        }
        warehouse.mkdir(parents=True, exist_ok=True)
        env = {
            f"AIRFLOW_CONN_{HOT_CONN.upper()}": dsn.replace("postgresql://", "postgres://", 1),
            f"AIRFLOW_CONN_{CATALOG_CONN.upper()}": json.dumps(
                {"conn_type": "iceberg", "extra": {"name": "default", **properties}}
            ),
        }
        overrides = benchmark_config(core={"parallelism": str(args.parallelism)})
        dag_ids = [f"tpch_{kind}_{r}" for r in range(args.repeat) for kind in ("parallel", "sequential", "lineitem")]
        runs: list[dict[str, Any]] = []
        with AirflowCluster(
            workdir / "airflow", dags, env, expected_dag_ids=dag_ids, parse_timeout=300, config_overrides=overrides
        ) as af:
            for r in range(args.repeat):
                kinds = ["parallel", "sequential", "lineitem"]
                for kind in kinds[r % 3 :] + kinds[: r % 3]:  # rotate, so drifting load hits each alike
                    dag_id = f"tpch_{kind}_{r}"
                    run = {**run_dag(af, dag_id, args.run_timeout), "kind": kind, "repeat": r}
                    if run["state"] != "success":
                        raise RuntimeError(f"{dag_id} ended {run['state']}: {run['tasks']}")
                    namespace = {"parallel": "par", "sequential": "seq", "lineitem": "li"}[kind] + str(r)
                    check_lake(properties, namespace, rows if kind != "lineitem" else {"lineitem": rows["lineitem"]})
                    runs.append(run)
                    print(f"  [{r + 1}/{args.repeat}] {dag_id}: {run['run_seconds']}s", flush=True)
    report = summarize(runs, rows)
    print_report(report, args.sf, args.parallelism)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {"sf": args.sf, "parallelism": args.parallelism, "rows": rows, "report": report, "runs": runs}, indent=2
        )
    )
    return 0


def summarize(runs: list[dict[str, Any]], rows: dict[str, int]) -> dict[str, Any]:
    def median(kind: str) -> float:
        return statistics.median(r["run_seconds"] for r in runs if r["kind"] == kind)

    lineitem_task = statistics.median(r["tasks"]["lineitem"]["seconds"] for r in runs if r["kind"] == "lineitem")
    total = sum(rows.values())
    return {
        "tables": len(rows),
        "parallel_seconds": median("parallel"),
        "sequential_seconds": median("sequential"),
        "speedup": median("sequential") / median("parallel"),
        "parallel_rows_per_second": total / median("parallel"),
        "lineitem_task_seconds": lineitem_task,
        "lineitem_task_rows_per_second": rows["lineitem"] / lineitem_task,
        "lineitem_run_seconds": median("lineitem"),
    }


def print_report(report: dict[str, Any], sf: float, parallelism: int) -> None:
    n = report["tables"]
    print(f"\nTPC-H SF {sf}, {n} tables, Airflow LocalExecutor parallelism {parallelism} (median of runs)")
    print(f"{'DAG run':<34}{'seconds':>10}")
    print(f"{f'{n} tables, tasks in parallel':<34}{report['parallel_seconds']:>10.2f}")
    print(f"{f'{n} tables, one after another':<34}{report['sequential_seconds']:>10.2f}")
    print(f"{'lineitem alone (its task)':<34}{report['lineitem_task_seconds']:>10.2f}")
    print(f"parallel speed-up over one after another: {report['speedup']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
