"""The contract of ``lake/row_delta.py``, the one module that commits position-delete files through pyiceberg's
private snapshot producer: on the pinned pyiceberg, delete files committed with data files are read by pyiceberg and
by DuckDB's Iceberg reader, the snapshot summary counts them, removed delete files leave their manifests as delete
manifests, and a commit that loses the catalog's swap to another writer is applied onto that writer's snapshot. On
another pyiceberg the first test fails, naming the version to check it against."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_tiering.lake.position_deletes import DeletedPositions, FileDeletes, write_position_deletes
from airflow_provider_tiering.lake.row_delta import PYICEBERG_VERSION, commit_row_delta, row_delta_available
from airflow_provider_tiering.lake.warehouse import LakeStorage
from testbed.lake_check import duckdb_lake_rows

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "v", StringType()),
)
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string(), nullable=False),
                   pa.field("v", pa.string())])  # fmt: skip


def test_the_installed_pyiceberg_is_the_one_the_private_calls_were_checked_against():
    import pyiceberg

    assert row_delta_available(), (
        f"pyiceberg {pyiceberg.__version__} is installed; lake/row_delta.py uses pyiceberg {PYICEBERG_VERSION}'s "
        "private snapshot producer: check it against this version (this test file), then update PYICEBERG_VERSION"
    )


@pytest.fixture
def table_and_catalog(catalog_properties):
    catalog = load_catalog("default", **catalog_properties)
    catalog.create_namespace_if_not_exists("contract")
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    table = catalog.create_table(("contract", "t"), schema=SCHEMA, partition_spec=spec,
                                 properties={"format-version": "2"})  # fmt: skip
    for region in ("eu", "us"):
        rows = [{"id": i, "region": region, "v": f"{region}{i}"} for i in range(10)]
        table.append(pa.Table.from_pylist(rows, schema=ARROW))
    return catalog, catalog.load_table(("contract", "t")), catalog_properties


def _ids(catalog_properties, identifier=("contract", "t")) -> tuple[list, list]:
    table = load_catalog("default", **catalog_properties).load_table(identifier)
    by_pyiceberg = sorted((r["region"], r["id"]) for r in table.scan().to_arrow().to_pylist())
    by_duckdb = sorted((r[1], r[0]) for r in duckdb_lake_rows(catalog_properties, identifier, ["id", "region"]))
    return by_pyiceberg, by_duckdb


def test_deletes_committed_with_data_are_read_by_pyiceberg_and_duckdb(table_and_catalog):
    catalog, table, properties = table_and_catalog
    tasks = {t.file.partition[0]: t for t in table.scan().plan_files()}
    storage = LakeStorage.of(table.io.properties)
    deletes = write_position_deletes(
        table,
        [
            FileDeletes(tasks["eu"].file, np.array([1, 4], np.int64)),
            FileDeletes(tasks["us"].file, np.array([0], np.int64)),
        ],
        f"{table.location()}/data/staged",
        storage,
    )
    assert len(deletes) == 2  # one per partition
    with table.transaction() as tx:
        commit_row_delta(tx, table, properties={"tiering.epoch": "1"}, added_deletes=deletes)
    expected = sorted([("eu", i) for i in range(10) if i not in (1, 4)] + [("us", i) for i in range(1, 10)])
    by_pyiceberg, by_duckdb = _ids(properties)
    assert by_pyiceberg == expected and by_duckdb == expected
    table = catalog.load_table(("contract", "t"))
    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == "3" and summary["total-delete-files"] == "2"
    assert summary["tiering.epoch"] == "1"
    task = next(t for t in table.scan().plan_files() if t.file.partition[0] == "eu")
    assert DeletedPositions(table.io).of(task.file, task.delete_files).tolist() == [1, 4]

    # The eu file rewritten without its deleted rows, its delete file removed: manifests keep their kinds.
    rewrite = [{"id": i, "region": "eu", "v": f"eu{i}"} for i in range(10) if i not in (1, 4)]
    staged = f"{table.location()}/data/rewrite.parquet"
    import pyarrow.parquet as pq

    with table.io.new_output(staged).create() as stream:
        pq.write_table(pa.Table.from_pylist(rewrite, schema=ARROW), stream)
    from airflow_provider_tiering.core.ports import WrittenFile
    from airflow_provider_tiering.lake.add_files import data_file, set_name_mapping

    with table.transaction() as tx:  # the file has no field ids: read by name, as the rounds' files were once
        set_name_mapping(tx)
    table = catalog.load_table(("contract", "t"))
    entry = data_file(table, WrittenFile(staged, 8, table.io.new_input(staged).__len__(), 0, '["eu"]'))
    eu_delete = next(iter(task.delete_files))
    with table.transaction() as tx:
        commit_row_delta(
            tx, table, properties={}, added_data=[entry], removed_data=[task.file], removed_deletes=[eu_delete]
        )
    table = catalog.load_table(("contract", "t"))
    by_pyiceberg, by_duckdb = _ids(properties)
    assert by_pyiceberg == expected and by_duckdb == expected
    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == "1" and summary["total-delete-files"] == "1"
    for manifest in table.current_snapshot().manifests(table.io):
        contents = {e.data_file.content for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
        assert (manifest.content == ManifestContent.DELETES) == (contents != {0}), (manifest.content, contents)


def test_a_commit_that_loses_the_swap_is_applied_onto_the_other_writers_snapshot(table_and_catalog):
    catalog, table, properties = table_and_catalog
    task = next(t for t in table.scan().plan_files() if t.file.partition[0] == "us")
    deletes = write_position_deletes(
        table, [FileDeletes(task.file, np.array([2], np.int64))], f"{table.location()}/data/staged",
        LakeStorage.of(table.io.properties),
    )  # fmt: skip
    other = catalog.load_table(("contract", "t"))
    other.append(pa.Table.from_pylist([{"id": 99, "region": "eu", "v": "late"}], schema=ARROW))
    with table.transaction() as tx:  # planned on the snapshot before the other writer's append
        commit_row_delta(tx, table, properties={}, added_deletes=deletes)
    by_pyiceberg, by_duckdb = _ids(properties)
    expected = sorted([("eu", i) for i in range(10)] + [("eu", 99)] + [("us", i) for i in range(10) if i != 2])
    assert by_pyiceberg == expected and by_duckdb == expected


def test_on_another_pyiceberg_a_delete_commit_fails_loudly_and_commits_nothing(table_and_catalog, monkeypatch):
    from airflow_provider_tiering.core.errors import LakeError
    from airflow_provider_tiering.lake import row_delta

    catalog, table, _ = table_and_catalog
    task = next(t for t in table.scan().plan_files() if t.file.partition[0] == "us")
    deletes = write_position_deletes(
        table, [FileDeletes(task.file, np.array([2], np.int64))], f"{table.location()}/data/staged",
        LakeStorage.of(table.io.properties),
    )  # fmt: skip
    before = table.current_snapshot().snapshot_id
    monkeypatch.setattr(row_delta, "PYICEBERG_VERSION", "0.11.1")  # as if another pyiceberg were installed
    with pytest.raises(LakeError, match=r"needs pyiceberg 0\.11\.1 .*install pyiceberg==0\.11\.1"):
        with table.transaction() as tx:
            commit_row_delta(tx, table, properties={}, added_deletes=deletes)
    assert catalog.load_table(("contract", "t")).current_snapshot().snapshot_id == before


def test_trimming_keeps_a_delete_files_positions_of_the_files_that_stay(table_and_catalog):
    """A delete file naming a file a compaction rewrote and one it did not: it goes, its positions of the staying
    file are carried into a new delete file, and the rows read stay the same."""
    from airflow_provider_tiering.lake.position_deletes import trim_delete_files
    from testbed.lake_check import files_named

    catalog, table, properties = table_and_catalog
    eu = next(t for t in table.scan().plan_files() if t.file.partition[0] == "eu")
    storage = LakeStorage.of(table.io.properties)
    (eu_deletes,) = write_position_deletes(table, [FileDeletes(eu.file, np.array([3, 5], np.int64))],
                                     f"{table.location()}/data/staged", storage)  # fmt: skip
    with table.transaction() as tx:
        commit_row_delta(tx, table, properties={}, added_deletes=[eu_deletes])
    table = catalog.load_table(("contract", "t"))
    us = next(t for t in table.scan().plan_files() if t.file.partition[0] == "us")
    (keep,) = [d for d in table.scan().plan_files() if d.file.partition[0] == "eu"][0].delete_files

    nothing = trim_delete_files(table.io, [keep], {eu.file.file_path: eu.file, us.file.file_path: us.file})
    assert nothing.removed == () and nothing.carried == ()
    trim = trim_delete_files(table.io, [keep], {us.file.file_path: us.file})  # eu rewritten: the file goes whole
    assert [d.file_path for d in trim.removed] == [keep.file_path] and trim.carried == ()

    # One delete file naming both partitions' files is not written by rounds (one per partition), so a second data
    # file in eu stands for "another file": append one and name both.
    table.append(pa.Table.from_pylist([{"id": 50, "region": "eu", "v": "x"}], schema=ARROW))
    table = catalog.load_table(("contract", "t"))
    eu_files = sorted((t.file for t in table.scan().plan_files() if t.file.partition[0] == "eu"),
                      key=lambda f: f.record_count)  # fmt: skip
    second, first = eu_files  # 1 row, 10 rows
    (pair,) = write_position_deletes(
        table, [FileDeletes(first, np.array([7], np.int64)), FileDeletes(second, np.array([0], np.int64))],
        f"{table.location()}/data/staged", storage,
    )  # fmt: skip
    assert files_named(table.io, pair) == {first.file_path, second.file_path}
    trim = trim_delete_files(table.io, [pair], {first.file_path: first})  # ``second`` rewritten
    assert trim.removed == (pair,)
    (carried,) = trim.carried
    assert carried.data_file.file_path == first.file_path and carried.positions.tolist() == [7]
