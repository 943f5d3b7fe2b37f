"""A round on a real Spark standalone cluster: a master and two one-core workers on 127.0.0.1
(scripts/spark_standalone.sh, from the virtualenv's pyspark), a real PostgreSQL hot table, a local Iceberg
warehouse that the driver and the executors share (one machine).

The driver runs in a child process (testbed.spark_standalone): one JVM holds one SparkContext, and this test
session may already hold a local one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.spark_standalone import (
    StandaloneCluster,
    group_members,
    is_loopback,
    listening_addresses,
    round_in_child,
    running_cluster,
)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1g each), all ALIVE; every process group killed at teardown."""
    with running_cluster(tmp_path_factory.mktemp("spark-standalone"), workers=2) as cluster:
        yield cluster


def _round_config(
    cluster: StandaloneCluster, dsn: str, table: str, catalog: dict[str, str], tmp_path: Path, **options: object
) -> dict[str, object]:
    """A round of ``table`` on the cluster's two executors (``testbed.spark_standalone.run_cluster_round``)."""
    return {
        "master": cluster.master_url,
        "status_url": f"http://127.0.0.1:{cluster.webui_port}/json/",
        "executors": 2,
        "dsn": dsn,
        "table": table,
        "target_rows_per_split": 500,
        "catalog": catalog,
        "state_path": str(tmp_path / "state.json"),
        "conf": {"spark.executor.memory": "512m"},
        **options,
    }


def test_a_round_on_a_standalone_cluster_runs_on_both_workers_and_tiers_the_table_row_for_row(
    standalone: StandaloneCluster, pg_server, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    workers = [w for w in standalone.status()["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2 and all(w["host"] == "127.0.0.1" and w["cores"] == 1 for w in workers)

    table = "orders_standalone"
    hot = PostgresHot(pg_server.dsn)
    hot.create(table)
    hot.insert(table, 1, 4000)
    config = _round_config(standalone, pg_server.dsn, table, catalog_properties, tmp_path, cursor_column="id")
    report = round_in_child(config)

    # (b) the lake holds exactly the hot table.
    assert report["outcome"] == "tiered" and report["rows"] == 4000 and report["splits"] >= 4
    assert digest(lake_rows(catalog_properties, ("cluster", table), COLUMNS)) == digest(hot.rows(table))
    assert unreferenced_data_files(catalog_properties, ("cluster", table)) == []

    # (a) one executor on each worker, and each ran split tasks.
    executors = report["executors"]
    assert {e["worker"] for e in executors} == {w["id"] for w in workers}, executors
    assert all(e["tasks"] >= 1 for e in executors), executors
    assert sum(e["tasks"] for e in executors) >= report["splits"]
    deadline = time.monotonic() + 30  # the master moves the app to completedapps once the driver has unregistered
    while report["app_id"] not in (completed := {a["id"]: a for a in standalone.status()["completedapps"]}):
        assert time.monotonic() < deadline, standalone.status()
        time.sleep(0.5)
    assert completed[report["app_id"]]["state"] == "FINISHED"

    # Nothing listened beyond 127.0.0.1: the driver (while it ran), the master, the workers, their executors.
    assert report["driver_listening"] and all(is_loopback(host) for host, _ in report["driver_listening"])
    cluster_listening = listening_addresses(group_members(standalone.process_groups()))
    assert cluster_listening and all(is_loopback(host) for host, _ in cluster_listening), cluster_listening


def test_a_change_stream_first_load_in_several_splits_on_the_cluster_with_a_writer_running(
    standalone: StandaloneCluster, pg_server, catalog_properties: dict[str, str], tmp_path: Path, local_writer
) -> None:
    """A change-stream table's first load is read by several Spark tasks on both workers, each a range of the
    table's blocks in the snapshot its slot was created with, while a writer changes rows: the changes committed
    after that snapshot come from the stream, none missed and none twice; the slot is never ahead of the lake."""
    import threading

    import psycopg

    from airflow_provider_tiering.core.round import run_round
    from airflow_provider_tiering.core.round_result import RoundOutcome
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn
    from airflow_provider_tiering.sources.registry import build_source
    from testbed.changing_table import ChangingTable, assert_lake_equals_hot
    from testbed.rounds import lake_of

    table = "cdc_split_load"
    hot = ChangingTable(pg_server.dsn, table)
    hot.create()
    hot.insert(12000)
    hot.conn.execute(f'ANALYZE "{table}"')
    writer = ChangingTable(pg_server.dsn, table, seed=9)
    writer.next_id = 1_000_000
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            writer.transaction(3)

    source = {"kind": "postgres_cdc", "conn_id": "unused", "table": table}
    config = _round_config(
        standalone, pg_server.dsn, table, catalog_properties, tmp_path, source=source, target_rows_per_split=1500
    )
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        report = round_in_child(config)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert report["outcome"] == "tiered" and report["splits"] >= 4, report
    assert {e["worker"] for e in report["executors"] if e["tasks"]} == {
        w["id"] for w in standalone.status()["workers"] if w["state"] == "ALIVE"
    }
    assert sum(writer.counts.values()) > 0  # the writer changed rows while the load ran
    spec = TableSpec.parse({"name": table, "source": source, "lake": {"namespace": "cluster", "table": table}})
    store = JsonFileStateStore(tmp_path / "state.json")
    for _ in range(5):  # the changes since the load's snapshot, from the stream
        result = run_round(spec, build_source(spec.source, hot.connection()), lake_of(spec, catalog_properties),
                           local_writer, store)  # fmt: skip
        if result.outcome is RoundOutcome.NOTHING_TO_TIER:
            break
    assert_lake_equals_hot(hot, catalog_properties, ("cluster", table))
    with psycopg.connect(pg_server.dsn) as conn:
        slot_name = f"tiering_public_{table}"
        (slot,) = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot_name,)
        ).fetchone()
    lake_lsn = store.load().committed.end_offsets["lsn"]
    assert parse_lsn(slot) <= parse_lsn(lake_lsn)
    hot.close()
    writer.close()


def test_a_merge_round_on_the_cluster_rewrites_its_files_in_executor_tasks_and_survives_kills(
    standalone: StandaloneCluster, pg_server, catalog_properties: dict[str, str], tmp_path: Path, local_writer
) -> None:
    """A merge round's rewrite of the lake's files holding changed keys runs in Spark tasks on both workers (the
    driver's REST API lists them). An executor SIGKILLed in the rewrite, once its files are written: Spark runs the
    task again elsewhere, exactly one attempt's files are committed, the dead one's are deleted. The driver SIGKILLed
    with the rewrite written, before the commit: the lake is unchanged, and the next round converges and deletes the
    dead attempt's files. Lake = hot by key after each."""
    import psycopg
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.core.round import run_round
    from airflow_provider_tiering.core.round_result import RoundOutcome
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from testbed.mutable_tables import assert_lake_equals_live_rows, postgres_mutable
    from testbed.rounds import lake_of
    from testbed.split_faults import attempts

    table = "merge_on_cluster"
    hot = postgres_mutable(pg_server.dsn, table)
    hot.create()
    rows = 300_000

    def change(version_base: int, every: int, remainder: int, *, delete: bool = False) -> None:
        """Update (or soft-delete) every ``every``-th key, scattered over every file, with fresh versions."""
        extra = ", deleted_at = now()" if delete else ", name = 'renamed ' || id, amount = amount + 1"
        with psycopg.connect(pg_server.dsn) as conn:
            conn.execute(  # type: ignore[call-overload]
                f'UPDATE "{table}" SET version = {version_base} + id{extra} '
                f"WHERE id % {every} = {remainder} AND deleted_at IS NULL"
            )
        hot.version = version_base + rows

    with psycopg.connect(pg_server.dsn) as conn:
        conn.execute(
            f"INSERT INTO \"{table}\" SELECT 0, g, 'name ' || g, (g %% 100000) / 100.0, NULL, g "
            "FROM generate_series(1, %s) AS g",
            (rows,),
        )
    hot.next_id, hot.version = rows + 1, rows
    merge = {"primary_key": ["id"], "soft_delete_column": "deleted_at"}
    # Copy-on-write for every file holding a changed key: the rewrite is what runs in executor tasks.
    lake = {"namespace": "cluster", "table": table, "copy_on_write_fraction": 0}
    spec_fields = {"merge": merge, "target_file_size_mb": 1, "lake": lake}
    spec = TableSpec.parse(
        {"name": table, "source": {"conn_id": "unused", "table": table, "cursor_column": "version"}, **spec_fields}
    )
    store = JsonFileStateStore(tmp_path / "state.json")
    first = run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, store)
    assert first.outcome is RoundOutcome.TIERED and first.metrics.files >= 3, first.metrics

    # 1. An executor killed in the rewrite.
    change(1_000_000, 50, 7)  # 2% of the keys updated
    change(2_000_000, 997, 3, delete=True)  # 0.1% deleted
    records = tmp_path / "attempts"
    records.mkdir()
    lake_dir = str(Path(catalog_properties["warehouse"].removeprefix("file://")))
    config = _round_config(
        standalone,
        pg_server.dsn,
        table,
        catalog_properties,
        tmp_path,
        cursor_column="version",
        target_rows_per_split=200_000,
        spec=spec_fields,
        merge_faults={"record_dir": str(records), "lake_dir": lake_dir, "kill_executor": [0]},
        conf={"spark.executor.memory": "512m", "spark.executorEnv.PYTHONPATH": str(Path(__file__).parents[2])},
    )
    report = round_in_child(config)
    assert report["outcome"] == "tiered", report
    merged = report["merge"]
    assert merged["ran_on"] == "spark" and merged["tasks"] >= 2 and merged["files_rewritten"] >= 3, merged
    merge_stage = max(t["stage"] for t in report["tasks"])
    merge_tasks = [t for t in report["tasks"] if t["stage"] == merge_stage]
    assert {t["index"] for t in merge_tasks} == set(range(merged["tasks"])), merge_tasks
    assert "driver" not in {t["executor"] for t in merge_tasks}
    assert len({t["executor"] for t in merge_tasks}) >= 2, merge_tasks  # both workers' (one then killed)
    assert [t["status"] for t in sorted(merge_tasks, key=lambda t: t["attempt"]) if t["index"] == 0] == [
        "FAILED",
        "SUCCESS",
    ], merge_tasks
    killed = attempts(records)[0]
    assert [r["attempt"] for r in killed][:2] == [0, 1] and killed[0]["files"], killed  # it had written its files
    assert_lake_equals_live_rows(hot, catalog_properties, ("cluster", table))
    assert unreferenced_data_files(catalog_properties, ("cluster", table)) == []
    assert not any(Path(f).exists() for f in killed[0]["files"])

    # 2. The driver killed with the rewrite written, before the commit.
    lake_table = load_catalog("default", **catalog_properties).load_table(("cluster", table))
    before = lake_table.current_snapshot().snapshot_id
    change(3_000_000, 40, 11)
    config = {**config, "kill_before_merge_commit": True}
    config.pop("merge_faults")
    with pytest.raises(RuntimeError, match="merge rewritten: .* killing the driver"):
        round_in_child(config)
    lake_table = load_catalog("default", **catalog_properties).load_table(("cluster", table))
    assert lake_table.current_snapshot().snapshot_id == before
    assert unreferenced_data_files(catalog_properties, ("cluster", table))  # the dead attempt's rewrite
    change(4_000_000, 400, 1)
    recovered = run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, store)
    assert recovered.outcome is RoundOutcome.TIERED
    assert_lake_equals_live_rows(hot, catalog_properties, ("cluster", table))
    assert unreferenced_data_files(catalog_properties, ("cluster", table)) == []
