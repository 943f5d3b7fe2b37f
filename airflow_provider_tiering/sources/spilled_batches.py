"""Record batches kept on local disk while a round plans, read back when it writes them: an Arrow IPC stream in an
anonymous temporary file (unlinked as it is created: gone when closed or when the process dies, and no other
process can open it)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pyarrow as pa


class SpilledBatches:
    """Batches of one schema (the first one's), in the order written."""

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="tiering-batches-", dir=directory)
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._finished = False
        self.schema: pa.Schema | None = None
        self.rows = 0

    @property
    def closed(self) -> bool:
        return self._file.closed

    @property
    def bytes(self) -> int:
        return 0 if self._file.closed else self._file.tell()

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self.schema = batch.schema
            self._writer = pa.ipc.new_stream(self._file, batch.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """The batches written so far, from the first; once read, no more may be written."""
        if self._writer is None:
            return
        if not self._finished:
            self._writer.close()
            self._finished = True
        self._file.flush()
        self._file.seek(0)
        yield from pa.ipc.open_stream(self._file)

    def close(self) -> None:
        self._file.close()
