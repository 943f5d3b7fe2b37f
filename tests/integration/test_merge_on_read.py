"""Merge-on-read: merge and change-stream rounds of scattered updates and deletes keep the lake's data files and
delete the superseded rows by position, and the lake equals the hot table by key through three readers (pyiceberg,
pyarrow's Parquet reader applying the delete files itself, DuckDB's Iceberg reader). A compaction that replaces
the files a round's deletes name, between the round's plan and its commit, loses nothing (forced deterministically
at the catalog's swap); maintenance applies the deletes. Real PostgreSQL 15, real pyiceberg, Spark for compaction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.maintenance import CompactionResult, MaintenanceStatus, run_maintenance
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.live_files import live_data_files, live_delete_files
from airflow_provider_tiering.lake.maintainer import IcebergMaintainer
from airflow_provider_tiering.lake.tiering_commits import OPERATION_PROPERTY
from airflow_provider_tiering.sources.registry import build_source
from testbed.changing_table import ChangingTable, assert_lake_equals_hot
from testbed.lake_check import files_named, live_file_rows, unreferenced_data_files
from testbed.lake_faults import CatalogThatPausesBeforeTheSwap
from testbed.mutable_tables import assert_lake_equals_live_rows_in_files, postgres_mutable
from testbed.pg_server import drop_table_slot
from testbed.rounds import catalog, lake_of

MB = 1024 * 1024


def merge_spec(name: str) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "hot", "table": name, "cursor_column": "version"},
            "lake": {"namespace": "it", "table": name},
            "merge": {"primary_key": ["id"], "soft_delete_column": "deleted_at"},
        }
    )


def cdc_spec(name: str) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"kind": "postgres_cdc", "conn_id": "hot", "table": name},
            "lake": {"namespace": "it", "table": name},
        }
    )


def assert_deletes_name_live_files(catalog_properties: dict[str, str], name: str) -> None:
    """Every live delete file is a position-delete file naming live data files only: none misses its rows."""
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    live = {f.file_path for f in live_data_files(table)}
    for delete_file in live_delete_files(table):
        assert delete_file.content == 1, f"{delete_file.file_path}: not a position-delete file"
        named = files_named(table.io, delete_file)
        assert named <= live, f"{delete_file.file_path} names files no longer live: {sorted(named - live)[:3]}"


def delete_files_of(catalog_properties: dict[str, str], name: str) -> list[str]:
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    return sorted(f.file_path for f in live_delete_files(table))


@pytest.fixture
def merged(pg_server, tmp_path, catalog_properties, local_writer):
    """A PostgreSQL table of 3,000 rows tiered by merge in three rounds (three data files of 1,000 rows)."""
    name = "mor_merged"
    hot = postgres_mutable(pg_server.dsn, name, seed=44)
    hot.create()
    spec = merge_spec(name)
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier(lake: IcebergLake | None = None) -> RoundResult:
        return run_round(spec, hot.source(spec.source), lake or lake_of(spec, catalog_properties), local_writer, store)

    for _ in range(3):
        hot.insert(1000)
        assert tier().outcome is RoundOutcome.TIERED
    return hot, spec, tier


def test_scattered_merges_over_many_rounds_delete_by_position(merged, tmp_path, catalog_properties):
    hot, spec, tier = merged
    name = spec.lake.table
    for number in range(12):
        hot.random_changes(inserts=20, updates=40, deletes=10, undeletes=5)
        result = tier()
        assert result.outcome is RoundOutcome.TIERED, result.error
        merge = result.metrics.merge
        assert merge is not None
        # 40 scattered updates of ~3,000 rows: no file loses most of its rows, so none is rewritten.
        assert merge.files_rewritten == 0 and merge.files_given_deletes >= 2, (number, merge)
        assert merge.rows_deleted_by_position >= 40 and merge.delete_files_written >= 1
        assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name), duckdb=number % 4 == 3)
        assert_deletes_name_live_files(catalog_properties, name)
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    summary = table.current_snapshot().summary
    assert int(summary["total-position-deletes"]) >= 12 * 40 and int(summary["total-delete-files"]) >= 12
    assert len(live_data_files(table)) == 3 + 12  # the three loaded files kept, one file of new versions a round
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []
    state = JsonFileStateStore(tmp_path / "state.json").load()  # what the status shows
    assert state is not None and state.lake_delete_files == int(summary["total-delete-files"])
    assert state.lake_deleted_rows == int(summary["total-position-deletes"])


def test_change_stream_rounds_of_scattered_changes_delete_by_position(
    pg_server, tmp_path, catalog_properties, local_writer
):
    name = "mor_stream"
    hot = ChangingTable(pg_server.dsn, name, seed=45)
    hot.create()
    spec = cdc_spec(name)
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier() -> RoundResult:
        source = build_source(spec.source, hot.connection())
        return run_round(spec, source, lake_of(spec, catalog_properties), local_writer, store)

    try:
        hot.insert(2000)
        assert tier().outcome is RoundOutcome.TIERED
        given_deletes = 0
        for number in range(10):
            hot.random_changes(60)
            result = tier()
            assert result.outcome is RoundOutcome.TIERED, result.error
            assert result.metrics.merge is not None
            given_deletes += result.metrics.merge.files_given_deletes
            assert_lake_equals_hot(hot, catalog_properties, ("it", name), duckdb=number % 3 == 2)
            assert_deletes_name_live_files(catalog_properties, name)
        assert given_deletes >= 10 and delete_files_of(catalog_properties, name)
        assert_lake_equals_hot(hot, catalog_properties, ("it", name), duckdb=True)
    finally:
        hot.close()
        drop_table_slot(pg_server.dsn, name)


def test_a_compaction_between_plan_and_commit_makes_the_round_plan_its_deletes_again(
    merged, catalog_properties, spark_writer
):
    """The round plans its position deletes against the three files; a compaction replaces all three just before
    the round's swap; the swap is lost, the round plans again against the compacted file and commits deletes that
    name it. Nothing of the first plan is referenced."""
    hot, spec, tier = merged
    name = spec.lake.table
    before = {
        f.file_path for f in live_data_files(load_catalog("default", **catalog_properties).load_table(("it", name)))
    }
    assert len(before) == 3
    compactions = []

    def compaction_commits_first() -> None:
        compactions.append(
            compact(
                lake_of(spec, catalog_properties),
                spark_writer,
                target_file_bytes=128 * MB,
                small_file_bytes=8 * MB,
                max_small_files=2,
                table_name=name,
            )  # fmt: skip
        )

    changed = [hot.keys(deleted=False)[i] for i in range(0, 3000, 97)]  # scattered across the three files
    for key in changed:
        hot.update(key)
    instrumented = CatalogThatPausesBeforeTheSwap(catalog(catalog_properties).handle().get(), compaction_commits_first)
    result = tier(lake_of(spec, catalog_properties, catalog_handle=CatalogHandle.of(instrumented)))

    assert compactions and compactions[0].outcome is CompactionResult.COMPACTED
    assert result.outcome is RoundOutcome.TIERED, result.error
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    parent = table.snapshot_by_id(table.current_snapshot().parent_snapshot_id)
    assert parent.summary[OPERATION_PROPERTY] == "compaction"
    live = {f.file_path: f.record_count for f in live_data_files(table)}
    assert not before & set(live)  # the three files the first plan deleted from are gone
    (compacted,) = [path for path, rows in live.items() if rows == 3000]
    (deletes,) = live_delete_files(table)
    assert "/merge-1/" in deletes.file_path  # planned again, on the swap's second try
    assert files_named(table.io, deletes) == {compacted} and deletes.record_count == len(changed)
    assert_deletes_name_live_files(catalog_properties, name)
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name), duckdb=True)
    assert result.metrics.merge.rows_deleted_by_position == len(changed)
    hot.random_changes(inserts=5, updates=30, deletes=5, undeletes=2)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))


class MemoryMaintenanceStore:
    def __init__(self) -> None:
        self.status: MaintenanceStatus | None = None

    def load(self) -> MaintenanceStatus | None:
        return self.status

    def save(self, status: MaintenanceStatus) -> None:
        self.status = status


def test_maintenance_compacts_the_files_deletes_pile_on_and_applies_them(merged, catalog_properties, spark_writer):
    """Twelve rounds leave at least ten delete files on each of the three loaded files: the table's maintenance
    (the spec's defaults) rewrites them without their deleted rows and drops the delete files naming nothing live;
    what stays is below both thresholds, and the lake still equals the table, then and after more rounds."""
    hot, spec, tier = merged
    name = spec.lake.table
    for _ in range(12):
        hot.random_changes(inserts=10, updates=40, deletes=10, undeletes=3)
        assert tier().outcome is RoundOutcome.TIERED
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    loaded = {t.file.file_path for t in table.scan().plan_files() if len(t.delete_files) >= 10}
    assert len(loaded) >= 3, "expected the three loaded files to carry ten delete files each"
    deleted_before = int(table.current_snapshot().summary["total-position-deletes"])

    store = MemoryMaintenanceStore()
    lake = lake_of(spec, catalog_properties)
    status = run_maintenance(
        name, spec.maintenance, IcebergMaintainer(lake, spark_writer, name), store,
        target_file_bytes=spec.target_file_bytes, now=datetime.now(UTC),
    )  # fmt: skip

    assert status.last_check is not None and status.last_check.outcome is CompactionResult.COMPACTED
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    tasks = table.scan().plan_files()
    assert not loaded & {t.file.file_path for t in tasks}
    for task in tasks:
        assert len(task.delete_files) < spec.maintenance.max_delete_files, task.file.file_path
        hidden = task.file.record_count - live_file_rows(task, ["id"]).num_rows
        assert hidden < spec.maintenance.deleted_fraction * task.file.record_count, task.file.file_path
    assert status.deleted_rows < deleted_before and status.delete_files == len(live_delete_files(table))
    assert_deletes_name_live_files(catalog_properties, name)
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name), duckdb=True)
    for _ in range(2):
        hot.random_changes(inserts=10, updates=30, deletes=5, undeletes=2)
        assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name), duckdb=True)
