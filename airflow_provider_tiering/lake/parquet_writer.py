"""Write a stream of Arrow batches as Parquet data files that Iceberg's ``add_files`` accepts.

Runs inside Spark tasks. Files are cut at a target size; in a partitioned table each file holds one
partition, whose record values travel with the file's name to the commit, and the source columns stay
inside the file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from airflow_provider_tiering.core.ports import RowPartitioner, WrittenFile
from airflow_provider_tiering.lake.partitioner import partition_to_json
from airflow_provider_tiering.lake.warehouse import LOCAL_STORAGE, LakeStorage

# Buffer about this much before writing a row group, so row groups are not one per small batch.
ROW_GROUP_BYTES = 64 * 1024 * 1024


class _RollingWriter:
    def __init__(
        self,
        filesystem: pafs.FileSystem,
        base_path: str,
        base_uri: str,
        prefix: str,
        schema: pa.Schema,
        target_bytes: int,
        split_index: int,
        partition: str,
    ) -> None:
        self.filesystem = filesystem
        self.base_path = base_path
        self.base_uri = base_uri
        self.prefix = prefix
        self.schema = schema
        self.target_bytes = target_bytes
        self.split_index = split_index
        self.partition = partition
        self.written: list[WrittenFile] = []
        self._sink: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._name = ""
        self._rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0

    def _open(self) -> None:
        self._name = f"{self.prefix}-{len(self.written):04d}.parquet"
        self.filesystem.create_dir(self.base_path, recursive=True)
        self._sink = self.filesystem.open_output_stream(f"{self.base_path}/{self._name}")
        self._writer = pq.ParquetWriter(
            self._sink,
            self.schema,
            compression="zstd",
            compression_level=1,
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
            write_statistics=True,
        )
        self._rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        # Row groups of at most the target's size (or ROW_GROUP_BYTES), so a file can be cut near the target even
        # from one large batch (a merge rewrites a whole file's rows at once).
        limit = min(ROW_GROUP_BYTES, self.target_bytes)
        rows = max(1, batch.num_rows * limit // max(batch.nbytes, 1))
        for start in range(0, batch.num_rows, rows):
            part = batch.slice(start, rows)
            self._pending.append(part)
            self._pending_bytes += part.nbytes
            if self._pending_bytes >= limit:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self._open()
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        assert self._writer is not None
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._rows += table.num_rows
        self._pending, self._pending_bytes = [], 0
        if self._sink.tell() >= self.target_bytes:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        size = self._sink.tell()
        self._sink.close()
        self.written.append(
            WrittenFile(f"{self.base_uri}/{self._name}", self._rows, size, self.split_index, self.partition)
        )
        self._writer = None

    def close(self) -> list[WrittenFile]:
        self._flush()
        self._close_file()
        return self.written


def write_data_files(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    directory_uri: str,
    file_prefix: str,
    split_index: int,
    partitioner: RowPartitioner | None = None,
    target_file_bytes: int = 128 * 1024 * 1024,
    *,
    storage: LakeStorage = LOCAL_STORAGE,
) -> list[WrittenFile]:
    """Write ``batches`` under ``directory_uri`` (a sub-folder per partition) as ``<file_prefix>-…-NNNN.parquet``,
    through the lake's ``storage`` (no properties: a local path, or the environment's defaults)."""
    filesystem, base_path = storage.filesystem_and_path(directory_uri)
    base_uri = directory_uri.rstrip("/")
    base_path = base_path.rstrip("/")
    writers: dict[str, _RollingWriter] = {}
    # A task-unique token keeps names distinct across retries of the same split.
    prefix = f"{file_prefix}-{uuid.uuid4().hex[:12]}"

    def writer_for(values: list[Any], sub: str) -> _RollingWriter:
        if sub not in writers:
            writers[sub] = _RollingWriter(
                filesystem,
                f"{base_path}/{sub}" if sub else base_path,
                f"{base_uri}/{sub}" if sub else base_uri,
                prefix,
                schema,
                target_file_bytes,
                split_index,
                partition_to_json(values),
            )
        return writers[sub]

    for batch in batches:
        if partitioner is None or not partitioner.is_partitioned:
            writer_for([], "").write(batch)
            continue
        for values, sub, rows in partitioner.split(pa.Table.from_batches([batch], schema=schema)):
            for part in rows.to_batches():
                writer_for(values, sub).write(part)
    files: list[WrittenFile] = []
    for writer in writers.values():
        files.extend(writer.close())
    return files
