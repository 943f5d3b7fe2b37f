"""Benchmark: what tables with nothing new cost the machine per hour, one setup beside another, in one run.

Per setup, a fresh Airflow (as ``bench_freshness``: api-server, scheduler, dag-processor, LocalExecutor with
``[core] parallelism = --parallelism``, its DAG file parsed every ``--parse-interval`` seconds) tiers ``--tables``
append tables of a throw-away PostgreSQL 15 (100 rows each, ``freshness_seconds`` 300, maintenance as the spec's
default has it) into a pyiceberg SQL catalog on SQLite.
Once every table has committed its first round and every DAG run has ended (the first runs' maintenance tasks
included: maintenance's own hourly work is in neither window), nothing is written any more. For ``--minutes`` (a
multiple of the 300 s schedule measures whole cycles) the machine's CPU is taken as ``bench_freshness`` takes it
(Airflow's own processes, the task processes, PostgreSQL, the rest), with the task starts per minute; reported per
hour. The setups:

* ``one-dag``     ``build_tiering_dag`` of every table, scheduled every 300 s: each run starts every table's tier task
                  (which probes the hot store and skips) and maintenance task, and the summary;
* ``own-clocks``  ``build_table_dags``: one DAG per table scheduled every 300 s (its run probes and skips), the
                  group's status DAG every minute and its maintenance DAG hourly.

    python -m benchmarks.bench_idle_tables                       # 200 tables, both setups, 10 minutes each
    python -m benchmarks.bench_idle_tables --tables 4 --minutes 0.5 --setups own-clocks   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make ``testbed`` and ``benchmarks`` importable
    sys.path.insert(0, str(REPO))

from benchmarks.bench_freshness import (  # noqa: E402
    GROUP,
    SETUPS,
    Table,
    cpu_snapshot,
    cpu_split,
    dag_file,
    dag_ids,
    deployment,
    lake_position,
    server_pid,
    task_starts,
)

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "idle_tables.json"
FRESHNESS = 300
ROWS = 100


def create_tables(dsn: str, specs: list[Table]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in specs:
            conn.execute(f'CREATE TABLE "{table.name}" (id bigint PRIMARY KEY, payload text NOT NULL)')
            conn.execute(f'INSERT INTO "{table.name}" SELECT g, md5(g::text) FROM generate_series(1, %s) g', (ROWS,))


def run_setup(setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from pyiceberg.catalog import load_catalog

    from testbed.airflow_cluster import AirflowCluster
    from testbed.pg_server import PostgresServer

    specs = [Table(f"idle_{i:03d}", "append", FRESHNESS, backlog=False) for i in range(args.tables)]
    home = workdir / setup
    home.mkdir(parents=True)
    server = PostgresServer(home / "pg", settings={"max_connections": 300}).start()
    try:
        create_tables(server.dsn, specs)
        dags, catalog, env, overrides = deployment(
            home, server, dag_file(setup, specs, every_seconds=FRESHNESS), args.parallelism
        )
        overrides["dag_processor"] = {"min_file_process_interval": str(args.parse_interval)}
        started = time.monotonic()
        with AirflowCluster(home / "airflow", dags, env, expected_dag_ids=dag_ids(setup, specs),
                            config_overrides=overrides, parse_timeout=600) as af:  # fmt: skip
            lake = load_catalog("default", **catalog)
            waiting = list(specs)
            while waiting:
                if time.monotonic() - started > args.warmup_timeout:
                    raise RuntimeError(f"[{setup}] tables never tiered: {[t.name for t in waiting][:10]}")
                waiting = [t for t in waiting if lake_position(lake, t) is None]
                time.sleep(5)
            while af.get("/api/v2/dags/~/dagRuns", params={"state": ["queued", "running"], "limit": 1})[
                "total_entries"
            ]:  # the first runs' last tasks (maintenance, summaries) end before the window opens
                time.sleep(5)
            print(f"[{setup}] every table tiered and every run ended after {time.monotonic() - started:.0f} s; "
                  f"measuring {args.minutes:g} min idle", flush=True)  # fmt: skip
            window_start = datetime.now(UTC)
            before, load_before = cpu_snapshot(af, server_pid(server)), os.getloadavg()
            time.sleep(args.minutes * 60)
            after, load_after = cpu_snapshot(af, server_pid(server)), os.getloadavg()
            window_end = datetime.now(UTC)
            seconds = (window_end - window_start).total_seconds()
            cpu = cpu_split(before, after, seconds)
            per_hour = 3600 / seconds
            result = {
                "setup": setup, "tables": len(specs), "window_seconds": round(seconds),
                "parse_interval_seconds": args.parse_interval,
                "machine_cpu_s_per_hour": round(cpu["by_process_cpu_s"]["machine_busy"] * per_hour),
                "airflow_own_cpu_s_per_hour": round(cpu["airflow_own_cpu_s"] * per_hour),
                "task_processes_cpu_s_per_hour": round(cpu["task_processes_cpu_s"] * per_hour),
                "postgres_cpu_s_per_hour": round(cpu["by_process_cpu_s"].get("postgres", 0.0) * per_hour),
                "task_starts_per_minute": round(task_starts(af, window_start, window_end) / (seconds / 60), 1),
                "cpu": cpu, "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
            }  # fmt: skip
            print(json.dumps(result, indent=1), flush=True)
            return result
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, run in this order")
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--parallelism", type=int, default=8, help="[core] parallelism: LocalExecutor workers")
    parser.add_argument(
        "--parse-interval",
        type=int,
        default=30,
        help="[dag_processor] min_file_process_interval (Airflow's default; the freshness benchmark parses every 5 s)",
    )
    parser.add_argument("--warmup-timeout", type=float, default=1800.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if set(setups) - set(SETUPS):
        parser.error(f"unknown setups {sorted(set(setups) - set(SETUPS))}; choose from {SETUPS}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tiering-bench-idle-"))
    results = [run_setup(setup, args, workdir) for setup in setups]
    report = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "group": GROUP, "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    print("\nsetup       tables  machine CPU-s/h  Airflow own  task processes  PostgreSQL  task starts/min")
    for r in results:
        cells = [r["setup"].ljust(11), str(r["tables"]).ljust(7), str(r["machine_cpu_s_per_hour"]).ljust(16),
                 str(r["airflow_own_cpu_s_per_hour"]).ljust(12), str(r["task_processes_cpu_s_per_hour"]).ljust(15),
                 str(r["postgres_cpu_s_per_hour"]).ljust(11), str(r["task_starts_per_minute"])]  # fmt: skip
        print(" ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
