"""Benchmark B4: the memory of a round stays flat as the data grows.

For each row count of ``--rows`` (default 1M, 3M, 6M) a table ``lineitem_rows_<n>`` holds the first ``n`` rows of
TPC-H ``lineitem`` (loaded at the smallest scale factor that has enough rows; same columns, identity cursor
``l_id`` with a primary key; kept for the next run against the same ``--dsn``), and one FIRST round
(``run_round`` as the operator runs it, fresh Iceberg table) tiers it in a child process. Its writer always uses
Spark (``--mode spark``, the default): with the operator's ``spark.local_single_split`` a round of one split (up to
1M rows) is written by the task process without a JVM, and the sizes would not compare; ``--mode operator``
measures that instead. While the child runs, this process samples its process tree with psutil every
``--interval`` seconds (default 0.1) and keeps the peaks of the resident set size (RSS) of:

* ``task``  the child itself: the Python process that runs ``run_round`` (plans, drives Spark, commits);
* ``jvm``   the Spark driver JVM it starts (a ``java`` child; in local mode executors live in it);
* ``workers``  Spark's Python workers (``pyspark.daemon`` and its forked workers, which read the splits and
               write Parquet);
* ``tree``  the sum over the whole tree at one instant (task, JVM, workers, the ``bash`` of ``spark-submit``).
            Forked workers share pages with the daemon, so this sum over-counts a little: an upper bound.

The child also reports, from the inside: its own peak RSS (``getrusage``), pyarrow's peak allocation, and the
driver JVM's heap (peak used of each heap pool, committed, max). The target is growth within 20% from the smallest
to the largest row count: splits stream through Arrow batches in the workers and only file metadata reaches the
driver, so nothing should grow with the table.

    python -m benchmarks.bench_memory --rows 1000000,3000000,6000000
    python -m benchmarks.bench_memory --rows 20000,40000     # smoke run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_incremental import (  # noqa: E402
    LOCAL_SINGLE_SPLIT,
    MODES,
    add_child_arguments,
    child_command,
    child_env,
    copy_table,
    parse_child,
    tier_once,
)
from benchmarks.bench_round import _catalog  # noqa: E402
from benchmarks.tpch_data import KNOWN_ROW_COUNTS, format_sf  # noqa: E402

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "memory.json"
DEFAULT_ROWS = "1000000,3000000,6000000"
GROWTH_TARGET_PERCENT = 20.0
MIB = 1024 * 1024
PEAKS = ("task", "jvm", "workers", "tree")


# -- child: one round, and what it can see of its own memory -------------------------------------------------
def jvm_memory(writer: Any) -> dict[str, Any]:
    jvm = writer.spark._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    pools = {}
    for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
        if str(pool.getType().toString()) == "Heap memory":
            pools[str(pool.getName())] = int(pool.getPeakUsage().getUsed())
    return {
        "heap_peak_used_by_pool": pools,
        "heap_committed": int(runtime.totalMemory()),
        "heap_used_now": int(runtime.totalMemory() - runtime.freeMemory()),
        "heap_max": int(runtime.maxMemory()),
    }


def run_child(dsn: str, table: str, catalog: dict[str, str], state_path: Path, mode: str) -> dict[str, Any]:
    import resource

    import pyarrow as pa

    inside: dict[str, Any] = {}

    def look_inside(writer: Any) -> None:
        if writer._spark is not None:
            inside["jvm"] = jvm_memory(writer)

    local = LOCAL_SINGLE_SPLIT[mode]
    result = tier_once(dsn, table, catalog, state_path, local_single_split=local, before_stop=look_inside)
    inside["task_max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    inside["pyarrow_max_memory"] = pa.default_memory_pool().max_memory()
    return {**result, "inside": inside}


# -- parent: tables, sampling, report -------------------------------------------------------------------
def scale_factor_for(rows: int) -> float:
    for sf, count in sorted(KNOWN_ROW_COUNTS.items()):
        if count >= rows:
            return sf
    raise ValueError(f"no known scale factor has {rows} lineitem rows")


def ensure_table(dsn: str, rows: int, sf: float) -> str:
    """``lineitem_rows_<rows>``: the first ``rows`` rows of ``lineitem``; kept when already made from this SF."""
    import psycopg
    from psycopg import sql

    table = f"lineitem_rows_{rows}"
    comment = f"first {rows} rows of lineitem sf={format_sf(sf)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select obj_description(to_regclass(%s), 'pg_class')", (table,)).fetchone()
        if row is None or row[0] != comment:
            copy_table(conn, "lineitem", table, rows)
            conn.execute(sql.SQL("comment on table {} is {}").format(sql.Identifier(table), sql.Literal(comment)))
    return table


class TreeSampler:
    """Peak RSS of a process, its ``java`` descendants and the rest of its descendants, sampled together."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.peaks = dict.fromkeys(PEAKS, 0)
        self.samples = 0
        self.timeline: list[tuple[float, int, int, int, int]] = []
        self.names: set[str] = set()
        self._started = time.perf_counter()

    def sample(self) -> None:
        import psutil

        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        current = dict.fromkeys(PEAKS, 0)
        for process in processes:
            try:
                rss = process.memory_info().rss
                name = process.name()
            except psutil.Error:  # ended between listing and reading
                continue
            self.names.add(name)
            if process.pid == self.root.pid:
                current["task"] += rss
            elif name == "java":
                current["jvm"] += rss
            elif name.startswith("python"):
                current["workers"] += rss
            current["tree"] += rss  # also the bash of spark-submit, if it is still there
        for key, value in current.items():
            self.peaks[key] = max(self.peaks[key], value)
        self.samples += 1
        elapsed = round(time.perf_counter() - self._started, 2)
        self.timeline.append((elapsed, current["task"], current["jvm"], current["workers"], current["tree"]))


def measure(dsn: str, table: str, workdir: Path, interval: float, mode: str) -> dict[str, Any]:
    catalog = _catalog(workdir, f"lake-{table}")
    state = workdir / f"lake-{table}" / "state.json"
    command = child_command("benchmarks.bench_memory", dsn, table, catalog, state, mode)
    out_path, err_path = workdir / f"{table}.out", workdir / f"{table}.err"
    started = time.perf_counter()
    # Files, not pipes: a child that fills a pipe nobody reads while we sample would hang.
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(command, env=child_env(), stdout=out, stderr=err, text=True, cwd=REPO)
        sampler = TreeSampler(proc.pid)
        while proc.poll() is None:
            sampler.sample()
            time.sleep(interval)
    process_seconds = time.perf_counter() - started
    result = parse_child(f"round of {table}", proc.returncode, out_path.read_text(), err_path.read_text())
    return {
        **result,
        "process_seconds": process_seconds,
        "peak_rss": sampler.peaks,
        "samples": sampler.samples,
        "process_names": sorted(sampler.names),
        # one point a second is enough to see where memory grows
        "timeline_mib": [
            [t, *(round(v / MIB, 1) for v in values)]
            for i, (t, *values) in enumerate(sampler.timeline)
            if i % max(1, round(1 / interval)) == 0
        ],
    }


def growth(report: list[dict[str, Any]]) -> dict[str, float]:
    first, last = report[0]["peak_rss"], report[-1]["peak_rss"]
    return {key: 100.0 * (last[key] - first[key]) / first[key] for key in PEAKS if first[key]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated row counts to tier")
    parser.add_argument("--sf", type=float, help="TPC-H scale factor to cut the tables from (default: just enough)")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--mode", choices=MODES, default="spark", help="the round's writer (see above)")
    add_child_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        result = run_child(args.dsn, args.table, json.loads(args.catalog), args.state, args.child)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem

    sizes = sorted(int(n) for n in args.rows.split(","))
    sf = args.sf or scale_factor_for(sizes[-1])
    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-b4-") as (workdir, dsn):
        began = time.perf_counter()
        available = load_lineitem(dsn, sf, workdir)
        if sizes[-1] > available:
            raise SystemExit(f"lineitem at SF {sf} has {available} rows, fewer than {sizes[-1]}")
        tables = {n: ensure_table(dsn, n, sf) for n in sizes}
        print(f"lineitem SF {sf}: tables of {', '.join(f'{n:,}' for n in sizes)} rows", end="")
        print(f" (ready in {time.perf_counter() - began:.1f}s)", flush=True)
        report = []
        for n in sizes:
            result = measure(dsn, tables[n], workdir, args.interval, args.mode)
            if result["rows"] != n or result["outcome"] != "tiered":
                raise AssertionError(f"the round of {tables[n]} tiered {result['rows']} rows of {n}: {result}")
            report.append(result)
            peaks = result["peak_rss"]
            print(f"  {n:>10,} rows {result['seconds']:8.2f}s  tree peak {peaks['tree'] / MIB:,.0f} MiB", flush=True)
        document = {
            "sf": sf,
            "interval_seconds": args.interval,
            "mode": args.mode,
            "results": report,
            "growth_percent": growth(report),
            "growth_target_percent": GROWTH_TARGET_PERCENT,
        }
        print_report(document)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(document, indent=2))
    return 0


def print_report(document: dict[str, Any]) -> None:
    print(f"\nB4: peak RSS of a first round's processes (MiB), sampled every {document['interval_seconds']}s")
    header = f"{'rows':>10} {'seconds':>8} {'task (py)':>10} {'JVM':>8} {'workers':>8} {'tree':>8}"
    print(header + f" {'files':>6} {'splits':>6} {'JVM heap peak':>14}")
    for r in document["results"]:
        peaks = {key: f"{r['peak_rss'][key] / MIB:,.0f}" for key in PEAKS}
        jvm = r["inside"].get("jvm")
        heap = f"{sum(jvm['heap_peak_used_by_pool'].values()) / MIB:,.0f}" if jvm else "-"
        print(
            f"{r['rows']:>10,} {r['seconds']:>8.2f} {peaks['task']:>10} {peaks['jvm']:>8} {peaks['workers']:>8}"
            f" {peaks['tree']:>8} {r['files']:>6} {r['splits']:>6} {heap:>14}"
        )
    growth_text = ", ".join(f"{key} {value:+.1f}%" for key, value in document["growth_percent"].items())
    sizes = document["results"]
    print(f"growth {sizes[0]['rows']:,} -> {sizes[-1]['rows']:,} rows: {growth_text}")
    target = document["growth_target_percent"]
    verdicts = {key: abs(v) <= target for key, v in document["growth_percent"].items() if key != "workers"}
    print(
        f"target: within {target:.0f}% for task, JVM and tree: "
        + ", ".join(f"{k} {'ok' if ok else 'MISSED'}" for k, ok in verdicts.items())
    )


if __name__ == "__main__":
    sys.exit(main())
