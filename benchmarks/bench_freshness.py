"""Benchmark: the data age the lake keeps, table by table, under Airflow's real scheduler with writers busy; one
setup beside another, in one run.

Per setup, a fresh Airflow (api-server, scheduler, dag-processor, LocalExecutor: ``testbed.airflow_cluster``, with
``[core] parallelism = --parallelism`` and Airflow's default of 16 active runs per DAG) tiers ``--tables`` tables of
a throw-away PostgreSQL 15 into a pyiceberg SQL catalog on SQLite. The tables alternate between 30 s and 300 s of
``freshness_seconds`` and cycle through append (cursor ``id``), merge by key (cursor ``updated_at``) and change stream
(``postgres_cdc``); each starts with 1,000 rows. One (an append table of the 300 s class) gets ``--backlog-rows``
more in one transaction as the measured window opens: its round reads them in splits on Spark while its siblings
tier. The setups:

* ``one-dag``     today's: ``build_tiering_dag`` of every table, scheduled every 30 s (as often as the freshest
                  table needs), its maintenance tasks as the spec's default has them;
* ``own-clocks``  ``build_table_dags``: one DAG per table scheduled every ``freshness_seconds``, beside the group's
                  status DAG (every minute) and maintenance DAG (hourly).

A writer process commits one transaction a second per table (appends insert 5 rows; merges update 3 random rows and
insert 2; change streams update 3, insert 2 and every 5th time delete one) and records each commit's position and
time in ``bench_commits`` (a table no DAG reads): the last id, the ``updated_at`` written, or the WAL position after
the commit. The measured window opens once every table has committed a round, and lasts
``--minutes``. Every ``--sample-every`` seconds a sampler reads each lake table's committed offsets from its Iceberg
snapshot and takes the table's **data age**: now minus the time of the oldest recorded commit beyond them (0 when the
lake holds every commit). Reported per freshness class (the backlog table apart): p50, p95 and max of the samples,
and the worst table's p95. Also: task starts per minute (task instances started in the window), and the machine's
CPU in the window split by process: Airflow's own (scheduler, dag-processor, api-server, the executor's supervisor
processes), the task processes (as the executor's workers reaped them), PostgreSQL, the writer and sampler, and the
rest of the machine's busy time (tasks' Spark JVMs that outlived their task process, and anything else running).

    python -m benchmarks.bench_freshness                                   # both setups, 20 tables, 15 min each
    python -m benchmarks.bench_freshness --tables 4 --minutes 0.5 --backlog-rows 20000 --setups own-clocks  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make ``testbed`` and ``benchmarks`` importable
    sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "freshness.json"
SETUPS = ("one-dag", "own-clocks")
KINDS = ("append", "merge", "cdc")
NAMESPACE, GROUP, HOT_CONN = "fresh", "freshness", "hot_pg"
INITIAL_ROWS = 1000


@dataclass(frozen=True)
class Table:
    name: str
    kind: str
    freshness: int
    backlog: bool

    def spec(self) -> dict[str, Any]:
        source: dict[str, Any] = {"conn_id": HOT_CONN, "table": self.name}
        found: dict[str, Any] = {"name": self.name, "lake": {"namespace": NAMESPACE, "table": self.name}}
        if self.kind == "cdc":
            source["kind"] = "postgres_cdc"
        else:
            source["cursor_column"] = "id" if self.kind == "append" else "updated_at"
        if self.kind == "merge":
            found["merge"] = {"primary_key": ["id"]}
        return {**found, "source": source, "freshness_seconds": self.freshness, "retries": 2,
                "retry_delay_seconds": 5}  # fmt: skip


def tables(count: int) -> list[Table]:
    found = []
    for i in range(count):
        kind, freshness = KINDS[i % 3], (30, 300)[i % 2]
        found.append(Table(f"t{i:02d}_{kind}_{freshness}", kind, freshness, backlog=(i == 3)))
    return found


# -- the hot store ---------------------------------------------------------------------------------------------------
def create_tables(dsn: str, specs: list[Table]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench_commits (table_name text NOT NULL, position numeric NOT NULL, "
            "at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute("CREATE INDEX ON bench_commits (table_name, position)")
        for table in specs:
            rows = INITIAL_ROWS
            conn.execute(
                f'CREATE TABLE "{table.name}" (id bigint PRIMARY KEY, payload text NOT NULL, amount numeric(12, 2) '
                "NOT NULL, updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            conn.execute(
                f'INSERT INTO "{table.name}" (id, payload, amount) SELECT g, md5(g::text), g %% 1000 '
                "FROM generate_series(1, %s) g",
                (rows,),
            )
            record_commit(conn, table, rows)


def add_backlog(dsn: str, table: Table, rows: int) -> None:
    """``rows`` more rows in the backlog table, in one transaction, recorded as one commit."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute(
            f'INSERT INTO "{table.name}" (id, payload, amount) SELECT g, md5(g::text), g %% 1000 '
            "FROM generate_series(%s::bigint, %s::bigint) g",
            (INITIAL_ROWS + 1, INITIAL_ROWS + rows),
        )
        conn.commit()
        record_commit(conn, table, INITIAL_ROWS + rows)
        conn.commit()


def record_commit(conn: Any, table: Table, last_id: int) -> None:
    """The commit's position as the lake's offsets will say it (see the module's description), and its time: the
    last id; the newest ``updated_at`` (only the writer writes); the WAL position after the commit."""
    if table.kind == "append":
        conn.execute("INSERT INTO bench_commits (table_name, position) VALUES (%s, %s)", (table.name, last_id))
    elif table.kind == "merge":
        conn.execute(
            "INSERT INTO bench_commits (table_name, position) SELECT %s, "
            f'(extract(epoch FROM (SELECT max(updated_at) FROM "{table.name}")) * 1000000)::numeric',
            (table.name,),
        )
    else:
        conn.execute(
            "INSERT INTO bench_commits (table_name, position) SELECT %s, pg_current_wal_lsn() - '0/0'::pg_lsn",
            (table.name,),
        )


def write(dsn: str, specs: list[Table], stop_file: str) -> None:
    """The writer process: one transaction a second per table until ``stop_file`` exists."""
    import psycopg

    rng = random.Random(7)
    next_id = {t.name: INITIAL_ROWS + 1 for t in specs}
    with psycopg.connect(dsn) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        ticks = 0
        while not os.path.exists(stop_file):
            started = time.monotonic()
            for table in specs:
                if table.backlog:
                    continue  # its backlog is its load; the writers keep to the others
                name, first = table.name, next_id[table.name]
                inserts = 5 if table.kind == "append" else 2
                conn.execute(
                    f'INSERT INTO "{name}" (id, payload, amount) SELECT g, md5(g::text), g %% 1000 '
                    "FROM generate_series(%s::bigint, %s::bigint) g",
                    (first, first + inserts - 1),
                )
                next_id[name] += inserts
                if table.kind != "append":
                    keys = [rng.randrange(1, first) for _ in range(3)]
                    conn.execute(
                        f'UPDATE "{name}" SET amount = amount + 1, updated_at = clock_timestamp() WHERE id = ANY(%s)',
                        (keys,),
                    )
                    if table.kind == "cdc" and ticks % 5 == 0:
                        conn.execute(f'DELETE FROM "{name}" WHERE id = %s', (rng.randrange(1, first),))
                conn.commit()
                record_commit(conn, table, next_id[name] - 1)
                conn.commit()
            ticks += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


# -- the lake's offsets and the data age -----------------------------------------------------------------------------
def lake_offsets(catalog: Any, name: str) -> dict[str, Any] | None:
    """The end offsets of the lake's newest tiering commit (None before its first)."""
    from pyiceberg.exceptions import NoSuchTableError

    from airflow_provider_tiering.lake.tiering_commits import END_PROPERTY

    try:
        lake = catalog.load_table((NAMESPACE, name))
    except NoSuchTableError:
        return None
    for snapshot in reversed(lake.snapshots()):  # the newest tiering snapshot (maintenance commits carry none)
        end = snapshot.summary.additional_properties.get(END_PROPERTY) if snapshot.summary else None
        if end:
            found: dict[str, Any] = json.loads(end)
            return found
    return None


def lake_position(catalog: Any, table: Table) -> int | None:
    """The lake's committed offsets as a ``bench_commits`` position (None before its first commit)."""
    offsets = lake_offsets(catalog, table.name)
    if offsets is None:
        return None
    if table.kind == "cdc":
        high, low = offsets["lsn"].split("/")
        return (int(high, 16) << 32) + int(low, 16)
    cursor = offsets["cursor"]
    if table.kind == "append":
        return int(cursor)
    at = datetime.fromisoformat(str(cursor))
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1_000_000)


class Sampler(threading.Thread):
    """Every ``every`` seconds, each table's data age (see the module's description)."""

    def __init__(self, dsn: str, catalog_properties: dict[str, str], specs: list[Table], every: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.properties, self.specs, self.every = dsn, catalog_properties, specs, every
        self.samples: dict[str, list[float]] = {t.name: [] for t in specs}
        self.committed: dict[str, bool] = {t.name: False for t in specs}
        #: Each table's lake position at its last sample (None: not committed yet).
        self.positions: dict[str, int | None] = {t.name: None for t in specs}
        self.measuring = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("default", **self.properties)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.monotonic()
                for table in self.specs:
                    position = lake_position(catalog, table)
                    self.committed[table.name] = position is not None
                    self.positions[table.name] = position
                    oldest = conn.execute(
                        "SELECT extract(epoch FROM clock_timestamp() - min(at)) FROM bench_commits "
                        "WHERE table_name = %s AND position > %s",
                        (table.name, -1 if position is None else position),
                    ).fetchone()
                    age = 0.0 if oldest is None or oldest[0] is None else float(oldest[0])
                    if self.measuring.is_set():
                        self.samples[table.name].append(age)
                self.stop.wait(max(0.0, self.every - (time.monotonic() - started)))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))] if ordered else float("nan")


def ages(specs: list[Table], samples: dict[str, list[float]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for freshness in sorted({t.freshness for t in specs}):
        members = [t for t in specs if t.freshness == freshness and not t.backlog]
        pooled = [age for t in members for age in samples[t.name]]
        per_table = {t.name: round(percentile(samples[t.name], 0.95), 1) for t in members}
        found[f"{freshness}s"] = {
            "tables": len(members), "samples": len(pooled), "p50": round(percentile(pooled, 0.5), 1),
            "p95": round(percentile(pooled, 0.95), 1), "max": round(max(pooled, default=float("nan")), 1),
            "worst_table_p95": max(per_table.values(), default=float("nan")), "p95_by_table": per_table,
        }  # fmt: skip
    for table in specs:
        if table.backlog:
            values = samples[table.name]
            found["backlog_table"] = {
                "table": table.name, "p50": round(percentile(values, 0.5), 1),
                "p95": round(percentile(values, 0.95), 1), "max": round(max(values, default=float("nan")), 1),
            }  # fmt: skip
    return found


# -- the machine's CPU, by process -----------------------------------------------------------------------------------
def _busy_seconds() -> float:
    """The machine's busy CPU time since boot (``/proc/stat``: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def tree_seconds(process: Any) -> float:
    """A process's CPU, its reaped children's and its live descendants' (each live one with its own reaped)."""
    import psutil

    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        try:
            times = each.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def cpu_snapshot(af: Any, postgres_pid: int | None, writer_pid: int | None = None) -> dict[str, float]:
    """Cumulative CPU seconds by role (see the module's description)."""
    import psutil

    own = psutil.Process().cpu_times()  # this process alone: Airflow's processes are its children too
    found = {"machine_busy": _busy_seconds(), "bench_and_writer": own.user + own.system}
    if writer_pid is not None:
        found["bench_and_writer"] += tree_seconds(psutil.Process(writer_pid))
    for name, popen in af.processes.items():
        try:
            top = psutil.Process(popen.pid)
        except psutil.Error:
            continue
        if name != "scheduler":
            found[name] = tree_seconds(top)
            continue
        own = top.cpu_times()
        found["scheduler"] = own.user + own.system + own.children_user + own.children_system
        supervisors = tasks = 0.0
        for worker in top.children():
            try:
                times = worker.cpu_times()
            except psutil.Error:
                continue
            supervisors += times.user + times.system
            tasks += times.children_user + times.children_system
            for task in worker.children():
                try:
                    tasks += tree_seconds(task)
                except psutil.Error:
                    continue
        found["supervisors"], found["tasks"] = supervisors, tasks
    if postgres_pid is not None:
        found["postgres"] = tree_seconds(psutil.Process(postgres_pid))
    return found


def cpu_split(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, Any]:
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    airflow = sum(spent.get(k, 0.0) for k in ("scheduler", "dag-processor", "api-server", "triggerer", "supervisors"))
    known = airflow + sum(spent.get(k, 0.0) for k in ("tasks", "postgres", "bench_and_writer"))
    rest = spent["machine_busy"] - known
    return {
        "cores_busy": round(spent["machine_busy"] / seconds, 2),
        "airflow_own_cpu_s": round(airflow, 1),
        "task_processes_cpu_s": round(spent.get("tasks", 0.0), 1),
        "rest_of_machine_cpu_s": round(rest, 1),
        "by_process_cpu_s": {k: round(v, 1) for k, v in sorted(spent.items())},
    }


# -- one setup -------------------------------------------------------------------------------------------------------
def dag_file(setup: str, specs: list[Table], every_seconds: int = 30) -> str:
    """The DAG file of ``setup``: ``one-dag`` scheduled every ``every_seconds``."""
    listed = json.dumps([t.spec() for t in specs], indent=1)
    if setup == "one-dag":
        build = (
            "from datetime import timedelta\nfrom airflow_provider_tiering.dag_factory import build_tiering_dag\n\n"
            f"dag = build_tiering_dag({GROUP!r}, TABLES, schedule=timedelta(seconds={every_seconds}))\n"
        )
    else:
        build = (
            "from airflow_provider_tiering.dag_factory import build_table_dags\n\n"
            f"build_table_dags({GROUP!r}, TABLES)\n"
        )
    return f"# the benchmark's tiering DAGs ({setup})\nTABLES = {listed}\n\n{build}"


def dag_ids(setup: str, specs: list[Table]) -> list[str]:
    if setup == "one-dag":
        return [GROUP]
    return [GROUP, f"{GROUP}_maintenance", *(f"{GROUP}.{t.name}" for t in specs)]


def task_starts(af: Any, since: datetime, until: datetime) -> int:
    params = {"start_date_gte": since.isoformat(), "start_date_lte": until.isoformat(), "limit": 1}
    return int(af.get("/api/v2/dags/~/dagRuns/~/taskInstances", params=params)["total_entries"])


def deployment(
    home: Path, server: Any, dag_source: str, parallelism: int
) -> tuple[Path, dict[str, str], dict[str, str], dict[str, dict[str, str]]]:
    """A benchmark's Airflow under ``home``: its dags folder holding ``dag_source``, a SQL catalog on SQLite, the
    connections (``hot_pg`` to ``server``, ``iceberg_default``) and the config overrides (``parallelism`` workers,
    Airflow's default of 16 active runs per DAG, the file parsed every 5 s)."""
    from testbed.tiering_env import embedded_setup

    dags, catalog, env = embedded_setup(home, server, dag_source)
    return dags, catalog, env, deployment_overrides(parallelism)


def deployment_overrides(parallelism: int) -> dict[str, dict[str, str]]:
    """A benchmark's Airflow config: ``parallelism`` workers, 16 active runs per DAG, the rest ``BENCHMARK_CONFIG``."""
    from testbed.airflow_cluster import benchmark_config

    return benchmark_config(
        core={"parallelism": str(parallelism), "max_active_tasks_per_dag": "16", "max_active_runs_per_dag": "16"}
    )


def run_setup(setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import psutil

    from testbed.airflow_cluster import AirflowCluster
    from testbed.pg_server import PostgresServer

    specs = tables(args.tables)
    home = workdir / setup
    home.mkdir(parents=True)
    server = PostgresServer(home / "pg").start()
    writer = None
    stop_file = home / "stop-writing"
    try:
        started = time.monotonic()
        create_tables(server.dsn, specs)
        print(f"[{setup}] hot tables ready in {time.monotonic() - started:.0f} s", flush=True)
        dags, catalog, env, overrides = deployment(home, server, dag_file(setup, specs), args.parallelism)
        with AirflowCluster(home / "airflow", dags, env, expected_dag_ids=dag_ids(setup, specs),
                            config_overrides=overrides, parse_timeout=300) as af:  # fmt: skip
            writer = subprocess.Popen(
                [sys.executable, "-c", "import sys, json; from benchmarks.bench_freshness import write, Table; "
                 "write(sys.argv[1], [Table(**t) for t in json.loads(sys.argv[2])], sys.argv[3])",
                 server.dsn, json.dumps([t.__dict__ for t in specs]), str(stop_file)],
                cwd=REPO,
            )  # fmt: skip
            sampler = Sampler(server.dsn, catalog, specs, args.sample_every)
            sampler.start()
            deadline = time.monotonic() + args.warmup_timeout
            while not all(sampler.committed.values()):
                if time.monotonic() > deadline:
                    missing = [name for name, committed in sampler.committed.items() if not committed]
                    raise RuntimeError(f"[{setup}] tables never tiered: {missing}\n{af.diagnostics()}")
                time.sleep(1)
            warmup = time.monotonic() - started
            print(f"[{setup}] every table tiered; {args.backlog_rows:,} rows arrive; measuring {args.minutes:g} min",
                  flush=True)  # fmt: skip
            window_start = datetime.now(UTC)
            cpu_before = cpu_snapshot(af, server_pid(server), writer.pid)
            load_before = os.getloadavg()
            sampler.measuring.set()
            backlog = threading.Thread(
                target=add_backlog, args=(server.dsn, next(t for t in specs if t.backlog), args.backlog_rows)
            )
            backlog.start()
            time.sleep(args.minutes * 60)
            sampler.measuring.clear()
            cpu_after = cpu_snapshot(af, server_pid(server), writer.pid)
            backlog.join()
            window_end = datetime.now(UTC)
            load_after = os.getloadavg()
            sampler.stop.set()
            sampler.join()
            seconds = (window_end - window_start).total_seconds()
            starts = task_starts(af, window_start, window_end)
            result = {
                "setup": setup, "tables": len(specs), "window_seconds": round(seconds),
                "warmup_seconds": round(warmup), "data_age_seconds": ages(specs, sampler.samples),
                "task_starts_per_minute": round(starts / (seconds / 60), 1),
                "cpu": cpu_split(cpu_before, cpu_after, seconds),
                "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
                "machine": {"cpus": psutil.cpu_count()},
            }  # fmt: skip
            print(json.dumps(result, indent=1), flush=True)
            return result
    finally:
        stop_file.touch()
        if writer is not None:
            writer.wait(timeout=30)
        server.stop()


def server_pid(server: Any) -> int | None:
    pid_file = Path(server.datadir) / "postmaster.pid"
    return int(pid_file.read_text().split()[0]) if pid_file.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, run in this order")
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--backlog-rows", type=int, default=5_000_000)
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--parallelism", type=int, default=8, help="[core] parallelism: LocalExecutor workers")
    parser.add_argument("--warmup-timeout", type=float, default=900.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = set(setups) - set(SETUPS)
    if unknown:
        parser.error(f"unknown setups {sorted(unknown)}; choose from {SETUPS}")
    import compileall

    import airflow_provider_tiering

    compileall.compile_dir(str(Path(airflow_provider_tiering.__file__).parent), quiet=1)  # as a wheel's install does
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tiering-bench-freshness-"))
    results = [run_setup(setup, args, workdir) for setup in setups]
    report = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "results": results,
              "arguments": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    print(summary(results))
    return 0


def summary(results: list[dict[str, Any]]) -> str:
    lines = ["", "setup       class  p50    p95    max    worst p95  | task starts/min  Airflow CPU  tasks CPU  cores"]
    for r in results:
        for klass, age in r["data_age_seconds"].items():
            if klass == "backlog_table":
                continue
            lines.append(
                f"{r['setup']:<11} {klass:<5}  {age['p50']:<6} {age['p95']:<6} {age['max']:<6} "
                f"{age['worst_table_p95']:<10} | {r['task_starts_per_minute']:<16} {r['cpu']['airflow_own_cpu_s']:<12} "
                f"{r['cpu']['task_processes_cpu_s']:<10} {r['cpu']['cores_busy']}"
            )
        backlog = r["data_age_seconds"].get("backlog_table")
        if backlog:
            lines.append(
                f"{r['setup']:<11} backlog table {backlog['table']}: p50 {backlog['p50']} s, max {backlog['max']} s"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
