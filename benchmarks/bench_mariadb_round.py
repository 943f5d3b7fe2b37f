"""Benchmark: a full tiering round of TPC-H ``lineitem`` from MariaDB into Iceberg, next to the source's reader
(connectorx's Arrow stream) draining the same table, in the same run.

The MariaDB server and its ``lineitem`` are those of ``benchmarks/bench_mariadb_readers.py`` (same loader, data
directory ``<workdir>/mariadb`` reused across runs). Each variant runs in its own Python process, ``--repeat``
times, alternating:

* ``drain``  ``connectorx.read_sql(url, "SELECT <every column> FROM lineitem", return_type="arrow_stream")``, every
             batch consumed: the reader alone, nothing written;
* ``round``  a round exactly as the operator builds it (``build_round``: MariaDB source, local Spark, pyiceberg SQL
             catalog on SQLite, a fresh lake table each time): plan, safe watermark, write, fenced commit, record;
             with the default ``consistent_snapshot`` a MariaDB round is read as one split;
* ``round-splits`` the same with ``consistent_snapshot`` off (rows that never change): one split per Spark slot.

    python -m benchmarks.bench_mariadb_round --sf 1 --repeat 3
    python -m benchmarks.bench_mariadb_round --sf 0.01 --repeat 1      # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_mariadb_readers import (  # noqa: E402
    CURSOR_COLUMN,
    DEFAULT_WORKDIR,
    TABLE,
    lineitem_columns,
    load_lineitem,
    loadavg,
    select_query,
)

VARIANTS = ("drain", "round", "round-splits")


def run_drain(url: str, workdir: Path) -> dict[str, Any]:
    import connectorx

    started = time.perf_counter()
    rows = 0
    for batch in connectorx.read_sql(url, select_query(lineitem_columns()), return_type="arrow_stream"):
        rows += batch.num_rows
    return {"rows": rows, "seconds": time.perf_counter() - started}


def run_round(url: str, workdir: Path, consistent_snapshot: bool = True) -> dict[str, Any]:
    from airflow_provider_tiering.build import CatalogConfig, TableConnections, build_round
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore

    root = workdir / "round"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    spec = TableSpec.parse(
        {
            "name": TABLE,
            "source": {
                "conn_id": "bench",
                "table": TABLE,
                "cursor_column": CURSOR_COLUMN,
                "consistent_snapshot": consistent_snapshot,
            },
            "lake": {"namespace": "bench", "table": TABLE},
        }
    )
    started = time.perf_counter()
    connections = TableConnections(ConnectionInfo.from_uri(url), CatalogConfig("default", catalog))
    with build_round(spec, connections) as parts:
        result = parts.run(JsonFileStateStore(root / "state.json"))
    seconds = time.perf_counter() - started
    metrics = result.metrics
    return {
        "rows": metrics.rows if metrics else 0,
        "seconds": seconds,
        "splits": metrics.splits if metrics else 0,
        "files": metrics.files if metrics else 0,
    }


def spawn(variant: str, url: str, workdir: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_mariadb_round", "--child", variant, "--url", url]
    command += ["--workdir", str(workdir)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{variant} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "wall_seconds": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    if args.child:
        if args.child == "drain":
            result = run_drain(args.url, workdir)
        else:
            result = run_round(args.url, workdir, consistent_snapshot=args.child == "round")
        print(json.dumps(result), flush=True)
        return 0

    from testbed.mariadb_server import MariaDBServer

    os.environ["RUST_BACKTRACE"] = "0"
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {loadavg()}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with MariaDBServer(workdir / "mariadb") as db:
        loaded = load_lineitem(db, args.sf, workdir)
        print(f"lineitem: {loaded}", flush=True)
        for repeat in range(args.repeat):
            for variant in VARIANTS if repeat % 2 == 0 else tuple(reversed(VARIANTS)):
                result = spawn(variant, db.url, workdir)
                results[variant].append(result)
                rate = result["rows"] / result["seconds"]
                print(f"{variant:12s} {result['rows']:>10,} rows in {result['seconds']:7.2f}s: {rate:>10,.0f} rows/s")
    medians = {v: statistics.median(r["seconds"] for r in runs) for v, runs in results.items()}
    rows = results["round"][0]["rows"]
    print("\n| variant | median seconds | rows/s |\n| --- | ---: | ---: |")
    for variant in VARIANTS:
        print(f"| {variant} | {medians[variant]:.2f} | {rows / medians[variant]:,.0f} |")
    ratios = ", ".join(f"{v} / drain {medians[v] / medians['drain']:.2f}x" for v in VARIANTS[1:])
    print(f"\ntime {ratios}; load average after: {loadavg()}")
    out = workdir / "round-vs-drain.json"
    out.write_text(json.dumps({"results": results, "medians": medians}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
