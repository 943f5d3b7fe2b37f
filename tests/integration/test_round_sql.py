"""Rounds against real hot stores, real Spark and a real pyiceberg catalog; the lake is checked independently."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.tiering_commits import END_PROPERTY, EPOCH_PROPERTY
from testbed.hot_tables import COLUMNS, PostgresHot, SqliteHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.rounds import round_parts
from testbed.writers import UntouchableWriter


@pytest.fixture(params=["sqlite", "postgres"])
def hot(request, tmp_path, pg_server):
    if request.param == "sqlite":
        return SqliteHot(tmp_path / "hot.db")
    return PostgresHot(pg_server.dsn)


def make_spec(name: str, partition_by: tuple[str, ...] = ()) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "unused", "table": name, "cursor_column": "id"},
            "lake": {"namespace": "it", "table": name, "partition_by": list(partition_by)},
            "target_rows_per_split": 700,
        }
    )


def run(spec, hot, catalog_properties, writer, state_path: Path):
    return round_parts(spec, hot, catalog_properties, writer=writer).run(JsonFileStateStore(state_path))


def assert_lake_equals_hot(hot, table, catalog_properties):
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


@pytest.mark.parametrize("partition_by", [(), ("region",)], ids=["plain", "identity-partitioned"])
def test_lake_equals_hot_store_after_three_rounds_with_inserts(
    hot, partition_by, catalog_properties, spark_writer, tmp_path
):
    table = f"orders_{hot.kind}_{len(partition_by)}"
    spec = make_spec(table, partition_by)
    hot.create(table)
    state_path = tmp_path / "state.json"
    epochs = []
    for round_number, (start, count) in enumerate([(1, 3000), (3001, 1200), (4201, 800)], start=1):
        hot.insert(table, start, count)
        result = run(spec, hot, catalog_properties, spark_writer, state_path)
        assert result.outcome == "tiered"
        assert result.metrics.rows == count
        assert result.end_offsets == {"cursor": start + count - 1}
        epochs.append(result.epoch)
        assert_lake_equals_hot(hot, table, catalog_properties)
        state = JsonFileStateStore(state_path).load()
        assert state.status is TableStatus.TIERED and state.committed.snapshot_id == result.snapshot_id
        assert len(load_catalog("default", **catalog_properties).load_table(("it", table)).snapshots()) == round_number
    assert epochs == [1, 2, 3]

    iceberg = load_catalog("default", **catalog_properties).load_table(("it", table))
    summary = iceberg.current_snapshot().summary
    assert summary[EPOCH_PROPERTY] == "3" and summary[END_PROPERTY] == '{"cursor":5000}'
    assert unreferenced_data_files(catalog_properties, ("it", table)) == []
    if partition_by:
        assert [f.name for f in iceberg.spec().fields] == ["region"]
        files = iceberg.inspect.files().to_pylist()
        assert {f["partition"]["region"] for f in files} == {"eu", "us", "apac"}
        # Each file holds exactly one partition value, and the files are pruned by a filter.
        eu_rows = iceberg.scan(row_filter="region == 'eu'").to_arrow()
        assert set(eu_rows.column("region").to_pylist()) == {"eu"}
        assert len(list(iceberg.scan(row_filter="region == 'eu'").plan_files())) < len(files)


def test_round_with_nothing_to_tier_runs_no_spark_job(hot, catalog_properties, spark_writer, tmp_path):
    table = f"idle_{hot.kind}"
    spec = make_spec(table)
    hot.create(table)
    hot.insert(table, 1, 500)
    state_path = tmp_path / "state.json"
    tiered = run(spec, hot, catalog_properties, spark_writer, state_path)
    started = time.monotonic()
    idle = run(spec, hot, catalog_properties, UntouchableWriter(), state_path)
    elapsed = time.monotonic() - started
    assert idle.outcome == "nothing_to_tier" and idle.snapshot_id == tiered.snapshot_id
    assert JsonFileStateStore(state_path).load().status is TableStatus.TIERED
    assert elapsed < 10, f"an idle round took {elapsed:.1f}s"


def test_empty_hot_table_creates_the_lake_table_and_tiers_nothing(hot, catalog_properties, tmp_path):
    table = f"empty_{hot.kind}"
    spec = make_spec(table)
    hot.create(table)
    result = run(spec, hot, catalog_properties, UntouchableWriter(), tmp_path / "state.json")
    assert result.outcome == "nothing_to_tier"
    iceberg = load_catalog("default", **catalog_properties).load_table(("it", table))
    assert [f.name for f in iceberg.schema().fields] == list(COLUMNS)
    assert JsonFileStateStore(tmp_path / "state.json").load().status is TableStatus.SCHEDULED


def test_a_round_of_one_split_is_written_without_starting_spark(hot, catalog_properties, tmp_path):
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.spark.session import SparkSettings

    table = f"small_{hot.kind}"
    spec = make_spec(table).model_copy(update={"target_rows_per_split": 5000})
    hot.create(table)
    hot.insert(table, 1, 1200)
    # A master nobody listens on: the round fails if it starts a session.
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    result = run(spec, hot, catalog_properties, writer, tmp_path / "state.json")
    assert result.outcome == "tiered" and result.metrics.rows == 1200 and result.metrics.splits == 1
    assert writer._spark is None
    assert_lake_equals_hot(hot, table, catalog_properties)
    assert unreferenced_data_files(catalog_properties, ("it", table)) == []
