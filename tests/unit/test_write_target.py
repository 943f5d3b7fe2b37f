"""What a round ships to its Spark tasks to write a table's files: an unpartitioned table's partitioner, in the
append's target as in the merge's and the compaction's, carries no pyiceberg object (unpickling one imports pyiceberg
in every Python worker); a partitioned one cuts rows by partition."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.iceberg import IcebergLake

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string())])


@pytest.fixture
def catalog(tmp_path) -> CatalogHandle:
    found = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    found.create_namespace("ns")
    return CatalogHandle.of(found)


def test_an_unpartitioned_tables_partitioner_ships_no_pyiceberg_object(catalog):
    lake = IcebergLake(catalog, "ns", "plain")
    lake.ensure_table(SCHEMA)
    target = lake.write_target(epoch=1, attempt="a", target_file_bytes=1 << 20)
    assert target.partitioner is not None and not target.partitioner.is_partitioned
    assert b"pyiceberg" not in pickle.dumps(target)
    assert b"pyiceberg" not in pickle.dumps(lake.partitioner())  # what a merge's and a compaction's targets carry
    rows = pa.table({"id": [1, 2], "region": ["eu", None]})
    assert [(values, sub, part.num_rows) for values, sub, part in target.partitioner.split(rows)] == [([], "", 2)]


def test_a_partitioned_tables_target_ships_its_partitioner(catalog):
    lake = IcebergLake(catalog, "ns", "by_region", partition_by=("region",))
    lake.ensure_table(SCHEMA)
    target = lake.write_target(epoch=1, attempt="a", target_file_bytes=1 << 20)
    assert target.partitioner is not None and target.partitioner.is_partitioned
    rows = pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"]})
    assert sorted((sub, part.num_rows) for _, sub, part in target.partitioner.split(rows)) == [
        ("region=eu", 2),
        ("region=us", 1),
    ]
