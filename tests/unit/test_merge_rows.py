"""The reduction of a merge round's rows (``lake/merge_reduce.py``), on real Parquet files: the latest version of
each key survives, soft-deleted keys leave, files holding only survivors are kept as written; and how the rewrite
is cut into tasks (``lake/merge_rewrite.py``)."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_tiering.core.ports import MergeKey, WrittenFile
from airflow_provider_tiering.lake.merge_reduce import KeptRows, reduce_round
from airflow_provider_tiering.lake.merge_rewrite import merge_splits, without_keys
from airflow_provider_tiering.lake.warehouse import LOCAL_STORAGE

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


def survivors_of(changes):
    """What the merge's tasks would write of the round's files, and the files committed as written."""
    parts = [pq.read_table(f.path) for f in changes.as_written]
    parts += [k.read(LOCAL_STORAGE) for k in changes.to_filter]
    return pa.concat_tables(parts) if parts else None


def reduce(tmp_path, files, key=KEY):
    changes = reduce_round(files, key, SCHEMA)
    return changes, list(changes.to_filter), survivors_of(changes)


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
    assert clean in changes.as_written  # nothing of it superseded or deleted
    assert sorted(survivors.column("id").to_pylist()) == [5, 6, 8]  # 8 was deleted, then brought back
    assert sorted(changes.keys.column("id").to_pylist()) == [5, 6, 7, 8]  # 7 still leaves the lake
    assert changes.deleted_keys == 1 and len(staged) == 1


def test_a_boolean_soft_delete_column_deletes_only_when_true(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("gone", pa.bool_()), ("v", pa.int64())])
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "gone": [True, False, None], "v": [1, 2, 3]}, schema=schema), path)
    files = [WrittenFile(str(path), 3, path.stat().st_size, 0)]

    changes = reduce_round(files, MergeKey(("id",), "v", "gone"), schema)
    assert sorted(survivors_of(changes).column("id").to_pylist()) == [2, 3]
    assert changes.deleted_keys == 1


def test_only_the_deciding_columns_are_read_to_reduce(tmp_path, monkeypatch):
    from airflow_provider_tiering.lake import merge_reduce

    first = written(tmp_path, 0, [(1, "a1", None, 10), (1, "a2", None, 20)])
    asked = []
    real = merge_reduce.read_round_file
    monkeypatch.setattr(merge_reduce, "read_round_file", lambda f, s, c=None: asked.append(c) or real(f, s, c))
    changes = reduce_round([first], KEY, SCHEMA)
    assert asked == [["id", "version", "deleted_at"]]  # never "name": the rows are read by the rewrite's tasks
    assert changes.to_filter[0].positions.to_pylist() == [1]


def test_rows_without_keys_keep_their_order():
    rows = pa.table({"id": [5, 3, 9, 1, 7], "v": ["e", "c", "i", "a", "g"]})
    rest = without_keys(rows, pa.table({"id": [9, 3]}), ["id"])
    assert rest.to_pylist() == [{"id": 5, "v": "e"}, {"id": 1, "v": "a"}, {"id": 7, "v": "g"}]


class FakeDataFile:
    def __init__(self, size, partition=()):
        self.file_size_in_bytes = size
        self.partition = partition
        self.spec_id = 0


def test_a_rewrite_that_fits_one_split_is_one_split_else_one_task_per_group():
    big = [FakeDataFile(100), FakeDataFile(90), FakeDataFile(30), FakeDataFile(20)]
    kept = [KeptRows(WrittenFile(f"r{i}", 1, 40, i), pa.array([0], pa.int64())) for i in range(3)]
    assert len(merge_splits(big[2:], kept[:1], 100)) == 1  # 90 bytes: the task process writes it
    splits = merge_splits(big, kept, 100)
    assert [s.index for s in splits] == list(range(len(splits)))
    assert sorted(s.bytes for s in splits) == [40, 50, 80, 90, 100]  # lake: 100 | 90 | 30+20; round: 40+40 | 40
    assert sum(len(s.lake_files) for s in splits) == 4 and sum(len(s.round_files) for s in splits) == 3
    assert merge_splits([], [], 100) == []
