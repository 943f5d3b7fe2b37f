"""The change stream's text values typed in the task process (``sources/postgres/text_casts.py``): each covered type
parses PostgreSQL's ISO text exactly, and a text Arrow cannot parse exactly makes the chunk go to the server
(``typed_columns`` returns None) instead of a guess."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_tiering.sources.postgres.column_types import PgColumn, column_read
from airflow_provider_tiering.sources.postgres.text_casts import text_cast, typed_columns


def column(data_type: str, declared: str | None = None, kind: str = "b", **more: object) -> PgColumn:
    return PgColumn("c", data_type, declared or data_type, kind, **more)  # type: ignore[arg-type]


def typed(col: PgColumn, texts: list[str | None]) -> list[object] | None:
    read = column_read(col)
    cast = text_cast(col, read)
    assert cast is not None
    found = typed_columns([texts], [cast], [pa.field("c", read.arrow_type)])
    return None if found is None else found[0].to_pylist()


@pytest.mark.parametrize(
    ("col", "texts", "values"),
    [
        (column("bigint"), ["-9223372036854775808", None], [-9223372036854775808, None]),
        (column("double precision"), ["0.30000000000000004", "-Infinity"], [0.30000000000000004, float("-inf")]),
        (column("boolean"), ["t", "f", None], [True, False, None]),
        (column("numeric", "numeric(12,3)", precision=12, scale=3), ["-1.500"], [Decimal("-1.500")]),
        (column("date"), ["0001-01-01", "9999-12-31"], [date(1, 1, 1), date(9999, 12, 31)]),
        (column("timestamp without time zone"), ["2026-11-02 09:30:00.5"], [datetime(2026, 11, 2, 9, 30, 0, 500000)]),
        (column("timestamp with time zone"), ["2026-11-02 09:30:00+00"], [datetime(2026, 11, 2, 9, 30, tzinfo=UTC)]),
        (column("character", "character(3)"), ["a  "], ["a  "]),
        (column("jsonb"), ['{"a": 1}'], ['{"a": 1}']),
        (column("USER-DEFINED", "mood", kind="e"), ["happy, really"], ["happy, really"]),
        (
            column("ARRAY", "text[]", element="text", element_kind="b"),
            ['{a,"b c",NULL,"NULL","q\\"uote","back\\\\slash",""}', "{}", None, "[0:1]={x,y}", "{é漢字}"],
            [["a", "b c", None, "NULL", 'q"uote', "back\\slash", ""], [], None, ["x", "y"], ["é漢字"]],
        ),
        (
            column("ARRAY", "mood[]", element="mood", element_kind="e"),
            ['{"happy, really",sad}'],
            [["happy, really", "sad"]],
        ),
    ],
    ids=[
        "bigint",
        "double",
        "boolean",
        "numeric",
        "date",
        "timestamp",
        "timestamptz",
        "char",
        "jsonb",
        "enum",
        "text array",
        "enum array",
    ],  # fmt: skip
)
def test_each_covered_type_parses_postgresqls_text_exactly(col, texts, values):
    assert typed(col, texts) == values


@pytest.mark.parametrize(
    ("col", "text"),
    [
        (column("date"), "0044-03-15 BC"),
        (column("date"), "infinity"),
        (column("timestamp without time zone"), "10000-01-01 00:00:00"),
        (column("timestamp with time zone"), "1900-01-01 00:00:00+00:53:28"),
        (column("numeric", "numeric(12,2)", precision=12, scale=2), "NaN"),
        (column("numeric"), "1.0000000000000000001"),  # more digits than the lake's decimal(38,18) keeps
        (column("boolean"), "true"),
        (column("ARRAY", "text[]", element="text", element_kind="b"), "{{a,b},{c,d}}"),
    ],
    ids=[
        "date BC",
        "infinity",
        "year 10000",
        "zone with seconds",
        "numeric NaN",
        "too many digits",
        "not boolout",
        "two dimensions",
    ],  # fmt: skip
)
def test_a_text_arrow_cannot_parse_exactly_goes_to_the_server(col, text):
    assert typed(col, ["2000-01-01" if "date" in col.data_type else None, text]) is None


@pytest.mark.parametrize(
    "col",
    [
        column("bytea"),
        column("time without time zone"),
        column("interval"),
        column("inet"),
        column("ARRAY", "integer[]", element="integer", element_kind="b"),
        column("ARRAY", "interval[]", element="interval", element_kind="b"),
    ],
    ids=["bytea", "time", "interval", "inet", "integer array", "interval array"],
)
def test_types_without_a_cast_here_are_typed_by_the_server(col):
    assert text_cast(col, column_read(col)) is None
