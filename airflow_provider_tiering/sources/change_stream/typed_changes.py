"""A round's reduced changes as the record batches it writes: each row with its change columns, and the chunks of a
plan past ``keys_in_memory`` typed as they come and kept on local disk, so the round writes them without reading the
log a second time."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol

import pyarrow as pa

from airflow_provider_tiering.core.ports import CHANGE_CHUNK, CHANGE_DELETED, CHANGE_FILL, RejectedRecord
from airflow_provider_tiering.sources.change_stream.plans import ChangeSplit
from airflow_provider_tiering.sources.change_stream.reduce import ChangeSet, Key, RowVersion
from airflow_provider_tiering.sources.spilled_batches import SpilledBatches

log = logging.getLogger(__name__)


class TypesChanges(Protocol):
    """What types a change set's rows and reads a split of changes: a change stream's source."""

    @property
    def display_name(self) -> str: ...

    def typed(self, rows: dict[Key, RowVersion | None], schema: pa.Schema, chunk: int) -> Iterator[pa.RecordBatch]:
        """A chunk of rows typed as ``schema``, each with its change columns (:func:`with_change_columns`)."""
        ...

    def read_split(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]: ...


def with_change_columns(
    batch: pa.RecordBatch, deleted: list[bool] | None, fill: list[str | None] | None, chunk: int = 0
) -> pa.RecordBatch:
    """``batch`` with the staged change columns the merge reduces by (``CHANGE_DELETED``, ``CHANGE_FILL``,
    ``CHANGE_CHUNK``), every column nullable (a deleted key's row holds its key only)."""
    rows = batch.num_rows
    flags = pa.array(deleted if deleted is not None else [False] * rows, pa.bool_())
    fills = pa.array(fill if fill is not None else [None] * rows, pa.string())
    chunks = pa.array([chunk] * rows, pa.int32())
    return pa.RecordBatch.from_arrays(
        [*batch.columns, flags, fills, chunks],
        schema=pa.schema(
            [
                *(f.with_nullable(True) for f in batch.schema),
                pa.field(CHANGE_DELETED, pa.bool_()),
                pa.field(CHANGE_FILL, pa.string()),
                pa.field(CHANGE_CHUNK, pa.int32()),
            ]
        ),
    )


class TypedChunks:
    """The chunks of a plan's changes past ``keys_in_memory``, typed as they come (numbered from 1) into record
    batches on local disk: the round writes them without reading the log again (``ChangeSet.spilled``)."""

    def __init__(self, source: TypesChanges, schema: pa.Schema) -> None:
        self.source = source
        self.schema = schema
        self.batches = SpilledBatches()
        self.chunks = 0

    @property
    def closed(self) -> bool:
        return self.batches.closed

    def write(self, rows: dict[Key, RowVersion | None]) -> None:
        self.chunks += 1
        for batch in self.source.typed(rows, self.schema, self.chunks):
            self.batches.write(batch)

    def close(self) -> None:
        self.batches.close()


class PlannedChanges:
    """A round of changes read by the process that planned it, from the changes its plan read (held, or typed in
    chunks on local disk): the log is not read a second time. Never pickled: a Spark task reads its split's changes
    itself."""

    def __init__(self, source: TypesChanges, found: ChangeSet) -> None:
        self.source = source
        self.found = found

    @property
    def display_name(self) -> str:
        return self.source.display_name

    def read_split(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        found = self.found
        spilled = found.spilled
        log.info(
            "%s: %d transactions: %d inserts, %d updates, %d deletes -> %s", self.display_name,
            found.transactions, found.inserted, found.updated, found.deleted,
            f"{len(found.rows)} keys" if not isinstance(spilled, TypedChunks)
            else f"{spilled.batches.rows} keys typed in {spilled.chunks} chunks while planning "
            f"({spilled.batches.bytes / 2**20:.1f} MiB on local disk)",
        )  # fmt: skip
        if not isinstance(spilled, TypedChunks):
            return self.source.typed(found.rows, schema, 1)
        if spilled.schema != schema:  # never from the round, which reads the source's schema: read the log again
            return self.source.read_split(split, schema)
        return iter(spilled.batches)

    def take_rejects(self) -> list[RejectedRecord]:
        return []
