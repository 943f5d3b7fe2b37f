"""Make Arrow batches read from a hot store fit the schema they are written in."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.errors import UnsupportedColumnType


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Cast a batch read from the hot store to ``schema`` (extension types through their storage); lake
    columns the hot store no longer has are written as nulls. A value the cast cannot carry over raises
    :class:`UnsupportedColumnType`."""
    if batch.schema.equals(schema):  # already conformed (by the source's own read): nothing to cast
        return batch
    columns = []
    names = set(batch.schema.names)
    for target in schema:
        if target.name not in names:
            columns.append(pa.nulls(batch.num_rows, target.type))
            continue
        column = batch.column(target.name)
        if isinstance(column, pa.ExtensionArray):
            column = column.storage
        if column.type != target.type:
            try:
                column = pc.cast(column, target.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                # The same rows fail the same way on every retry: only a change of the value or the type cures it.
                raise UnsupportedColumnType(
                    f"column {target.name!r}: cannot convert {column.type} to {target.type}: {exc}. A value does "
                    "not fit the lake's type: change the value or the column's type, or leave the column out with "
                    "the spec's source.columns; nothing was tiered"
                ) from exc
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
