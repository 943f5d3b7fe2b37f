"""A stale attempt resumed after a newer one committed is fenced and commits nothing."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.errors import FencedError
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.iceberg import IcebergLake
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.lake_faults import CatalogThatPausesBeforeTheSwap
from testbed.rounds import catalog, lake_of

SPEC = TableSpec.parse(
    {
        "name": "fenced",
        "source": {"conn_id": "unused", "table": "fenced", "cursor_column": "id"},
        "lake": {"namespace": "it", "table": "fenced"},
        "target_rows_per_split": 500,
    }
)


def fenced_table(tmp_path, catalog_properties):
    """A hot table of 2,000 rows, its state store, and a function giving its lake (through ``catalog`` if given)."""
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("fenced")
    hot.insert("fenced", 1, 2000)

    def lake(instrumented=None) -> IcebergLake:
        handle = None if instrumented is None else CatalogHandle.of(instrumented)
        return lake_of(SPEC, catalog_properties, catalog_handle=handle)

    return hot, JsonFileStateStore(tmp_path / "state.json"), lake


def test_stale_attempt_is_fenced_and_commits_nothing(tmp_path, catalog_properties, spark_writer):
    hot, state_store, lake = fenced_table(tmp_path, catalog_properties)
    newer: dict[str, object] = {}

    def pause_stale_attempt(phase: str) -> None:
        # The stale attempt has written its files; before it commits, a newer attempt runs a whole round.
        if phase == "written" and not newer:
            hot.insert("fenced", 2001, 300)
            newer["result"] = run_round(SPEC, hot.source(SPEC.source), lake(), spark_writer, state_store)

    with pytest.raises(FencedError, match="fenced") as err:
        run_round(SPEC, hot.source(SPEC.source), lake(), spark_writer, state_store, observe=pause_stale_attempt)
    assert "epoch 1" in str(err.value) and "nothing was committed" in str(err.value)

    winner = newer["result"]
    assert winner.outcome == "tiered" and winner.epoch == 2 and winner.metrics.rows == 2300
    table = load_catalog("default", **catalog_properties).load_table(("it", "fenced"))
    assert len(table.snapshots()) == 1 and table.current_snapshot().snapshot_id == winner.snapshot_id
    assert digest(lake_rows(catalog_properties, ("it", "fenced"), COLUMNS)) == digest(hot.rows("fenced"))
    # The fenced attempt deleted its own files and left the winner's state document alone.
    assert unreferenced_data_files(catalog_properties, ("it", "fenced")) == []
    state = state_store.load()
    assert state.status is TableStatus.TIERED and state.epoch == 2 and state.committed.snapshot_id == winner.snapshot_id


def test_commit_refuses_a_lower_epoch_even_with_matching_offsets(tmp_path, catalog_properties, spark_writer):
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("fenced")
    hot.insert("fenced", 1, 100)
    lake = lake_of(SPEC, catalog_properties)
    first = run_round(SPEC, hot.source(SPEC.source), lake, spark_writer, JsonFileStateStore(tmp_path / "s.json"))
    with pytest.raises(FencedError):
        lake.commit(
            [], epoch=first.epoch, start=first.end_offsets, end={"cursor": 200}, table_name="fenced", attempt="x"
        )
    assert load_catalog("default", **catalog_properties).load_table(
        ("it", "fenced")
    ).current_snapshot().snapshot_id == (first.snapshot_id)


def test_attempt_fenced_when_a_newer_one_commits_between_its_check_and_its_swap(
    tmp_path, catalog_properties, spark_writer
):
    """The catalog swap of the stale attempt fails; retrying it must re-check the fence, not rebase its files onto
    the newer attempt's snapshot (pyiceberg's own commit retry would: that would tier rows 1..2000 twice)."""
    hot, state_store, lake = fenced_table(tmp_path, catalog_properties)
    newer: dict[str, object] = {}

    def newer_round() -> None:
        hot.insert("fenced", 2001, 300)
        newer["result"] = run_round(SPEC, hot.source(SPEC.source), lake(), spark_writer, state_store)

    stale_lake = lake(CatalogThatPausesBeforeTheSwap(catalog(catalog_properties).handle().get(), newer_round))
    with pytest.raises(FencedError, match="nothing was committed"):
        run_round(SPEC, hot.source(SPEC.source), stale_lake, spark_writer, state_store)

    winner = newer["result"]
    assert winner.outcome == "tiered" and winner.metrics.rows == 2300
    table = load_catalog("default", **catalog_properties).load_table(("it", "fenced"))
    assert [s.snapshot_id for s in table.snapshots()] == [winner.snapshot_id]
    assert digest(lake_rows(catalog_properties, ("it", "fenced"), COLUMNS)) == digest(hot.rows("fenced"))
    assert unreferenced_data_files(catalog_properties, ("it", "fenced")) == []
    assert state_store.load().committed.snapshot_id == winner.snapshot_id
