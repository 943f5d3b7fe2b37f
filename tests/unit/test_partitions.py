"""Partition fields as specs declare them, parsed and validated when the DAG file is parsed."""

from __future__ import annotations

import pytest

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.partitions import PartitionField, parse_partition_field
from airflow_provider_tiering.core.spec import TableSpec


@pytest.mark.parametrize(
    ("text", "expected", "name", "iceberg"),
    [
        ("region", PartitionField("region"), "region", "identity"),
        ("identity(region)", PartitionField("region"), "region", "identity"),
        ("day(ts)", PartitionField("ts", "day"), "ts_day", "day"),
        ("days( ts )", PartitionField("ts", "day"), "ts_day", "day"),
        ("years(ts)", PartitionField("ts", "year"), "ts_year", "year"),
        ("month(ts)", PartitionField("ts", "month"), "ts_month", "month"),
        ("hours(ts)", PartitionField("ts", "hour"), "ts_hour", "hour"),
        ("bucket(16, id)", PartitionField("id", "bucket", 16), "id_bucket", "bucket[16]"),
        ("truncate(4,sku)", PartitionField("sku", "truncate", 4), "sku_trunc", "truncate[4]"),
    ],
)
def test_partition_fields_parse_like_spark_ddl(text, expected, name, iceberg):
    field = parse_partition_field(text)
    assert field == expected and field.name == name and field.iceberg_transform == iceberg
    assert parse_partition_field(str(field)) == field


@pytest.mark.parametrize("text", ["a b", "day(ts", "bucket(id)", "bucket(0, id)", "minute(ts)", "truncate(x, a)", ""])
def test_bad_partition_fields_fail_at_parse_time_naming_the_field(text):
    with pytest.raises(InvalidTableSpec, match=r"table 't': field 'lake.partition_by'"):
        TableSpec.parse(_spec([text]))


def test_partition_column_must_be_tiered_and_fields_unique():
    with pytest.raises(InvalidTableSpec, match="not in source.columns"):
        TableSpec.parse(_spec(["day(ts)"], columns=["id"]))
    with pytest.raises(InvalidTableSpec, match="ts_day declared more than once"):
        TableSpec.parse(_spec(["day(ts)", "days(ts)"]))
    assert TableSpec.parse(_spec(["days(ts)", "bucket(8, id)"])).lake.partition_by == ("day(ts)", "bucket(8, id)")


def _spec(partition_by: list[str], columns: list[str] | None = None) -> dict:
    source = {"conn_id": "hot", "table": "t", "cursor_column": "id"}
    if columns:
        source["columns"] = columns
    return {"name": "t", "source": source, "lake": {"namespace": "n", "table": "t", "partition_by": partition_by}}
