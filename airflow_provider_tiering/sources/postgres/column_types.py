"""Which lake type a PostgreSQL column is tiered as, and how it is selected so the Arrow read has that type.

The ADBC driver reads most types natively; others arrive as Arrow extension types no lake type matches (``uuid``
as ``arrow.uuid``, ``json`` as ``arrow.json``, ``inet`` as PostgreSQL's binary wire form, ``interval`` as a
month-day-nanosecond interval) and are selected as their text instead, the form PostgreSQL prints them in. A type
outside the table in docs/tables.md ("Column types") raises :class:`UnsupportedColumnType` when the schema is read,
before anything is written, naming the column and the way out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_tiering.core.errors import UnsupportedColumnType
from airflow_provider_tiering.sources.sql_table import quote_string

#: Unconstrained ``numeric``: Iceberg needs a fixed precision and scale; 38/18 keeps typical money and ratios exact.
UNCONSTRAINED_NUMERIC = pa.decimal128(38, 18)


class ReadAs(enum.Enum):
    """How a column is selected."""

    NATIVE = "native"  # as it is: the driver's Arrow type is the lake's
    TEXT = "text"  # CAST(x AS text): the type's text form (decimals parsed back by Arrow)
    HOST_TEXT = "host_text"  # abbrev(x): inet as PostgreSQL prints it (CAST would add /32 to a host address)
    ARRAY = "array"  # a one-dimensional array read natively as an Arrow list
    TEXT_ARRAY = "text_array"  # CAST(CAST(x AS text) AS text[]): an array of its elements' text forms


#: Types the driver reads as the Arrow type they are tiered as.
NATIVE_TYPES: dict[str, pa.DataType] = {
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "boolean": pa.bool_(),
    "text": pa.string(),
    "character varying": pa.string(),
    "character": pa.string(),
    "name": pa.string(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "time without time zone": pa.time64("us"),
    "timestamp without time zone": pa.timestamp("us"),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
}
#: Types tiered as their text: uuid canonical (lower-case, hyphenated), json as stored, jsonb as PostgreSQL
#: normalises it, interval as ISO 8601 (``P1Y2M3DT4H5M6S``: every session sets ``IntervalStyle``), addresses and
#: bit strings as printed.
TEXT_TYPES = frozenset(
    {"uuid", "json", "jsonb", "xml", "interval", "cidr", "macaddr", "macaddr8", "bit", "bit varying"}
)
#: Array elements the driver reads natively (the others in NATIVE_TYPES, TEXT_TYPES and numeric go through text).
NATIVE_ELEMENTS = frozenset(
    {
        "smallint",
        "integer",
        "bigint",
        "real",
        "double precision",
        "boolean",
        "text",
        "character varying",
        "character",
        "date",
        "timestamp without time zone",
        "timestamp with time zone",
    }
)
_ENUM, _BASE = "e", "b"  # pg_type.typtype


@dataclass(frozen=True)
class PgColumn:
    """A column as the catalog describes it (``information_schema.columns`` joined with ``pg_type``)."""

    name: str
    data_type: str  # information_schema's: a built-in name, 'ARRAY' or 'USER-DEFINED' (domains: their base)
    declared: str  # format_type(): how PostgreSQL names the column's type, e.g. 'numeric(12,3)', 'mood[]'
    type_kind: str  # pg_type.typtype of the (base) type: b base, e enum, c composite, r range, ...
    precision: int | None = None
    scale: int | None = None
    element: str | None = None  # arrays: the element's (base) type, as format_type() names it
    element_kind: str | None = None
    element_typmod: int = -1  # arrays: the elements' type modifier (numeric precision and scale)
    dimensions: int = 0  # pg_attribute.attndims: dimensions the column was declared with (0: not said)


@dataclass(frozen=True)
class ColumnRead:
    arrow_type: pa.DataType
    read_as: ReadAs


def _unsupported(column: PgColumn, why: str) -> UnsupportedColumnType:
    return UnsupportedColumnType(
        f"column {column.name!r} has type {column.declared}, which cannot be tiered ({why}): leave it out by listing "
        "the columns to tier in the spec's source.columns, or change its type (see 'Column types' in docs/tables.md); "
        "nothing was tiered"
    )


def _decimal(column: PgColumn, precision: int | None, scale: int | None) -> pa.DataType:
    if precision is None:
        return UNCONSTRAINED_NUMERIC
    if precision > 38:
        raise _unsupported(column, f"numeric({precision},{scale}) is wider than Iceberg's decimal(38)")
    if scale is not None and scale < 0:
        raise _unsupported(column, "Iceberg's decimals have no negative scale")
    return pa.decimal128(precision, scale or 0)


def numeric_typmod(typmod: int) -> tuple[int | None, int | None]:
    """Precision and scale of a ``numeric`` type modifier (-1: unconstrained); the scale is 11-bit signed."""
    if typmod < 4:
        return None, None
    value = typmod - 4
    return (value >> 16) & 0xFFFF, ((value & 0x7FF) ^ 1024) - 1024


def _element(column: PgColumn) -> tuple[pa.DataType, bool]:
    """An array's element type, and whether the driver reads it natively."""
    element, kind = column.element or "", column.element_kind
    if kind == _ENUM:
        return pa.string(), True
    if kind != _BASE:
        raise _unsupported(column, "arrays of composite, range or domain types are not mapped")
    if element in NATIVE_ELEMENTS:
        return NATIVE_TYPES[element], True
    if element == "numeric":
        return _decimal(column, *numeric_typmod(column.element_typmod)), False
    if element in TEXT_TYPES or element == "inet":
        return pa.string(), False
    raise _unsupported(column, f"arrays of {element} are not mapped")


def column_read(column: PgColumn) -> ColumnRead:
    """The Arrow type ``column`` is tiered as and how it is selected; :class:`UnsupportedColumnType` if none."""
    data_type = column.data_type
    if data_type == "ARRAY":
        if column.dimensions > 1:
            raise _unsupported(column, "multi-dimensional arrays are not mapped")
        element, native = _element(column)
        return ColumnRead(pa.list_(element), ReadAs.ARRAY if native else ReadAs.TEXT_ARRAY)
    if column.type_kind == _ENUM:
        return ColumnRead(pa.string(), ReadAs.NATIVE)
    if data_type == "numeric":
        return ColumnRead(_decimal(column, column.precision, column.scale), ReadAs.TEXT)
    if data_type in NATIVE_TYPES:
        return ColumnRead(NATIVE_TYPES[data_type], ReadAs.NATIVE)
    if data_type in TEXT_TYPES:
        return ColumnRead(pa.string(), ReadAs.TEXT)
    if data_type == "inet":
        return ColumnRead(pa.string(), ReadAs.HOST_TEXT)
    what = {"c": "a composite type", "r": "a range type", "m": "a multirange type"}.get(column.type_kind)
    raise _unsupported(column, f"{what} is not mapped" if what else "no lake type is mapped to it")


#: Text of the error a multi-dimensional value raises inside the read (see :func:`select_expression`).
MULTI_DIMENSIONAL = "holds a multi-dimensional array"


def select_expression(quoted: str, column: PgColumn, read: ColumnRead) -> str:
    """The select-list entry that reads ``column`` (its quoted name ``quoted``) as ``read`` says.

    Arrays are guarded: PostgreSQL does not enforce the declared dimensions and the driver would flatten a
    two-dimensional value into a list silently, so such a value fails the read with an error naming the column
    (a cast of a text naming it; it depends on the row, so it is never evaluated ahead of time)."""
    if read.read_as is ReadAs.NATIVE:
        return quoted
    if read.read_as is ReadAs.TEXT:
        return f"CAST({quoted} AS text) AS {quoted}"
    if read.read_as is ReadAs.HOST_TEXT:
        return f"abbrev({quoted}) AS {quoted}"
    value = quoted if read.read_as is ReadAs.ARRAY else f"CAST(CAST({quoted} AS text) AS text[])"
    array_type = column.declared if read.read_as is ReadAs.ARRAY else "text[]"
    message = quote_string(f"column {column.name} {MULTI_DIMENSIONAL} of ")
    refusal = f"CAST({message} || array_ndims({quoted}) || ' dimensions' AS {array_type})"
    return f"CASE WHEN array_ndims({quoted}) > 1 THEN {refusal} ELSE {value} END AS {quoted}"
