"""The contract of ``lake/fenced_transaction.py``'s kept metadata, on the pinned pyiceberg: the transaction's
``table_metadata`` is pyiceberg's own (the staged updates applied to the table's metadata), computed again once an
update is staged or the table is refreshed, and a commit through it lands what was staged."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.table.update import update_table_metadata
from pyiceberg.types import LongType, NestedField

from airflow_provider_tiering.core.errors import FencedError
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture
def catalog_and_table(catalog_properties):
    catalog = load_catalog("default", **catalog_properties)
    catalog.create_namespace_if_not_exists("contract")
    table = catalog.create_table(("contract", "t"), schema=SCHEMA, properties={"format-version": "2"})
    table.append(pa.Table.from_pylist([{"id": 1}], schema=ARROW))
    return catalog, catalog.load_table(("contract", "t"))


def _same(found, expected) -> bool:
    ignore = {"last_updated_ms"}  # pyiceberg stamps the time of each computation
    return found.model_dump(exclude=ignore) == expected.model_dump(exclude=ignore)


def test_the_metadata_is_kept_until_an_update_is_staged(catalog_and_table):
    _, table = catalog_and_table
    tx = fenced_transaction(table, lambda refreshed: None)
    first = tx.table_metadata
    assert tx.table_metadata is first
    assert _same(first, update_table_metadata(table.metadata, ()))

    tx.set_properties({"tiering.test": "1"})
    staged = tx.table_metadata
    assert staged is not first
    assert staged.properties["tiering.test"] == "1"
    assert _same(staged, update_table_metadata(table.metadata, tx._updates))
    assert tx.table_metadata is staged


def test_the_metadata_follows_a_refreshed_table(catalog_and_table):
    catalog, table = catalog_and_table
    tx = fenced_transaction(table, lambda refreshed: None)
    before = tx.table_metadata
    catalog.load_table(("contract", "t")).append(pa.Table.from_pylist([{"id": 2}], schema=ARROW))
    table.refresh()
    after = tx.table_metadata
    assert after is not before
    assert after.current_snapshot_id != before.current_snapshot_id
    assert after.current_snapshot_id == table.metadata.current_snapshot_id


def test_a_commit_lands_what_was_staged_and_a_lost_swap_still_meets_the_fence(catalog_and_table):
    catalog, table = catalog_and_table
    with fenced_transaction(table, lambda refreshed: None) as tx:
        tx.append(pa.Table.from_pylist([{"id": 2}], schema=ARROW))
        tx.set_properties({"tiering.test": "2"})
    reloaded = catalog.load_table(("contract", "t"))
    assert sorted(reloaded.scan().to_arrow()["id"].to_pylist()) == [1, 2]
    assert reloaded.properties["tiering.test"] == "2"

    def fence(refreshed):
        raise FencedError("a newer attempt committed")

    stale = catalog.load_table(("contract", "t"))
    catalog.load_table(("contract", "t")).append(pa.Table.from_pylist([{"id": 3}], schema=ARROW))
    tx = fenced_transaction(stale, fence)
    tx.append(pa.Table.from_pylist([{"id": 4}], schema=ARROW))
    assert tx.table_metadata is tx.table_metadata
    with pytest.raises(FencedError):
        tx.commit_transaction()
    assert sorted(catalog.load_table(("contract", "t")).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
