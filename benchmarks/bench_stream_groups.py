"""Benchmark: one change stream per database (a stream group) against a stream per table, side by side in one run,
on PostgreSQL (a slot per table, or one slot for the group) and MariaDB (a binlog dump per table, or one per run).

Three parts (``--parts``):

* ``decode``: what the server pays to decode the same changes for N tables (``--decode-tables``, 1, 10 and 100 by
  default): ``--decode-changes`` updates spread over min(N, 10) busy tables, then every stream reads them. PostgreSQL:
  N slots (each with a publication of its table) against one slot whose publication holds the N tables, each peeked
  to its end by one backend whose CPU (``/proc/<pid>/stat``) is the server's decoding CPU. MariaDB: N dumps of the
  binlog (each decoding only its table's events, as a table's stream does) against one dump decoding the N tables';
  the server's CPU is the mariadbd process's, the binlog bytes read are counted, and the decoding CPU of this process
  is reported too (a binlog is decoded by the reader, not the server).
* ``lag``: ``--tables`` change-stream tables (100), ``--busy`` of them (10) changed by writers (a process of their
  own, one thread per table, about ``--rate`` changes a second in all, each recording its commit's log position and
  time) for ``--seconds``. Worker processes, as Airflow's task slots, run the streams back to back, as
  ``bench_cdc_lag`` runs a table's rounds: ``--round-workers`` (2) of them each pass over their share of the tables,
  and a group has one more, its reader, run after run, a run starting at most every ``--reader-every`` seconds (1 s:
  its ``read_every_seconds``; a reader spinning faster takes the CPU the rounds need, for commits of a few changes).
  A group's table's probe asks what the reader announced (as the operator's probe does), a table with a stream of its
  own asks that stream (its slot, or the binlog: a change past the lake?); a round runs for those that say so. Each
  round is built as a task builds it (one split, in the worker). Reported: each change's lag (from its commit to its
  table's lake commit) at p50 and p95, the server's CPU (every process of the server), the workers' CPU per change
  (the reader and the rounds), WAL retained by the slots (PostgreSQL) and the slots and WAL senders the server has
  (the most of each sampled every 5 s); the change log's rows and files, and how fast the reader expires them. Then
  the writers stop, the streams catch up, and each busy table's lake is compared with the hot table by key.
* ``scheduler``: the same tables under Airflow's real scheduler and a LocalExecutor, each table a DAG of its own
  (``build_table_dags``; the busy ones every ``--busy-freshness`` seconds, the idle every ``--idle-freshness``), with
  a stream per table against a stream group read every ``--read-every`` seconds, for ``--minutes`` each, on each store
  of ``--hot``. A writer commits to each busy table every second, recording each commit's log position and time
  (PostgreSQL: ``bench_freshness``'s, in the server; MariaDB: this part's writers, in their process). Every 5 s each
  table's data age is sampled (now minus its oldest commit the lake lacks; MariaDB's computed from the lakes'
  positions once the writers stopped), from the first sample after every table's first round and every busy table's
  second (a group's first load holds a table as of its snapshot, its offsets where it joined the log, which is
  earlier); reported per class at p50, p95 and max, with the worst table's p95, task starts per minute, the CPU of
  Airflow's processes, the task processes and the server, and the slots and WAL the server holds (PostgreSQL).

    python -m benchmarks.bench_stream_groups                                         # both stores, both parts
    python -m benchmarks.bench_stream_groups --hot postgres --parts lag --seconds 60
    python -m benchmarks.bench_stream_groups --parts scheduler --minutes 6
    python -m benchmarks.bench_stream_groups --tables 12 --busy 3 --seconds 10 --decode-tables 1,4 \\
        --decode-changes 500                                                          # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make ``testbed`` and ``benchmarks`` importable
    sys.path.insert(0, str(REPO))

from benchmarks import bench_cdc_lag as lag_bench  # noqa: E402  (after the path above)

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "stream_groups.json"
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """A process's CPU seconds so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def tree_cpu(pid: int) -> float:
    """A process's CPU and its live descendants' (a server's backends, its reaped ones included)."""
    import psutil

    from benchmarks.bench_freshness import tree_seconds

    return tree_seconds(psutil.Process(pid))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 3)


# -- the stores ----------------------------------------------------------------------------------------------------
class PostgresStore(lag_bench.Store):
    """A throw-away PostgreSQL 15 allowing a slot per table (``max_replication_slots`` raised for it); where its log
    ends and where a lake stands in it are ``bench_cdc_lag``'s."""

    name = "postgres"
    kind = "postgres_cdc"

    def __init__(self, workdir: Path, tables: int) -> None:
        from testbed.pg_server import PostgresServer

        slots = max(40, tables + 10)
        settings = {"max_replication_slots": slots, "max_wal_senders": slots, "max_connections": 2 * slots + 100}
        self.server = PostgresServer(workdir / "pg", settings=settings).start()
        super().__init__(self.server.dsn)
        self.schema = "public"

    @property
    def pid(self) -> int:
        return int((Path(self.server.datadir) / "postmaster.pid").read_text().split()[0])

    def open(self, table: str, seed: int) -> Any:
        from testbed.changing_table import ChangingTable

        return ChangingTable(self.server.dsn, table, seed=seed)

    def connection(self) -> Any:
        from airflow_provider_tiering.core.connections import ConnectionInfo

        return ConnectionInfo.from_uri(self.uri)

    def replication(self) -> dict[str, Any]:
        return replication_of(self.server.dsn)

    def cleanup(self) -> None:
        import psycopg

        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active")
            for (name,) in conn.execute("SELECT pubname FROM pg_publication").fetchall():
                conn.execute(f'DROP PUBLICATION "{name}"')

    def stop(self) -> None:
        self.server.stop()


def replication_of(dsn: str) -> dict[str, Any]:
    """The slots, WAL senders and retained WAL a PostgreSQL server has."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        slots, retained = conn.execute(
            "SELECT count(*), coalesce(sum(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::int8 "
            "FROM pg_replication_slots"
        ).fetchone()
        (senders,) = conn.execute("SELECT count(*) FROM pg_stat_replication").fetchone()
    return {"slots": int(slots), "wal_senders": int(senders), "retained_wal_bytes": int(retained)}


class MariaDBStore(lag_bench.MariaDBStore):
    """A throw-away MariaDB 10.11 writing a row binlog; where its log ends and where a lake stands in it are
    ``bench_cdc_lag``'s."""

    name = "mariadb"
    kind = "mysql_cdc"

    def __init__(self, workdir: Path, tables: int) -> None:
        from testbed.mariadb_server import MariaDBServer

        server = MariaDBServer(workdir / "maria", binlog=True)
        server.start()
        super().__init__(server)
        self.schema = server.database

    @property
    def pid(self) -> int:
        found = self.server._server_pid()  # the testbed's own server: its pid file
        assert found is not None
        return found

    def open(self, table: str, seed: int) -> Any:
        from testbed.changing_table import ChangingMariaDBTable

        return ChangingMariaDBTable(self.server.url, table, seed=seed)

    def connection(self) -> Any:
        from airflow_provider_tiering.core.connections import ConnectionInfo

        return ConnectionInfo.from_uri(self.uri)

    def replication(self) -> dict[str, Any]:
        return {"slots": 0, "wal_senders": 0, "retained_wal_bytes": None}

    def cleanup(self) -> None:
        return None

    def stop(self) -> None:
        self.server.stop()


STORES = {"postgres": PostgresStore, "mariadb": MariaDBStore}


# -- part 1: what the server pays to decode ---------------------------------------------------------------------
def create_tables(store: Any, names: list[str], rows: int) -> None:
    """The tables, ``rows`` each, each through a session closed at once (a hundred open sessions would pass the
    server's ``max_connections``)."""
    for n, name in enumerate(names):
        table = store.open(name, n)
        table.create()
        table.insert(rows)
        table.close()


def decode(store: Any, tables: int, changes: int) -> dict[str, Any]:
    """Per-table streams against one group's, decoding the same ``changes`` for ``tables`` tables."""
    names = [f"dec{tables}_{n:03d}" for n in range(tables)]
    create_tables(store, names, 10)
    busy = names[: min(tables, 10)]
    hot = {name: store.open(name, n) for n, name in enumerate(busy)}
    found = (_pg_decode if store.name == "postgres" else _binlog_decode)(store, names, busy, changes, hot)
    for table in hot.values():
        table.close()
    store.cleanup()
    return {"tables": tables, "busy_tables": len(busy), "changes": changes, **found}


def _write_changes(hot: dict[str, Any], busy: list[str], changes: int) -> None:
    """``changes`` updates, round robin over the busy tables, ten a transaction."""
    for n in range(changes // 10):
        table = hot[busy[n % len(busy)]]
        keys = table.keys()
        with table._atomic():
            for k in range(10):
                table._run(f"UPDATE {table.ref} SET amount = amount + 1 WHERE id = %s", (keys[k % len(keys)],))


def _pg_decode(
    store: PostgresStore, names: list[str], busy: list[str], changes: int, hot: dict[str, Any]
) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(store.server.dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE PUBLICATION "p_{name}" FOR TABLE "{name}"')
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"s_{name}",))
        tables = ", ".join(f'"{n}"' for n in names)
        conn.execute(f'CREATE PUBLICATION "p_group{len(names)}" FOR TABLE {tables}')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"s_group{len(names)}",))
    _write_changes(hot, busy, changes)

    def peek(conn: Any, slot: str, publication: str) -> int:
        return int(conn.execute(
            "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
            "'publication_names', %s)", (slot, f'"{publication}"'),
        ).fetchone()[0])  # fmt: skip

    with psycopg.connect(store.server.dsn, autocommit=True) as conn:
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        before = process_cpu(backend)
        messages = sum(peek(conn, f"s_{name}", f"p_{name}") for name in names)
        per_table = process_cpu(backend) - before
        before = process_cpu(backend)
        group_messages = peek(conn, f"s_group{len(names)}", f"p_group{len(names)}")
        group = process_cpu(backend) - before
    return {
        "per_table": {"server_decode_cpu_s": round(per_table, 3), "messages": messages, "slots": len(names)},
        "group": {"server_decode_cpu_s": round(group, 3), "messages": group_messages, "slots": 1},
    }


def _binlog_decode(
    store: MariaDBStore, names: list[str], busy: list[str], changes: int, hot: dict[str, Any]
) -> dict[str, Any]:
    from contextlib import closing

    from airflow_provider_tiering.sources.mysql.binlog import BinlogSettings, binlog_messages
    from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, log_bytes, unpack
    from airflow_provider_tiering.sources.mysql.binlog_server import BinlogServer

    info = store.connection()
    server = BinlogServer("bench", store.schema, "", 0)
    with closing(hot[busy[0]]._connect()) as conn:
        start = server.end(conn)
    _write_changes(hot, busy, changes)
    with closing(hot[busy[0]]._connect()) as conn:
        end = server.end(conn)
    read = log_bytes(start.position, end.position, end.sizes)
    files = BinlogFiles.of(end.files.name(unpack(end.position)[0]))

    def settings(table: str, group: frozenset[tuple[str, str]] = frozenset()) -> BinlogSettings:
        return BinlogSettings(info.host or "", info.port or 3306, info.login, info.password, 0, store.schema, table,
                              "tiering_evictions", "bench", group=group)  # fmt: skip

    def dump(found: BinlogSettings) -> int:
        with closing(binlog_messages(found, start.position, end.position, files)) as messages:
            return sum(1 for _ in messages)

    server_before, own_before = process_cpu(store.pid), time.process_time()
    messages = sum(dump(settings(name)) for name in names)
    per_table = (process_cpu(store.pid) - server_before, time.process_time() - own_before)
    server_before, own_before = process_cpu(store.pid), time.process_time()
    group_messages = dump(settings("", frozenset((store.schema, n) for n in names)))
    group = (process_cpu(store.pid) - server_before, time.process_time() - own_before)
    return {
        "per_table": {"server_cpu_s": round(per_table[0], 3), "reader_decode_cpu_s": round(per_table[1], 3),
                      "binlog_bytes_read": read * len(names), "messages": messages, "dumps": len(names)},
        "group": {"server_cpu_s": round(group[0], 3), "reader_decode_cpu_s": round(group[1], 3),
                  "binlog_bytes_read": read, "messages": group_messages, "dumps": 1},
    }  # fmt: skip


# -- part 2: lag, back to back ------------------------------------------------------------------------------------
def writer_main(config: dict[str, Any]) -> None:
    """The writers' process: a thread per busy table, each committing changes until the stop file exists, each
    commit's log position and time recorded; written to ``config["out"]``."""
    uri, found, lock = config["uri"], {}, threading.Lock()
    # Where the log ends after each commit, as bench_cdc_lag's stores tell it (from the URI alone).
    store = lag_bench.MariaDBStore(SimpleNamespace(url=uri)) if config["store"] == "mariadb" else lag_bench.Store(uri)

    def write(table: str, seed: int) -> None:
        hot = _open_by_uri(config["store"], uri, table, seed)
        hot.next_id = 1_000_000 * (seed + 1)
        pause = len(config["tables"]) / config["rate"]
        mine = []
        while not Path(config["stop"]).exists():
            hot.random_changes(1)
            mine.append((store.log_end(hot.conn), time.time()))
            time.sleep(pause)
        hot.close()
        with lock:
            found[table] = mine

    threads = [threading.Thread(target=write, args=(t, n)) for n, t in enumerate(config["tables"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Path(config["out"]).write_text(json.dumps(found))


def _open_by_uri(store: str, uri: str, table: str, seed: int) -> Any:
    from testbed.changing_table import ChangingMariaDBTable, ChangingTable

    if store == "mariadb":
        return ChangingMariaDBTable(uri, table, seed=seed)
    return ChangingTable(uri, table, seed=seed)


@contextmanager
def writers(store: Any, busy: list[str], rate: float, workdir: Path) -> Iterator[tuple[Path, int]]:
    """The writers' process (:func:`writer_main`) while inside: where it writes the commits once stopped, its pid."""
    stop, out = workdir / "writers.stop", workdir / "writers.json"
    stop.unlink(missing_ok=True)
    config = {"store": store.name, "uri": store.uri, "tables": busy, "rate": rate, "stop": str(stop),
              "out": str(out)}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_stream_groups", "--writer", json.dumps(config)], cwd=REPO
    )
    try:
        yield out, process.pid
    finally:
        stop.touch()
        process.wait(timeout=120)


class StoreView:
    """A store as a worker process sees it (from its URI): its connection and where a lake stands in its log."""

    def __init__(self, name: str, uri: str) -> None:
        self.name, self.uri, self.kind = name, uri, STORES[name].kind
        self.positions = lag_bench.MariaDBStore(SimpleNamespace(url=uri)) if name == "mariadb" else lag_bench.Store(uri)

    def connection(self) -> Any:
        from airflow_provider_tiering.core.connections import ConnectionInfo

        return ConnectionInfo.from_uri(self.uri)

    def lake_position(self, offsets: dict[str, Any]) -> int:
        return int(self.positions.lake_position(offsets))


class Streams:
    """The tables of one setup and how they are tiered: ``group`` (runs of the reader; each table's probe of what
    the reader announced, and a round of those with changes) or ``per_table`` (each table's probe of its own stream,
    and a round of those with changes)."""

    def __init__(self, setup: str, store: Any, names: list[str], workdir: Path, catalog: dict[str, str]) -> None:
        from airflow_provider_tiering.build import build_writer
        from airflow_provider_tiering.spark.session import SparkSettings

        self.setup, self.store, self.names, self.workdir, self.catalog = setup, store, names, workdir, catalog
        self.writer = build_writer(SparkSettings(master="local[1]"), local_single_split=True)
        self.group = {"name": f"bench_{store.name}", "conn_id": "hot", "change_log": {"namespace": "bench"},
                      "expire_every_seconds": 30}  # fmt: skip
        self.commits: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
        self.reads = 0

    def spec(self, table: str) -> Any:
        from airflow_provider_tiering.core.spec import TableSpec

        source = {"kind": self.store.kind, "conn_id": "hot", "table": table}
        if self.setup == "group":
            source["stream"] = self.group
        return TableSpec.parse({"name": table, "source": source, "lake": {"namespace": "bench", "table": table}})

    def store_of(self, table: str) -> Any:
        from airflow_provider_tiering.core.state_store import JsonFileStateStore

        return JsonFileStateStore(self.workdir / f"{self.setup}-{table}.json")

    def group_store(self) -> Any:
        from airflow_provider_tiering.core.state_store import JsonFileStreamStateStore

        return JsonFileStreamStateStore(self.workdir / "group.json")

    def tier(self, table: str) -> None:
        from testbed.rounds import round_parts

        with round_parts(self.spec(table), self.store.connection(), self.catalog, writer=self.writer) as parts:
            result = parts.run(self.store_of(table))
        if result.end_offsets is not None:
            self.commits[table].append((self.store.lake_position(dict(result.end_offsets)), time.time()))

    def read(self, **options: Any) -> dict[str, int]:
        """A run of the group's reader (``options``: the group's settings for it); the tables it wrote changes of."""
        from airflow_provider_tiering.build import build_stream_reader
        from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
        from testbed.rounds import connections

        reader = build_stream_reader(
            StreamGroupSpec.parse({**self.group, **options}), [self.spec(t) for t in self.names],
            connections(self.store.connection(), self.catalog), self.group_store(),
        )  # fmt: skip
        run = reader.run()
        self.reads += 1
        return {table.split(".", 1)[1]: count for table, count in run.changes.items()}

    def load(self) -> None:
        """Every table's first round (the group's after its reader took them in)."""
        if self.setup == "group":
            self.read()
        for table in self.names:
            self.tier(table)

    def expire(self, name: str) -> dict[str, Any]:
        """A run of the reader that expires what its tables applied, and the change log before and after."""
        before, started = change_log_size(self.catalog, name), time.monotonic()
        self.read(expire_every_seconds=0)
        return {"before": before, "after": change_log_size(self.catalog, name),
                "seconds": round(time.monotonic() - started, 2)}  # fmt: skip

    def rounds(self) -> int:
        """One pass over the tables, as their tasks run: each one's probe (its own stream's, or what the group's
        reader announced, as the operator asks) and a round of those that say so; the rounds it ran."""
        from airflow_provider_tiering.hooks.stream_group import announced_by
        from airflow_provider_tiering.sources.registry import build_source

        announced = announced_by(self.group_store()) if self.setup == "group" else None
        ran = 0
        for table in self.names:
            state = self.store_of(table).load()
            committed = None if state is None or state.committed is None else state.committed.end_offsets
            source = build_source(self.spec(table).source, self.store.connection())
            if announced is not None:
                source.bind_change_log(None, announced)
            if committed is None or source.has_rows_after(committed):
                self.tier(table)
                ran += 1
        return ran

    def cycle(self) -> int:
        """A run of the reader (a group's), then a pass over the tables; the rounds it ran."""
        if self.setup == "group":
            self.read()
        return self.rounds()


def worker_main(config: dict[str, Any]) -> None:
    """A worker process of the lag part: the group's reader run after run (``role`` "reader"), or passes over
    ``tables`` (``role`` "rounds"). Once its imports are done it says so (``<out>.ready``), waits for the file
    ``go`` (the window's end, in epoch seconds) and runs until then; its rounds' lake commits, its passes and its
    CPU written to ``config["out"]``."""
    import importlib

    # Imported before the window, as a task's process has them when its round starts.
    for module in ("airflow_provider_tiering.build", "airflow_provider_tiering.hooks.stream_group",
                   "airflow_provider_tiering.sources.registry", "testbed.rounds"):  # fmt: skip
        importlib.import_module(module)

    store = StoreView(config["store"], config["uri"])
    streams = Streams(config["setup"], store, config["names"], Path(config["run_dir"]), config["catalog"])
    streams.names = config["tables"] if config["role"] == "rounds" else config["names"]
    Path(config["out"] + ".ready").touch()
    go = Path(config["go"])
    while not go.exists():
        time.sleep(0.1)
    until = float(go.read_text())
    passes = rounds = 0
    cpu_before = time.process_time()  # the window's, not the imports'
    try:
        while time.time() < until:
            started = time.monotonic()
            if config["role"] == "reader":
                found = streams.read()
                # Its schedule (read_every_seconds): a run starts at most that often.
                time.sleep(max(0.0, config["reader_every"] - (time.monotonic() - started)))
            else:
                found = streams.rounds()
                rounds += found
            passes += 1
            if not found:
                time.sleep(0.2)  # nothing new: a task's next try comes a moment later
    finally:
        streams.writer.stop()
    Path(config["out"]).write_text(json.dumps({
        "commits": streams.commits, "passes": passes, "rounds": rounds, "cpu_s": time.process_time() - cpu_before,
    }))  # fmt: skip


class Workers:
    """The worker processes (:func:`worker_main`), as Airflow's task slots: ``round_workers`` of them each running
    the rounds of its share of the tables, and a group's reader beside them; started, and ready once their imports
    are done."""

    def __init__(
        self, store: Any, setup: str, names: list[str], run_dir: Path, catalog: dict[str, str], round_workers: int,
        reader_every: float,
    ) -> None:  # fmt: skip
        self.store, self.go = store, run_dir / "go"
        self.go.unlink(missing_ok=True)
        reader = [("reader", names)] if setup == "group" else []
        roles = reader + [("rounds", names[k::round_workers]) for k in range(round_workers)]
        self.processes: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        for n, (role, tables) in enumerate(roles):
            out = run_dir / f"worker{n}.json"
            config = {"store": store.name, "uri": store.uri, "setup": setup, "role": role, "names": names,
                      "tables": tables, "run_dir": str(run_dir), "catalog": catalog, "go": str(self.go),
                      "out": str(out), "reader_every": reader_every}  # fmt: skip
            command = [sys.executable, "-m", "benchmarks.bench_stream_groups", "--worker", json.dumps(config)]
            self.processes.append((role, out, subprocess.Popen(command, cwd=REPO)))
        deadline = time.monotonic() + 300
        while not all(Path(f"{out}.ready").exists() for _, out, _ in self.processes):
            if time.monotonic() > deadline or any(p.poll() is not None for _, _, p in self.processes):
                self.stop()
                raise RuntimeError("a worker did not get ready: see its output above")
            time.sleep(0.2)

    def run(self, seconds: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The workers' window of ``seconds``: their reports, and the server's slots, WAL senders and retained WAL
        sampled every 5 s meanwhile."""
        until = time.time() + seconds
        self.go.write_text(str(until))
        samples = []
        while any(p.poll() is None for _, _, p in self.processes):
            if self.store.name == "postgres" and time.time() < until:
                samples.append(self.store.replication())
            time.sleep(5)
        reports = []
        for role, out, process in self.processes:
            if process.returncode != 0:
                raise RuntimeError(f"a {role} worker failed (exit code {process.returncode}): see its output above")
            reports.append({"role": role, **json.loads(out.read_text())})
        return reports, samples or [self.store.replication()]

    def stop(self) -> None:
        for _, _, process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def lags(streams: Streams, commits: dict[str, list[tuple[int, float]]]) -> list[float]:
    """Each change's lag: from its commit to the first lake commit of its table at or past its position."""
    found = []
    for table, changes in commits.items():
        lake = streams.commits.get(table, [])
        for position, at in changes:
            applied = next((when for where, when in lake if where >= position), None)
            if applied is not None:
                found.append(max(0.0, applied - at))
    return found


def change_log_size(catalog: dict[str, str], name: str) -> dict[str, Any] | None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = load_catalog("default", **catalog).load_table(("bench", f"{name}_changes"))
    except NoSuchTableError:
        return None
    files = list(table.scan().plan_files())
    return {"rows": sum(t.file.record_count for t in files), "files": len(files),
            "bytes": sum(t.file.file_size_in_bytes for t in files)}  # fmt: skip


def lag(store: Any, setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One setup's streams back to back under the writers (see the module's description)."""
    from testbed.changing_table import assert_lake_equals_hot

    prefix = "g" if setup == "group" else "o"
    names = [f"{prefix}{n:03d}" for n in range(args.tables)]
    create_tables(store, names, 20)
    run_dir = workdir / f"{store.name}-{setup}"
    run_dir.mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{run_dir}/catalog.db", "warehouse": f"file://{run_dir}/warehouse"}
    streams = Streams(setup, store, names, run_dir, catalog)
    streams.load()
    busy = names[: args.busy]
    pool = Workers(store, setup, names, run_dir, catalog, args.round_workers, args.reader_every)
    server_before, started = tree_cpu(store.pid), time.monotonic()
    try:
        with writers(store, busy, args.rate, run_dir) as (out, _):
            workers, samples = pool.run(args.seconds)
    finally:
        pool.stop()
    elapsed = time.monotonic() - started
    server_cpu = tree_cpu(store.pid) - server_before
    for found_commits in (w["commits"] for w in workers):
        for table, done in found_commits.items():
            streams.commits[table].extend((int(p), float(a)) for p, a in done)
    streams.cycle()  # the writers stopped: the streams catch up
    streams.cycle()
    commits = {t: [(int(p), float(a)) for p, a in v] for t, v in json.loads(out.read_text()).items()}
    changes = sum(len(v) for v in commits.values())
    found = lags(streams, commits)
    task_cpu = sum(w["cpu_s"] for w in workers)
    for n, table in enumerate(busy):
        hot = store.open(table, n)
        assert_lake_equals_hot(hot, catalog, ("bench", table))
        hot.close()
    result = {
        "setup": setup, "tables": args.tables, "busy_tables": len(busy), "seconds": round(elapsed, 1),
        "changes": changes, "changes_per_second": round(changes / elapsed, 1),
        "reader_runs": sum(w["passes"] for w in workers if w["role"] == "reader"),
        "passes": sum(w["passes"] for w in workers if w["role"] == "rounds"),
        "rounds": sum(w["rounds"] for w in workers),
        "lag_p50_s": percentile(found, 0.5), "lag_p95_s": percentile(found, 0.95), "lag_max_s": percentile(found, 1.0),
        "lags_measured": len(found), "server_cpu_s": round(server_cpu, 2),
        "server_cpu_us_per_change": round(server_cpu / max(changes, 1) * 1e6, 1),
        "task_cpu_s": round(task_cpu, 2), "task_cpu_us_per_change": round(task_cpu / max(changes, 1) * 1e6, 1),
        **{k: max(v[k] for v in samples) if samples else None for k in ("slots", "wal_senders", "retained_wal_bytes")},
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }  # fmt: skip
    if setup == "group":
        result["change_log_expiry"] = streams.expire(streams.group["name"])
    streams.writer.stop()
    store.cleanup()
    return result


# -- part 3: under the scheduler -------------------------------------------------------------------------------
class ScheduledPostgres:
    """The scheduler part's PostgreSQL (a slot per table allowed): ``bench_freshness``'s tables, writer and sampler
    (the data age asked of the server, where each commit's WAL position and time are recorded)."""

    name, conn_id = "postgres", "hot_pg"

    def __init__(self, home: Path, tables: list[Any]) -> None:
        from benchmarks import bench_freshness as freshness
        from testbed.pg_server import PostgresServer

        slots = max(40, len(tables) + 10)
        settings = {"max_replication_slots": slots, "max_wal_senders": slots, "max_connections": 2 * slots + 100}
        self.server = PostgresServer(home / "pg", settings=settings).start()
        self.tables, self.stop_file, self.writer = tables, home / "stop-writing", None
        freshness.create_tables(self.server.dsn, tables)

    def spec(self, table: Any) -> dict[str, Any]:
        found: dict[str, Any] = table.spec()
        return found

    def env(self) -> dict[str, str]:
        from testbed.tiering_env import pg_conn

        return {"AIRFLOW_CONN_HOT_PG": pg_conn(self.server, self.server.password)}

    @property
    def pid(self) -> int | None:
        from benchmarks import bench_freshness as freshness

        return freshness.server_pid(self.server)

    @property
    def writer_pid(self) -> int | None:
        return None if self.writer is None else int(self.writer.pid)

    def start_writing(self, busy: list[Any], catalog: dict[str, str]) -> Any:
        from benchmarks import bench_freshness as freshness

        self.writer = subprocess.Popen(
            [sys.executable, "-c", "import sys, json; from benchmarks.bench_freshness import write, Table; "
             "write(sys.argv[1], [Table(**t) for t in json.loads(sys.argv[2])], sys.argv[3])",
             self.server.dsn, json.dumps([t.__dict__ for t in busy]), str(self.stop_file)],
            cwd=REPO,
        )  # fmt: skip
        return freshness.Sampler(self.server.dsn, catalog, self.tables, 5.0)

    def stop_writing(self) -> None:
        self.stop_file.touch()
        if self.writer is not None:
            self.writer.wait(timeout=30)

    def ages(self, sampler: Any) -> dict[str, list[float]]:
        found: dict[str, list[float]] = sampler.samples
        return found

    def replication(self) -> dict[str, Any]:
        return replication_of(self.server.dsn)

    def stop(self) -> None:
        self.server.stop()


class ScheduledMariaDB:
    """The scheduler part's MariaDB: this module's tables and writers (each commit's binlog position and time, kept
    by the writer process), and a sampler of the lakes' positions; each sample's data age is computed once the
    writers stopped (now minus the oldest commit past the lake's position at that sample)."""

    name, conn_id = "mariadb", "hot_maria"

    def __init__(self, home: Path, tables: list[Any]) -> None:
        self.store = MariaDBStore(home, len(tables))
        self.tables, self.home = tables, home
        self.writing: Any = None
        self.out = home / "writers.json"
        self.writer_pid: int | None = None
        self.commits: dict[str, list[tuple[float, int]]] = {}
        create_tables(self.store, [t.name for t in tables], 20)

    def spec(self, table: Any) -> dict[str, Any]:
        from benchmarks import bench_freshness as freshness

        return {"name": table.name, "source": {"kind": "mysql_cdc", "conn_id": self.conn_id, "table": table.name},
                "lake": {"namespace": freshness.NAMESPACE, "table": table.name},
                "freshness_seconds": table.freshness, "retries": 2, "retry_delay_seconds": 5}  # fmt: skip

    def env(self) -> dict[str, str]:
        server = self.store.server
        conn = {"conn_type": "mysql", "host": server.host, "port": server.port, "login": server.user,
                "password": server.password, "schema": server.database}  # fmt: skip
        return {"AIRFLOW_CONN_HOT_MARIA": json.dumps(conn)}

    @property
    def pid(self) -> int | None:
        return self.store.pid

    def start_writing(self, busy: list[Any], catalog: dict[str, str]) -> Any:
        self.writing = writers(self.store, [t.name for t in busy], float(len(busy)), self.home)  # a commit a second
        self.out, self.writer_pid = self.writing.__enter__()
        return LakePositions(self.store, catalog, [t.name for t in self.tables], 5.0)

    def stop_writing(self) -> None:
        if self.writing is not None:
            self.writing.__exit__(None, None, None)
            self.writing = None
            found = json.loads(self.out.read_text())
            self.commits = {t: sorted((float(a), int(p)) for p, a in v) for t, v in found.items()}

    def ages(self, sampler: Any) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for table, samples in sampler.samples.items():
            commits = self.commits.get(table, [])
            found[table] = [
                max(0.0, at - min((t for t, p in commits if p > position and t <= at), default=at))
                for at, position in samples
            ]
        return found

    def replication(self) -> dict[str, Any]:
        return self.store.replication()

    def stop(self) -> None:
        self.store.stop()


class LakePositions(threading.Thread):
    """Every ``every`` seconds, each table's lake position as ``store`` places its offsets, with the time (kept while
    ``measuring``); ``committed`` and ``positions`` as ``bench_freshness.Sampler`` has them."""

    def __init__(self, store: Any, catalog_properties: dict[str, str], names: list[str], every: float) -> None:
        super().__init__(daemon=True)
        self.store, self.properties, self.names, self.every = store, catalog_properties, names, every
        self.samples: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
        self.committed: dict[str, bool] = dict.fromkeys(names, False)
        self.positions: dict[str, int | None] = dict.fromkeys(names)
        self.measuring = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        from pyiceberg.catalog import load_catalog

        from benchmarks import bench_freshness as freshness

        catalog = load_catalog("default", **self.properties)
        while not self.stop.is_set():
            started = time.monotonic()
            for name in self.names:
                offsets = freshness.lake_offsets(catalog, name)
                position = None if offsets is None else int(self.store.lake_position(offsets))
                self.committed[name], self.positions[name] = position is not None, position
                if self.measuring.is_set():
                    self.samples[name].append((time.time(), -1 if position is None else position))
            self.stop.wait(max(0.0, self.every - (time.monotonic() - started)))


SCHEDULED = {"postgres": ScheduledPostgres, "mariadb": ScheduledMariaDB}


def scheduler(hot: str, setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One setup's tables on their own clocks under Airflow (see the module's description)."""
    from benchmarks import bench_freshness as freshness
    from testbed.airflow_cluster import AirflowCluster
    from testbed.tiering_env import embedded_setup

    tables = [freshness.Table(f"s{n:03d}", "cdc", args.busy_freshness if n < args.busy else args.idle_freshness,
                              False) for n in range(args.tables)]  # fmt: skip
    busy = tables[: args.busy]
    home = workdir / f"scheduler-{hot}-{setup}"
    home.mkdir(parents=True)
    store = SCHEDULED[hot](home, tables)
    try:
        group = {"name": "bench_group", "conn_id": store.conn_id, "change_log": {"namespace": freshness.NAMESPACE},
                 "read_every_seconds": args.read_every}  # fmt: skip
        specs = []
        for table in tables:
            spec = store.spec(table)
            if setup == "group":
                spec["source"]["stream"] = "bench_group"
            spec["maintenance"] = {"enabled": False}
            specs.append(spec)
        streams = f", streams=[{group!r}]" if setup == "group" else ""
        source = (
            f"# the benchmark's DAGs ({setup})\nfrom airflow_provider_tiering.dag_factory import build_table_dags\n\n"
            f"build_table_dags({freshness.GROUP!r}, {specs!r}{streams})\n"
        )
        dags, catalog, env = embedded_setup(home, None, source)
        env.update(store.env())
        overrides = freshness.deployment_overrides(args.parallelism)
        dag_ids = [freshness.GROUP, *(f"{freshness.GROUP}.{t.name}" for t in tables)]
        if setup == "group":
            dag_ids.append(f"{freshness.GROUP}.bench_group")
        with AirflowCluster(home / "airflow", dags, env, expected_dag_ids=dag_ids, config_overrides=overrides,
                            parse_timeout=600) as af:  # fmt: skip
            sampler = store.start_writing(busy, catalog)
            sampler.start()
            deadline = time.monotonic() + args.warmup_timeout
            while not all(sampler.committed.values()):
                if time.monotonic() > deadline:
                    missing = [name for name, done in sampler.committed.items() if not done]
                    raise RuntimeError(f"[{hot} {setup}] tables never tiered: {missing}\n{af.diagnostics()}")
                time.sleep(2)
            # Then a round of each busy table after its first: a group's first load holds the table as of its
            # snapshot, but its offsets say where the table joined the log (earlier), so until its next round the
            # sampled age counts commits the lake holds already.
            loaded = {t.name: sampler.positions[t.name] or 0 for t in busy}
            while not all((sampler.positions[name] or 0) > at for name, at in loaded.items()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"[{hot} {setup}] busy tables with no second round: {af.diagnostics()}")
                time.sleep(2)
            window_start = datetime.now(UTC)
            cpu_before = freshness.cpu_snapshot(af, store.pid, store.writer_pid)
            load_before = os.getloadavg()
            sampler.measuring.set()
            time.sleep(args.minutes * 60)
            sampler.measuring.clear()
            cpu_after = freshness.cpu_snapshot(af, store.pid, store.writer_pid)
            window_end, load_after = datetime.now(UTC), os.getloadavg()
            sampler.stop.set()
            sampler.join()
            store.stop_writing()
            seconds = (window_end - window_start).total_seconds()
            starts = freshness.task_starts(af, window_start, window_end)
            cpu = freshness.cpu_split(cpu_before, cpu_after, seconds)
            cpu["by_process_cpu_s"]["server"] = cpu["by_process_cpu_s"].pop("postgres", None)
            return {
                "hot": hot, "setup": setup, "tables": len(tables), "busy_tables": len(busy),
                "window_seconds": round(seconds), "data_age_seconds": freshness.ages(tables, store.ages(sampler)),
                "task_starts_per_minute": round(starts / (seconds / 60), 1), "cpu": cpu, **store.replication(),
                "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
            }  # fmt: skip
    finally:
        store.stop_writing()
        store.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hot", default="postgres,mariadb")
    parser.add_argument("--parts", default="decode,lag")
    parser.add_argument("--setups", default="per_table,group", help="the lag and scheduler parts' setups, side by side")
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--busy", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200.0, help="changes a second the writers commit in all")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--round-workers", type=int, default=2, help="the lag part's processes running rounds")
    parser.add_argument("--reader-every", type=float, default=1.0,
                        help="the lag part's reader: a run starts at most every this many seconds (its "
                        "read_every_seconds; 0: run after run)")  # fmt: skip
    parser.add_argument("--decode-tables", default="1,10,100")
    parser.add_argument("--decode-changes", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=10.0, help="the scheduler part's window, per setup")
    parser.add_argument("--busy-freshness", type=int, default=60)
    parser.add_argument("--idle-freshness", type=int, default=300)
    parser.add_argument("--read-every", type=float, default=10.0)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--warmup-timeout", type=float, default=1800.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--writer", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer:
        writer_main(json.loads(args.writer))
        return 0
    if args.worker:
        worker_main(json.loads(args.worker))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tiering-bench-stream-groups-"))
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not setups or set(setups) - {"per_table", "group"}:
        parser.error("--setups: per_table, group or both")
    report: dict[str, Any] = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
                              "arguments": {k: str(v) for k, v in vars(args).items() if k != "writer"}}  # fmt: skip

    def save() -> None:  # after each part: a long run keeps what it measured if a later part fails
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=1))

    hots = [h.strip() for h in args.hot.split(",") if h.strip()]
    if "scheduler" in parts:
        report["scheduler"] = []
        for hot in hots:
            for setup in setups:
                report["scheduler"].append(scheduler(hot, setup, args, workdir))
                save()
    for hot in hots:
        if not parts & {"decode", "lag"}:
            break
        store = STORES[hot](workdir / hot, args.tables)
        try:
            found: dict[str, Any] = report.setdefault(hot, {})
            if "decode" in parts:
                found["decode"] = [decode(store, int(n), args.decode_changes) for n in args.decode_tables.split(",")]
                save()
            if "lag" in parts:
                found["lag"] = []
                for setup in setups:
                    found["lag"].append(lag(store, setup, args, workdir / hot))
                    save()
        finally:
            store.stop()
    save()
    print(summary(report))
    return 0


def summary(report: dict[str, Any]) -> str:
    lines = []
    for row in report.get("scheduler", []):
        for klass, age in row["data_age_seconds"].items():
            lines.append(
                f"scheduler {row['hot']} {row['setup']:<9} {klass}: data age p50 {age['p50']} s, p95 {age['p95']} "
                f"s, max {age['max']} s, worst table p95 {age['worst_table_p95']} s"
            )
        cpu = row["cpu"]
        lines.append(
            f"scheduler {row['hot']} {row['setup']:<9}: {row['task_starts_per_minute']} task starts/min, Airflow CPU "
            f"{cpu['airflow_own_cpu_s']} s, tasks {cpu['task_processes_cpu_s']} s, server "
            f"{cpu['by_process_cpu_s'].get('server')} s in {row['window_seconds']} s; slots {row['slots']}, "
            f"retained WAL {row['retained_wal_bytes']}"
        )
    for hot in ("postgres", "mariadb"):
        found = report.get(hot)
        if not found:
            continue
        for row in found.get("decode", []):
            per_table, group = row["per_table"], row["group"]
            key = "server_decode_cpu_s" if hot == "postgres" else "server_cpu_s"
            extra = "" if hot == "postgres" else (
                f", binlog read {per_table['binlog_bytes_read']:,} vs {group['binlog_bytes_read']:,} bytes, reader "
                f"decode {per_table['reader_decode_cpu_s']} vs {group['reader_decode_cpu_s']} s"
            )  # fmt: skip
            lines.append(
                f"{hot} decode N={row['tables']:<3}: server CPU per table {per_table[key]} s vs group {group[key]} s "
                f"({row['changes']} changes){extra}"
            )
        for row in found.get("lag", []):
            lines.append(
                f"{hot} lag {row['setup']:<9}: p50 {row['lag_p50_s']} s, p95 {row['lag_p95_s']} s; server "
                f"{row['server_cpu_us_per_change']} us/change, task {row['task_cpu_us_per_change']} us/change; "
                f"slots {row['slots']}, senders {row['wal_senders']}, retained {row['retained_wal_bytes']}; "
                f"{row['changes']} changes, {row['rounds']} rounds in {row['passes']} passes, "
                f"{row['reader_runs']} reader runs"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
