"""SIGKILL the process running a round at three points; the next round leaves the lake equal to the hot store."""

from __future__ import annotations

import json

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.iceberg import IcebergLake
from testbed.crash_round import crash_round
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.rounds import lake_of

SPEC = {
    "name": "crashy",
    "source": {"conn_id": "unused", "table": "crashy", "cursor_column": "id"},
    "lake": {"namespace": "it", "table": "crashy"},
    "target_rows_per_split": 1000,
}


@pytest.mark.parametrize("kill_at", ["writing", "written", "committed"])
def test_round_killed_with_sigkill_loses_and_duplicates_nothing(kill_at, tmp_path, catalog_properties, spark_writer):
    spec = TableSpec.parse(SPEC)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("crashy")
    hot.insert("crashy", 1, 1000)
    state_store = JsonFileStateStore(tmp_path / "state.json")

    def lake() -> IcebergLake:
        return lake_of(spec, catalog_properties)

    first = run_round(spec, hot.source(spec.source), lake(), spark_writer, state_store)
    hot.insert("crashy", 1001, 12_000)  # 12 splits: a kill mid-write leaves some written, some not

    crashed = crash_round(tmp_path, catalog_properties, kill_at, SPEC)
    assert crashed.returncode == -9, (
        f"round was not killed: {crashed.returncode}\n{crashed.stdout}\n{crashed.stderr[-3000:]}"
    )
    assert f"phase {kill_at}" in crashed.stdout
    table = load_catalog("default", **catalog_properties).load_table(("it", "crashy"))
    dead = state_store.load()
    assert dead.status is TableStatus.TIERING and dead.epoch == first.epoch + 1
    if kill_at == "writing":
        written_before_kill = json.loads((tmp_path / "killed-with-files.json").read_text())
        assert written_before_kill, "the kill was meant to land mid-write"
    if kill_at == "committed":
        assert table.current_snapshot().snapshot_id != first.snapshot_id  # the dead attempt did commit
    else:
        assert table.current_snapshot().snapshot_id == first.snapshot_id
        assert unreferenced_data_files(catalog_properties, ("it", "crashy")), "expected the dead attempt's files"

    hot.insert("crashy", 13_001, 500)
    # The first round's event was announced (epoch 1); the dead attempt's, if it committed, was not.
    recovered = run_round(spec, hot.source(spec.source), lake(), spark_writer, state_store, announced_epoch=first.epoch)

    assert recovered.outcome == "tiered"
    assert recovered.epoch == first.epoch + 2
    # After a crash past the commit, only the newer rows are tiered: the committed ones are not tiered again.
    assert recovered.metrics.rows == (500 if kill_at == "committed" else 12_500)
    assert digest(lake_rows(catalog_properties, ("it", "crashy"), COLUMNS)) == digest(hot.rows("crashy"))
    assert unreferenced_data_files(catalog_properties, ("it", "crashy")) == []
    state = state_store.load()
    assert state.status is TableStatus.TIERED and state.committed.snapshot_id == recovered.snapshot_id
    if kill_at != "committed":
        assert "ended without recording" in state.last_error and state.consecutive_failures == 0
        assert recovered.unannounced == () and len(recovered.announcements()) == 1
    else:
        # The next round owes the dead attempt's event, read back from the lake: the events chain without a gap.
        (dead_commit,) = recovered.unannounced
        assert dead_commit.epoch == first.epoch + 1 and dead_commit.rows == 12_000
        events = recovered.announcements()
        assert [e["epoch"] for e in events] == [first.epoch + 1, recovered.epoch]
        assert events[0]["recovered"] is True and "recovered" not in events[1]
        assert events[0]["start_offsets"] == first.end_offsets == {"cursor": 1000}
        assert events[0]["end_offsets"] == events[1]["start_offsets"] == {"cursor": 13_000}
        assert sum(e["rows"] for e in events) + first.metrics.rows == len(hot.rows("crashy"))
