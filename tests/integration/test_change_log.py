"""A stream group's change log on a real pyiceberg catalog: each table's backlog counted in one scan agrees with its
count alone, before and after the reader expires what a table applied."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.offsets import LsnOffsets
from airflow_provider_tiering.core.ports import StreamMember
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.change_log import CHANGE_LOG_SCHEMA, IcebergChangeLog


def _rows(changes: list[tuple[str, int]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"source_table": t, "position": p, "log_position": str(p), "commit_at": p, "seq": 0, "op": "I", "row": "{}"}
            for t, p in changes
        ],
        schema=CHANGE_LOG_SCHEMA,
    )


def _offsets(position: int) -> LsnOffsets:
    return {"lsn": f"0/{position:X}"}


def test_backlogs_in_one_scan_agree_with_each_tables_count(catalog_properties: dict[str, str]) -> None:
    catalog = load_catalog("default", **catalog_properties)
    catalog.create_namespace("lake")
    change_log = IcebergChangeLog(CatalogHandle.of(catalog), "lake", "group_changes")
    change_log.ensure()
    members = {t: StreamMember(t, t, 0) for t in ("a", "b", "c")}
    change_log.append(_rows([("a", 10), ("b", 11), ("a", 12)]), epoch=1, start=None, end=_offsets(12),
                      members=members, group="g", attempt="one")  # fmt: skip
    change_log.append(_rows([("a", 20), ("c", 21), ("b", 22), ("a", 23)]), epoch=2, start=_offsets(12),
                      end=_offsets(23), members=members, group="g", attempt="two")  # fmt: skip

    after = {"a": 12, "b": 0, "c": 21, "d": 0}  # "d": a table with no change in the log
    found = change_log.backlogs(after)
    assert found == {"a": 2, "b": 2, "c": 0, "d": 0}
    assert found == {t: change_log.changes_after(t, p) for t, p in after.items()}

    # a: one file wholly applied (10, 12), one read (20 of 20, 23); b: one file wholly applied, one not at all.
    assert change_log.expire(2, {"a": 20, "b": 11}, members) == 4
    assert change_log.backlogs({"a": 0, "b": 0, "c": 0}) == {"a": 1, "b": 1, "c": 1}
    assert change_log.backlogs({}) == {}
    # Kept N days: a row without a commit time is not known to be old enough, so it stays.
    assert change_log.expire(2, {"a": 30}, members, before=datetime.now(UTC)) == 0
    assert change_log.expire(2, {}, members, left=["c"]) == 1  # a table that left: all of its rows
    assert change_log.backlogs({"a": 0, "b": 0, "c": 0}) == {"a": 1, "b": 1, "c": 0}
