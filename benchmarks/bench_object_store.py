"""Benchmark: B1 (a full round of TPC-H ``lineitem`` from PostgreSQL) into a lake on the local filesystem and into one
on a local S3-compatible server (moto's, ``testbed/s3_server.py``, requests signed and checked), in the same run,
alternating, and where the time goes.

Each round runs in its own Python process, as an Airflow task runs it (its own Spark session; a SQL catalog on
SQLite in both cases, only the warehouse differs: ``file://…`` or ``s3://lake/…`` with the storage properties in
the catalog's). Per round: wall time, and the time between the round's phases (plan, acquire, write = Spark reads
the splits and writes Parquet to the warehouse, commit = manifests, manifest list and metadata written and the
catalog swapped, record, clean; start = from the epoch to the first write: Spark's session), plus the CPU seconds
moto's server spent serving it (it shares the 2 cores). Then the object store's share alone: the data files of the
last file round copied to the S3 server and to another local directory with the filesystem ``LakeStorage`` opens
(pyarrow's, as the split writers use it), alternating.

    python -m benchmarks.bench_object_store --sf 1 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("file", "s3")
#: The spans reported, each from one phase notice (or the round's start) to the next.
SPANS = (
    ("plan", "start", "planned"),
    ("acquire", "planned", "acquired"),
    ("start", "acquired", "writing"),
    ("write", "writing", "written"),
    ("commit", "written", "committed"),
    ("record", "committed", "recorded"),
    ("clean", "recorded", "cleaned"),
)


def _spec() -> Any:
    from airflow_provider_tiering.core.spec import TableSpec

    return TableSpec.parse(
        {
            "name": "lineitem",
            "source": {"conn_id": "bench", "table": "lineitem", "cursor_column": "l_id"},
            "lake": {"namespace": "bench", "table": "lineitem"},
        }
    )


def run_child(dsn: str, catalog_file: Path, state_file: Path) -> dict[str, Any]:
    """One round of the whole table into the catalog in ``catalog_file`` (a child process)."""
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.rounds import round_parts

    properties = json.loads(catalog_file.read_text())
    marks: dict[str, float] = {}
    started = time.perf_counter()
    marks["start"] = started
    with round_parts(_spec(), ConnectionInfo.from_uri(dsn), properties) as parts:
        result = parts.run(
            JsonFileStateStore(state_file), observe=lambda phase: marks.setdefault(str(phase), time.perf_counter())
        )
        seconds = time.perf_counter() - started
    assert result.metrics is not None
    spans = {name: marks[end] - marks[begin] for name, begin, end in SPANS if begin in marks and end in marks}
    return {
        "seconds": seconds,
        "rows": result.metrics.rows,
        "bytes": result.metrics.bytes,
        "files": result.metrics.files,
        "splits": result.metrics.splits,
        "spans": spans,
    }


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def run_round(target: str, dsn: str, workdir: Path, s3: Any) -> dict[str, Any]:
    run = workdir / f"{target}-{uuid.uuid4().hex[:8]}"
    run.mkdir(parents=True)
    catalog: dict[str, str] = {"type": "sql", "uri": f"sqlite:///{run}/catalog.db"}
    if target == "file":
        catalog["warehouse"] = f"file://{run}/warehouse"
    else:
        catalog["warehouse"] = f"s3://lake/{run.name}/warehouse"
        catalog.update(s3.storage_properties())
    (run / "catalog.json").write_text(json.dumps(catalog))
    command = [sys.executable, "-m", "benchmarks.bench_object_store", "--child", "--dsn", dsn, "--workdir", str(run)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    moto_before = _cpu_seconds(s3.pid)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    moto_cpu = _cpu_seconds(s3.pid) - moto_before
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{target} round failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["moto_cpu_seconds"] = moto_cpu
    if target == "s3":  # moto keeps objects in memory: drop this round's
        client = s3.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=f"{run.name}/"):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
            if keys:
                client.delete_objects(Bucket="lake", Delete={"Objects": keys})
    return result


def copy_files(source_dir: Path, target: str, storage: Any) -> float:
    """Seconds to copy every file under ``source_dir`` to ``target`` through ``storage``'s filesystem."""
    filesystem, root = storage.filesystem_and_path(target)
    started = time.perf_counter()
    for path in sorted(source_dir.rglob("*.parquet")):
        with open(path, "rb") as source, filesystem.open_output_stream(f"{root}/{path.name}") as sink:
            while block := source.read(8 * 1024 * 1024):
                sink.write(block)
    seconds = time.perf_counter() - started
    filesystem.delete_dir(root)
    return seconds


def measure_copies(workdir: Path, s3: Any, repeat: int) -> dict[str, Any]:
    from airflow_provider_tiering.lake.warehouse import LakeStorage

    source = max(workdir.glob("file-*"), key=lambda p: p.stat().st_mtime) / "warehouse"
    nbytes = sum(p.stat().st_size for p in source.rglob("*.parquet"))
    s3_storage, local_storage = LakeStorage.of(s3.storage_properties()), LakeStorage()
    seconds: dict[str, list[float]] = {"file": [], "s3": []}
    for n in range(repeat):
        seconds["file"].append(copy_files(source, f"file://{workdir}/copy-{n}", local_storage))
        seconds["s3"].append(copy_files(source, f"s3://lake/copy-{n}", s3_storage))
    return {"bytes": nbytes, **{k: statistics.median(v) for k, v in seconds.items()}, "all": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workdir = Path(args.workdir)
        result = run_child(args.dsn, workdir / "catalog.json", workdir / "state.json")
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    sys.path.insert(0, str(REPO))
    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem
    from testbed.s3_server import S3Server

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-s3-") as (workdir, dsn):
        load_started = time.perf_counter()
        rows = load_lineitem(dsn, args.sf, workdir)
        print(f"lineitem: {rows:,} rows at SF {args.sf} (ready in {time.perf_counter() - load_started:.1f}s)")
        samples: dict[str, list[dict[str, Any]]] = {t: [] for t in TARGETS}
        with S3Server(workdir / "s3", buckets=("lake",)) as s3:
            for repeat in range(args.repeat):
                order = TARGETS if repeat % 2 == 0 else TARGETS[::-1]  # alternating, so drifting load hits both
                for target in order:
                    load = os.getloadavg()[0]
                    result = run_round(target, dsn, workdir, s3)
                    result["load_before"] = load
                    samples[target].append(result)
                    spans = " ".join(f"{k} {v:.2f}" for k, v in result["spans"].items())
                    print(
                        f"  run {repeat + 1} {target:<4} {result['seconds']:7.2f}s ({spans}; "
                        f"moto cpu {result['moto_cpu_seconds']:.1f}s; load {load:.1f})",
                        flush=True,
                    )
            moto_before = _cpu_seconds(s3.pid)
            copies = measure_copies(workdir, s3, args.repeat)
            copies["moto_cpu_seconds"] = (_cpu_seconds(s3.pid) - moto_before) / args.repeat
        report = summarize(rows, samples)
        report["copy"] = copies
        print_report(report, args.sf)
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps({"sf": args.sf, "rows": rows, "results": report}, indent=2))
    return 0


def summarize(rows: int, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for target, runs in samples.items():
        if not runs:
            continue
        assert all(r["rows"] == rows for r in runs), f"{target}: a round did not tier every row"
        report[target] = {
            "median_seconds": statistics.median(r["seconds"] for r in runs),
            "all_seconds": [r["seconds"] for r in runs],
            "spans": {name: statistics.median(r["spans"].get(name, 0.0) for r in runs) for name, _, _ in SPANS},
            "moto_cpu_seconds": statistics.median(r["moto_cpu_seconds"] for r in runs),
            "bytes": runs[-1]["bytes"],
            "files": runs[-1]["files"],
            "splits": runs[-1]["splits"],
            "load_before": [r["load_before"] for r in runs],
        }
    return report


def print_report(report: dict[str, Any], sf: float) -> None:
    print(f"\nTPC-H lineitem SF {sf}: median of rounds (each in its own process)")
    names = [name for name, _, _ in SPANS]
    print(f"{'lake':<5} {'seconds':>8} " + " ".join(f"{n:>8}" for n in names) + f" {'moto cpu':>9}")
    for target, r in report.items():
        if target not in TARGETS:
            continue
        print(
            f"{target:<5} {r['median_seconds']:>8.2f} "
            + " ".join(f"{r['spans'][n]:>8.2f}" for n in names)
            + f" {r['moto_cpu_seconds']:>9.1f}"
        )
    if "file" in report and "s3" in report:
        print(f"s3 / file: {report['s3']['median_seconds'] / report['file']['median_seconds']:.2f}x")
    copy = report.get("copy")
    if copy:
        mib = copy["bytes"] / 2**20
        print(
            f"copying the round's {mib:.0f} MiB of data files: local {copy['file']:.2f}s "
            f"({mib / copy['file']:.0f} MiB/s), S3 server {copy['s3']:.2f}s ({mib / copy['s3']:.0f} MiB/s; "
            f"moto cpu {copy['moto_cpu_seconds']:.1f}s)"
        )


if __name__ == "__main__":
    sys.exit(main())
