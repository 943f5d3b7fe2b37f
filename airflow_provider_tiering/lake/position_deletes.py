"""Iceberg position-delete files: which rows of which data files are deleted (``file_path``, ``pos``), written by a
merge-on-read round for the rows its changes supersede, and read back wherever a data file's rows are read by
position (the merge's search for changed keys, a rewrite, a compaction).

A delete file lies in the partition of the data files it names (scan planning matches them by partition and sequence
number), sorted by path and position as the specification asks; its bounds on ``file_path`` let readers skip it for
other files. It is written through the lake's storage (the table's FileIO properties), under the attempt's directory
like the round's data files, so a round that dies before its commit leaves nothing a reader sees, and the next
committed round's cleanup deletes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_tiering.lake.warehouse import LakeStorage

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

#: The reserved field ids of a position-delete file's columns (the Iceberg specification's).
FILE_PATH_ID = 2147483546
POS_ID = 2147483545
_DELETE_FIELDS: list[pa.Field[Any]] = [
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
]
DELETE_SCHEMA = pa.schema(_DELETE_FIELDS)


@dataclass(frozen=True)
class FileDeletes:
    """Rows of one data file to delete: its positions (sorted, none deleted already)."""

    data_file: DataFile
    positions: np.ndarray

    @property
    def count(self) -> int:
        return int(self.positions.size)


class DeletedPositions:
    """The positions position-delete files delete, per data file, each delete file read once: every delete file
    of a merge round names rows of many data files, and a merge or compaction asks for every live data file, so
    reading a delete file per data file made a round's cost grow with the square of the rounds since compaction
    (a profile of change rounds under writers: a third of their time)."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._read: dict[str, dict[str, np.ndarray]] = {}

    def of(self, data_file: DataFile, delete_files: Iterable[DataFile]) -> np.ndarray:
        """The positions of ``data_file``'s rows that ``delete_files`` delete, sorted and unique."""
        from pyiceberg.manifest import DataFileContent

        found: list[np.ndarray] = []
        for delete_file in delete_files:
            if delete_file.content != DataFileContent.POSITION_DELETES:
                raise ValueError(
                    f"{delete_file.file_path} is an equality-delete file: only position deletes are read (and written)"
                )
            positions = self.by_file(delete_file).get(data_file.file_path)
            if positions is not None:
                found.append(positions)
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(found))

    def by_file(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        """Data file path -> the positions ``delete_file`` deletes of it (in the file's order)."""
        found = self._read.get(delete_file.file_path)
        if found is None:
            found = self._read[delete_file.file_path] = self._positions_by_file(delete_file)
        return found

    def _positions_by_file(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        with self.io.new_input(delete_file.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["file_path", "pos"])  # type: ignore[arg-type]
        encoded = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(rows.column("file_path")).combine_chunks())
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        positions = rows.column("pos").to_numpy()
        order = np.argsort(indices, kind="stable")
        bounds = np.searchsorted(indices[order], np.arange(len(encoded.dictionary) + 1))
        return {
            str(path): positions[order[bounds[i] : bounds[i + 1]]]
            for i, path in enumerate(encoded.dictionary.to_pylist())
        }


@dataclass(frozen=True)
class DeleteFilesTrim:
    """Delete files that name a data file no longer live, to remove, and the positions they delete of live files,
    to write again (``write_position_deletes``): so every live delete file names live files only."""

    removed: tuple[DataFile, ...]
    carried: tuple[FileDeletes, ...]


def trim_delete_files(
    io: FileIO,
    delete_files: Iterable[DataFile],
    staying: Mapping[str, DataFile],
    deletes: DeletedPositions | None = None,
) -> DeleteFilesTrim:
    """Of ``delete_files``, those naming a data file outside ``staying`` (path -> file: the live data files once a
    commit replaces some) go; what they delete of staying files is carried into new delete files. A rewritten
    file's deletes were applied as it was rewritten, so a delete file left naming it would only be dead weight the
    status counts as deleted rows. ``deletes``: the delete files already read (a merge's, found holding keys)."""
    read = deletes or DeletedPositions(io)
    removed: list[DataFile] = []
    carried: list[FileDeletes] = []
    for delete_file in {d.file_path: d for d in delete_files}.values():
        by_file = read.by_file(delete_file)
        if by_file.keys() <= staying.keys():
            continue
        removed.append(delete_file)
        for path in sorted(by_file.keys() & staying.keys()):
            carried.append(FileDeletes(staying[path], np.unique(by_file[path])))
    return DeleteFilesTrim(tuple(removed), tuple(carried))


def write_position_deletes(
    table: Table, deletes: Sequence[FileDeletes], directory_uri: str, storage: LakeStorage
) -> list[DataFile]:
    """One position-delete file per partition of the data files in ``deletes``, under ``directory_uri``; their
    manifest entries (statistics included: the row count, and bounds on ``file_path`` and ``pos``)."""
    by_partition: dict[tuple[int, str], list[FileDeletes]] = {}
    for found in _one_per_file(deletes):
        key = (spec_id_of(table, found.data_file), repr(found.data_file.partition))
        by_partition.setdefault(key, []).append(found)
    filesystem, base_path = storage.filesystem_and_path(directory_uri)
    written = []
    for group in by_partition.values():
        group = sorted(group, key=lambda d: d.data_file.file_path)
        paths = pa.array(
            np.repeat(np.array([d.data_file.file_path for d in group], dtype=object), [d.count for d in group]),
            pa.string(),
        )
        rows = pa.Table.from_arrays([paths, pa.array(np.concatenate([d.positions for d in group]), pa.int64())],
                                    schema=DELETE_SCHEMA)  # fmt: skip
        name = f"deletes-{uuid.uuid4().hex}.parquet"
        with filesystem.open_output_stream(f"{base_path.rstrip('/')}/{name}") as stream:
            pq.write_table(rows, stream, compression="zstd")
        uri = f"{directory_uri.rstrip('/')}/{name}"
        written.append(
            _delete_file_entry(table, uri, filesystem.get_file_info(f"{base_path.rstrip('/')}/{name}").size, group)
        )
    return written


def _one_per_file(deletes: Sequence[FileDeletes]) -> list[FileDeletes]:
    """The positions of each data file together, sorted and unique (a round's new deletes and those carried over
    from a trimmed delete file may name one file)."""
    by_path: dict[str, list[FileDeletes]] = {}
    for found in deletes:
        if found.count:
            by_path.setdefault(found.data_file.file_path, []).append(found)
    merged = []
    for group in by_path.values():
        positions = group[0].positions if len(group) == 1 else np.unique(np.concatenate([d.positions for d in group]))
        merged.append(FileDeletes(group[0].data_file, positions))
    return merged


def spec_id_of(table: Table, data_file: DataFile) -> int:
    """The partition spec a data file was written with (a file read from a scan plan may not carry it: the table's
    default then, the only spec this provider writes)."""
    found = getattr(data_file, "_spec_id", None)
    return table.metadata.default_spec_id if found is None else int(found)


def _delete_file_entry(table: Table, uri: str, size: int, group: Sequence[FileDeletes]) -> DataFile:
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.types import LongType, StringType

    first, last = group[0], group[-1]
    rows = sum(d.count for d in group)
    lowest = min(int(d.positions[0]) for d in group)
    highest = max(int(d.positions[-1]) for d in group)
    bounds: tuple[Mapping[int, bytes], Mapping[int, bytes]] = (
        {FILE_PATH_ID: to_bytes(StringType(), first.data_file.file_path), POS_ID: to_bytes(LongType(), lowest)},
        {FILE_PATH_ID: to_bytes(StringType(), last.data_file.file_path), POS_ID: to_bytes(LongType(), highest)},
    )
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=first.data_file.partition,
        record_count=rows,
        file_size_in_bytes=size,
        value_counts={FILE_PATH_ID: rows, POS_ID: rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        lower_bounds=dict(bounds[0]),
        upper_bounds=dict(bounds[1]),
        spec_id=spec_id_of(table, first.data_file),
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )
