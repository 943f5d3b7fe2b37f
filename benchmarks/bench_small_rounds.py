"""Benchmark: what a small round costs on PostgreSQL, in time, in CPU on both sides and in connections.

Most rounds of a busy deployment move a few rows: their cost is the round's fixed part (catalogue queries, the safe
watermark, planning, the lake's commit), paid by the task and by the hot server. One PostgreSQL 15 server
(``testbed/pg_server.py``, a throw-away one) holds a table; after a first round, ``--rounds`` rounds each tier
``--rows`` new rows, written by the task process itself (the local writer: no Spark), into an Iceberg SQL catalog on
SQLite. Reported per round (medians of ``--repeat`` runs): wall time, this process's CPU, the server's CPU (its
postmaster and every backend, those that ended included) and the connections the round opened to the server.

``--repo`` imports the package from another checkout (e.g. ``git worktree add /tmp/before <commit>``), so a change
is measured against its baseline in the same session: run both, alternated.

    python -m benchmarks.bench_small_rounds                       # 30 rounds of 10 rows, 3 repeats
    python -m benchmarks.bench_small_rounds --repo /tmp/before    # the same, the package of another checkout
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu_seconds(postmaster: int) -> float:
    """The server's CPU: the postmaster's own and its children's, reaped ones included (a backend per connection)."""
    import psutil

    root = psutil.Process(postmaster)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def measure(rounds: int, rows: int, workdir: Path) -> dict[str, float]:
    import adbc_driver_postgresql.dbapi as adbc
    import psycopg

    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.hot_tables import PostgresHot
    from testbed.pg_server import PostgresServer
    from testbed.rounds import round_parts

    opened = {"adbc": 0, "psycopg": 0}

    def counting(name: str, driver: Any) -> None:
        connect = driver.connect

        def counted(*args: Any, **kwargs: Any) -> Any:
            opened[name] += 1
            return connect(*args, **kwargs)

        driver.connect = counted  # counts the rounds' connections (the fixture's are made outside a round)

    counting("adbc", adbc)
    counting("psycopg", psycopg)
    with PostgresServer(workdir / "pg") as server:
        hot = PostgresHot(server.dsn)
        hot.create("small_rounds")
        hot.insert("small_rounds", 1, rows)
        catalog = {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db", "warehouse": f"file://{workdir}/lake"}
        spec = TableSpec.parse(
            {
                "name": "small_rounds",
                "source": {"conn_id": "bench", "table": "small_rounds", "cursor_column": "id"},
                "lake": {"namespace": "bench", "table": "small_rounds"},
            }
        )
        writer = build_writer(SparkSettings(), local_single_split=True)
        store = JsonFileStateStore(workdir / "state.json")
        round_parts(spec, hot, catalog, writer=writer).run(store)  # creates the lake table
        postmaster = int((Path(server.datadir) / "postmaster.pid").read_text().split()[0])
        wall = client = on_server = 0.0
        connections = {"adbc": 0, "psycopg": 0}
        for number in range(rounds):
            hot.insert("small_rounds", rows * (number + 1) + 1, rows)
            opened.update(adbc=0, psycopg=0)
            client_before, server_before = cpu_seconds(), server_cpu_seconds(postmaster)
            started = time.perf_counter()
            result = round_parts(spec, hot, catalog, writer=writer).run(store)
            wall += time.perf_counter() - started
            client += cpu_seconds() - client_before
            on_server += server_cpu_seconds(postmaster) - server_before
            for name, count in opened.items():
                connections[name] += count
            assert result.metrics is not None and result.metrics.rows == rows, result
    return {
        "wall_ms": 1000 * wall / rounds,
        "client_cpu_ms": 1000 * client / rounds,
        "server_cpu_ms": 1000 * on_server / rounds,
        "connections": sum(connections.values()) / rounds,
        "adbc_connections": connections["adbc"] / rounds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose package is measured")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(args.repo.resolve()), str(REPO)]
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            workdir.chmod(0o755)  # the server runs as another OS user when this one is root
            runs.append(measure(args.rounds, args.rows, workdir))
    medians = {key: round(statistics.median(run[key] for run in runs), 1) for key in runs[0]}
    print(json.dumps({"repo": str(args.repo), "rounds": args.rounds, "rows": args.rows, **medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
