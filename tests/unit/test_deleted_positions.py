"""Positions deleted per data file, each position-delete file read once however many data files it names."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFileContent

from airflow_provider_tiering.lake.position_deletes import DeletedPositions


class CountingIO(PyArrowFileIO):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    def new_input(self, location: str):
        self.opened.append(location)
        return super().new_input(location)


def delete_file(path, rows, content=DataFileContent.POSITION_DELETES):
    pq.write_table(
        pa.Table.from_pylist(rows, schema=pa.schema([("file_path", pa.string()), ("pos", pa.int64())])), path
    )
    return SimpleNamespace(file_path=str(path), content=content)


def data_file(name):
    return SimpleNamespace(file_path=f"file:///lake/{name}.parquet")


def test_each_delete_file_is_read_once_for_every_data_file_it_names(tmp_path):
    a, b, c = data_file("a"), data_file("b"), data_file("c")
    first = delete_file(
        tmp_path / "d1.parquet",
        [{"file_path": a.file_path, "pos": p} for p in (7, 2, 9)] + [{"file_path": b.file_path, "pos": 4}],
    )
    second = delete_file(
        tmp_path / "d2.parquet", [{"file_path": a.file_path, "pos": 2}, {"file_path": a.file_path, "pos": 3}]
    )
    io = CountingIO()
    deletes = DeletedPositions(io)
    assert deletes.of(a, [first, second]).tolist() == [2, 3, 7, 9]  # sorted, each once
    assert deletes.of(b, [first, second]).tolist() == [4]
    assert deletes.of(c, [first, second]).tolist() == []
    assert sorted(io.opened) == [first.file_path, second.file_path]  # each read once
    assert DeletedPositions(io).of(a, [second]).tolist() == [2, 3]
    assert DeletedPositions(io).of(a, []).dtype.kind == "i"


def test_an_equality_delete_file_is_refused(tmp_path):
    equality = delete_file(tmp_path / "e.parquet", [], content=DataFileContent.EQUALITY_DELETES)
    with pytest.raises(ValueError, match="equality-delete"):
        DeletedPositions(PyArrowFileIO()).of(data_file("a"), [equality])
