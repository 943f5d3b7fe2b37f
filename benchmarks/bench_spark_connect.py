"""Benchmark: N tables with R new rows each, one tiering round per table, each round in its own Python process
(as one Airflow task runs it), in two modes on the same data:

* ``per-task session``      each process starts its own local Spark session (``local[*]``: a JVM per task);
* ``shared Spark Connect``  each process connects to one Spark Connect server (``local[*]``, 127.0.0.1 only),
                            started once by ``scripts/spark_connect_server.sh`` before the tasks; its start-up
                            time is reported on its own and added in a third line.

The hot tables live in one SQLite file (rows from ``testbed.hot_tables.make_rows``); each mode gets its
own fresh Iceberg SQL catalog on SQLite and local warehouse, and runs ``core.round.run_round`` with the real
SQLite source, Iceberg lake and Spark writer (built by ``build_round``; the writer always runs a Spark job), the
state in a ``JsonFileStateStore``. ``--concurrency`` processes run at once (default 2, one per core here). After
each mode every lake table is read back with pyiceberg: it must hold exactly R rows with R distinct ids.

    python -m benchmarks.bench_spark_connect                       # 50 tables x 10,000 rows
    python -m benchmarks.bench_spark_connect --tables 2 --rows 200 # smoke run

Writes ``benchmarks/results/spark_connect.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "spark_connect_server.sh"
NAMESPACE = "bench"
MODES = ("per-task", "connect")
MODE_LABELS = {
    "per-task": "per-task session",
    "connect": "shared Spark Connect",
    "connect+start": "shared Connect + server start",
}


def table_name(index: int) -> str:
    return f"t{index:03d}"


def catalog_properties(root: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}


# -- the data ---------------------------------------------------------------------------------------------------------
def create_hot_tables(path: Path, tables: int, rows: int) -> None:
    from testbed.hot_tables import SqliteHot

    path.unlink(missing_ok=True)
    hot = SqliteHot(path)
    for index in range(tables):
        hot.create(table_name(index))
        hot.insert(table_name(index), 1, rows)


def create_catalog(root: Path) -> dict[str, str]:
    from pyiceberg.catalog import load_catalog

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    properties = catalog_properties(root)
    load_catalog("default", **properties).create_namespace(NAMESPACE)
    return properties


def check_lake(properties: dict[str, str], tables: int, rows: int) -> list[str]:
    """Problems found: each table must hold exactly ``rows`` rows with ``rows`` distinct ids."""
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **properties)
    problems = []
    for index in range(tables):
        ids = catalog.load_table((NAMESPACE, table_name(index))).scan(selected_fields=("id",)).to_arrow()["id"]
        distinct = len(pc.unique(ids))
        if len(ids) != rows or distinct != rows:
            problems.append(f"{table_name(index)}: {len(ids)} rows, {distinct} distinct ids (expected {rows})")
    return problems


# -- one task (a child process) ---------------------------------------------------------------------------------------
def run_task(table: str, hot: str, catalog: str, state_dir: str, remote: str | None) -> dict[str, Any]:
    imported = time.perf_counter()
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import round_parts

    spec = TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "bench", "table": table, "cursor_column": "id"},
            "lake": {"namespace": NAMESPACE, "table": table},
        }
    )
    session_started = time.perf_counter()
    # Every round runs a Spark job here (``local_single_split`` off): the sessions are what is compared.
    writer = build_writer(SparkSettings(remote=remote) if remote else SparkSettings())
    _ = writer.spark  # start (or attach to) the session here, to time it apart from the round
    round_started = time.perf_counter()
    parts = round_parts(spec, ConnectionInfo("sqlite", host=hot), json.loads(catalog), writer=writer)
    store = JsonFileStateStore(Path(state_dir) / f"{table}.json")
    result = parts.run(store)
    round_done = time.perf_counter()
    parts.stop()
    return {
        "table": table,
        "outcome": result.outcome,
        "rows": result.metrics.rows if result.metrics else 0,
        "files": result.metrics.files if result.metrics else 0,
        "splits": result.metrics.splits if result.metrics else 0,
        "import_seconds": session_started - imported,
        "session_seconds": round_started - session_started,
        "round_seconds": round_done - round_started,
        "stop_seconds": time.perf_counter() - round_done,
    }


def launch_task(table: str, hot: Path, catalog: dict[str, str], state_dir: Path, remote: str | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_spark_connect", "--child", table, "--hot", str(hot)]
    command += ["--catalog-json", json.dumps(catalog), "--state-dir", str(state_dir)]
    if remote:
        command += ["--remote", remote]
    started = time.perf_counter()
    proc = subprocess.run(command, env=child_env(), capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{table} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return {**json.loads(lines[-1].removeprefix("RESULT ")), "wall_seconds": wall}


def run_mode(
    mode: str, tables: int, rows: int, concurrency: int, hot: Path, workdir: Path, remote: str | None
) -> dict[str, Any]:
    catalog = create_catalog(workdir / f"lake-{mode}")
    state_dir = workdir / f"state-{mode}"
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [
            pool.submit(launch_task, table_name(i), hot, catalog, state_dir, remote if mode == "connect" else None)
            for i in range(tables)
        ]
        tasks = [f.result() for f in futures]
    total = time.perf_counter() - started
    problems = check_lake(catalog, tables, rows)
    problems += [f"{t['table']}: outcome {t['outcome']}, {t['rows']} rows" for t in tasks if t["rows"] != rows]
    if problems:
        raise AssertionError(f"{mode}: the lake does not match the hot tables:\n" + "\n".join(problems))
    return {"total_seconds": total, "tasks": tasks, "lake_checked": True}


# -- the shared server ------------------------------------------------------------------------------------------------
class ConnectServer:
    """scripts/spark_connect_server.sh with its own port and directory."""

    def __init__(self, directory: Path, port: int) -> None:
        self.env = {
            **child_env(),
            "VENV": str(Path(sys.executable).parent.parent),
            "SPARK_CONNECT_PORT": str(port),
            "SPARK_CONNECT_DIR": str(directory),
        }
        self.env.pop("SPARK_CONNECT_TOKEN", None)  # clients here send no token
        self.remote = f"sc://127.0.0.1:{port}"
        self.directory = directory

    def _script(self, action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), action], env=self.env, capture_output=True, text=True)

    def start(self) -> float:
        """Start the server and wait until it answers a query; returns the seconds that took."""
        started = time.perf_counter()
        proc = self._script("start")
        if proc.returncode != 0:
            raise RuntimeError(f"Spark Connect server did not start:\n{proc.stdout}\n{proc.stderr}")
        probe = "from pyspark.sql import SparkSession as S; s = S.builder.remote(%r).getOrCreate(); s.range(1).count()"
        probe += "; s.stop()"
        subprocess.run([sys.executable, "-c", probe % self.remote], env=self.env, check=True, capture_output=True)
        return time.perf_counter() - started

    def footprint(self) -> dict[str, Any]:
        """The server JVM's and its Python workers' resident memory, and how many Python daemons it keeps."""
        pid = (self.directory / "server.pid").read_text().strip()
        out = subprocess.run(["ps", "-eo", "pid=,ppid=,rss=,args="], capture_output=True, text=True).stdout
        procs = [line.split(None, 3) for line in out.splitlines()]
        children: dict[str, list[list[str]]] = {}
        for p in procs:
            children.setdefault(p[1], []).append(p)
        own = [p for p in procs if p[0] == pid]
        stack, tree = list(own), []
        while stack:
            p = stack.pop()
            tree.append(p)
            stack.extend(children.get(p[0], []))
        daemons = [p for p in children.get(pid, []) if len(p) > 3 and "pyspark.daemon" in p[3]]
        return {
            "jvm_rss_mb": sum(int(p[2]) for p in own) / 1024,
            "python_rss_mb": sum(int(p[2]) for p in tree if p not in own) / 1024,
            "python_daemons": len(daemons),
            "python_processes": len(tree) - len(own),
        }

    def stop(self) -> None:
        self._script("stop")


# -- report -----------------------------------------------------------------------------------------------------------
def summarize(tables: int, rows: int, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    report: dict[str, dict[str, Any]] = {}
    for mode, result in results.items():
        walls = [t["wall_seconds"] for t in result["tasks"]]
        report[mode] = {
            "total_seconds": result["total_seconds"],
            "mean_task_seconds": statistics.mean(walls),
            "median_task_seconds": statistics.median(walls),
            "median_session_seconds": statistics.median(t["session_seconds"] for t in result["tasks"]),
            "median_round_seconds": statistics.median(t["round_seconds"] for t in result["tasks"]),
        }
    if "connect" in results:
        start = results["connect"]["server_start_seconds"]
        report["connect"]["server_start_seconds"] = start
        report["connect+start"] = {**report["connect"], "total_seconds": report["connect"]["total_seconds"] + start}
    for r in report.values():
        r["rows_per_second"] = tables * rows / r["total_seconds"]
        if "per-task" in report:
            r["speedup_vs_per_task"] = report["per-task"]["total_seconds"] / r["total_seconds"]
    return report


def print_report(report: dict[str, dict[str, Any]], tables: int, rows: int, concurrency: int) -> None:
    print(f"\n{tables} tables x {rows:,} rows, one round per table, {concurrency} task processes at once")
    print(
        f"{'mode':<30} {'tables':>6} {'rows':>10} {'total wall s':>12} {'per table s':>11} {'rows/s':>9} {'ratio':>6}"
    )
    for mode, r in report.items():
        ratio = f"{r['speedup_vs_per_task']:.2f}x" if "speedup_vs_per_task" in r else "-"
        print(
            f"{MODE_LABELS[mode]:<30} {tables:>6} {tables * rows:>10,} {r['total_seconds']:>12.1f} "
            f"{r['mean_task_seconds']:>11.2f} {r['rows_per_second']:>9,.0f} {ratio:>6}"
        )
    print("per table s: mean wall time of one task process; ratio: per-task total / this total (higher is faster)")
    if "connect" in report:
        start = report["connect"]["server_start_seconds"]
        print(f"Spark Connect server start-up (until it answers a query): {start:.1f}s")
    for mode, r in report.items():
        if mode != "connect+start":
            print(
                f"  {MODE_LABELS[mode]}: median in a task: session {r['median_session_seconds']:.2f}s, "
                f"round {r['median_round_seconds']:.2f}s"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--rows", type=int, default=10_000, help="new rows per table")
    parser.add_argument("--concurrency", type=int, default=2, help="task processes at once")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: per-task,connect")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir, removed afterwards)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "spark_connect.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--hot", help=argparse.SUPPRESS)
    parser.add_argument("--catalog-json", help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", help=argparse.SUPPRESS)
    parser.add_argument("--remote", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = run_task(args.child, args.hot, args.catalog_json, args.state_dir, args.remote)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    sys.path.insert(0, str(REPO))
    from testbed.ports import find_free_port

    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: choose among {', '.join(MODES)}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tiering-bench-connect-"))
    workdir.mkdir(parents=True, exist_ok=True)
    server: ConnectServer | None = None
    try:
        hot = workdir / "hot.db"
        loaded = time.perf_counter()
        create_hot_tables(hot, args.tables, args.rows)
        with sqlite3.connect(hot) as conn:
            assert conn.execute(f"SELECT count(*) FROM {table_name(0)}").fetchone()[0] == args.rows
        print(f"hot store: {args.tables} tables x {args.rows:,} rows ({time.perf_counter() - loaded:.1f}s)", flush=True)
        results: dict[str, dict[str, Any]] = {}
        for mode in modes:
            remote = None
            if mode == "connect":
                server = ConnectServer(workdir / "spark-connect", find_free_port())
                start_seconds = server.start()
                remote = server.remote
                print(f"Spark Connect server up at {remote} in {start_seconds:.1f}s", flush=True)
            result = run_mode(mode, args.tables, args.rows, args.concurrency, hot, workdir, remote)
            if server is not None:
                result["server_start_seconds"] = start_seconds
                result["server_after"] = server.footprint()
                server.stop()
                server = None
            results[mode] = result
            print(f"{MODE_LABELS[mode]}: {result['total_seconds']:.1f}s, lake checked", flush=True)
        report = summarize(args.tables, args.rows, results)
        print_report(report, args.tables, args.rows, args.concurrency)
        if "connect" in results:
            print(f"server after the run: {json.dumps(results['connect']['server_after'])}")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "tables": args.tables,
            "rows_per_table": args.rows,
            "concurrency": args.concurrency,
            "cpus": os.cpu_count(),
            "report": report,
            "runs": results,
        }
        args.output.write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.output}")
    finally:
        if server is not None:
            server.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
