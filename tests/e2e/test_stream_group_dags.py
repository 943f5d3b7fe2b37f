"""Stream groups of 20 tables through DAG runs under a real scheduler and LocalExecutor, on PostgreSQL (one slot, one
publication) and on MariaDB (one binlog dump per run): the group's reader DAG writes each table's changes to the change
log, each table's own DAG applies them. Writers update, delete, change keys and re-insert on several tables; the
reader's task and a table's task are SIGKILLed at every phase; one table fails for several rounds while its siblings
keep up, then catches up once fixed; a table joins mid-stream with a writer running; one leaves (its lake table kept,
no longer read). After each step the lake equals the hot table by key for every table (pyiceberg and the Parquet
files; DuckDB at the end); the CLI and ``sys.lake_tiering_status`` show each table's group and backlog."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.changing_table import ChangingMariaDBTable, ChangingTable, assert_lake_equals_hot
from testbed.stream_group_dags import READER_PHASES, ROUND_PHASES, dag_file
from testbed.stream_group_runs import GroupRuns, Writers
from testbed.tiering_env import embedded_setup
from tests.e2e.test_cli import cli

TABLES = 20
FAILING_TIMEOUT = 20  # seconds: a round of the failing table on MariaDB waits on its lock this long


@dataclass
class Database:
    """One of the two databases a group reads, as this test drives it."""

    name: str
    server: Any
    conn_id: str
    kind: str

    @property
    def mariadb(self) -> bool:
        return self.name == "mariadb"

    def open(self, table: str, seed: int) -> ChangingTable | ChangingMariaDBTable:
        if self.mariadb:
            return ChangingMariaDBTable(self.server.url, table, seed=seed)
        return ChangingTable(self.server.dsn, table, seed=seed)

    def env(self) -> dict[str, str]:
        if not self.mariadb:
            return {}
        server = self.server
        conn = {"conn_type": "mysql", "host": server.host, "port": server.port, "login": server.user,
                "password": server.password, "schema": server.database}  # fmt: skip
        return {"AIRFLOW_CONN_HOT_MARIA": json.dumps(conn)}


@pytest.fixture(params=["postgres", "mariadb"])
def database(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "mariadb":
        yield Database("mariadb", request.getfixturevalue("mariadb_server"), "hot_maria", "mysql_cdc")
        return
    server = request.getfixturevalue("pg_server")
    yield Database("postgres", server, "hot_pg", "postgres_cdc")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE %s",
                     ("tiering_group_%",))  # fmt: skip


@pytest.mark.timeout(2400)
def test_a_group_of_twenty_tables_reads_its_database_once_through_dag_runs(database: Database, tmp_path: Path) -> None:
    prefix = "pg" if not database.mariadb else "my"
    namespace, dag_group, stream = f"{prefix}sg", f"{prefix}_dags", f"{prefix}_stream"
    tables = [f"{prefix}_t{n:02d}" for n in range(TABLES)]
    busy, failing, late, gone = tables[:5], tables[7], f"{prefix}_late", tables[19]
    group = {"name": stream, "conn_id": database.conn_id, "change_log": {"namespace": namespace},
             "expire_every_seconds": 0, "retries": 0, "read_every_seconds": 3600}  # fmt: skip

    def member(table: str) -> dict[str, Any]:
        source: dict[str, Any] = {"kind": database.kind, "conn_id": database.conn_id, "table": table, "stream": stream}
        options: dict[str, Any] = {}
        if table == failing and not database.mariadb:  # its spec names its columns: a rename of one fails it
            source["columns"] = ["id", "name", "amount", "doc", "tags", "note"]
        if table == failing and database.mariadb:  # a lock holds its rounds past their timeout
            options["round_timeout_seconds"] = FAILING_TIMEOUT
        return {"name": table, "source": source, "lake": {"namespace": namespace, "table": table}, "retries": 0,
                "max_consecutive_failures": 50, "freshness_seconds": 3600, "maintenance": {"enabled": False},
                **options}  # fmt: skip

    hot = {t: database.open(t, n) for n, t in enumerate([*tables, late])}
    for table in tables:
        hot[table].create()
        hot[table].insert(30)
    hot[failing]._run(f"ALTER TABLE {hot[failing].ref} ADD COLUMN note TEXT")
    markers = tmp_path / "markers"
    markers.mkdir()
    dags, catalog, env = embedded_setup(tmp_path, None if database.mariadb else database.server,
                                        dag_file(dag_group, group, [member(t) for t in tables], markers))  # fmt: skip
    env.update(database.env())

    def check(which: list[str], *, duckdb: bool = False) -> None:
        for table in which:
            assert_lake_equals_hot(hot[table], catalog, (namespace, table), duckdb=duckdb)

    def slots() -> int | None:
        if database.mariadb:
            return None
        with psycopg.connect(database.server.dsn) as conn:
            return int(conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0])

    slots_before = slots()
    dag_ids = [f"{dag_group}.{t}" for t in tables] + [f"{dag_group}.{stream}", dag_group]
    try:
        with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env,
                            expected_dag_ids=dag_ids) as af:  # fmt: skip
            runs = GroupRuns(af, dag_group, stream)
            # Each DAG's first scheduled run: the reader takes the tables in, each table loads.
            runs.settled(dag_ids, first_runs=True)
            lakes = load_catalog("default", **catalog)
            unloaded = [t for t in tables if not lakes.table_exists((namespace, t))]  # a first round that gave up
            assert runs.read() == "success" and set(runs.tier(unloaded).values()) <= {"success"}
            check(tables)
            if slots_before is not None:
                assert slots() == slots_before + 1, "one slot for the group's 20 tables"

            with Writers(database.open, busy) as writers:
                for _ in range(2):
                    assert runs.read() == "success"
                    assert set(runs.tier(busy).values()) == {"success"}
            made = writers.counts()
            assert all(made[k] for k in ("update", "key_update", "delete", "reinsert")), made
            assert runs.read() == "success"
            runs.tier(busy)
            check(tables)

            # The reader's task and a table's task SIGKILLed at every phase, writers busy.
            with Writers(database.open, busy):
                for reader_phase, round_phase in zip(READER_PHASES, ROUND_PHASES, strict=True):
                    (markers / f"kill-reader-{reader_phase}").touch()
                    assert runs.read() == "failed", reader_phase
                    (markers / f"kill-{busy[0]}-{round_phase}").touch()
                    assert runs.read() == "success"
                    assert runs.tier(busy[:1]) == {busy[0]: "failed"}, round_phase
                    assert not list(markers.iterdir()), f"the kill switches fired ({reader_phase}, {round_phase})"
            assert runs.read() == "success"
            runs.tier(busy)
            check(tables)

            # One table fails for several rounds while its siblings keep up; fixed, it catches up from the log.
            # PostgreSQL: a migration renamed a column its spec names. MariaDB: a session holds the table locked while
            # its rounds run, which wait on it past their timeout (a table lock ends with a transaction: the changes
            # are made between two locks).
            locker = database.open(failing, 99)
            if not database.mariadb:
                hot[failing]._run(f"ALTER TABLE {hot[failing].ref} RENAME COLUMN note TO note_renamed")
            for _ in range(3):
                for table in [failing, busy[1]]:
                    hot[table].random_changes(10)
                assert runs.read() == "success"
                if database.mariadb:
                    locker._run(f"LOCK TABLES {locker.ref} WRITE")
                assert runs.tier([failing, busy[1]]) == {failing: "failed", busy[1]: "success"}
                if database.mariadb:
                    locker._run("UNLOCK TABLES")
                check(busy[1:2])
            locker.close()
            failed = af.asset_state_store(f"tiering/{namespace}/{failing}")["tiering_state"]
            assert failed["consecutive_failures"] >= 3, failed
            read = af.asset_state_store(f"tiering-stream/{namespace}/{stream}_changes")["tiering_stream_state"]
            waiting = next(t for t in read["tables"].values() if t["name"] == failing)
            # Its changes wait in the change log, counted: as many as the log holds past its lake's position.
            log_rows = load_catalog("default", **catalog).load_table((namespace, f"{stream}_changes")).scan().to_arrow()
            mine = [r for r in log_rows.to_pylist() if r["source_table"].endswith(f".{failing}")]
            lake = failed["committed"]["end_offsets"]
            assert waiting["backlog_changes"] == len(mine) >= 10 and waiting["held_from"] <= min(
                r["position"] for r in mine
            ), (waiting, lake)
            if not database.mariadb:
                hot[failing]._run(f"ALTER TABLE {hot[failing].ref} RENAME COLUMN note_renamed TO note")
            assert runs.tier([failing]) == {failing: "success"}
            check([failing, busy[1]])

            # A table joins the running stream, a writer on it; its DAG's first run waits for the reader.
            hot[late].create()
            hot[late].insert(100)
            with Writers(database.open, [late]):
                (dags / "tiering_dags.py").write_text(
                    dag_file(dag_group, group, [member(t) for t in [*tables, late]], markers)
                )
                af.wait_for_dags([f"{dag_group}.{late}"])
                assert runs.read() == "success"
                runs.settled([f"{dag_group}.{late}"], first_runs=True)
                for _ in range(2):
                    assert runs.read() == "success"
                    assert runs.tier([late]) == {late: "success"}
            assert runs.read() == "success"
            runs.tier([late])
            check([late])

            # A table leaves the group: no longer read, its lake table kept.
            kept = [t for t in [*tables, late] if t != gone]
            (dags / "tiering_dags.py").write_text(dag_file(dag_group, group, [member(t) for t in kept], markers))
            reader_state = f"tiering-stream/{namespace}/{stream}_changes"
            for _ in range(30):
                assert runs.read() == "success"
                read = af.asset_state_store(reader_state)["tiering_stream_state"]
                if not any(t.endswith(f".{gone}") for t in read["tables"]):
                    break
            else:
                raise AssertionError(f"{gone} still read: {read['tables'].keys()}")
            if not database.mariadb:
                with psycopg.connect(database.server.dsn) as conn:
                    published = {r[0] for r in conn.execute("SELECT tablename FROM pg_publication_tables")}
                assert gone not in published and late in published
            hot[gone].random_changes(10)
            for table in busy:
                hot[table].random_changes(20)
            assert runs.read() == "success"
            assert len(load_catalog("default", **catalog).load_table((namespace, gone)).scan().to_arrow()) > 0
            runs.tier(busy)
            check(kept, duckdb=True)  # and read by DuckDB's Iceberg reader
            if slots_before is not None:
                assert slots() == slots_before + 1

            # Where users look: the CLI, and sys.lake_tiering_status once the group's status DAG ran.
            shown = cli(af, "status", busy[0], "-o", "json")
            assert shown.returncode == 0, shown.stderr
            record = json.loads(shown.stdout)
            assert record["change_stream"]["stream_group"] == stream, record["change_stream"]
            assert record["change_stream"]["log_backlog_changes"] == 0, record["change_stream"]
            assert record["stream_group"]["status"] == "read" and record["stream_group"]["log"], record
            text = cli(af, "status", busy[0]).stdout
            assert "stream group" in text and "group reader" in text, text
            runs.settled([dag_group])
            run_id = af.trigger_dag(dag_group)
            af.wait_for_run(dag_group, run_id, timeout=300)
            status = load_catalog("default", **catalog).load_table(("sys", "lake_tiering_status")).scan().to_arrow()
            rows = {r["tiered_table"]: r for r in status.to_pylist()}
            assert rows[busy[0]]["stream_group"] == stream and rows[busy[0]]["stream_reader_status"] == "read"
            assert rows[busy[0]]["log_backlog_changes"] == 0
    finally:
        for table in hot.values():
            table.close()
