"""Benchmark: a thousand tables on one small Airflow, most of them idle; a whole database declared once beside today's
DAG per table, in one run.

Per setup, a fresh Airflow (as ``bench_freshness``: api-server, scheduler, dag-processor, LocalExecutor with
``[core] parallelism = --parallelism``) tiers the tables of a throw-away PostgreSQL 15 into a pyiceberg SQL catalog
on SQLite. A tenth of the tables are busy: a writer commits one transaction a second to each (as ``bench_freshness``'s
writer: appends insert 5 rows; merges update 3 rows and insert 2), their freshness cycling through 60, 120, 180 and
300 s; the rest are idle (100 rows each, freshness 300 s). The setups:

* ``database``    ``build_database_dag``: the schema declared once (append by ``id``, merge by ``updated_at``, found
                  by the rules; each busy table's freshness an override), probed every ``--probe-every`` seconds;
                  ``--tables`` tables (1,000);
* ``own-clocks``  today's ``build_table_dags``: one DAG per table on its own clock, with the status DAG every minute
                  and the maintenance DAG hourly; ``--own-clocks-tables`` tables (200).

Once every table has committed its first round, three windows:

1. **busy** (``--minutes``): the writers run. Every ``--sample-every`` seconds each busy table's data age (now minus
   the oldest commit the lake does not hold, as ``bench_freshness`` samples it); p50 / p95 / max per freshness class
   and the worst table's p95; the task starts per minute; the machine's CPU by process (Airflow's own split by
   process); the probe queries the hot store received (``pg_stat_statements``: calls of the listing query, and every
   statement of the tiering sessions);
2. **idle** (``--idle-minutes``): the writers stopped and every run ended: what the whole setup costs with nothing
   to tier, per hour;
3. ``database`` only, **idle, busy tables only** (``--idle-minutes``): the same Airflow with the declaration's include
   narrowed to the busy tables (the others then listed as dropped): the difference with window 2 is what the idle
   tables cost (their rows in the listing, the database's document), in cores and per table and hour.

Then the status surfaces at that size: the Tiering page's list (``GET /tiering/api/tables``), ``airflow tiering
status -o json`` and ``airflow tiering database``, each timed ``--repeat`` times; and the declaration's parse (a
DagBag of the DAG file in a fresh interpreter, as the dag-processor parses it). Writes
``benchmarks/results/many_tables.json``.

    python -m benchmarks.bench_many_tables                                       # 1,000 and 200 tables
    python -m benchmarks.bench_many_tables --tables 30 --own-clocks-tables 10 --minutes 1 --idle-minutes 0.5  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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
    NAMESPACE,
    Sampler,
    Table,
    cpu_snapshot,
    cpu_split,
    deployment,
    percentile,
    record_commit,
    server_pid,
    task_starts,
)

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "many_tables.json"
SETUPS = ("database", "own-clocks")
DATABASE, DAG_ID = "many", "many_tables"
FRESHNESS = (60, 120, 180, 300)
IDLE_FRESHNESS = 300
ROWS = 100
AIRFLOW_PROCESSES = ("scheduler", "dag-processor", "api-server", "triggerer", "supervisors")


def tables(count: int, freshness: tuple[int, ...] = FRESHNESS) -> list[Table]:
    """A tenth busy (append and merge alternating, freshness cycling through ``freshness``), the rest idle."""
    busy = max(1, count // 10)
    found = []
    for i in range(count):
        if i < busy:
            kind, every = ("append", "merge")[i % 2], freshness[i % len(freshness)]
            found.append(Table(f"t{i:04d}_{kind}_{every}", kind, every, backlog=False))
        else:
            found.append(Table(f"t{i:04d}_idle", "append", IDLE_FRESHNESS, backlog=False))
    return found


def busy_tables(specs: list[Table]) -> list[Table]:
    return [t for t in specs if not t.name.endswith("_idle")]


def create_tables(dsn: str, specs: list[Table]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(
            "CREATE TABLE bench_commits (table_name text NOT NULL, position numeric NOT NULL, "
            "at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute("CREATE INDEX ON bench_commits (table_name, position)")
        for table in specs:
            if table.kind == "merge":
                conn.execute(
                    f'CREATE TABLE "{table.name}" (id bigint PRIMARY KEY, payload text NOT NULL, amount numeric(12, 2) '
                    "NOT NULL, updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
            else:  # no updated_at: the rules append it by id
                conn.execute(
                    f'CREATE TABLE "{table.name}" (id bigint PRIMARY KEY, payload text NOT NULL, amount numeric(12, 2) '
                    "NOT NULL)"
                )
            conn.execute(
                f'INSERT INTO "{table.name}" (id, payload, amount) SELECT g, md5(g::text), g %% 1000 '
                "FROM generate_series(1, %s) g",
                (ROWS,),
            )
            record_commit(conn, table, ROWS)


def declaration(specs: list[Table], probe_every: float, only: list[Table] | None = None) -> dict[str, Any]:
    include = ["t*"] if only is None else [t.name for t in only]
    return {
        "name": DATABASE, "conn_id": "hot_pg", "include": include, "lake": {"namespace": NAMESPACE},
        "table_defaults": {"freshness_seconds": IDLE_FRESHNESS, "retries": 2, "retry_delay_seconds": 5,
                           "maintenance": {"enabled": False}},
        "tables": {t.name: {"spec": {"freshness_seconds": t.freshness}} for t in busy_tables(specs)},
        "probe_every_seconds": probe_every,
    }  # fmt: skip


def dag_file(setup: str, specs: list[Table], probe_every: float, only: list[Table] | None = None) -> str:
    if setup == "database":
        return (
            "# the benchmark's declared database\n"
            "from airflow_provider_tiering.dag_factory import build_database_dag\n\n"
            f"dag = build_database_dag({DAG_ID!r}, {declaration(specs, probe_every, only)!r})\n"
        )
    listed = repr([{**t.spec(), "maintenance": {"enabled": False}} for t in specs])
    return (
        f"# the benchmark's DAG per table\nTABLES = {listed}\n\n"
        "from airflow_provider_tiering.dag_factory import build_table_dags\n\n"
        f"build_table_dags({GROUP!r}, TABLES)\n"
    )


def dag_ids(setup: str, specs: list[Table]) -> list[str]:
    return [DAG_ID] if setup == "database" else [GROUP, *(f"{GROUP}.{t.name}" for t in specs)]


def statements(dsn: str) -> dict[str, int]:
    """Calls of the listing query and of every statement on the hot store so far (``pg_stat_statements``)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT query, calls FROM pg_stat_statements").fetchall()
    listing = sum(calls for query, calls in rows if "pg_stat_get_tuples_inserted" in query)
    return {"listing": int(listing), "all": int(sum(calls for _, calls in rows))}


def runs_ended(af: Any) -> None:
    while af.get("/api/v2/dags/~/dagRuns", params={"state": ["queued", "running"], "limit": 1})["total_entries"]:
        time.sleep(2)


def measured(af: Any, server: Any, seconds: float, writer_pid: int | None = None) -> dict[str, Any]:
    """The machine's CPU, the task starts and the hot store's statements over a window of ``seconds``."""
    start, before, calls, load = datetime.now(UTC), cpu_snapshot(af, server_pid(server), writer_pid), None, []
    calls = statements(server.dsn)
    load.append(os.getloadavg()[0])
    time.sleep(seconds)
    after, end = cpu_snapshot(af, server_pid(server), writer_pid), datetime.now(UTC)
    load.append(os.getloadavg()[0])
    window = (end - start).total_seconds()
    cpu = cpu_split(before, after, window)
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in AIRFLOW_PROCESSES}
    later = statements(server.dsn)
    return {
        "window_seconds": round(window), "start": start, "end": end, "cpu": cpu,
        "airflow_cpu_s_by_process": {k: round(v, 1) for k, v in spent.items() if v},
        "task_starts_per_minute": round(task_starts(af, start, end) / (window / 60), 1),
        "listing_queries": later["listing"] - calls["listing"], "statements": later["all"] - calls["all"],
        "load_average_1m": [round(x, 2) for x in load],
    }  # fmt: skip


def timed(run: Any, repeat: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeat):
        started = time.monotonic()
        run()
        seconds.append(time.monotonic() - started)
    return {"median_s": round(statistics.median(seconds), 3), "max_s": round(max(seconds), 3)}


def surfaces(af: Any, repeat: int, setup: str) -> dict[str, Any]:
    """The Tiering page's list, the CLI's status and (declared database) the database's listing, timed."""
    found: dict[str, Any] = {}
    listed = af.get("/tiering/api/tables")
    found["page_list_tables"] = listed["total_entries"]
    found["page_list"] = timed(lambda: af.get("/tiering/api/tables"), repeat)
    cli = [str(af.airflow_bin), "tiering"]

    def run(*args: str) -> None:
        done = subprocess.run([*cli, *args], env=af.env(), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"airflow tiering {' '.join(args)}: {done.stderr[-500:]}")

    found["cli_status"] = timed(lambda: run("status", "-o", "json"), repeat)
    found["cli_status_failed_only"] = timed(lambda: run("status", "--status", "FAILED", "-o", "json"), repeat)
    if setup == "database":
        found["cli_database"] = timed(lambda: run("database", DATABASE, "-o", "json"), repeat)
    return found


def parse_seconds(af: Any, dags: Path, repeat: int) -> dict[str, float]:
    """The DAG file parsed as the dag-processor parses it: a DagBag in a fresh interpreter."""
    code = (  # Airflow itself is imported before the clock starts: the dag-processor has it loaded
        "import time; from airflow.dag_processing.dagbag import DagBag; t = time.monotonic(); "
        f"bag = DagBag({str(dags)!r}); assert not bag.import_errors, bag.import_errors; "
        "print(time.monotonic() - t)"
    )
    seconds = []
    for _ in range(repeat):
        done = subprocess.run([str(af.python_bin), "-c", code], env=af.env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-1500:])
        seconds.append(float(done.stdout.strip().splitlines()[-1]))
    return {"median_s": round(statistics.median(seconds), 2), "max_s": round(max(seconds), 2)}


def data_ages(specs: list[Table], samples: dict[str, list[float]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for freshness in sorted({t.freshness for t in busy_tables(specs)}):
        members = [t for t in busy_tables(specs) if t.freshness == freshness]
        pooled = [a for t in members for a in samples[t.name]]
        per_table = [percentile(samples[t.name], 0.95) for t in members if samples[t.name]]
        found[f"{freshness}s"] = {
            "tables": len(members), "samples": len(pooled), "p50": round(percentile(pooled, 0.5), 1),
            "p95": round(percentile(pooled, 0.95), 1), "max": round(max(pooled, default=float("nan")), 1),
            "worst_table_p95": round(max(per_table, default=float("nan")), 1), "goal_p95": freshness + 30,
        }  # fmt: skip
    return found


def run_setup(setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from testbed.airflow_cluster import AirflowCluster
    from testbed.pg_server import PostgresServer

    specs = tables(args.tables if setup == "database" else args.own_clocks_tables, args.freshness)
    busy = busy_tables(specs)
    home = workdir / setup
    home.mkdir(parents=True)
    settings = {"max_connections": 400, "shared_preload_libraries": "pg_stat_statements"}
    server = PostgresServer(home / "pg", settings=settings).start()
    stop_file, writer = home / "stop-writing", None
    try:
        started = time.monotonic()
        create_tables(server.dsn, specs)
        source = dag_file(setup, specs, args.probe_every)
        dags, catalog, env, overrides = deployment(home, server, source, args.parallelism)
        with AirflowCluster(home / "airflow", dags, env, expected_dag_ids=dag_ids(setup, specs),
                            config_overrides=overrides, parse_timeout=900) as af:  # fmt: skip
            from pyiceberg.catalog import load_catalog

            from benchmarks.bench_freshness import lake_position

            lake = load_catalog("default", **catalog)  # creates the catalog's tables before the sampler's thread
            sampler = Sampler(server.dsn, catalog, busy, args.sample_every)  # the busy tables' data ages
            sampler.start()
            waiting = list(specs)
            while waiting:
                if time.monotonic() - started > args.warmup_timeout:
                    raise RuntimeError(f"[{setup}] tables never tiered: {[t.name for t in waiting][:10]}")
                waiting = [t for t in waiting if lake_position(lake, t) is None]
                time.sleep(5)
            warmup = time.monotonic() - started
            print(f"[{setup}] {len(specs)} tables tiered after {warmup:.0f} s; busy window {args.minutes:g} min",
                  flush=True)  # fmt: skip
            writer = subprocess.Popen(
                [sys.executable, "-c", "import sys, json; from benchmarks.bench_freshness import write, Table; "
                 "write(sys.argv[1], [Table(**t) for t in json.loads(sys.argv[2])], sys.argv[3])",
                 server.dsn, json.dumps([t.__dict__ for t in busy]), str(stop_file)],
                cwd=REPO,
            )  # fmt: skip
            time.sleep(max(args.freshness) + args.probe_every)  # every busy table through a round with its writer on
            sampler.measuring.set()
            busy_window = measured(af, server, args.minutes * 60, writer.pid)
            sampler.measuring.clear()
            stop_file.touch()
            writer.wait(timeout=60)
            writer = None
            # The busy tables' last changes tiered (a 300 s table's round comes up to 300 s after its last change),
            # their runs settled: the idle window holds no round.
            time.sleep(max(args.freshness) + 2 * args.probe_every)
            if setup == "database":  # a DAG per table always has some run under way: its idle is its steady state
                runs_ended(af)
            print(f"[{setup}] idle window {args.idle_minutes:g} min", flush=True)
            idle_window = measured(af, server, args.idle_minutes * 60)
            result: dict[str, Any] = {
                "setup": setup, "tables": len(specs), "busy_tables": len(busy), "warmup_seconds": round(warmup),
                "data_age_seconds": data_ages(specs, sampler.samples), "busy": busy_window, "idle": idle_window,
            }  # fmt: skip
            sampler.stop.set()
            sampler.join()
            result["surfaces"] = surfaces(af, args.repeat, setup)
            result["parse"] = parse_seconds(af, dags, args.repeat)
            if setup == "database":
                (dags / "tiering_dags.py").write_text(dag_file(setup, specs, args.probe_every, only=busy))
                time.sleep(3 * 5 + args.probe_every)  # reparsed (every 5 s), then a probe listed them dropped
                runs_ended(af)
                print(f"[{setup}] idle window, busy tables only, {args.idle_minutes:g} min", flush=True)
                result["idle_busy_only"] = measured(af, server, args.idle_minutes * 60)
            for window in ("busy", "idle", "idle_busy_only"):
                if window in result:
                    result[window]["start"] = result[window]["start"].isoformat(timespec="seconds")
                    result[window]["end"] = result[window]["end"].isoformat(timespec="seconds")
            print(json.dumps(result, indent=1), flush=True)
            return result
    finally:
        stop_file.touch()
        if writer is not None:
            writer.wait(timeout=60)
        server.stop()


def idle_cost(result: dict[str, Any]) -> dict[str, Any]:
    """What the idle tables cost: a declared database's, the difference of its two idle windows; a DAG per table's,
    its idle window (each idle table costs its DAG's runs)."""
    idle = result["idle"]
    cores = idle["cpu"]["by_process_cpu_s"]["machine_busy"] / idle["window_seconds"]
    idle_tables = result["tables"] - result["busy_tables"]
    if "idle_busy_only" in result:
        base = result["idle_busy_only"]
        cores -= base["cpu"]["by_process_cpu_s"]["machine_busy"] / base["window_seconds"]
        found = {"idle_tables_cores": round(cores, 3)}
    else:
        found = {"idle_tables_cores": round(cores * idle_tables / result["tables"], 3)}
    found["cpu_s_per_idle_table_hour"] = round(found["idle_tables_cores"] * 3600 / max(1, idle_tables), 2)
    found["whole_setup_idle_cores"] = round(idle["cpu"]["cores_busy"], 3)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, run in this order")
    parser.add_argument("--tables", type=int, default=1000, help="tables of the declared database")
    parser.add_argument("--own-clocks-tables", type=int, default=200, help="tables of the DAG-per-table setup")
    parser.add_argument("--minutes", type=float, default=8.0, help="the busy window")
    parser.add_argument("--idle-minutes", type=float, default=5.0, help="each idle window")
    parser.add_argument("--probe-every", type=float, default=30.0, help="the declaration's probe_every_seconds")
    parser.add_argument(
        "--freshness",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=FRESHNESS,
        help="the busy tables' freshness_seconds, cycled (default 60,120,180,300)",
    )
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--parallelism", type=int, default=8, help="[core] parallelism: LocalExecutor workers")
    parser.add_argument("--repeat", type=int, default=5, help="timings of each status surface and of the parse")
    parser.add_argument("--warmup-timeout", type=float, default=5400.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if set(setups) - set(SETUPS):
        parser.error(f"unknown setups {sorted(set(setups) - set(SETUPS))}; choose from {SETUPS}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tiering-bench-many-"))
    results = [run_setup(setup, args, workdir) for setup in setups]
    for result in results:
        result["idle_cost"] = idle_cost(result)
    report = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    print(summary(results))
    return 0


def summary(results: list[dict[str, Any]]) -> str:
    lines = ["setup       tables  data age p95 by freshness (goal +30 s)   idle tables' cores  CPU-s/idle table/h  "
             "starts/min busy  Airflow CPU-s busy  listing queries/min  page list  CLI status  parse"]  # fmt: skip
    for r in results:
        ages = " ".join(f"{k}:{v['p95']}" for k, v in r["data_age_seconds"].items())
        busy, cost, s = r["busy"], r["idle_cost"], r["surfaces"]
        airflow = busy["cpu"]["airflow_own_cpu_s"]
        per_minute = busy["listing_queries"] / (busy["window_seconds"] / 60)
        lines.append(
            f"{r['setup']:<11} {r['tables']:<7} {ages:<40} {cost['idle_tables_cores']:<19} "
            f"{cost['cpu_s_per_idle_table_hour']:<19} {busy['task_starts_per_minute']:<16} {airflow:<19} "
            f"{per_minute:<20.2f} {s['page_list']['median_s']:<10} {s['cli_status']['median_s']:<11} "
            f"{r['parse']['median_s']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
