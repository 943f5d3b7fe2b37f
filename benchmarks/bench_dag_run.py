"""Benchmark: the wall time of one DAG run of a tiering DAG of N tables that have nothing to tier, next to a DAG of
N empty ``@task``s, under a real Airflow (api-server, scheduler, dag-processor, LocalExecutor; the e2e harness
``testbed.airflow_cluster.AirflowCluster`` with its default settings but the DAG files parsed every 5 s), in the
same Airflow, same session.

The N hot tables live in one SQLite file with ``--rows`` rows each. Before Airflow starts they are tiered once,
outside Airflow, with ``run_round`` and the real SQLite source, Iceberg lake (pyiceberg SQL catalog on SQLite) and
Spark writer (each round built by ``build_round``; one local Spark session for all of them), so the lake sits at
their high watermark; each table's resulting state document is then written into Airflow's asset state store (REST
``PUT .../state-store``), as if a DAG run had tiered it. Three DAGs, each in its own file (a task process parses
only its own DAG's file):

* ``bench_tiering_nothing_new``  the N tables with ``freshness_seconds`` ~0: every task is due, asks the hot store
                                 whether it has rows beyond the recorded offsets, finds none and skips without
                                 opening the lake or starting Spark;
* ``bench_tiering_not_due``      the same N tables (same assets, same state) with a freshness of ~30 years: every
                                 task reads its state, finds the table not due and skips at once;
* ``bench_empty``                N ``@task`` functions that return None.

Both tiering DAGs also have the factory's ``tiering_summary`` task (N + 1 tasks; it runs after all the others).
All DAGs run with the harness's parallelism (``[core] parallelism = 4``: four LocalExecutor workers) and
``max_active_tasks=16`` (the factory's default, set on the empty DAG too), so at most 4 tasks run at once in
either. After ``--warmup`` unmeasured runs of each, the DAGs are triggered one at a time, rotating their order,
``--repeat`` times. Per DAG: the median wall time of the run (its ``start_date`` to ``end_date`` from REST) and
trigger -> finished as seen by the client (polling every 0.2 s), task-instance durations, how long each task held
a worker (of either DAG, a quarter to a third are stalled 5 s by Airflow's supervisor: see ``STALL_SECONDS``) and
the median of the unstalled ones, and the ratio tiering / empty. Writes ``benchmarks/results/dag_run.json``.

    python -m benchmarks.bench_dag_run --tables 200 --repeat 3      # or: make bench-dag-run
    python -m benchmarks.bench_dag_run --tables 5 --repeat 1        # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make ``testbed`` and ``benchmarks`` importable
    sys.path.insert(0, str(REPO))

from testbed.airflow_cluster import AirflowCluster, benchmark_config  # noqa: E402

EMPTY = "bench_empty"
NOTHING_NEW = "bench_tiering_nothing_new"
NOT_DUE = "bench_tiering_not_due"
TIERING_DAGS = {NOTHING_NEW: 0.001, NOT_DUE: 1e9}  # dag id -> freshness_seconds (must be > 0)
HOT_CONN, CATALOG_CONN, NAMESPACE = "bench_hot", "iceberg_default", "bench"
STATE_KEY = "tiering_state"
MAX_ACTIVE_TASKS = 16  # build_tiering_dag's default; set on the empty DAG too

TIERING_DAG_FILE = textwrap.dedent(
    """
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    TABLES = [
        {{
            "name": f"t{{i:04d}}",
            "source": {{"conn_id": {conn!r}, "table": f"t{{i:04d}}", "cursor_column": "id"}},
            "lake": {{"namespace": {namespace!r}, "table": f"t{{i:04d}}"}},
            "freshness_seconds": {freshness!r},
            "retries": 0,
        }}
        for i in range({n})
    ]
    # The tiering tasks' overhead, comparable with earlier results: a maintenance task per table would add a task
    # start per table to every run (it skips between its intervals).
    dag = build_tiering_dag({dag_id!r}, TABLES, max_active_tasks={max_active_tasks}, maintenance=False)
    """
)
EMPTY_DAG_FILE = textwrap.dedent(
    """
    from datetime import datetime
    from airflow.sdk import DAG, task

    with DAG({dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             max_active_tasks={max_active_tasks}):

        @task
        def noop():
            return None

        for i in range({n}):
            noop.override(task_id=f"t{{i:04d}}")()
    """
)


def table_name(i: int) -> str:
    return f"t{i:04d}"


def table_spec(i: int, freshness: float = 300.0) -> dict[str, Any]:
    return {
        "name": table_name(i),
        "source": {"conn_id": HOT_CONN, "table": table_name(i), "cursor_column": "id"},
        "lake": {"namespace": NAMESPACE, "table": table_name(i)},
        "freshness_seconds": freshness,
        "retries": 0,
    }


def catalog_properties(workdir: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db", "warehouse": f"file://{workdir}/warehouse"}


# -- preparing the hot tables and the lake (outside Airflow) ---------------------------------------------------------
def make_hot_tables(path: Path, tables: int, rows: int) -> None:
    with sqlite3.connect(path) as conn:
        for i in range(tables):
            name = table_name(i)
            conn.execute(f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY, region TEXT, amount REAL, note TEXT)')
            conn.executemany(
                f'INSERT INTO "{name}" VALUES (?, ?, ?, ?)',
                [(k, ("eu", "us", "apac")[k % 3], k * 1.25, f"row {k}") for k in range(1, rows + 1)],
            )


def tier_once(workdir: Path, tables: int) -> dict[str, Any]:
    """Tier every hot table once with ``run_round`` and the real source, lake and Spark writer, each round built by
    ``build_round`` on one catalog and one Spark writer for all (child process)."""
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import catalog, round_parts

    started = time.perf_counter()
    properties = catalog_properties(workdir)
    handle = catalog(properties).handle()
    handle.get()
    writer = build_writer(SparkSettings(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    hot = ConnectionInfo("sqlite", host=str(workdir / "hot.db"))
    rows = 0
    try:
        for i in range(tables):
            spec = TableSpec.parse(table_spec(i))
            store = JsonFileStateStore(workdir / "state" / f"{spec.name}.json")
            result = round_parts(spec, hot, properties, writer=writer, catalog_handle=handle).run(store)
            if result.outcome != "tiered":
                raise RuntimeError(f"{spec.name}: expected a tiered round, got {result.outcome}")
            rows += result.metrics.rows if result.metrics else 0
    finally:
        writer.stop()
    return {"tables": tables, "rows": rows, "seconds": round(time.perf_counter() - started, 2)}


def prepare(workdir: Path, tables: int, rows: int) -> dict[str, Any]:
    """Hot tables + lake at their high watermark + state documents, reused when ``workdir`` already has them."""
    marker = workdir / "prepared.json"
    if marker.exists():
        done = json.loads(marker.read_text())
        if done.get("tables") == tables and done.get("rows_per_table") == rows:
            return {**done, "reused": True}
    for stale in ("hot.db", "catalog.db", "catalog.db.lock", "warehouse", "state"):
        path = workdir / stale
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    make_hot_tables(workdir / "hot.db", tables, rows)
    # In a child process: its Spark JVM and imports are gone before Airflow starts.
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_dag_run", "--tier-once", str(workdir), "--tables", str(tables)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"initial tiering failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
    done = {**json.loads(out.stdout.strip().splitlines()[-1]), "rows_per_table": rows}
    marker.write_text(json.dumps(done))
    return {**done, "reused": False}


# -- the Airflow side ------------------------------------------------------------------------------------------------
def write_dags(dags: Path, tables: int) -> None:
    shutil.rmtree(dags, ignore_errors=True)
    dags.mkdir(parents=True)
    for dag_id, freshness in TIERING_DAGS.items():
        (dags / f"{dag_id}.py").write_text(
            TIERING_DAG_FILE.format(
                conn=HOT_CONN,
                namespace=NAMESPACE,
                freshness=freshness,
                n=tables,
                dag_id=dag_id,
                max_active_tasks=MAX_ACTIVE_TASKS,
            )
        )
    (dags / f"{EMPTY}.py").write_text(EMPTY_DAG_FILE.format(dag_id=EMPTY, n=tables, max_active_tasks=MAX_ACTIVE_TASKS))


def connections(workdir: Path) -> dict[str, str]:
    return {
        f"AIRFLOW_CONN_{HOT_CONN.upper()}": json.dumps({"conn_type": "sqlite", "host": str(workdir / "hot.db")}),
        f"AIRFLOW_CONN_{CATALOG_CONN.upper()}": json.dumps(
            {"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties(workdir)}}
        ),
    }


def load_states_into_airflow(af: AirflowCluster, workdir: Path, tables: int) -> None:
    """Write each table's state document (from the initial tiering) into its asset's state store."""
    ids: dict[str, int] = {}
    offset = 0
    while True:
        params = {"name_pattern": f"tiering/{NAMESPACE}/", "limit": 1000, "offset": offset}
        body = af.get("/api/v2/assets", params=params)
        ids.update({a["name"]: a["id"] for a in body["assets"]})
        offset += len(body["assets"])
        if not body["assets"] or offset >= body["total_entries"]:
            break
    for i in range(tables):
        name = f"tiering/{NAMESPACE}/{table_name(i)}"
        doc = json.loads((workdir / "state" / f"{table_name(i)}.json").read_text())
        af.put(f"/api/v2/assets/{ids[name]}/state-store/{STATE_KEY}", json={"value": doc})


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else round((b - a).total_seconds(), 3)


def task_instances(af: AirflowCluster, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
    return list(af.get(path, params={"limit": 1000})["task_instances"])


def _cpu_busy() -> tuple[float, float]:
    import psutil

    t = psutil.cpu_times()
    return t.idle + getattr(t, "iowait", 0.0), sum(t)


def measure_run(af: AirflowCluster, dag_id: str, timeout: float) -> dict[str, Any]:
    """Trigger one run, wait for it, and describe it (wall times, task-instance durations, machine load)."""
    load_before = os.getloadavg()[0]
    idle0, total0 = _cpu_busy()
    t0 = time.monotonic()
    run_id = af.trigger_dag(dag_id)
    deadline = t0 + timeout
    while True:
        run = af.dag_run(dag_id, run_id)
        if run["state"] in ("success", "failed"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{dag_id} run {run_id} still {run['state']} after {timeout}s")
        af.check_processes()
        time.sleep(0.2)
    client_seconds = time.monotonic() - t0
    idle1, total1 = _cpu_busy()
    tis = task_instances(af, dag_id, run_id)
    start, end = _ts(run["start_date"]), _ts(run["end_date"])
    work = [ti for ti in tis if ti["task_id"] != "tiering_summary"]
    durations = [ti["duration"] for ti in work if ti["duration"] is not None]
    starts = sorted(_ts(ti["start_date"]) for ti in work if ti["start_date"])
    ends = sorted(_ts(ti["end_date"]) for ti in work if ti["end_date"])
    summary = next((ti for ti in tis if ti["task_id"] == "tiering_summary"), None)
    return {
        "_ti": {ti["id"]: ti["duration"] for ti in work},
        "dag_id": dag_id,
        "run_id": run_id,
        "state": run["state"],
        "run_seconds": _seconds(start, end),
        "client_seconds": round(client_seconds, 3),
        "queued_to_start_seconds": _seconds(_ts(run.get("queued_at")), start),
        "tasks": len(tis),
        "task_states": dict(Counter(ti["state"] for ti in tis)),
        "ti_duration_mean": round(statistics.mean(durations), 3) if durations else None,
        "ti_duration_median": round(statistics.median(durations), 3) if durations else None,
        "ti_duration_sum": round(sum(durations), 3),
        "first_task_start_after_run_start": _seconds(start, starts[0]) if starts else None,
        "last_task_end_to_run_end": _seconds(ends[-1], end) if ends else None,
        "summary_task_seconds": None if summary is None else summary["duration"],
        "loadavg_1m_before": round(load_before, 2),
        "cpu_busy_fraction": round(1 - (idle1 - idle0) / max(total1 - total0, 1e-9), 3),
    }


_LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?)\s+(\w+)?\s*(.*)$")


def task_log_timeline(af: AirflowCluster, dag_id: str, run_id: str, task_id: str, ti: dict[str, Any]) -> dict:
    """A task's log lines as seconds since the task instance's start_date."""
    start = _ts(ti["start_date"])
    events = []
    for line in af.task_log(dag_id, run_id, task_id).splitlines():
        match = _LOG_TS.match(line)
        if not match:
            continue
        when = datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
        events.append([_seconds(start, when), match.group(3)[:160]])
    return {"task_id": task_id, "state": ti["state"], "duration": ti["duration"], "events": events}


def sample_timelines(af: AirflowCluster, run: dict[str, Any], count: int) -> list[dict[str, Any]]:
    tis = sorted(task_instances(af, run["dag_id"], run["run_id"]), key=lambda ti: ti["task_id"])
    picked = [ti for ti in tis if ti["task_id"] != "tiering_summary"]
    step = max(1, len(picked) // max(count, 1))
    return [task_log_timeline(af, run["dag_id"], run["run_id"], ti["task_id"], ti) for ti in picked[::step][:count]]


_WORKLOAD = re.compile(r"Workload finished .*?duration=([\d.]+).*?workload_id=([0-9a-f-]+)")


#: A worker held longer than this was stalled: Airflow's supervisor saw the task process's sockets close before the
#: process could be reaped, and then waits out ``[workers] min_heartbeat_interval`` (5 s) before it looks again.
STALL_SECONDS = 3.0


def with_worker_slot_times(runs: list[dict[str, Any]], scheduler_log: Path) -> list[dict[str, Any]]:
    """The runs, each with how long its tasks held a LocalExecutor worker (the supervisor's "Workload finished"
    duration: process start to the task process being reaped) next to their task-instance durations, how many were
    stalled (:data:`STALL_SECONDS`) and the median of the others (the task's own cost, without Airflow's stalls). A
    skipped task's end_date is only set once its process is reaped, a successful one's when it reports success."""
    slots = {m.group(2): float(m.group(1)) for m in _WORKLOAD.finditer(scheduler_log.read_text(errors="replace"))}
    out = []
    for run in runs:
        tis = run["_ti"]
        held = [slots[i] for i in tis if i in slots]
        unstalled = [h for h in held if h <= STALL_SECONDS]
        out.append(
            {
                **{k: v for k, v in run.items() if k != "_ti"},
                "slot_seconds_mean": round(statistics.mean(held), 3) if held else None,
                "slot_seconds_sum": round(sum(held), 1),
                "slot_seconds_median_unstalled": round(statistics.median(unstalled), 3) if unstalled else None,
                "slots_stalled": len(held) - len(unstalled),
            }
        )
    return out


# -- where a tiering task's time goes, outside Airflow (each step in a fresh process) -------------------------------
# The round's parts are built as the task builds them (``build_round``, its catalog loaded on its own to time it); the
# round finds nothing to tier. (A task whose table is at rest asks the hot store first and skips without the round.)
PROFILE = textwrap.dedent(
    """
    import json, sys, time
    t = time.perf_counter(); out = {{}}
    def lap(name):
        global t
        now = time.perf_counter(); out[name] = round(now - t, 3); t = now
    import airflow.sdk
    lap("import airflow.sdk")
    from airflow.dag_processing.dagbag import DagBag
    lap("import DagBag")
    bag = DagBag({dag_file!r})
    assert not bag.import_errors, bag.import_errors
    lap("parse the DAG file (DagBag)")
    from airflow_provider_tiering.hooks.tiering import TieringHook
    from airflow_provider_tiering.build import CatalogConfig, TableConnections, build_round
    lap("execute(): imports (hooks, builder, pyarrow)")
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    spec = TableSpec.parse({spec!r})
    catalog = CatalogConfig("default", {catalog!r})
    handle = catalog.handle()
    handle.get()
    lap("load the catalog")
    hot = ConnectionInfo("sqlite", host={hot!r})
    parts = build_round(spec, TableConnections(hot, catalog, SparkSettings(master="local[1]")), catalog=handle)
    lap("source, lake, writer objects")
    state = JsonFileStateStore({state!r})
    result = parts.run(state)
    assert result.outcome == "nothing_to_tier", result
    lap("run_round: nothing to tier")
    result = parts.run(state)
    lap("run_round again, warm (same process)")
    print(json.dumps(out))
    """
)


def profile_task_steps(workdir: Path, dag_file: Path, repeat: int) -> dict[str, float]:
    """Median seconds of each step a ``nothing_new`` tiering task takes, each repetition in a fresh process."""
    state = workdir / "profile-state.json"
    shutil.copy(workdir / "state" / "t0000.json", state)
    code = PROFILE.format(
        dag_file=str(dag_file),
        spec=table_spec(0, TIERING_DAGS[NOTHING_NEW]),
        catalog=catalog_properties(workdir),
        hot=str(workdir / "hot.db"),
        state=str(state),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {"AIRFLOW_HOME": str(workdir / "profile-home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **connections(workdir)}
    )
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(f"profile failed:\n{out.stderr[-4000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


# -- report ----------------------------------------------------------------------------------------------------------
def summarize(runs: list[dict[str, Any]], dag_ids: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dag_id in dag_ids:
        mine = [r for r in runs if r["dag_id"] == dag_id]
        run_s = [r["run_seconds"] for r in mine if r["run_seconds"] is not None]
        client_s = [r["client_seconds"] for r in mine]
        ti_mean = [r["ti_duration_mean"] for r in mine if r["ti_duration_mean"] is not None]
        out[dag_id] = {
            "runs": len(mine),
            "states": sorted({r["state"] for r in mine}),
            "run_seconds_median": round(statistics.median(run_s), 2) if run_s else None,
            "run_seconds_min": round(min(run_s), 2) if run_s else None,
            "run_seconds_max": round(max(run_s), 2) if run_s else None,
            "client_seconds_median": round(statistics.median(client_s), 2) if client_s else None,
            "ti_duration_mean_median": round(statistics.median(ti_mean), 3) if ti_mean else None,
            "summary_task_seconds_median": _median([r["summary_task_seconds"] for r in mine]),
            "slot_seconds_mean_median": _median([r.get("slot_seconds_mean") for r in mine]),
            "slot_seconds_median_unstalled_median": _median([r.get("slot_seconds_median_unstalled") for r in mine]),
            "slots_stalled_median": _median([r.get("slots_stalled") for r in mine]),
            "cpu_busy_fraction_median": _median([r["cpu_busy_fraction"] for r in mine]),
        }
    base = out.get(EMPTY, {})
    for dag_id in dag_ids:
        if dag_id == EMPTY or not base.get("run_seconds_median") or not out[dag_id]["run_seconds_median"]:
            continue
        out[dag_id]["ratio_run"] = round(out[dag_id]["run_seconds_median"] / base["run_seconds_median"], 2)
        out[dag_id]["ratio_client"] = round(out[dag_id]["client_seconds_median"] / base["client_seconds_median"], 2)
    return out


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.median(kept), 3) if kept else None


def print_table(tables: int, summary: dict[str, Any], target: float) -> None:
    print(
        f"\n{tables} tables; median of {max(s['runs'] for s in summary.values())} runs each "
        f"(min..max of the run's start->end in brackets)"
    )
    head = (
        f"{'DAG':<27} {'run s (start->end)':>24} {'client s':>9} {'task s (mean)':>14} {'slot s (mean)':>14} "
        f"{'slot s (unstalled median)':>26} {'stalled':>8} {'ratio run':>10}"
    )
    print(head + f" {'ratio client':>13}")
    print("-" * (len(head) + 14))
    for dag_id, s in summary.items():
        spread = f"{s['run_seconds_median']:.1f} [{s['run_seconds_min']:.1f}..{s['run_seconds_max']:.1f}]"
        ratio = f"{s['ratio_run']:.2f}x" if "ratio_run" in s else "1.00x"
        ratio_c = f"{s['ratio_client']:.2f}x" if "ratio_client" in s else "1.00x"
        print(
            f"{dag_id:<27} {spread:>24} {s['client_seconds_median']:>9.1f} "
            f"{s['ti_duration_mean_median'] or 0:>14.2f} {s['slot_seconds_mean_median'] or 0:>14.2f} "
            f"{s['slot_seconds_median_unstalled_median'] or 0:>26.3f} {s['slots_stalled_median'] or 0:>8g} "
            f"{ratio:>10} {ratio_c:>13}"
        )
    print(f"target: tiering / empty <= {target:g}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="measured runs of each DAG (alternating)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each DAG first")
    parser.add_argument("--rows", type=int, default=10, help="rows in each hot table")
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=[NOTHING_NEW, NOT_DUE],
        default=[NOTHING_NEW, NOT_DUE],
        help="tiering DAGs to run next to the empty DAG",
    )
    parser.add_argument("--workdir", type=Path, help="keep hot tables + lake here (reused across invocations)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "dag_run.json")
    parser.add_argument("--timelines", type=int, default=4, help="task logs sampled per DAG for the report")
    parser.add_argument("--profile", type=int, default=3, help="fresh-process profiles of a tiering task (0: off)")
    parser.add_argument("--run-timeout", type=float, default=1800.0)
    parser.add_argument("--target", type=float, default=1.2)
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="airflow.cfg override (repeatable)"
    )
    parser.add_argument("--tier-once", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.tier_once:
        print(json.dumps(tier_once(args.tier_once, args.tables)))
        return 0

    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-dag-run-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir.resolve()
    try:
        return _run(args, workdir)
    finally:
        if tmp is not None:
            tmp.cleanup()


def compile_package() -> None:
    """Write the provider's bytecode, as ``pip install`` of its wheel does: an editable checkout run with
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile the package from source in every task process (measured:
    about 30 ms of each nothing-new task), a cost no installed provider pays."""
    import compileall

    import airflow_provider_tiering

    compileall.compile_dir(str(Path(airflow_provider_tiering.__file__).parent), quiet=1)


def _run(args: argparse.Namespace, workdir: Path) -> int:
    dag_ids = [EMPTY, *args.cases]
    compile_package()
    print(f"preparing {args.tables} hot tables and tiering each once (outside Airflow) in {workdir} ...", flush=True)
    prepared = prepare(workdir, args.tables, args.rows)
    print(f"  {prepared}", flush=True)
    profile = {}
    if args.profile and NOTHING_NEW in args.cases:
        scratch = workdir / "profile-dags"
        write_dags(scratch, args.tables)
        profile = {
            "tiering_task_steps": profile_task_steps(workdir, scratch / f"{NOTHING_NEW}.py", args.profile),
            "empty_dag_parse": _parse_seconds(workdir, scratch / f"{EMPTY}.py", args.profile),
        }
        print(f"  fresh-process profile of one nothing-new tiering task: {profile}", flush=True)

    home, dags = workdir / "airflow", workdir / "dags"
    shutil.rmtree(home, ignore_errors=True)
    write_dags(dags, args.tables)
    runs: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    timelines: dict[str, list[dict[str, Any]]] = {}
    overrides = benchmark_config()
    for item in args.set:
        key, _, value = item.partition("=")
        section, _, option = key.partition(".")
        overrides.setdefault(section, {})[option] = value
    settings: dict[str, Any] = {}

    def write_report(done: list[dict[str, Any]], partial: bool) -> dict[str, Any]:
        """Write the JSON report (after every run too, so an interrupted benchmark leaves its figures)."""
        summary = summarize(done, dag_ids)
        report = {
            "partial": partial,
            "tables": args.tables,
            "rows_per_table": args.rows,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "cpus": os.cpu_count(),
            "airflow_settings": {**settings, "max_active_tasks (each DAG)": MAX_ACTIVE_TASKS, "overrides": overrides},
            "prepared": prepared,
            "target_ratio": args.target,
            "summary": summary,
            "runs": done,
            "profile": profile,
            "task_timelines": timelines,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2, default=str))
        return summary

    with AirflowCluster(
        home, dags, connections(workdir), expected_dag_ids=dag_ids, parse_timeout=300, config_overrides=overrides
    ) as af:
        print(f"airflow up in {af.timings.get('dags_parsed', 0):.0f}s; writing state documents ...", flush=True)
        load_states_into_airflow(af, workdir, args.tables)
        config = af.config()
        settings.update({k: config["core"][k] for k in ("executor", "parallelism", "max_active_tasks_per_dag")})
        settings["dag_processor min_file_process_interval"] = config["dag_processor"]["min_file_process_interval"]
        settings["workers min_heartbeat_interval"] = config.get("workers", {}).get(
            "min_heartbeat_interval", "5 (default)"
        )
        for _ in range(args.warmup):
            for dag_id in dag_ids:
                run = measure_run(af, dag_id, args.run_timeout)
                warm.append(run)
                print(f"  warm-up {dag_id}: {run['state']} in {run['run_seconds']}s {run['task_states']}", flush=True)
        for r in range(args.repeat):
            order = dag_ids[r % len(dag_ids) :] + dag_ids[: r % len(dag_ids)]
            for dag_id in order:
                run = {**measure_run(af, dag_id, args.run_timeout), "repeat": r}
                runs.append(run)
                write_report(with_worker_slot_times(runs, home / "proc-logs" / "scheduler.log"), partial=True)
                print(
                    f"  [{r + 1}/{args.repeat}] {dag_id}: {run['state']}, run {run['run_seconds']}s, client "
                    f"{run['client_seconds']}s, mean task {run['ti_duration_mean']}s, {run['task_states']}, "
                    f"load {run['loadavg_1m_before']}, cpu busy {run['cpu_busy_fraction']}",
                    flush=True,
                )
        if args.timelines:
            for dag_id in dag_ids:
                last = [run for run in runs if run["dag_id"] == dag_id][-1]
                timelines[dag_id] = sample_timelines(af, last, args.timelines)
        final_runs = with_worker_slot_times(runs, home / "proc-logs" / "scheduler.log")
    summary = write_report(final_runs, partial=False)
    print_table(args.tables, summary, args.target)
    print(f"wrote {args.output}")
    return 0


def _parse_seconds(workdir: Path, dag_file: Path, repeat: int) -> float:
    code = (
        "import json, time; t = time.perf_counter(); from airflow.dag_processing.dagbag import DagBag; "
        f"bag = DagBag({str(dag_file)!r}); assert not bag.import_errors; "
        "print(json.dumps(time.perf_counter() - t))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(workdir / "profile-home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    seconds = [
        json.loads(
            subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        for _ in range(repeat)
    ]
    return round(statistics.median(seconds), 3)


if __name__ == "__main__":
    sys.exit(main())
