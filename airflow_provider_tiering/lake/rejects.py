"""The side table of bad records: rows a file source could not parse, with the file, line and reason.

A round commits its rejects before its data, replacing whatever the side table already holds for the same
source files (one delete + append snapshot). So a round that dies or is fenced after its rejects commit and
is run again leaves each bad record in the side table once, just as its good rows reach the lake once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.ports import WrittenFile
from airflow_provider_tiering.lake.add_files import append_files
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.staging import attempt_uri, clean_attempt
from airflow_provider_tiering.lake.tiering_commits import ATTEMPT_PROPERTY, REJECTS_EPOCH_PROPERTY, TABLE_PROPERTY

_REJECTS_FIELDS: list[pa.Field[Any]] = [
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("line", pa.int64()),
    pa.field("record", pa.string()),
    pa.field("reason", pa.string(), nullable=False),
]
#: Bad records set aside by a source (``on_bad_record="side_table"``), as written to the side table.
REJECTS_SCHEMA = pa.schema(_REJECTS_FIELDS)


class RejectsTable:
    """The Iceberg side table of one tiered table's bad records (columns: ``REJECTS_SCHEMA``); a
    :class:`~airflow_provider_tiering.core.ports.RejectsSink`."""

    def __init__(self, lake: IcebergLake) -> None:
        self.lake = lake

    def ensure(self) -> None:
        self.lake.ensure_table(REJECTS_SCHEMA)

    def staging_uri(self, epoch: int, attempt: str) -> str:
        return attempt_uri(self.lake.location(), epoch, attempt)

    def replace(self, files: Sequence[WrittenFile], *, epoch: int, table_name: str, attempt: str) -> int:
        """Commit ``files`` (rejects files written by this round's tasks) in place of the side table's rows of
        the same source files; returns the snapshot id."""
        import pyarrow.parquet as pq
        from pyiceberg.expressions import In

        source_files: set[str] = set()
        storage = self.lake.lake_storage()
        for written in files:
            filesystem, path = storage.filesystem_and_path(written.path)
            with filesystem.open_input_file(path) as handle:
                values = pq.read_table(handle, columns=["source_file"]).column(0).to_pylist()
                source_files.update(str(v) for v in values if v is not None)
        properties = {REJECTS_EPOCH_PROPERTY: str(epoch), TABLE_PROPERTY: table_name, ATTEMPT_PROPERTY: attempt}
        table = self.lake.load_table()
        if table is None:
            raise LakeError(f"Iceberg table {self.lake.name} disappeared before the commit")
        append_files(table, files, properties, replacing=In(term="source_file", literals=sorted(source_files)))
        snapshot = table.current_snapshot()
        assert snapshot is not None  # the transaction just committed one
        return int(snapshot.snapshot_id)

    def clean_attempt(self, epoch: int, attempt: str, keep: Sequence[str]) -> int:
        return clean_attempt(self.staging_uri(epoch, attempt), keep, self.lake.lake_storage())

    def clean(self, committed_epoch: int, since_epoch: int = 0) -> int:
        return self.lake.clean(committed_epoch, since_epoch)
