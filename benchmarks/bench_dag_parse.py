"""Benchmark: how long a tiering DAG of N tables (from a YAML file) takes to parse, next to a DAG of N empty
tasks, each parsed by Airflow's DagBag in a fresh process (imports included), median of ``--repeat`` runs.

    python -m benchmarks.bench_dag_parse --tables 200 1000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TIERING_DAG = textwrap.dedent(
    """
    from pathlib import Path
    from airflow_provider_tiering.dag_factory import build_tiering_dag
    dag = build_tiering_dag("many_tables", Path(__file__).with_name("tables.yaml"), wait_until_due={wait})
    """
)
EMPTY_DAG = textwrap.dedent(
    """
    from datetime import datetime
    from airflow.sdk import DAG, task
    with DAG("many_empty_tasks", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
        @task
        def noop():
            return None
        for i in range({n}):
            noop.override(task_id=f"t{{i:04d}}")()
    """
)
PARSE = (
    "import json, time; from airflow.dag_processing.dagbag import DagBag; t = time.perf_counter(); "
    "bag = DagBag({folder!r}); print(json.dumps({{'seconds': time.perf_counter() - t, "
    "'tasks': sum(len(d.tasks) for d in bag.dags.values()), 'errors': list(bag.import_errors.values())}}))"
)


def parse_seconds(folder: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    out = subprocess.run(
        [sys.executable, "-c", PARSE.format(folder=str(folder))], env=env, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["errors"]:
        raise RuntimeError(result["errors"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(
        f"{'tables':>7} {'tiering DAG s':>14} {'+ due sensors s':>16} {'empty-task DAG s':>17} {'ratio':>7} "
        f"{'ratio w/ sensors':>17}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in args.tables:
            tiering, waiting, empty = root / f"tiering{n}", root / f"waiting{n}", root / f"empty{n}"
            for folder in (tiering, waiting, empty):
                folder.mkdir()
            lines = ["tables:"]
            for i in range(n):
                lines += [
                    f"  - name: t{i:04d}",
                    f"    source: {{conn_id: hot, table: t{i:04d}, cursor_column: id}}",
                    f"    lake: {{namespace: many, table: t{i:04d}}}",
                ]
            for folder, wait in ((tiering, False), (waiting, True)):
                (folder / "tables.yaml").write_text("\n".join(lines))
                (folder / "dag.py").write_text(TIERING_DAG.format(wait=wait))
            (empty / "dag.py").write_text(EMPTY_DAG.format(n=n))
            t_runs = [parse_seconds(tiering, root / "home") for _ in range(args.repeat)]
            w_runs = [parse_seconds(waiting, root / "home") for _ in range(args.repeat)]
            e_runs = [parse_seconds(empty, root / "home") for _ in range(args.repeat)]
            assert t_runs[0]["tasks"] == n + 1 and w_runs[0]["tasks"] == 2 * n + 1 and e_runs[0]["tasks"] == n
            t, w, e = (statistics.median(r["seconds"] for r in runs) for runs in (t_runs, w_runs, e_runs))
            print(f"{n:>7} {t:>14.2f} {w:>16.2f} {e:>17.2f} {t / e:>6.2f}x {w / e:>16.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
