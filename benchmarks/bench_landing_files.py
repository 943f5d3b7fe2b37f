"""Benchmark: a landing zone of many small JSON-lines files tiered in one round, next to Spark reading the same
files into Parquet with no commit, in the same run, on the same Spark settings.

* ``tiering round``  a round built by ``build_round`` (``core.round.run_round`` with the landing-zone
                     ``FileSource`` of ``sources/files/``: listing, settle check, offsets log, bin-packed splits,
                     pyarrow JSON reader in Spark tasks, Parquet, one Iceberg commit), a fresh SQL catalog on
                     SQLite and a local warehouse;
* ``spark json``     ``spark.read.schema(...).json(dir)`` then ``.write.parquet`` (Spark's own file source and
                     writer: no offsets, no commit, no state).

Both read the same files; after the round the lake is read back with pyiceberg and must hold every line once.
The first variant to run pays for warming the OS page cache, so the order alternates between repeats.

    python -m benchmarks.bench_landing_files                     # 10,000 files of ~10 KB
    python -m benchmarks.bench_landing_files --files 50          # smoke run

Writes ``benchmarks/results/landing_files.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "landing_files.json"
COLUMNS = {"id": "int64", "device": "string", "reading": "float64", "status": "string", "at": "timestamp[us]"}
SPARK_SCHEMA = "id BIGINT, device STRING, reading DOUBLE, status STRING, at TIMESTAMP_NTZ"


def make_landing_zone(root: Path, files: int, file_kb: int) -> int:
    """Write ``files`` JSON-lines files of about ``file_kb`` KB each in 100 sub-folders; returns the line count."""
    rng = random.Random(7)
    line_id = 0
    for index in range(files):
        folder = root / f"day={index % 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        size = 0
        while size < file_kb * 1024:
            line_id += 1
            line = json.dumps(
                {
                    "id": line_id,
                    "device": f"dev-{rng.randrange(5000):05d}",
                    "reading": round(rng.uniform(-40, 120), 3),
                    "status": rng.choice(["ok", "warn", "fail"]) + " " + "x" * rng.randrange(40),
                    "at": f"2026-11-{1 + index % 28:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00",
                }
            )
            lines.append(line)
            size += len(line) + 1
        (folder / f"part-{index:06d}.jsonl").write_text("\n".join(lines) + "\n")
    old = time.time() - 3600  # landed an hour ago: settled
    for path in root.rglob("*.jsonl"):
        os.utime(path, (old, old))
    return line_id


def run_round_variant(landing: Path, root: Path, lines: int, master: str) -> dict[str, Any]:
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import round_parts

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    properties = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    spec = TableSpec.parse(
        {
            "name": "readings",
            "source": {
                "kind": "files",
                "path": str(landing),
                "format": "jsonl",
                "columns": COLUMNS,
                "settle_seconds": 0,
            },
            "lake": {"namespace": "bench", "table": "readings"},
        }
    )
    # Always a Spark job, as the Spark variant's (``local_single_split`` off).
    writer = build_writer(SparkSettings(master=master))
    assert writer.parallelism > 0  # starts the session outside the timing, as the Spark variant's is
    phases: dict[str, float] = {}
    started = time.perf_counter()
    parts = round_parts(spec, None, properties, writer=writer)  # a local landing zone needs no connection
    with parts:
        result = parts.run(
            JsonFileStateStore(root / "state.json"),
            observe=lambda phase: phases.setdefault(phase, time.perf_counter() - started),
        )
        seconds = time.perf_counter() - started
    lake = load_catalog("default", **properties).load_table(("bench", "readings")).scan(selected_fields=("id",))
    ids = lake.to_arrow().column("id")
    if len(ids) != lines or len(ids.unique()) != lines:
        raise AssertionError(f"lake holds {len(ids)} rows ({len(ids.unique())} distinct), expected {lines}")
    return {"seconds": seconds, "rows": result.metrics.rows, "files_written": result.metrics.files, "phases": phases}


def run_spark_variant(landing: Path, root: Path, lines: int, master: str) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    shutil.rmtree(root, ignore_errors=True)
    spark = (
        SparkSession.builder.master(master)
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    started = time.perf_counter()
    frame = spark.read.schema(SPARK_SCHEMA).option("recursiveFileLookup", "true").json(str(landing))
    frame.write.parquet(str(root / "out"))
    seconds = time.perf_counter() - started
    rows = spark.read.parquet(str(root / "out")).count()
    spark.stop()
    if rows != lines:
        raise AssertionError(f"spark wrote {rows} rows, expected {lines}")
    return {"seconds": seconds, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--file-kb", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir, removed afterwards)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tiering-bench-files-"))
    try:
        landing = workdir / "landing"
        shutil.rmtree(landing, ignore_errors=True)
        started = time.perf_counter()
        lines = make_landing_zone(landing, args.files, args.file_kb)
        size = sum(p.stat().st_size for p in landing.rglob("*.jsonl"))
        took = time.perf_counter() - started
        print(f"{args.files:,} files, {lines:,} lines, {size / 2**20:.1f} MiB (written in {took:.1f}s)")
        runs: dict[str, list[dict[str, Any]]] = {"tiering round": [], "spark json": []}
        for repeat in range(args.repeat):
            order = ["tiering round", "spark json"] if repeat % 2 == 0 else ["spark json", "tiering round"]
            for variant in order:
                run = run_round_variant if variant == "tiering round" else run_spark_variant
                result = run(landing, workdir / variant.replace(" ", "-"), lines, args.master)
                runs[variant].append(result)
                print(f"  run {repeat + 1}: {variant:<14} {result['seconds']:8.2f}s", flush=True)
        report = {
            name: {
                "seconds": statistics.median(r["seconds"] for r in results),
                "files_per_second": args.files / statistics.median(r["seconds"] for r in results),
                "rows_per_second": lines / statistics.median(r["seconds"] for r in results),
            }
            for name, results in runs.items()
        }
        ratio = report["spark json"]["seconds"] / report["tiering round"]["seconds"]
        print(f"\n{'variant':<16}{'seconds':>10}{'files/s':>10}{'rows/s':>12}")
        for name, figures in report.items():
            print(
                f"{name:<16}{figures['seconds']:>10.2f}{figures['files_per_second']:>10.0f}"
                f"{figures['rows_per_second']:>12.0f}"
            )
        print(f"tiering round speed relative to spark json: {ratio:.2f}x (above 1 = faster)")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps(
                {"files": args.files, "lines": lines, "bytes": size, "report": report, "ratio": ratio, "runs": runs},
                indent=2,
            )
        )
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
