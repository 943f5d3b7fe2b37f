"""Benchmark: one full tiering round of TPC-H ``lineitem`` from PostgreSQL into Iceberg, side by side with
its baselines, in the same run on the same data:

* ``copy-binary``  the read limit: ``COPY lineitem TO STDOUT (FORMAT binary)`` drained to nowhere;
* ``bare-spark``   the same Spark job as a round (same splits, same ADBC reader, same Parquet writer: the
                   round's source and writer from ``build_round``), into a staging directory of its own,
                   without Iceberg commit, state or planning of offsets;
* ``adbc-append``  one process: ADBC reads the table into Arrow, pyiceberg ``append`` writes and commits;
* ``dlt``          dlt's ``sql_database`` source into Iceberg on the local filesystem (``benchmarks/alt_dlt.py``,
                   run by the bench virtualenv's Python: ``scripts/setup_bench_venv.sh``, dlt is kept out of
                   Airflow's environment);
* ``round``        a round built by ``build_round`` and run exactly as the operator runs it (plan, epoch, write,
                   fenced commit, record, clean);
* ``round-no-snapshot`` the same round with ``consistent_snapshot`` off: each split reads its own snapshot
                   instead of importing the round's (the cost of the consistent snapshot);
* ``idle-round``   the next round, with nothing to tier;
* ``cdc-first-load`` the first round of the same table as a change-stream table (``postgres_cdc``): its slot
                   created with an exported snapshot, the table read in that snapshot in ranges of its blocks, one
                   Spark task each (the slot and publication are dropped after each run).

Each variant runs in its own Python process (its own Spark JVM where it uses Spark: every variant pays
its own start-up), ``--repeat`` times; the table shows the median. Run with ``make bench`` or
``python -m benchmarks.bench_round --sf 1``; ``--sf 0.01`` is a smoke run.
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
VARIANTS = (
    "copy-binary",
    "bare-spark",
    "adbc-append",
    "dlt",
    "round",
    "round-no-snapshot",
    "idle-round",
    "cdc-first-load",
)
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"


CDC_SPEC = {
    "name": "lineitem_cdc",
    "source": {"kind": "postgres_cdc", "conn_id": "bench", "table": "lineitem"},
    "lake": {"namespace": "bench", "table": "lineitem_cdc"},
}


def _spec(consistent_snapshot: bool = True) -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    return TableSpec.parse(
        {
            "name": "lineitem",
            "source": {
                "conn_id": "bench",
                "table": "lineitem",
                "cursor_column": "l_id",
                "consistent_snapshot": consistent_snapshot,
            },
            "lake": {"namespace": "bench", "table": "lineitem"},
        }
    )


def _catalog(workdir: Path, name: str) -> dict[str, str]:
    root = workdir / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


# -- variants (each runs in a child process) -------------------------------------------------------
def run_copy_binary(dsn: str, workdir: Path) -> dict[str, Any]:
    from benchmarks.tpch_data import drain_copy_binary

    result = drain_copy_binary(dsn, "lineitem")
    return {"bytes": result.nbytes, "seconds": result.seconds}


def _connection(dsn: str) -> Any:
    from airflow_provider_tiering.core.connections import ConnectionInfo

    return ConnectionInfo.from_uri(dsn)


def run_bare_spark(dsn: str, workdir: Path) -> dict[str, Any]:
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.ports import WriteTarget
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import round_parts

    spec = _spec()
    # The round's source and a Spark writer, from the builder; the lake part is never used (nothing is committed,
    # so its catalog is never loaded). The writer always runs a Spark job, as a round of several splits does.
    properties = _catalog(workdir, "bare-spark")
    out = workdir / "bare-spark" / "staging"
    started = time.perf_counter()
    parts = round_parts(spec, _connection(dsn), properties, writer=build_writer(SparkSettings()))
    with parts:
        source, writer = parts.source, parts.writer
        schema = source.schema()
        end = source.safe_watermark(None, None).end
        plan = source.plan(None, end, spec.max_rows_per_round)
        splits = source.cut_splits(plan, spec.target_rows_per_split, writer.parallelism)
        target = WriteTarget(f"file://{out}", schema, target_file_bytes=spec.target_file_size_mb * 1024 * 1024)
        files = writer.write(source, splits, schema, target)
        seconds = time.perf_counter() - started
    return {"rows": sum(f.rows for f in files), "seconds": seconds, "files": len(files), "splits": len(splits)}


def run_adbc_append(dsn: str, workdir: Path) -> dict[str, Any]:
    import adbc_driver_postgresql.dbapi as pg
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.sources.conform import conform_batch
    from airflow_provider_tiering.sources.registry import build_source

    # The baseline: plain pyiceberg on its own catalog; only the Arrow schema is the round's (its source's).
    catalog = load_catalog("default", **_catalog(workdir, "adbc-append"))
    started = time.perf_counter()
    schema = build_source(_spec().source, _connection(dsn)).schema()
    with pg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM lineitem")
        reader = cur.fetch_record_batch()
        table = pa.Table.from_batches([conform_batch(b, schema) for b in reader], schema=schema)
    catalog.create_namespace("bench")
    iceberg = catalog.create_table(("bench", "lineitem"), schema=schema)
    iceberg.append(table)
    seconds = time.perf_counter() - started
    return {"rows": table.num_rows, "seconds": seconds}


def _round(dsn: str, workdir: Path, fresh: bool, consistent_snapshot: bool = True) -> dict[str, Any]:
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    spec = _spec(consistent_snapshot)
    properties = _catalog(workdir, "round") if fresh else json.loads((workdir / "round.json").read_text())
    (workdir / "round.json").write_text(json.dumps(properties))
    state = JsonFileStateStore(workdir / "round" / "state.json")
    started = time.perf_counter()
    # As the operator builds it: the writer from the spec's Spark part, the catalog loaded inside the round.
    parts = round_parts(spec, _connection(dsn), properties)
    with parts:
        run_started = time.perf_counter()
        result = parts.run(state)
        round_seconds = time.perf_counter() - run_started
        seconds = time.perf_counter() - started
        checks = {} if fresh else _check_costs(parts.source, result.end_offsets)
    rows = result.metrics.rows if result.metrics else 0
    return {
        "rows": rows,
        "seconds": seconds,
        "outcome": result.outcome,
        "files": result.metrics.files if result.metrics else 0,
        "round_seconds": round_seconds,
        **checks,
    }


def _check_costs(source: Any, committed: dict[str, Any], repeat: int = 7) -> dict[str, float]:
    """Median milliseconds of what a round with nothing new asks the hot store: the safe watermark (the
    visibility check of open transactions included), the look for rows behind the committed cursor, the cheap
    probe for new rows, the table's identity and shape, and a due table's whole probe (all three of the last, on
    one connection)."""

    def median_ms(call: Any) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
        return round(statistics.median(times), 2)

    shape = source.identity().shape_json()  # what the last round recorded
    return {
        "watermark_ms": median_ms(lambda: source.safe_watermark(committed, None)),
        "look_behind_ms": median_ms(lambda: source.look_behind(committed, None)),
        "has_rows_after_ms": median_ms(lambda: source.has_rows_after(committed)),
        "identity_ms": median_ms(source.identity),
        "probe_ms": median_ms(lambda: source.probe(committed, None, shape)),
    }


def run_round_variant(dsn: str, workdir: Path) -> dict[str, Any]:
    return _round(dsn, workdir, fresh=True)


def run_round_without_snapshot(dsn: str, workdir: Path) -> dict[str, Any]:
    return _round(dsn, workdir, fresh=True, consistent_snapshot=False)


def run_idle_round(dsn: str, workdir: Path) -> dict[str, Any]:
    return _round(dsn, workdir, fresh=False)


def run_cdc_first_load(dsn: str, workdir: Path) -> dict[str, Any]:
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from benchmarks.scratch import drop_change_stream
    from testbed.rounds import round_parts

    properties = _catalog(workdir, "cdc")
    try:
        started = time.perf_counter()
        parts = round_parts(TableSpec.parse(CDC_SPEC), _connection(dsn), properties)
        with parts:
            result = parts.run(JsonFileStateStore(workdir / "cdc" / "state.json"))
        seconds = time.perf_counter() - started
    finally:
        drop_change_stream(dsn, CDC_SPEC)
    metrics = result.metrics
    return {
        "rows": metrics.rows if metrics else 0,
        "seconds": seconds,
        "outcome": result.outcome,
        "files": metrics.files if metrics else 0,
        "splits": metrics.splits if metrics else 0,
    }


RUNNERS = {
    "copy-binary": run_copy_binary,
    "bare-spark": run_bare_spark,
    "adbc-append": run_adbc_append,
    "round": run_round_variant,
    "round-no-snapshot": run_round_without_snapshot,
    "idle-round": run_idle_round,
    "cdc-first-load": run_cdc_first_load,
}


def _child(variant: str, dsn: str, workdir: str) -> None:
    print("RESULT " + json.dumps(RUNNERS[variant](dsn, Path(workdir))), flush=True)


def child_command(variant: str, dsn: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run one of this module's variants in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "benchmarks.bench_round", "--child", variant, "--dsn", dsn]
    return [*command, "--workdir", str(workdir)], env


def run_variant(variant: str, dsn: str, workdir: Path, bench_python: Path = BENCH_PYTHON) -> dict[str, Any]:
    command, env = child_command(variant, dsn, workdir)
    if variant == "dlt":
        command = [str(bench_python), str(REPO / "benchmarks" / "alt_dlt.py"), "--dsn", dsn]
        command += ["--workdir", str(workdir / "dlt")]
        env.pop("PYTHONPATH")
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{variant} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset to run")
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON, help="Python of the dlt virtualenv")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    variants = [v for v in VARIANTS if v in args.variants.split(",")]
    if args.child:
        _child(args.child, args.dsn, args.workdir)
        return 0

    sys.path.insert(0, str(REPO))
    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-") as (workdir, dsn):
        load_started = time.perf_counter()
        rows = load_lineitem(dsn, args.sf, workdir)
        print(f"lineitem: {rows:,} rows at SF {args.sf} (ready in {time.perf_counter() - load_started:.1f}s)")
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for repeat in range(args.repeat):
            for variant in variants:  # interleaved, so drifting machine load hits every variant alike
                result = run_variant(variant, dsn, workdir, args.bench_python)
                samples[variant].append(result)
                print(f"  run {repeat + 1} {variant:<17} {result['seconds']:8.2f}s", flush=True)
        report = summarize(rows, samples)
        print_report(report, args.sf)
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps({"sf": args.sf, "rows": rows, "results": report}, indent=2))
    return 0


def summarize(rows: int, samples: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    report = {}
    for variant, runs in samples.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        report[variant] = {
            "median_seconds": seconds,
            "all_seconds": [r["seconds"] for r in runs],
            "rows_per_second": rows / seconds if variant != "idle-round" else None,
            "last": runs[-1],
        }
    round_rate = report["round"]["rows_per_second"] if "round" in report else None
    for variant in ("copy-binary", "bare-spark", "adbc-append", "dlt", "round-no-snapshot", "cdc-first-load"):
        if round_rate and variant in report:
            report[variant]["round_ratio"] = round_rate / report[variant]["rows_per_second"]
    return report


def print_report(report: dict[str, dict[str, Any]], sf: float) -> None:
    print(f"\nTPC-H lineitem SF {sf}: median of runs (each variant in its own process)")
    print(f"{'variant':<17} {'seconds':>9} {'rows/s':>12} {'round / variant':>16}")
    for variant, r in report.items():
        rate = f"{r['rows_per_second']:,.0f}" if r["rows_per_second"] else "-"
        ratio = f"{r['round_ratio']:.2f}x" if "round_ratio" in r else "-"
        print(f"{variant:<17} {r['median_seconds']:>9.2f} {rate:>12} {ratio:>16}")
    idle = report.get("idle-round", {}).get("last")
    if idle:
        print(
            f"idle round in-process {idle['round_seconds'] * 1000:.0f} ms; its hot-store looks: safe watermark "
            f"{idle['watermark_ms']} ms, rows behind the cursor {idle['look_behind_ms']} ms, "
            f"new rows {idle['has_rows_after_ms']} ms, identity and shape {idle.get('identity_ms', '-')} ms; a due "
            f"table's whole probe {idle.get('probe_ms', '-')} ms"
        )
    print(
        "targets: round >= 0.9x bare-spark, round >= 1.0x adbc-append and dlt; "
        "cdc-first-load <= 1.2x (its time / the round's)"
    )


if __name__ == "__main__":
    sys.exit(main())
