"""The lake's types: the Iceberg schema of a hot table's Arrow schema, which type changes Iceberg promotes, the
name mapping of files written without field ids, and the Arrow schema data files are written in (with field ids).

How the lake's schema follows the hot table's is ``lake/shape_plan.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType


def iceberg_schema_from_arrow(schema: pa.Schema) -> Schema:
    """The Iceberg schema (fresh field ids) that pyiceberg gives an Arrow schema at table creation."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    # The conversion create_table applies (private: pyiceberg has no public Arrow -> Iceberg schema without ids);
    # the partition spec is built on its field ids before the table exists.
    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))


def widens(old: IcebergType, new: IcebergType) -> bool:
    """Whether Iceberg promotes ``old`` to ``new`` (int -> long, float -> double, a decimal's precision up at the same
    scale): the files keep their type and readers widen their values."""
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


def name_mapping_keeping_history(previous: str | None, schema: Schema) -> str:
    """The name mapping (``schema.name-mapping.default``) for ``schema``, keeping every name a field was known by
    with that field: files written without field ids (by versions that wrote none) name columns as they were then
    called, so a name stays with the field it meant even when another field takes it later (a swap of names, a
    column dropped and added again). A field's current name is added where no other field had it."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    claimed: dict[str, int] = {}
    names: dict[int, list[str]] = {}
    if previous:
        for entry in NameMapping.model_validate_json(previous).root:
            if entry.field_id is None:
                continue
            for name in entry.names:
                claimed.setdefault(name, entry.field_id)
                names.setdefault(entry.field_id, []).append(name)
    nested = {entry.field_id: entry.fields for entry in schema.name_mapping.root}
    fields = []
    for field in schema.fields:  # top-level columns; nested fields take the schema's own mapping
        known = [n for n in names.get(field.field_id, []) if claimed.get(n) == field.field_id]
        if field.name not in known and claimed.get(field.name, field.field_id) == field.field_id:
            known.append(field.name)
        fields.append(MappedField(field_id=field.field_id, names=known, fields=list(nested.get(field.field_id, []))))
    return NameMapping(root=fields).model_dump_json()


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
    """The Arrow schema data files are written in: the lake's columns, in order, each carrying its Iceberg field id
    (``PARQUET:field_id``), so every reader resolves a file's columns by id, whatever they were called when it was
    written (a renamed column, a column dropped and added again under its old name)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(lake_schema, include_field_ids=True)
    return pa.schema([pa.field(f.name, _plain(f.type), nullable=f.nullable, metadata=f.metadata) for f in arrow])
