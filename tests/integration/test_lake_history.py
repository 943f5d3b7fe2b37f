"""The committed offsets are read from the lake whatever else commits to the table: other writers' snapshots on top
of a tiering snapshot are passed over, and once snapshot expiry has removed the tiering snapshots the offsets of
the last tiering commit still hold (rows are neither tiered again nor skipped)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts

SPEC = TableSpec.parse(
    {
        "name": "shared",
        "source": {"conn_id": "unused", "table": "shared", "cursor_column": "id"},
        "lake": {"namespace": "it", "table": "shared"},
    }
)


def append_from_another_writer(catalog_properties: dict[str, str], ids: range) -> int:
    table = load_catalog("default", **catalog_properties).load_table(("it", "shared"))
    rows = [
        {"id": i, "region": "other", "amount": Decimal("1.00"), "created_at": datetime(2026, 1, 1), "note": "x"}
        for i in ids
    ]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    return table.current_snapshot().snapshot_id


def test_offsets_survive_other_writers_snapshots_and_snapshot_expiry(tmp_path, catalog_properties, spark_writer):
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("shared")
    hot.insert("shared", 1, 300)
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_():
        return round_parts(SPEC, hot, catalog_properties, writer=spark_writer).run(state)

    first = round_()
    append_from_another_writer(catalog_properties, range(-10, 0))
    hot.insert("shared", 301, 200)
    second = round_()
    assert second.outcome == "tiered" and second.start_offsets == {"cursor": 300} and second.metrics.rows == 200
    tiered = [row for row in lake_rows(catalog_properties, ("it", "shared"), COLUMNS) if row[1] != "other"]
    assert digest(tiered) == digest(hot.rows("shared"))

    # Another writer commits on top of the latest tiering snapshot, then everything below it is expired: the
    # offsets of the last tiering commit live on in a table property written in the same swap.
    head = append_from_another_writer(catalog_properties, range(-20, -10))
    table = load_catalog("default", **catalog_properties).load_table(("it", "shared"))
    expired = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != head]
    assert first.snapshot_id in expired and second.snapshot_id in expired
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    assert [
        s.snapshot_id for s in load_catalog("default", **catalog_properties).load_table(("it", "shared")).snapshots()
    ] == [head]
    hot.insert("shared", 501, 100)
    third = round_()
    assert third.outcome == "tiered" and third.start_offsets == {"cursor": 500} and third.metrics.rows == 100
    assert third.epoch == second.epoch + 1
    tiered = [row for row in lake_rows(catalog_properties, ("it", "shared"), COLUMNS) if row[1] != "other"]
    assert digest(tiered) == digest(hot.rows("shared"))
    assert state.load().status is TableStatus.TIERED
