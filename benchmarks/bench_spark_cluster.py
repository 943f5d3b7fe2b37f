"""Benchmark: one tiering round of one PostgreSQL table into Iceberg on a local Spark standalone cluster, with 1
worker versus 2 workers (one core each), in the same run on the same data.

* The table: TPC-H ``lineitem`` at ``--sf`` (default 0.83, about 5M rows; ``benchmarks.tpch_data``), or ``--rows``
  generated rows of the integration tests' ``orders`` table (``testbed.hot_tables``), in a throw-away
  PostgreSQL server on 127.0.0.1 (or ``--dsn``).
* Each configuration gets a fresh cluster (``scripts/spark_standalone.sh`` through ``testbed.spark_standalone``: a
  master and N workers, 127.0.0.1 only), a fresh Iceberg SQL catalog with a local warehouse (shared by the driver
  and the executors: one machine), and one ``run_round`` with ``SparkSplitWriter`` on ``spark://127.0.0.1:<port>``
  in its own Python process (its own driver JVM), as an Airflow task runs it. ``spark.cores.max`` = N and the
  first job waits for all N executors.
* Reported: wall time of the task (session start + executors registered + round), rows/s, speed-up over 1 worker,
  where the time goes (cluster start, session start, executors registered, plan, write, commit, record + clean) and
  per executor (the driver's REST API ``/allexecutors``; its worker from the workers' ``/json/``) its tasks and task
  seconds. After each run the lake is read back: it must hold every row once (count and distinct cursor values).

    python -m benchmarks.bench_spark_cluster                   # ~5M lineitem rows, 1 vs 2 workers
    python -m benchmarks.bench_spark_cluster --rows 3000 --split-rows 500   # smoke run

Writes ``benchmarks/results/spark_cluster.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "spark_cluster.json"
TIMING_KEYS = ("session_start", "executors_registered", "plan", "split_cut", "write", "commit", "record_clean")


def load_table(dsn: str, args: argparse.Namespace, workdir: Path) -> tuple[str, str, int]:
    """(table, cursor column, rows) of the hot table, created in ``dsn`` if missing."""
    if args.rows:
        from testbed.hot_tables import PostgresHot

        hot = PostgresHot(dsn)
        hot.create("orders")
        hot.insert("orders", 1, args.rows)
        return "orders", "id", args.rows
    from benchmarks.tpch_data import CURSOR_COLUMN, TABLE, load_lineitem

    return TABLE, CURSOR_COLUMN, load_lineitem(dsn, args.sf, workdir)


def check_lake(catalog: dict[str, str], table: str, cursor: str, rows: int) -> None:
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog

    values = load_catalog("default", **catalog).load_table(("cluster", table)).scan(selected_fields=(cursor,))
    column = values.to_arrow()[cursor]
    distinct = len(pc.unique(column))
    if len(column) != rows or distinct != rows:
        raise RuntimeError(f"lake holds {len(column)} rows, {distinct} distinct {cursor} (expected {rows})")


def run_config(
    workers: int, dsn: str, table: str, cursor: str, rows: int, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    from testbed.spark_standalone import StandaloneCluster, round_in_child

    root = workdir / f"w{workers}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    with StandaloneCluster(root / "cluster", workers=workers, memory=args.worker_memory) as cluster:
        report = round_in_child(
            {
                "master": cluster.master_url,
                "status_url": f"http://127.0.0.1:{cluster.webui_port}/json/",
                "executors": workers,
                "dsn": dsn,
                "table": table,
                "cursor_column": cursor,
                "target_rows_per_split": args.split_rows,
                "catalog": catalog,
                "state_path": str(root / "state.json"),
                "conf": {"spark.executor.memory": args.executor_memory},
            }
        )
    report["cluster_start"] = cluster.start_seconds
    if report["rows"] != rows or report["outcome"] != "tiered":
        raise RuntimeError(f"{workers} worker(s): tiered {report['rows']} of {rows} rows ({report['outcome']})")
    check_lake(catalog, table, cursor, rows)
    t = report["timings"]
    report["wall"] = t["session_start"] + t["executors_registered"] + t["round"]
    shutil.rmtree(root / "warehouse", ignore_errors=True)
    return report


def summarize(rows: int, samples: dict[int, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    report: dict[str, dict[str, Any]] = {}
    for workers, runs in samples.items():
        median = {key: statistics.median(r["timings"][key] for r in runs) for key in TIMING_KEYS}
        wall = statistics.median(r["wall"] for r in runs)
        report[str(workers)] = {
            "workers": workers,
            "wall_seconds": wall,
            "all_wall_seconds": [r["wall"] for r in runs],
            "rows_per_second": rows / wall,
            "cluster_start_seconds": statistics.median(r["cluster_start"] for r in runs),
            "timings": median,
            "splits": runs[-1]["splits"],
            "files": runs[-1]["files"],
            "executors": runs[-1]["executors"],
        }
    base = report[str(min(samples))]
    for entry in report.values():
        entry["speed_up"] = base["wall_seconds"] / entry["wall_seconds"]
        entry["write_speed_up"] = base["timings"]["write"] / entry["timings"]["write"]
    return report


def print_report(report: dict[str, dict[str, Any]], rows: int, table: str) -> None:
    print(f"\n{table}: {rows:,} rows, one round per configuration (median of runs); each worker 1 core")
    print(f"{'workers':>7} {'wall s':>8} {'rows/s':>10} {'speed-up':>9} {'write s':>8} {'write speed-up':>15}")
    for r in report.values():
        print(
            f"{r['workers']:>7} {r['wall_seconds']:>8.2f} {r['rows_per_second']:>10,.0f} {r['speed_up']:>8.2f}x "
            f"{r['timings']['write']:>8.2f} {r['write_speed_up']:>14.2f}x"
        )
    print("\nwhere the time goes (seconds)")
    print(f"{'workers':>7} {'cluster start':>14} " + " ".join(f"{k:>20}" for k in TIMING_KEYS))
    for r in report.values():
        cells = " ".join(f"{r['timings'][k]:>20.2f}" for k in TIMING_KEYS)
        print(f"{r['workers']:>7} {r['cluster_start_seconds']:>14.2f} {cells}")
    print("\nper executor (last run; REST API of the driver)")
    print(f"{'workers':>7} {'executor':>8} {'worker':<40} {'tasks':>5} {'task s':>8} {'GC s':>6}")
    for r in report.values():
        for e in r["executors"]:
            print(
                f"{r['workers']:>7} {e['id']:>8} {e['worker'] or '?':<40} {e['tasks']:>5} "
                f"{e['task_seconds']:>8.2f} {e['gc_seconds']:>6.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.83, help="TPC-H scale factor of lineitem (0.83 = ~5M rows)")
    parser.add_argument("--rows", type=int, help="tier this many generated rows instead of TPC-H lineitem")
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, comma separated")
    parser.add_argument("--split-rows", type=int, default=1_000_000, help="target_rows_per_split of the table")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--executor-memory", default="1g")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from benchmarks.scratch import postgres_scratch

    worker_counts = [int(n) for n in args.workers.split(",")]
    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-cluster-") as (workdir, dsn):
        load_started = time.perf_counter()
        table, cursor, rows = load_table(dsn, args, workdir)
        print(f"{table}: {rows:,} rows (ready in {time.perf_counter() - load_started:.1f}s)", flush=True)
        samples: dict[int, list[dict[str, Any]]] = {n: [] for n in worker_counts}
        for repeat in range(args.repeat):
            for workers in worker_counts:  # interleaved, so drifting machine load hits every configuration alike
                result = run_config(workers, dsn, table, cursor, rows, args, workdir)
                samples[workers].append(result)
                print(
                    f"  run {repeat + 1}: {workers} worker(s) {result['wall']:8.2f}s "
                    f"(write {result['timings']['write']:.2f}s)",
                    flush=True,
                )
        report = summarize(rows, samples)
        print_report(report, rows, table)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps(
                {
                    "table": table,
                    "rows": rows,
                    "sf": None if args.rows else args.sf,
                    "split_rows": args.split_rows,
                    "results": report,
                    "runs": {str(n): runs for n, runs in samples.items()},
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
