"""Keep the lake table's schema in step with the hot store's, and make batches fit the lake's schema.

Allowed without asking: a new hot column (added to the lake, older rows read as null), a safe widening
(int -> long, float -> double, decimal precision up at the same scale), a NOT NULL dropped. Anything else
(narrowing, a lossy type change, a required lake column missing from the hot store) raises
:class:`SchemaConflict` naming the column and both types, before anything is written or committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_tiering.core.errors import SchemaConflict

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType


@dataclass
class SchemaChanges:
    """What the hot store's schema asks of the lake's: columns to add, columns to widen or relax."""

    added: list[tuple[str, IcebergType]] = field(default_factory=list)
    widened: list[tuple[str, IcebergType, IcebergType]] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.widened or self.relaxed)

    def describe(self) -> str:
        parts = [f"added {name} ({kind})" for name, kind in self.added]
        parts += [f"widened {name} {old} -> {new}" for name, old, new in self.widened]
        parts += [f"{name} made optional" for name in self.relaxed]
        return "; ".join(parts)


def iceberg_schema_from_arrow(schema: pa.Schema) -> Schema:
    """The Iceberg schema (fresh field ids) that pyiceberg gives an Arrow schema at table creation."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    # The conversion create_table applies (private: pyiceberg has no public Arrow -> Iceberg schema without ids);
    # the partition spec is built on its field ids before the table exists.
    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))


def _widens(old: IcebergType, new: IcebergType) -> bool:
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (
        isinstance(old, DecimalType)
        and isinstance(new, DecimalType)
        and old.scale == new.scale
        and new.precision > old.precision
    )


def same_type(old: IcebergType, new: IcebergType) -> bool:
    """Whether two Iceberg types are the same, ignoring the field ids of nested types (a list's element id in the
    lake is whatever was free when the column was added; the hot store's schema gets fresh ones)."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(old, ListType) and isinstance(new, ListType):
        return old.element_required == new.element_required and same_type(old.element_type, new.element_type)
    if isinstance(old, MapType) and isinstance(new, MapType):
        return (
            old.value_required == new.value_required
            and same_type(old.key_type, new.key_type)
            and same_type(old.value_type, new.value_type)
        )
    if isinstance(old, StructType) and isinstance(new, StructType):
        return len(old.fields) == len(new.fields) and all(
            a.name == b.name and a.required == b.required and same_type(a.field_type, b.field_type)
            for a, b in zip(old.fields, new.fields)
        )
    return old == new


def plan_schema_changes(lake_schema: Schema, source: pa.Schema) -> SchemaChanges:
    """Compare the lake table's Iceberg schema with the hot store's Arrow schema (top-level columns)."""
    wanted = iceberg_schema_from_arrow(source)
    changes = SchemaChanges()
    for column in wanted.fields:
        try:
            current = lake_schema.find_field(column.name)
        except ValueError:
            current = None
        if current is None:
            changes.added.append((column.name, column.field_type))
            continue
        if not same_type(current.field_type, column.field_type):
            if _widens(current.field_type, column.field_type):
                changes.widened.append((column.name, current.field_type, column.field_type))
            else:
                raise SchemaConflict(
                    f"column {column.name!r}: the hot store's type {column.field_type} cannot be written into the "
                    f"lake's {current.field_type} (only int -> long, float -> double and wider decimals are "
                    "applied; a narrowing or any other type change would lose data); nothing was committed"
                )
        if current.required and not column.required:
            changes.relaxed.append(column.name)
    source_names = set(source.names)
    for column in lake_schema.fields:
        if column.required and column.name not in source_names:
            raise SchemaConflict(
                f"column {column.name!r}: required ({column.field_type}) in the lake but gone from the hot store; "
                "nothing was committed"
            )
    return changes


def apply_schema_changes(table: Table, source: pa.Schema) -> None:
    """Apply what :func:`plan_schema_changes` allowed, in one schema commit, with pyiceberg's union by name (the
    name mapping follows, for files without ids). Columns new to the lake are added optional: older rows lack them."""
    lake_columns = {field.name for field in table.schema().fields}
    wanted = pa.schema([f if f.name in lake_columns else f.with_nullable(True) for f in source])
    with table.update_schema() as update:
        update.union_by_name(wanted)


def _plain(kind: pa.DataType) -> pa.DataType:
    # pyiceberg maps strings, binaries and lists to the large_ variants; the regular ones save a copy per batch.
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_large_list(kind):
        element = kind.value_field
        return pa.list_(element.with_type(_plain(element.type)))
    return kind


def write_schema(lake_schema: Schema) -> pa.Schema:
    """The Arrow schema data files are written in: the lake's columns, in order, without field ids."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(lake_schema, include_field_ids=False)
    return pa.schema([pa.field(f.name, _plain(f.type), nullable=f.nullable) for f in arrow])
