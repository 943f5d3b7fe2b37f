"""Read the Parquet files of a landing zone: their schemas' union, and their rows in the table's schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.sources.files.listing import LandedFile
from airflow_provider_tiering.sources.files.text_records import ARROW_ERRORS

BATCH_ROWS = 65_536


def union_schema(filesystem: pafs.FileSystem, root: str, files: Sequence[LandedFile], display_name: str) -> pa.Schema:
    """The union of the files' schemas (columns in first-seen order, no field metadata)."""
    schemas = []
    for landed in files:
        try:
            with filesystem.open_input_file(f"{root}/{landed.path}") as handle:
                schemas.append(pq.read_schema(handle))
        except (OSError, *ARROW_ERRORS) as exc:
            raise SourceError(f"{display_name}: cannot read the schema of {landed.path}: {exc}") from exc
    try:
        unified = pa.unify_schemas(schemas)
    except ARROW_ERRORS as exc:
        raise SourceError(f"{display_name}: the files' schemas do not agree: {exc}") from exc
    return pa.schema([pa.field(f.name, f.type) for f in unified])


def read_parquet(
    filesystem: pafs.FileSystem, path: str, landed: LandedFile, schema: pa.Schema, display_name: str
) -> Iterator[pa.RecordBatch]:
    """The file's rows as batches of ``schema``: columns it lacks are nulls, others are cast."""
    try:
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            present = [name for name in schema.names if name in parquet.schema_arrow.names]
            if not present:
                raise SourceError(f"{display_name}: file {landed.path} holds none of the columns")
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=present):
                columns = []
                for field in schema:
                    if field.name not in present:
                        columns.append(pa.nulls(batch.num_rows, field.type))
                        continue
                    column = batch.column(field.name)
                    try:
                        columns.append(column if column.type == field.type else pc.cast(column, field.type))
                    except ARROW_ERRORS as exc:
                        raise SourceError(
                            f"{display_name}: file {landed.path} column {field.name!r}: cannot convert "
                            f"{column.type} to {field.type}: {exc}"
                        ) from exc
                yield pa.RecordBatch.from_arrays(columns, schema=schema)
    except (OSError, *ARROW_ERRORS) as exc:
        raise SourceError(f"{display_name}: cannot read {landed.path}: {exc}") from exc
