"""Profile one full round of TPC-H lineitem with py-spy (driver and Spark's Python workers), and summarize it.

Runs ``bench_round``'s ``round`` variant under ``py-spy record --subprocesses`` (py-spy lives in the bench
virtualenv: ``scripts/setup_bench_venv.sh``), writes the folded stacks next to the results and prints where the
samples fall: per process kind (the task process = driver, Spark's Python workers), and the top functions by
own time and by inclusive time. The JVM is not sampled (py-spy sees Python only); its share is the wall time
the Python processes spend waiting in py4j/socket calls.

    python -m benchmarks.profile_round --sf 1
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PY_SPY = REPO / ".venv-bench" / "bin" / "py-spy"
#: Leaf frames that block (a heuristic: py-spy's --idle samples keep threads parked in these).
WAITING = ("wait", "recv", "readinto", "select", "poll", "sleep", "accept", "FinalizerWorker")


def summarize(folded: Path, top: int = 15) -> str:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    by_process: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        # Each stack starts with the process chain: the round's process, then Spark's launcher, daemon, worker.
        processes = [f for f in frames if f.startswith("process ")]
        kind = "spark python worker" if any("pyspark.daemon" in p for p in processes) else "task process"
        calls = [f for f in frames if not f.startswith("process ")]
        waiting = bool(calls) and any(w in calls[-1] for w in WAITING)
        by_process[f"{kind}, {'waiting' if waiting else 'busy'}"] += count
        if calls:
            own[calls[-1]] += count
        for frame in set(calls):
            inclusive[frame] += count
    lines = [f"{total} samples"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in by_process.most_common()]
    lines.append("top own time:")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    lines.append("top inclusive time:")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "round_profile.folded")
    parser.add_argument("--rate", type=int, default=50, help="samples per second")
    args = parser.parse_args(argv)

    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem

    with postgres_scratch(args.workdir, args.dsn, "tiering-profile-") as (workdir, dsn):
        load_lineitem(dsn, args.sf, workdir)
        child = [sys.executable, "-m", "benchmarks.bench_round", "--child", "round", "--dsn", dsn]
        child += ["--workdir", str(workdir)]
        args.output.parent.mkdir(parents=True, exist_ok=True)
        command = [str(PY_SPY), "record", "--subprocesses", "--idle", "--rate", str(args.rate), "--format", "raw"]
        command += ["--output", str(args.output), "--", *child]
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
        subprocess.run(command, check=True, cwd=REPO, env=env)
    print(summarize(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
