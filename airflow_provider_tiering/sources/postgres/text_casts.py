"""Type a change's column values from their PostgreSQL text form with Arrow's casts, in this process, for the column
types whose text form Arrow parses to the value the server's own cast would give.

The change stream carries every value as its type's text output, printed by the session that reads the slot
(``Replication.peek`` sets that session's ``DateStyle`` to ISO, its ``TimeZone`` to UTC and its float digits to an
exact form, the shortest one on PostgreSQL 12 and later). Arrow's casts are strict: a text it cannot parse exactly
(a date BC, ``infinity``, a decimal with more digits than the lake's scale, ``NaN``) raises instead of guessing, and
the values are then typed by the server (``change_stream_source.py``), which gives what the bulk read would. Arrays
of strings (text, varchar, char, uuid, json, enums) are parsed by psycopg's own array loader (quoting, escapes, NULL
and bounds are its to get right); a multi-dimensional value goes to the server, which refuses it naming the column.
Types not named here (other arrays, bytea, time, interval, addresses, bit strings) are always typed by the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.sources.postgres.column_types import ColumnRead, PgColumn

#: One column's text values (None: NULL) -> its values typed; raises ``pa.ArrowInvalid`` on a text it cannot parse.
TextCast = Callable[["pa.Array[Any]"], "pa.Array[Any]"]

#: Types whose text form is the lake's value itself: strings, uuid in its canonical form, json as stored and jsonb
#: as the server normalises it (the bulk read selects these as ``CAST(x AS text)``, the same text).
_AS_IS = frozenset({"text", "character varying", "character", "name", "uuid", "json", "jsonb"})
#: Types Arrow parses from PostgreSQL's text form (ISO dates and timestamps, shortest exact floats, plain decimals).
_PARSED = frozenset(
    {
        "smallint",
        "integer",
        "bigint",
        "real",
        "double precision",
        "numeric",
        "date",
        "timestamp without time zone",
        "timestamp with time zone",
    }
)
_ENUM = "e"  # pg_type.typtype
_BOOLEAN_TEXTS = pa.array(["t", "f"])


def text_cast(column: PgColumn, read: ColumnRead) -> TextCast | None:
    """How ``column``'s text values are typed in this process, or None when only the server types them."""
    if column.data_type == "ARRAY":
        strings = column.element_kind == _ENUM or (column.element_kind == "b" and column.element in _AS_IS)
        return _string_array if strings else None
    if column.type_kind == _ENUM or column.data_type in _AS_IS:
        return _as_is
    if column.data_type == "boolean":
        return _boolean
    if column.data_type in _PARSED:
        target = read.arrow_type
        return lambda values: pc.cast(values, target)
    return None


def typed_columns(
    columns: Sequence[Sequence[str | None]], casts: Sequence[TextCast], fields: Sequence[pa.Field[pa.DataType]]
) -> list[pa.Array[Any]] | None:
    """Each column's text values typed by its cast, or None when a value is one Arrow does not parse exactly (the
    server types the chunk then)."""
    typed: list[pa.Array[Any]] = []
    for values, cast, field in zip(columns, casts, fields, strict=True):
        try:
            array = cast(pa.array(values, pa.string()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if array.type != field.type:  # the lake's type is not the one the column is read as: the server's cast
            return None
        typed.append(array)
    return typed


def _as_is(values: pa.Array[Any]) -> pa.Array[Any]:
    return values


def _boolean(values: pa.Array[Any]) -> pa.Array[Any]:
    # boolout prints 't' or 'f'; anything else is not a boolean's text.
    known = pc.is_in(values, value_set=_BOOLEAN_TEXTS).true_count
    if known != len(values) - values.null_count:
        raise pa.ArrowInvalid("not a boolean's text form")
    return pc.equal(values, pa.scalar("t"))


def _string_array(values: pa.Array[Any]) -> pa.Array[Any]:
    load = _text_array_loader()
    lists = []
    for text in values.to_pylist():
        items = None if text is None else load(text.encode())
        if items is not None and any(isinstance(item, list) for item in items):
            raise pa.ArrowInvalid("a multi-dimensional array")  # the server's read refuses it, naming the column
        lists.append(items)
    return pa.array(lists, pa.list_(pa.string()))


@cache
def _text_array_loader() -> Callable[[bytes], list[Any]]:
    """psycopg's loader of a ``text[]`` in its text form (no connection: the built-in types' adapters, UTF-8)."""
    from psycopg.adapt import Transformer
    from psycopg.postgres import types
    from psycopg.pq import Format

    oid = types["text"].array_oid
    loader = Transformer().get_loader(oid, Format.TEXT)
    return loader.load
