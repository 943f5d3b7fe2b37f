"""The reduction of a merge round's rows (``lake/merge.py``), on real Parquet files: the latest version of each
key survives, soft-deleted keys leave, files holding only survivors are kept as written."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_tiering.core.ports import MergeKey, WrittenFile
from airflow_provider_tiering.lake.merge import reduce_round
from airflow_provider_tiering.lake.parquet_writer import write_data_files

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("deleted_at", pa.timestamp("us")),
        pa.field("version", pa.int64(), nullable=False),
    ]
)
GONE = datetime(2026, 1, 1)


def written(tmp_path, index, rows):
    path = tmp_path / f"split-{index}.parquet"
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA)
    pq.write_table(table, path)
    return WrittenFile(str(path), table.num_rows, path.stat().st_size, index)


KEY = MergeKey(("id",), "version", "deleted_at")


def reduce(tmp_path, files, key=KEY):
    staged = []

    def write(rows, prefix):
        out = write_data_files(rows.to_batches(), SCHEMA, str(tmp_path / "staged"), prefix, 0)
        staged.extend(out)
        return out

    changes = reduce_round(files, key, SCHEMA, write)
    survivors = pa.concat_tables([pq.read_table(f.path) for f in changes.files]) if changes.files else None
    return changes, staged, survivors


def test_latest_version_of_each_key_survives_across_files(tmp_path):
    first = written(tmp_path, 0, [(1, "a1", None, 10), (2, "b1", None, 11), (1, "a3", None, 30)])
    second = written(tmp_path, 1, [(1, "a2", None, 20), (3, "c1", None, 12)])
    changes, staged, survivors = reduce(tmp_path, [first, second])
    assert sorted(survivors.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a3", "deleted_at": None, "version": 30},
        {"id": 2, "name": "b1", "deleted_at": None, "version": 11},
        {"id": 3, "name": "c1", "deleted_at": None, "version": 12},
    ]
    assert sorted(changes.keys.column("id").to_pylist()) == [1, 2, 3]
    assert changes.kept_rows == 3 and changes.deleted_keys == 0
    assert len(staged) == 2  # both files held a superseded version: both written again


def test_soft_deleted_latest_version_removes_the_key_and_a_clean_file_is_kept_as_written(tmp_path):
    clean = written(tmp_path, 0, [(5, "e", None, 1), (6, "f", None, 2)])
    deleting = written(tmp_path, 1, [(7, "g", GONE, 3), (8, "h1", GONE, 4), (8, "h2", None, 5)])
    changes, staged, survivors = reduce(tmp_path, [clean, deleting])
    assert clean in changes.files  # nothing of it superseded or deleted
    assert sorted(survivors.column("id").to_pylist()) == [5, 6, 8]  # 8 was deleted, then brought back
    assert sorted(changes.keys.column("id").to_pylist()) == [5, 6, 7, 8]  # 7 still leaves the lake
    assert changes.deleted_keys == 1 and len(staged) == 1


def test_a_boolean_soft_delete_column_deletes_only_when_true(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("gone", pa.bool_()), ("v", pa.int64())])
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "gone": [True, False, None], "v": [1, 2, 3]}, schema=schema), path)
    files = [WrittenFile(str(path), 3, path.stat().st_size, 0)]

    def write(rows, prefix):
        return write_data_files(rows.to_batches(), schema, str(tmp_path / "staged"), prefix, 0)

    changes = reduce_round(files, MergeKey(("id",), "v", "gone"), schema, write)
    assert sorted(pq.read_table(changes.files[0].path).column("id").to_pylist()) == [2, 3]
    assert changes.deleted_keys == 1
