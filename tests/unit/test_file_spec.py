"""Validation of landing-zone specs: clear errors that name the field, and SQL specs unchanged."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.source_specs import FileSourceSpec, SqlSourceSpec
from airflow_provider_tiering.core.spec import TableSpec, load_table_specs
from airflow_provider_tiering.sources.files.column_types import arrow_type


def spec(**source_overrides):
    source = {"kind": "files", "path": "/landing/orders", "format": "jsonl", "columns": {"id": "int64"}}
    source.update(source_overrides)
    return {"name": "orders", "source": source, "lake": {"namespace": "sales", "table": "orders"}}


def test_file_source_has_defaults():
    source = TableSpec.parse(spec()).source
    assert isinstance(source, FileSourceSpec)
    assert source.file_patterns() == ("*.jsonl", "*.json")
    assert (source.settle_seconds, source.on_bad_record, source.after_commit) == (30.0, "fail", "keep")
    assert (source.recursive, source.csv_delimiter, source.csv_header) == (True, ",", True)
    assert source.max_files_per_round == 100_000 and source.target_bytes_per_split == 128 * 1024 * 1024
    assert source.column_names() == ("id",)


def test_a_source_without_kind_is_sql():
    data = spec()
    data["source"] = {"conn_id": "hot", "table": "orders", "cursor_column": "id"}
    source = TableSpec.parse(data).source
    assert isinstance(source, SqlSourceSpec) and source.kind == "sql"


def test_parquet_may_leave_columns_to_the_files():
    source = TableSpec.parse(spec(format="parquet", columns=None)).source
    assert source.column_names() is None and source.file_patterns() == ("*.parquet",)


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"columns": {"id": "int65"}}, "source.columns.id", "'int65' is not a supported Arrow type"),
        ({"columns": {"id": "timestamp[ns]"}}, "source.columns.id", "microseconds"),
        ({"columns": {"id": "decimal128(40, 2)"}}, "source.columns.id", "precision"),
        ({"columns": {"bad name": "int64"}}, "source.columns.bad name", "not a plain identifier"),
        ({"columns": None}, "source.columns", "columns are required for format 'jsonl'"),
        ({"format": "csv", "columns": None}, "source.columns", "columns are required for format 'csv'"),
        ({"columns": {}}, "source.columns", "must not be empty"),
        ({"after_commit": "archive"}, "source.archive_path", "archive_path is required"),
        ({"archive_path": "/archive"}, "source.archive_path", "only used when after_commit is 'archive'"),
        ({"colour": "blue"}, "source.colour", "Extra inputs are not permitted"),
        ({"format": "xml"}, "source.format", "'jsonl', 'csv' or 'parquet'"),
        ({"settle_seconds": -1}, "source.settle_seconds", "greater than or equal to 0"),
        ({"max_files_per_round": 0}, "source.max_files_per_round", "greater than 0"),
        ({"target_bytes_per_split": 0}, "source.target_bytes_per_split", "greater than 0"),
        ({"csv_delimiter": ";;"}, "source.csv_delimiter", "at most 1 character"),
        ({"on_bad_record": "skip"}, "source.on_bad_record", "'fail' or 'side_table'"),
        ({"path": ""}, "source.path", "at least 1 character"),
        (
            {"kind": "kafka"},
            "source",
            "does not match any of the expected tags: 'sql', 'postgres_cdc', 'mysql_cdc', 'files'",
        ),
    ],
)
def test_invalid_file_source_names_table_and_field(overrides, field, message):
    with pytest.raises(InvalidTableSpec) as err:
        TableSpec.parse(spec(**overrides))
    text = str(err.value)
    assert text.startswith("table 'orders': ")
    assert f"field '{field}" in text and message in text


def test_partition_columns_must_be_declared_columns():
    data = spec()
    data["lake"]["partition_by"] = ["region"]
    with pytest.raises(InvalidTableSpec, match=r"partition_by \['region'\] are not in source.columns"):
        TableSpec.parse(data)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("int32", pa.int32()),
        ("int64", pa.int64()),
        ("float32", pa.float32()),
        ("float64", pa.float64()),
        ("double", pa.float64()),
        ("string", pa.string()),
        ("bool", pa.bool_()),
        ("binary", pa.binary()),
        ("date32", pa.date32()),
        ("timestamp[us]", pa.timestamp("us")),
        ("timestamp[us, tz=UTC]", pa.timestamp("us", tz="UTC")),
        ("decimal128(12, 2)", pa.decimal128(12, 2)),
        ("decimal128(38,0)", pa.decimal128(38, 0)),
    ],
)
def test_every_accepted_type_name_is_an_arrow_type(name, expected):
    declared = TableSpec.parse(spec(columns={"v": name})).source.columns["v"]
    assert arrow_type(declared) == expected


def test_yaml_table_list_with_a_landing_zone(tmp_path):
    path = tmp_path / "tables.yaml"
    path.write_text(
        "tables:\n"
        "  - name: events\n"
        "    source: {kind: files, path: /landing/events, format: csv, marker_suffix: .done,\n"
        "             columns: {id: int64, at: 'timestamp[us, tz=UTC]'}}\n"
        "    lake: {namespace: raw, table: events}\n"
        "  - name: orders\n"
        "    source: {conn_id: hot, table: orders, cursor_column: id}\n"
        "    lake: {namespace: raw, table: orders}\n"
    )
    events, orders = load_table_specs(path)
    assert isinstance(events.source, FileSourceSpec) and events.source.marker_suffix == ".done"
    assert isinstance(orders.source, SqlSourceSpec)
