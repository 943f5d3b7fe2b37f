"""The pure parts of column type mapping: PostgreSQL and MariaDB types to Arrow, how columns are selected, nested
Iceberg types compared without their ids, and a Spark task's not-retryable error rebuilt on the driver."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_tiering.core.errors import NotRetryable, SourceError, UnsupportedColumnType
from airflow_provider_tiering.sources.mysql.table import arrow_type, time_of_day
from airflow_provider_tiering.sources.postgres.column_types import (
    UNCONSTRAINED_NUMERIC,
    PgColumn,
    ReadAs,
    column_read,
    numeric_typmod,
    select_expression,
)


def pg(data_type: str, declared: str | None = None, kind: str = "b", **more: object) -> PgColumn:
    return PgColumn("c", data_type, declared or data_type, kind, **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column", "arrow", "read_as"),
    [
        (pg("uuid"), pa.string(), ReadAs.TEXT),
        (pg("json"), pa.string(), ReadAs.TEXT),
        (pg("jsonb"), pa.string(), ReadAs.TEXT),
        (pg("interval"), pa.string(), ReadAs.TEXT),
        (pg("inet"), pa.string(), ReadAs.HOST_TEXT),
        (pg("cidr"), pa.string(), ReadAs.TEXT),
        (pg("USER-DEFINED", "mood", kind="e"), pa.string(), ReadAs.NATIVE),
        (pg("numeric"), UNCONSTRAINED_NUMERIC, ReadAs.TEXT),
        (pg("numeric", "numeric(12,3)", precision=12, scale=3), pa.decimal128(12, 3), ReadAs.TEXT),
        (pg("bigint"), pa.int64(), ReadAs.NATIVE),
        (pg("ARRAY", "integer[]", element="integer", element_kind="b"), pa.list_(pa.int32()), ReadAs.ARRAY),
        (pg("ARRAY", "text[]", element="text", element_kind="b"), pa.list_(pa.string()), ReadAs.ARRAY),
        (pg("ARRAY", "mood[]", element="mood", element_kind="e"), pa.list_(pa.string()), ReadAs.ARRAY),
        (pg("ARRAY", "uuid[]", element="uuid", element_kind="b"), pa.list_(pa.string()), ReadAs.TEXT_ARRAY),
        (
            pg("ARRAY", "numeric(10,2)[]", element="numeric", element_kind="b", element_typmod=(10 << 16) + 2 + 4),
            pa.list_(pa.decimal128(10, 2)),
            ReadAs.TEXT_ARRAY,
        ),
    ],
)
def test_postgres_types_map_to_lake_types(column: PgColumn, arrow: pa.DataType, read_as: ReadAs) -> None:
    read = column_read(column)
    assert (read.arrow_type, read.read_as) == (arrow, read_as)


@pytest.mark.parametrize(
    ("column", "why"),
    [
        (pg("point"), "no lake type is mapped"),
        (pg("tsvector"), "no lake type is mapped"),
        (pg("USER-DEFINED", "address", kind="c"), "a composite type"),
        (pg("int4range", kind="r"), "a range type"),
        (pg("ARRAY", "integer[]", element="integer", element_kind="b", dimensions=2), "multi-dimensional"),
        (pg("ARRAY", "point[]", element="point", element_kind="b"), "arrays of point"),
        (pg("numeric", "numeric(40,2)", precision=40, scale=2), "wider than Iceberg's decimal"),
    ],
)
def test_postgres_types_the_lake_cannot_hold_are_refused_with_the_way_out(column: PgColumn, why: str) -> None:
    with pytest.raises(UnsupportedColumnType) as refused:
        column_read(column)
    assert isinstance(refused.value, NotRetryable) and isinstance(refused.value, SourceError)
    message = str(refused.value)
    assert why in message and f"type {column.declared}" in message and "source.columns" in message


def test_numeric_type_modifiers() -> None:
    assert numeric_typmod(-1) == (None, None)
    assert numeric_typmod((12 << 16) + 3 + 4) == (12, 3)
    assert numeric_typmod((5 << 16) + (0x7FF & -2) + 4) == (5, -2)  # PostgreSQL 15's negative scale


def test_select_expressions_read_extension_types_as_text_and_guard_arrays() -> None:
    assert select_expression('"u"', pg("uuid"), column_read(pg("uuid"))) == 'CAST("u" AS text) AS "u"'
    assert select_expression('"ip"', pg("inet"), column_read(pg("inet"))) == 'abbrev("ip") AS "ip"'
    assert select_expression('"id"', pg("bigint"), column_read(pg("bigint"))) == '"id"'
    array = pg("ARRAY", "uuid[]", element="uuid", element_kind="b")
    sql = select_expression('"ua"', array, column_read(array))
    assert sql.startswith('CASE WHEN array_ndims("ua") > 1 THEN CAST(')
    assert 'ELSE CAST(CAST("ua" AS text) AS text[]) END AS "ua"' in sql


@pytest.mark.parametrize(
    ("data_type", "column_type", "arrow"),
    [
        ("uuid", "uuid", pa.string()),
        ("inet4", "inet4", pa.string()),
        ("inet6", "inet6", pa.string()),
        ("set", "set('a','b')", pa.string()),
        ("longtext", "longtext", pa.string()),  # JSON
        ("bit", "bit(10)", pa.binary()),
        ("year", "year(4)", pa.int16()),
        ("time", "time(6)", pa.time64("us")),
    ],
)
def test_mariadb_types_map_to_lake_types(data_type: str, column_type: str, arrow: pa.DataType) -> None:
    assert arrow_type("c", data_type, column_type, None, None) == arrow


def test_mariadb_types_the_lake_cannot_hold_are_refused() -> None:
    with pytest.raises(UnsupportedColumnType, match=r"column 'g' has type point.*source\.columns"):
        arrow_type("g", "point", "point", None, None)


def test_mariadb_time_must_be_a_time_of_day() -> None:
    micros = pa.array([0, 86_399_999_999, None], pa.int64())
    assert time_of_day(micros, "t").type == pa.time64("us")
    with pytest.raises(UnsupportedColumnType, match=r"column 't' holds TIME 24:00:00\.000000"):
        time_of_day(pa.array([86_400_000_000]), "t")
    with pytest.raises(UnsupportedColumnType, match=r"TIME -0:00:01\.500000"):
        time_of_day(pa.array([-1_500_000]), "t")


def test_nested_lake_types_compare_without_field_ids() -> None:
    from pyiceberg.types import IntegerType, ListType, LongType

    from airflow_provider_tiering.lake.schema import same_type

    assert same_type(ListType(3, IntegerType(), False), ListType(9, IntegerType(), False))
    assert not same_type(ListType(3, IntegerType(), False), ListType(3, LongType(), False))
    assert not same_type(ListType(3, IntegerType(), True), ListType(3, IntegerType(), False))
