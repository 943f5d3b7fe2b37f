"""``make bench``: every benchmark of the suite on one TPC-H load, then ``docs/benchmarks.md`` regenerated.

In order, sharing one PostgreSQL (a throw-away server on 127.0.0.1 unless ``--dsn``) and one TPC-H load:

1. B1 full load of lineitem: the read limit, bare Spark, pyiceberg append, dlt, our round (``bench_round``);
2. B3 the 8 TPC-H tables in one DAG run vs one after another, and lineitem as an Airflow task
   (``bench_tpch_tables``: a real Airflow);
3. B4 peak memory while tiering 1M, 3M, 6M rows (``bench_memory``);
4. B2 an incremental round of 1% new rows vs a first round of a 1%-size table (``bench_incremental``, on its
   own copy of lineitem);
5. B5 rounds of tables whose rows change, merged by cursor and from the change stream, next to a full reload,
   pyiceberg's upsert and dlt's merge (``bench_merge``, on its own copies of orders);
6. B6 a change-stream round's peak memory against the number of changes (``bench_change_memory``).

Each writes ``benchmarks/results/<name>.json``; ``benchmarks/report.py`` (run by the bench virtualenv's Python,
which has matplotlib and dlt: ``scripts/setup_bench_venv.sh``) turns them into tables and PNG plots.

    python -m benchmarks.suite                 # SF 1, 3 repeats (about 25 minutes here)
    python -m benchmarks.suite --quick         # SF 0.01, 1 repeat, small sizes, 3 tables in B3: a smoke run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs" / "benchmarks.md"
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-rows", default="1000000,3000000,6000000")
    parser.add_argument("--quick", action="store_true", help="SF 0.01, 1 repeat, small memory sizes")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    args = parser.parse_args(argv)
    quick_b3 = ["--tables", "region,nation"] if args.quick else []
    quick_b2 = ["--modes", "operator"] if args.quick else []  # no Spark session: every quick round is one split
    quick_b5 = ["--scenarios", "1%", "--dlt-scenarios", "", "--upsert-scenarios", "", "--small-rounds", "0",
                "--read-rounds", "2", "--read-scenarios", "1%"]  # fmt: skip
    quick_b6 = ["--sizes", "2000"]
    if args.quick:
        args.sf, args.repeat, args.memory_rows = 0.01, 1, "20000,40000"

    from benchmarks import (
        bench_change_memory,
        bench_incremental,
        bench_memory,
        bench_merge,
        bench_round,
        bench_tpch_tables,
    )
    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem

    args.results.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-suite-") as (workdir, dsn):
        common = ["--dsn", dsn]
        steps = [
            ("load lineitem", lambda: load_lineitem(dsn, args.sf, workdir)),
            (
                "B1 full load",
                lambda: bench_round.main(
                    [*common, "--sf", str(args.sf), "--repeat", str(args.repeat), "--workdir", str(workdir / "b1")]
                    + ["--bench-python", str(args.bench_python), "--output", str(args.results / "full_load.json")]
                ),
            ),
            (
                "B3 many tables",
                lambda: bench_tpch_tables.main(
                    [*common, "--sf", str(args.sf), "--repeat", "1", "--workdir", str(workdir / "b3"), *quick_b3]
                    + ["--output", str(args.results / "tpch_tables.json")]
                ),
            ),
            (
                "B4 memory",
                lambda: bench_memory.main(
                    [*common, "--rows", args.memory_rows, "--workdir", str(workdir / "b4")]
                    + ["--output", str(args.results / "memory.json")]
                ),
            ),
            (
                "B2 incremental",
                lambda: bench_incremental.main(
                    [*common, "--sf", str(args.sf), "--repeat", str(args.repeat), "--workdir", str(workdir / "b2")]
                    + [*quick_b2, "--output", str(args.results / "incremental.json")]
                ),
            ),
            (
                "B5 merges",
                lambda: bench_merge.main(
                    [*common, "--sf", str(args.sf), "--workdir", str(workdir / "b5"), "--bench-python"]
                    + [str(args.bench_python), *(quick_b5 if args.quick else []), "--output"]
                    + [str(args.results / "merge.json")]
                ),
            ),
            (
                "B6 change memory",
                lambda: bench_change_memory.main(
                    [*common, "--workdir", str(workdir / "b6"), *(quick_b6 if args.quick else [])]
                    + ["--output", str(args.results / "change_memory.json")]
                ),
            ),
        ]
        for name, step in steps:
            started = time.perf_counter()
            print(f"\n=== {name} ===", flush=True)
            outcome = step()
            if name.startswith("B") and outcome != 0:
                raise SystemExit(f"{name} failed with exit code {outcome}")
            timings[name] = time.perf_counter() - started
            print(f"=== {name}: {timings[name]:.0f}s ===", flush=True)
    report = [str(args.bench_python), str(REPO / "benchmarks" / "report.py"), "--results", str(args.results)]
    subprocess.run([*report, "--docs", str(args.docs)], check=True, cwd=REPO)
    print("\n" + "\n".join(f"{name:<16}{seconds:>8.0f}s" for name, seconds in timings.items()))
    print(f"wrote {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
