"""Each Iceberg partition transform a spec can declare: every data file holds one partition, whose value is the
transform of every row in it (checked with pyiceberg's reference transforms, file by file), and a filtered scan
prunes files (real PostgreSQL, Spark, pyiceberg)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import psycopg
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.rounds import round_parts

HOT = "partitioned_events"
COLUMNS = ("id", "region", "sku", "ts", "ts_tz", "day")
ROWS = 2400


@pytest.fixture(scope="module")
def hot_dsn(pg_server) -> str:
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {HOT}")
        conn.execute(
            f"CREATE TABLE {HOT} (id bigint PRIMARY KEY, region text, sku text, ts timestamp, ts_tz timestamptz, "
            "day date)"
        )
        # Rows 37 minutes apart span 2 years, 3 months, 60 days and 1480 hours; some regions are null.
        conn.execute(
            f"INSERT INTO {HOT} SELECT g, (ARRAY['eu', 'us', 'apac', NULL])[1 + g % 4], 'sku-' || (g % 50), "
            "timestamp '2025-12-20 22:00' + g * interval '37 minutes', "
            "timestamptz '2025-12-20 22:00+00' + g * interval '37 minutes', "
            f"date '2025-12-20' + (g / 40) FROM generate_series(1, {ROWS}) g"
        )
    return pg_server.dsn


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("field", "pruning_filter", "column", "keep"),
    [
        ("region", EqualTo("region", "eu"), "region", lambda v: v == "eu"),
        ("year(ts)", GreaterThanOrEqual("ts", "2026-01-01T00:00:00"), "ts", lambda v: v >= _at("2026-01-01")),
        (
            "month(ts_tz)",
            GreaterThanOrEqual("ts_tz", "2026-02-01T00:00:00+00:00"),
            "ts_tz",
            lambda v: v >= _at("2026-02-01T00:00:00+00:00"),
        ),
        ("day(ts)", EqualTo("ts", "2026-01-02T18:20:00"), "ts", lambda v: v == _at("2026-01-02T18:20:00")),
        ("day(day)", EqualTo("day", "2026-01-05"), "day", lambda v: v == date(2026, 1, 5)),
        ("hour(ts)", GreaterThanOrEqual("ts", "2026-02-15T00:00:00"), "ts", lambda v: v >= _at("2026-02-15")),
        ("bucket(8, id)", EqualTo("id", 1234), "id", lambda v: v == 1234),
        ("truncate(5, sku)", EqualTo("sku", "sku-42"), "sku", lambda v: v == "sku-42"),
        ("truncate(500, id)", GreaterThanOrEqual("id", 2000), "id", lambda v: v >= 2000),
    ],
)
def test_transform_partitions_each_file_and_prunes_scans(
    field, pruning_filter, column, keep, hot_dsn, catalog_properties, spark_writer, tmp_path
):
    name = "p_" + "".join(ch if ch.isalnum() else "_" for ch in field).strip("_")
    spec = TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "unused", "table": HOT, "cursor_column": "id", "max_watermark_wait_seconds": 0},
            "lake": {"namespace": "parts", "table": name, "partition_by": [field]},
            "target_rows_per_split": 800,
        }
    )
    parts = round_parts(spec, ConnectionInfo.from_uri(hot_dsn), catalog_properties, writer=spark_writer)
    result = parts.run(JsonFileStateStore(tmp_path / "s.json"))
    assert result.outcome == "tiered" and result.metrics.rows == ROWS
    assert digest(lake_rows(catalog_properties, ("parts", name), COLUMNS)) == digest(
        postgres_rows(hot_dsn, HOT, COLUMNS)
    )

    table = load_catalog("default", **catalog_properties).load_table(("parts", name))
    (partition_field,) = table.spec().fields
    source = table.schema().find_field(partition_field.source_id)
    reference = partition_field.transform.transform(source.field_type)  # pyiceberg's pure-Python transform
    tasks = list(table.scan().plan_files())
    partitions = set()
    for task in tasks:
        rows = pq.read_table(task.file.file_path.removeprefix("file://"), columns=[source.name]).column(0)
        expected = {None if v is None else reference(_internal(v)) for v in rows.to_pylist()}
        assert expected == {task.file.partition[0]}, f"{task.file.file_path} mixes partitions {expected}"
        partitions.add(task.file.partition[0])
    assert len(partitions) > 1

    pruned = list(table.scan(row_filter=pruning_filter).plan_files())
    assert 0 < len(pruned) < len(tasks)
    matching = table.scan(row_filter=pruning_filter, selected_fields=COLUMNS).to_arrow().num_rows
    values = [row[0] for row in postgres_rows(hot_dsn, HOT, (column,))]
    assert matching == len([v for v in values if v is not None and keep(v)]) > 0


def _internal(value):
    """A Python value in Iceberg's internal form, as the reference transforms take it."""
    from pyiceberg.utils.datetime import date_to_days, datetime_to_micros

    if isinstance(value, datetime):
        return datetime_to_micros(value if value.tzinfo is None else value.astimezone(UTC))
    if isinstance(value, date):
        return date_to_days(value)
    return value
