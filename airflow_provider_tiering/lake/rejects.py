"""The side table of bad records: rows a file source could not parse, with the file, line and reason.

A round commits its rejects before its data, replacing whatever the side table already holds for the same
source files (one delete + append snapshot). So a round that dies or is fenced after its rejects commit and
is run again leaves each bad record in the side table once, just as its good rows reach the lake once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.lake.data_files import WrittenFile, filesystem_and_path
from airflow_provider_tiering.lake.iceberg import IcebergLake

#: Bad records set aside by a source (``on_bad_record="side_table"``), as written to the side table.
REJECTS_SCHEMA = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("record", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)


class RejectsTable(IcebergLake):
    """The Iceberg side table of one tiered table's bad records (columns: ``REJECTS_SCHEMA``)."""

    def ensure(self) -> Any:
        return self.ensure_table(REJECTS_SCHEMA)

    def replace(self, files: Sequence[WrittenFile], *, epoch: int, table_name: str, attempt: str) -> int:
        """Commit ``files`` (rejects files written by this round's tasks) in place of the side table's rows of
        the same source files; returns the snapshot id."""
        import pyarrow.parquet as pq
        from pyiceberg.expressions import In

        source_files: set[str] = set()
        for written in files:
            filesystem, path = filesystem_and_path(written.path)
            with filesystem.open_input_file(path) as handle:
                source_files.update(pq.read_table(handle, columns=["source_file"]).column(0).to_pylist())
        properties = {"tiering.rejects-epoch": str(epoch), "tiering.table": table_name, "tiering.attempt": attempt}
        self._append(self.load_table(), files, properties, replacing=In("source_file", sorted(source_files)))
        return int(self.load_table().current_snapshot().snapshot_id)
