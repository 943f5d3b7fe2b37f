"""The key a merge table's round merges by: the spec's, or the hot table's own primary key, checked against the
columns the round tiers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import MergeKeyUnusable
from airflow_provider_tiering.core.ports import MergeKey, PlanT, Source, SplitT
from airflow_provider_tiering.core.spec import MergeSpec, TableSpec

if TYPE_CHECKING:
    import pyarrow as pa


def resolve_merge_key(spec: TableSpec, source: Source[PlanT, SplitT], schema: pa.Schema) -> MergeKey | None:
    """The round's merge key (None: an append-only table).

    Raises:
        MergeKeyUnusable: no key is declared and the hot table has no primary key; a key column is not tiered,
            is nullable, or is the cursor; the soft-delete column is not tiered or is in the key.
    """
    merge, cursor = spec.merge, spec.source.cursor()
    streams = spec.source.streams_changes
    if merge is None and not streams:
        return None
    merge = merge or MergeSpec()
    where = f"{source.display_name} (table {spec.name!r})"
    if cursor is None and not streams:
        raise MergeKeyUnusable(f"{where}: merge needs a cursor column")
    columns = merge.primary_key
    if columns is None:
        own = source.primary_key()
        if not own:
            raise MergeKeyUnusable(
                f"{where} has no primary key to merge by: declare merge.primary_key (columns that identify a row)"
            )
        columns = own
    names = set(schema.names)
    missing = [c for c in columns if c not in names]
    if missing:
        raise MergeKeyUnusable(f"{where}: merge key column(s) {missing} are not tiered (add them to source.columns)")
    if cursor is not None and cursor in columns:
        raise MergeKeyUnusable(
            f"{where}: the merge key {list(columns)} holds the cursor column {cursor!r}; declare merge.primary_key "
            "without it"
        )
    nullable = [c for c in columns if schema.field(c).nullable]
    if nullable:
        raise MergeKeyUnusable(
            f"{where}: merge key column(s) {nullable} are nullable in the hot table; an Iceberg identifier field "
            "must be required: make them NOT NULL"
        )
    soft_delete = merge.soft_delete_column
    if soft_delete is not None and (soft_delete not in names or soft_delete in columns):
        raise MergeKeyUnusable(
            f"{where}: merge.soft_delete_column {soft_delete!r} must be a tiered column outside the key {list(columns)}"
        )
    return MergeKey(tuple(columns), cursor, soft_delete, from_change_stream=streams)
