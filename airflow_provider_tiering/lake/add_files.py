"""Commit Parquet files a round wrote into an Iceberg table: their manifest entries, and one fast-append snapshot.

The files' statistics come from their Parquet footers (pyiceberg's own functions, the ones its ``add_files``
uses); their partition from the writer, since statistics cannot tell a bucket. File names are unique by
construction, so ``add_files``'s duplicate check (a scan of the whole table) is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.ports import WrittenFile
from airflow_provider_tiering.lake.fenced_transaction import Fence, fenced_transaction
from airflow_provider_tiering.lake.partitioner import partition_from_json

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction


def data_file(table: Table, written: WrittenFile) -> DataFile:
    """The manifest entry of a written file, with its statistics read from its Parquet footer."""
    import pyarrow.parquet as pq

    # pyiceberg's add_files machinery, one file at a time (its public add_files takes paths and scans the table).
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
        pyarrow_to_schema,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    metadata = table.metadata
    input_file = table.io.new_input(written.path)
    with input_file.open() as stream:
        parquet_metadata = pq.read_metadata(stream)  # type: ignore[arg-type]  # a file-like object, as pyarrow takes
    schema = metadata.schema()
    arrow_schema = parquet_metadata.schema.to_arrow_schema()
    _check_pyarrow_schema_compatible(schema, arrow_schema, format_version=metadata.format_version)
    # The file's columns by its own field ids (by the table's name mapping for a file without them), not by the
    # table's names now: a rename committed after the file was written must not give a column another's statistics.
    mapping = metadata.name_mapping() or schema.name_mapping
    file_schema = pyarrow_to_schema(arrow_schema, name_mapping=mapping, format_version=metadata.format_version)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(file_schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=written.path,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition_from_json(written.partition)),
        file_size_in_bytes=written.bytes,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def append_files(
    table: Table,
    files: Sequence[WrittenFile],
    properties: dict[str, str],
    *,
    replacing: BooleanExpression | None = None,
    fence: Fence | None = None,
    table_properties: dict[str, str] | None = None,
) -> None:
    """One fast-append snapshot of ``files`` with snapshot ``properties``. With ``replacing`` (a row filter), the
    rows it matches are deleted in the same transaction. With ``fence``, pyiceberg's own retries of a lost catalog
    swap check it on the refreshed table first; ``table_properties`` are set in the same swap.

    Raises:
        pyiceberg.exceptions.CommitFailedException: the swap was lost more often than pyiceberg retries.
    """
    data_files = [data_file(table, f) for f in files]
    with table.transaction() if fence is None else fenced_transaction(table, fence) as tx:
        if replacing is not None:
            tx.delete(replacing, snapshot_properties=properties)
        set_name_mapping(tx)
        if table_properties:
            tx.set_properties(dict(table_properties))
        with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for entry in data_files:
                append.append_data_file(entry)


def set_name_mapping(tx: Transaction) -> None:
    """Data files carry no field ids: readers map their columns by name (schema updates keep this current)."""
    from pyiceberg.table import TableProperties

    if tx.table_metadata.name_mapping() is None:
        mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
