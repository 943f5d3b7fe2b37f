"""MariaDB hot tables against a real MariaDB server on 127.0.0.1: rounds with a transaction committing out of cursor
order, a wrong password, an added column, MariaDB's types, eviction and reading across tiers, and a reader that may
not see other sessions' transactions. The lake is read back with pyiceberg and the hot table with PyMySQL (the
product reads splits with connectorx)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.across_tiers import read_across_tiers
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.hot_tables import COLUMNS, MariaDBHot
from testbed.lake_check import digest, lake_rows, mariadb_rows, view_rows
from testbed.mariadb_server import MariaDBServer
from testbed.rounds import round_parts

NAMESPACE = "maria"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_spec(table: str, **options: Any) -> TableSpec:
    source = {"conn_id": "hot_mariadb", "table": table, "cursor_column": "id", **options.pop("source", {})}
    return TableSpec.parse(
        {"name": table, "source": source, "lake": {"namespace": NAMESPACE, "table": table}, **options}
    )


@pytest.fixture
def hot(mariadb_server: MariaDBServer) -> MariaDBHot:
    return MariaDBHot(mariadb_server.url)


def assert_lake_equals_hot(hot: MariaDBHot, table: str, catalog_properties: dict[str, str]) -> int:
    expected = hot.rows(table)
    assert digest(lake_rows(catalog_properties, (NAMESPACE, table), COLUMNS)) == digest(expected)
    return len(expected)


def test_three_rounds_with_a_late_commit_leave_the_lake_equal_to_the_table(
    hot: MariaDBHot, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table = unique("orders")
    hot.create(table)
    # Append-only rows: several splits, each its own statement (a consistent snapshot is one split on MariaDB).
    spec = make_spec(
        table, source={"max_watermark_wait_seconds": 1, "consistent_snapshot": False}, target_rows_per_split=400
    )
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_() -> Any:
        return round_parts(spec, hot, catalog_properties, writer=spark_writer).run(state)

    hot.insert(table, 1, 1000)
    first = round_()
    assert first.outcome == "tiered" and first.metrics.rows == 1000 and first.metrics.splits > 1
    assert assert_lake_equals_hot(hot, table, catalog_properties) == 1000

    # A transaction takes ids 1001..1100 and holds them while another commits 1101..1300: a cursor-only reader
    # would tier up to 1300 and never see 1001..1100.
    late = hot.connect(autocommit=False)
    with late.cursor() as cur:
        from testbed.hot_tables import make_rows

        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s, %s)", make_rows(1001, 100))
    hot.insert(table, 1101, 200)
    held = round_()
    assert held.outcome == "nothing_to_tier" and held.end_offsets == {"cursor": 1000}
    assert held.blockers and held.blockers[0]["pid"] is not None  # shown in the status, with the session's id
    assert state.load().watermark_blockers == held.blockers
    late.commit()
    late.close()

    second = round_()
    assert second.outcome == "tiered" and second.metrics.rows == 300 and second.end_offsets == {"cursor": 1300}
    hot.insert(table, 1301, 500)
    third = round_()
    assert third.outcome == "tiered" and third.metrics.rows == 500 and third.epoch == 3
    assert assert_lake_equals_hot(hot, table, catalog_properties) == 1800
    assert state.load().status is TableStatus.TIERED


def test_an_idle_transaction_that_only_read_does_not_hold_the_table_back(
    hot: MariaDBHot, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table, other = unique("idle_reader"), unique("idle_reader_other")
    hot.create(table)
    hot.create(other)
    hot.insert(table, 1, 10)
    spec = make_spec(table, source={"max_watermark_wait_seconds": 30})
    reader = hot.connect(autocommit=False)
    try:
        with reader.cursor() as cur:  # an open transaction, not declared read-only, that has written nothing
            cur.execute(f"SELECT COUNT(*) FROM `{other}` FOR UPDATE")
            cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        hot.insert(table, 11, 5)
        result = round_parts(spec, hot, catalog_properties, writer=spark_writer).run(
            JsonFileStateStore(tmp_path / "state.json")
        )
        # Waiting for the reader would have taken the whole 30 s wait and tiered nothing.
        assert result.outcome == "tiered" and result.end_offsets == {"cursor": 15} and result.blockers == []
    finally:
        reader.rollback()
        reader.close()
    assert assert_lake_equals_hot(hot, table, catalog_properties) == 15


def test_a_wrong_password_fails_only_that_tables_task_with_a_masked_error(
    hot: MariaDBHot, mariadb_server: MariaDBServer, catalog_properties: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context

    good, bad = unique("good"), unique("bad")
    for name in (good, bad):
        hot.create(name)
        hot.insert(name, 1, 300)
    wrong = "Wr0ng-" + uuid.uuid4().hex[:12]
    fields = {"conn_type": "mysql", "host": "127.0.0.1", "port": mariadb_server.port, "schema": mariadb_server.database}
    monkeypatch.setenv(
        "AIRFLOW_CONN_MARIA_GOOD",
        json.dumps({**fields, "login": mariadb_server.user, "password": mariadb_server.password}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_MARIA_BAD", json.dumps({**fields, "login": mariadb_server.user, "password": wrong})
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_MARIA",
        json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}}),
    )

    def operator(name: str, conn_id: str) -> TierTableOperator:
        return TierTableOperator(
            table={
                "name": name,
                "source": {"conn_id": conn_id, "table": name, "cursor_column": "id"},
                "lake": {"namespace": NAMESPACE, "table": name, "catalog_conn_id": "iceberg_maria"},
            }
        )

    broken = operator(bad, "maria_bad")
    broken_context = task_context(broken.table_asset, None)
    with pytest.raises(SourceError, match="Access denied") as raised:
        broken.execute(broken_context)
    assert wrong not in str(raised.value)
    state = saved_state(broken_context, broken.table_asset)
    assert state.status is TableStatus.FAILED and state.consecutive_failures == 1
    assert f"mysql table {mariadb_server.database}.{bad}: cannot connect" in state.last_error
    assert "Access denied" in state.last_error and wrong not in json.dumps(state.to_json())
    assert not load_catalog("default", **catalog_properties).table_exists((NAMESPACE, bad))

    sibling = operator(good, "maria_good")
    sibling_context = task_context(sibling.table_asset, None)
    assert sibling.execute(sibling_context)["rows"] == 300
    assert saved_state(sibling_context, sibling.table_asset).status is TableStatus.TIERED
    assert assert_lake_equals_hot(hot, good, catalog_properties) == 300


def test_an_added_column_arrives_in_the_lake(
    hot: MariaDBHot, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table = unique("evolving")
    hot.create(table)
    hot.insert(table, 1, 100)
    spec = make_spec(table)
    state = JsonFileStateStore(tmp_path / "state.json")
    assert round_parts(spec, hot, catalog_properties).run(state).metrics.rows == 100
    with hot.connect() as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{table}` ADD COLUMN discount DECIMAL(5,2) NULL")
        cur.execute(f"INSERT INTO `{table}` (id, region, discount) VALUES (101, 'eu', 12.50), (102, 'us', NULL)")
    result = round_parts(spec, hot, catalog_properties).run(state)
    assert result.outcome == "tiered" and result.metrics.rows == 2
    iceberg = load_catalog("default", **catalog_properties).load_table((NAMESPACE, table))
    assert str(iceberg.schema().find_field("discount").field_type) == "decimal(5, 2)"
    columns = [*COLUMNS, "discount"]
    assert digest(lake_rows(catalog_properties, (NAMESPACE, table), columns)) == digest(
        mariadb_rows(hot.url, table, columns)
    )


TYPES = {
    "t_tinyint": ("TINYINT", -128, "int"),
    "t_bool": ("TINYINT(1)", 1, "int"),
    "t_smallint_u": ("SMALLINT UNSIGNED", 65535, "int"),
    "t_mediumint": ("MEDIUMINT", -8388608, "int"),
    "t_int_u": ("INT UNSIGNED", 4294967295, "long"),
    "t_bigint": ("BIGINT", -9223372036854775808, "long"),
    "t_bigint_u": ("BIGINT UNSIGNED", 18446744073709551615, "decimal(20, 0)"),
    "t_decimal": ("DECIMAL(12,2)", Decimal("-1234567890.12"), "decimal(12, 2)"),
    "t_decimal_wide": ("DECIMAL(38,20)", Decimal("123456789012345678.12345678901234567891"), "decimal(38, 20)"),
    "t_float": ("FLOAT", 1.5, "float"),
    "t_double": ("DOUBLE", 0.1, "double"),
    "t_char": ("CHAR(3)", "abc", "string"),
    "t_varchar": ("VARCHAR(40)", "ünïcødé 'quoted' \\ back", "string"),
    "t_text": ("TEXT", "x" * 1000, "string"),
    "t_enum": ("ENUM('red','green')", "green", "string"),
    "t_binary": ("VARBINARY(8)", b"\x00\xffab", "binary"),
    "t_blob": ("BLOB", bytes(range(256)), "binary"),
    "t_date": ("DATE", date(1999, 12, 31), "date"),
    "t_datetime": ("DATETIME(6)", datetime(2026, 11, 1, 8, 0, 0, 123456), "timestamp"),
    "t_timestamp": ("TIMESTAMP(6) NULL", datetime(2026, 11, 1, 8, 0, 0, 654321), "timestamptz"),
    "t_time": ("TIME(6)", timedelta(hours=23, minutes=59, seconds=58, microseconds=7), "time"),
    "t_year": ("YEAR", 2026, "int"),
}


def _comparable(value: Any) -> Any:
    if isinstance(value, timedelta):  # PyMySQL reads TIME as a duration
        return (datetime.min + value).time()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def test_mariadb_types_reach_the_lake_exactly(
    hot: MariaDBHot, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table = unique("types")
    columns = list(TYPES)
    with hot.connect() as conn, conn.cursor() as cur:
        definitions = ", ".join(f"`{name}` {sql_type}" for name, (sql_type, _, _) in TYPES.items())
        cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, {definitions})")
        marks = ", ".join(["%s"] * (len(columns) + 1))
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"INSERT INTO `{table}` VALUES ({marks})", [1, *(value for _, value, _ in TYPES.values())])
        cur.execute(f"INSERT INTO `{table}` (id, t_timestamp) VALUES (2, NULL)")  # every other column NULL
    spec = make_spec(table)
    result = round_parts(spec, hot, catalog_properties, writer=spark_writer).run(JsonFileStateStore(tmp_path / "s"))
    assert result.outcome == "tiered" and result.metrics.rows == 2
    iceberg = load_catalog("default", **catalog_properties).load_table((NAMESPACE, table))
    assert {name: str(iceberg.schema().find_field(name).field_type) for name in columns} == {
        name: iceberg_type for name, (_, _, iceberg_type) in TYPES.items()
    }
    lake = sorted(lake_rows(catalog_properties, (NAMESPACE, table), ["id", *columns]))
    expected = sorted(mariadb_rows(hot.url, table, ["id", *columns]))
    assert [tuple(_comparable(v) for v in row) for row in lake] == [
        tuple(_comparable(v) for v in row) for row in expected
    ]


def test_eviction_deletes_tiered_rows_by_primary_key_and_the_view_holds_every_row(
    hot: MariaDBHot, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table = unique("evicted")
    hot.create(table)
    hot.insert(table, 1, 600)
    everything = hot.rows(table)
    spec = make_spec(
        table,
        eviction={"enabled": True, "age_column": "created_at", "retention_seconds": 0, "batch_rows": 250},
    )
    state = JsonFileStateStore(tmp_path / "state.json")
    parts = round_parts(spec, hot, catalog_properties)
    result = parts.run(state)
    assert result.outcome == "tiered" and result.metrics.evicted_rows == 600
    assert state.load().eviction_note is None and hot.rows(table) == []
    hot.insert(table, 601, 50)
    view = read_across_tiers(parts.source, parts.lake)
    assert view.committed_offsets == {"cursor": 600} and view.hot.num_rows == 50
    assert digest(view_rows(view, COLUMNS)) == digest(everything + hot.rows(table))


def test_a_reader_that_cannot_see_other_transactions_fails_instead_of_losing_rows(
    hot: MariaDBHot, mariadb_server: MariaDBServer, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table = unique("narrow")
    hot.create(table)
    hot.insert(table, 1, 10)
    password = "narrow-" + uuid.uuid4().hex[:8]
    url = mariadb_server.create_user("narrow_reader", password, [f"SELECT ON {mariadb_server.database}.*"])
    narrow = MariaDBHot(url)
    state = JsonFileStateStore(tmp_path / "state.json")
    with pytest.raises(SourceError, match="GRANT PROCESS"):
        round_parts(make_spec(table), narrow, catalog_properties).run(state)
    failed = state.load()
    assert failed.status is TableStatus.FAILED and "INNODB_TRX" in failed.last_error
    assert password not in failed.last_error
    assert load_catalog("default", **catalog_properties).load_table((NAMESPACE, table)).current_snapshot() is None
