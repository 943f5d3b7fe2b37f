"""Create a tiered table's Iceberg table, and keep its schema and partitioning in step with the spec.

Sibling tasks create their tables in one namespace at the same time. pyiceberg's ``create_table_if_not_exists``
settles a table created by a sibling; for a namespace, pyiceberg's SQL catalog checks, then inserts, so a sibling's
concurrent create surfaces as an integrity error instead of ``NamespaceAlreadyExistsError``: a create that fails is
fine when the namespace exists afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import LakeError, MergeKeyUnusable
from airflow_provider_tiering.core.partitions import PartitionField
from airflow_provider_tiering.core.shape import DeclaredColumnChanges, HotIdentity, ShapeChanges, ShapeDecision
from airflow_provider_tiering.lake.hot_table_record import RecordedColumn, columns_property, identity_property
from airflow_provider_tiering.lake.partitioner import build_partition_spec, describe_spec
from airflow_provider_tiering.lake.schema import iceberg_schema_from_arrow
from airflow_provider_tiering.lake.shape_plan import apply_shape, plan_shape

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


def create_table(
    catalog: Catalog,
    identifier: tuple[str, str],
    schema: pa.Schema,
    partition_fields: Sequence[PartitionField],
    key: Sequence[str] = (),
    identity: HotIdentity | None = None,
) -> Table:
    """Create the namespace and the table (schema, identifier fields ``key``, partition spec and the record of the hot
    table's identity and column ids in one commit), or load what a sibling created meanwhile."""
    namespace = identifier[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise
    iceberg_schema = iceberg_schema_from_arrow(schema)
    if key:
        ids = [iceberg_schema.find_field(name).field_id for name in key]
        iceberg_schema = iceberg_schema.model_copy(update={"identifier_field_ids": ids})
    spec = build_partition_spec(partition_fields, iceberg_schema)
    properties: dict[str, str] = {}
    if identity is not None:
        hot_ids = {f.field_id: RecordedColumn(identity.columns.get(f.name)) for f in iceberg_schema.fields}
        properties = {**identity_property(identity), **columns_property(hot_ids)}
    return catalog.create_table_if_not_exists(
        identifier, schema=iceberg_schema, partition_spec=spec, properties=properties
    )


def check_partitioning(table: Table, partition_fields: Sequence[PartitionField]) -> bool:
    """Raise LakeError if the table holds data under another partition spec than the declared one; adopt the
    declared one if the table holds nothing yet (returns True when it changed the spec)."""
    schema = table.schema()
    declared = build_partition_spec(partition_fields, schema)
    wanted, current = describe_spec(declared, schema), describe_spec(table.spec(), schema)
    if wanted == current:
        return False
    if table.current_snapshot() is None:  # nothing written yet: adopt the declared spec
        with table.update_spec() as update:
            for field in table.spec().fields:
                update.remove_field(field.name)
            for field in declared.fields:
                column = schema.find_column_name(field.source_id)
                if column is None:
                    raise LakeError(f"partition field {field.name}: its column is not in the table")
                update.add_field(column, field.transform, field.name)
        return True
    raise LakeError(
        f"Iceberg table {'.'.join(table.name())} is partitioned by {current or 'nothing'}, but the table "
        f"spec declares {wanted or 'nothing'}; evolve the table's partition spec first (nothing was committed)"
    )


def identifier_names(table: Table) -> tuple[str, ...]:
    """The table's identifier fields by name (its merge key), in id order."""
    schema = table.schema()
    return tuple(schema.find_column_name(i) or str(i) for i in sorted(schema.identifier_field_ids))


def check_key(table: Table, key: Sequence[str]) -> bool:
    """Make the table's identifier fields ``key`` (set them while it holds no rows; returns True when it changed
    them); raise MergeKeyUnusable when it holds rows under other identifier fields (or none)."""
    current = identifier_names(table)
    if set(current) == set(key):
        return False
    if table.current_snapshot() is None:
        with table.update_schema() as update:
            update.set_identifier_fields(*key)
        return True
    name = ".".join(table.name())
    raise MergeKeyUnusable(
        f"Iceberg table {name} holds rows keyed by {list(current) or 'nothing'}, but the table spec merges by "
        f"{list(key) or 'nothing'}: its rows may repeat a key. Drop lake table {name} to tier the table again "
        "under the new key (nothing was committed)"
    )


def follow_shape(
    table: Table,
    source: pa.Schema,
    identity: HotIdentity,
    declared: DeclaredColumnChanges,
    decide: Callable[[ShapeChanges], ShapeDecision],
    refresh: Callable[[], Table],
    *,
    by_name: bool = False,
    partial: bool = False,
) -> tuple[ShapeChanges, bool]:
    """Let the table's schema follow the hot table's (``lake/shape_plan.py``), as ``decide`` says for what the change
    asks (the added columns' initial defaults, a reload, a backfill; ``decide`` is asked even when the schema is the
    same, and may ask for a reload all the same); one commit, or none when nothing changes. A sibling attempt
    changing it first is fine: the change is planned again on its result. Returns what changed, and whether it
    committed (a first record of the columns, or a reload, commits with the schema unchanged).

    Raises:
        SchemaConflict: from planning, or from ``decide``; nothing was changed.
    """
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(3):
        plan = plan_shape(table, source, identity, declared, by_name=by_name, partial=partial)
        decision = decide(plan.changes)
        if not plan.changes and not plan.records and decision.reload is None:
            return plan.changes, False
        try:
            with table.transaction() as tx:
                apply_shape(tx, plan, defaults=decision.defaults, reload=decision.reload, backfill=decision.backfill)
        except CommitFailedException:
            if attempt == 2:
                raise
            table = refresh()
            continue
        return plan.changes, True
    raise AssertionError("unreachable")  # the loop returns or raises
