"""Create a tiered table's Iceberg table, and keep its schema and partitioning in step with the spec.

Sibling tasks create their tables in one namespace at the same time. pyiceberg's ``create_table_if_not_exists``
settles a table created by a sibling; for a namespace, pyiceberg's SQL catalog checks, then inserts, so a sibling's
concurrent create surfaces as an integrity error instead of ``NamespaceAlreadyExistsError``: a create that fails is
fine when the namespace exists afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.partitions import PartitionField
from airflow_provider_tiering.lake.partitioner import build_partition_spec, describe_spec
from airflow_provider_tiering.lake.schema import apply_schema_changes, iceberg_schema_from_arrow, plan_schema_changes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def create_table(
    catalog: Catalog, identifier: tuple[str, str], schema: pa.Schema, partition_fields: Sequence[PartitionField]
) -> Table:
    """Create the namespace and the table (schema and partition spec in one commit), or load what a sibling
    created meanwhile."""
    namespace = identifier[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise
    iceberg_schema = iceberg_schema_from_arrow(schema)
    spec = build_partition_spec(partition_fields, iceberg_schema)
    return catalog.create_table_if_not_exists(identifier, schema=iceberg_schema, partition_spec=spec)


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


def follow_schema(table: Table, source: pa.Schema, reload: Callable[[], Table]) -> bool:
    """Let the table's schema follow the hot store's (``lake/schema.py``: new columns, safe widenings, dropped NOT
    NULLs; a conflict raises SchemaConflict before anything is written). Returns True when it changed the schema.
    A sibling attempt evolving it first is fine: its result is checked again."""
    from pyiceberg.exceptions import CommitFailedException

    changes = plan_schema_changes(table.schema(), source)
    if not changes:
        return False
    try:
        apply_schema_changes(table, source)
    except CommitFailedException:
        table = reload()
        if plan_schema_changes(table.schema(), source):
            apply_schema_changes(table, source)
    log.info("%s: schema follows the hot store: %s", ".".join(table.name()), changes.describe())
    return True
