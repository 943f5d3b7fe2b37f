"""Every type the MariaDB cursor source tiers arrives through the binlog with the value a SELECT reads: one table of
them all is tiered both ways (by its cursor, and from its binlog: rows inserted after the first load, then every row
updated), and the two lake tables are compared value for value, and with the rows PyMySQL reads. Values no lake type
holds (a zero date, a TIME that is no time of day) fail the round both ways."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.mariadb_server import MariaDBServer
from testbed.rounds import round_parts

COLUMNS = {
    "id": "INT PRIMARY KEY",
    "ti": "TINYINT", "tu": "TINYINT UNSIGNED", "si": "SMALLINT", "su": "SMALLINT UNSIGNED", "mi": "MEDIUMINT",
    "mu": "MEDIUMINT UNSIGNED", "ii": "INT", "iu": "INT UNSIGNED", "bi": "BIGINT", "bu": "BIGINT UNSIGNED",
    "d1": "DECIMAL(15,2)", "d2": "DECIMAL(38,10)", "d3": "DECIMAL(38,0)", "f": "FLOAT", "db": "DOUBLE",
    "dt": "DATE", "dtt": "DATETIME(6)", "dt0": "DATETIME", "ts": "TIMESTAMP(6) NULL", "ts3": "TIMESTAMP(3) NULL",
    "tm": "TIME(6)", "tm0": "TIME", "y": "YEAR", "ch": "CHAR(10)", "vc": "VARCHAR(300)", "tx": "TEXT",
    "lt": "LONGTEXT", "bl": "BLOB", "bn": "BINARY(4)", "vb": "VARBINARY(10)", "js": "JSON",
    "en": "ENUM('a','bb','ccc')", "st": "SET('x','y','z')", "b1": "BIT(1)", "b17": "BIT(17)", "u": "UUID",
    "i4": "INET4", "i6": "INET6", "l1": "VARCHAR(10) CHARACTER SET latin1",
}  # fmt: skip
ROWS = [
    (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808,
     18446744073709551615, "-1234567890123.45", "1234567890123456789012345678.0123456789", "-9" * 38, 1.1, 2.5e300,
     "1000-01-01", "9999-12-31 23:59:59.999999", "2024-02-29 12:00:00", "2038-01-19 03:14:07.999999",
     "1970-01-01 00:00:01.001", "23:59:59.999999", "00:00:00", 1901, "ab  ", "é😀 utf8mb4 " * 20, "text",
     "long" * 2000, b"\x00\x01\xff", b"ab", b"", '{"a": [1, 2, {"b": null}]}', "bb", "z,x", 1, 65541,
     "123e4567-e89b-12d3-a456-426614174000", "1.2.3.4", "::ffff:1.2.3.4", "café €"),
    (2, None, 0, None, 0, None, 0, None, 0, None, 0, "0.00", "-0.0000000001", "0", -0.0, -1.5, "2024-02-29",
     "1970-01-01 00:00:00", "2000-01-01 00:00:00", "2000-01-01 00:00:00.5", None, "00:00:00.000001", "12:00:00",
     2155, "", "", "", "", b"", b"ab\x00\x00", b"\x00", "null", "", "", 0, 0,
     "6ccd780c-baba-1026-9564-5b8c656024db", "0.0.0.0", "2001:db8::1", None),
    (3, *([None] * (len(COLUMNS) - 1))),
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    data = tmp_path_factory.mktemp("types") / "data"
    with MariaDBServer(data, binlog=True, buffer_pool_size="256M", settings={"sql_mode": ""}) as found:
        yield found


def create(server: MariaDBServer, name: str) -> None:
    with server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(f"CREATE TABLE `{name}` ({', '.join(f'`{c}` {t}' for c, t in COLUMNS.items())})")


def insert(server: MariaDBServer, name: str, rows: list[tuple[Any, ...]]) -> None:
    with server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '-05:00'")  # TIMESTAMPs are stored, and must reach the lake, in UTC
        marks = ", ".join(["%s"] * len(COLUMNS))
        cur.executemany(f"INSERT INTO `{name}` VALUES ({marks})", rows)


def lake(catalog_properties: dict[str, str], name: str) -> pa.Table:
    table = load_catalog("default", **catalog_properties).load_table(("types", name))
    return table.scan().to_arrow().sort_by("id")


def tier(spec: dict[str, Any], server: MariaDBServer, catalog: dict[str, str], writer: Any, store: Path) -> Any:
    connection = ConnectionInfo.from_uri(server.url)
    return round_parts(TableSpec.parse(spec), connection, catalog, writer=writer).run(JsonFileStateStore(store))


def spec_of(name: str, **source: Any) -> dict[str, Any]:
    lake_table = {"namespace": "types", "table": name}
    return {"name": name, "source": {"conn_id": "hot", "table": name, **source}, "lake": lake_table}


def test_every_type_reaches_the_lake_from_the_binlog_as_a_select_reads_it(
    server: MariaDBServer, catalog_properties: dict[str, str], local_writer: Any, tmp_path: Path
) -> None:
    create(server, "by_cursor")
    create(server, "by_binlog")
    insert(server, "by_cursor", ROWS)
    cdc = spec_of("by_binlog", kind="mysql_cdc")
    assert tier(cdc, server, catalog_properties, local_writer, tmp_path / "cdc.json").outcome is RoundOutcome.TIERED
    insert(server, "by_binlog", ROWS)  # after the first load: every value comes through the binlog
    cursor = spec_of("by_cursor", cursor_column="id")
    assert tier(cursor, server, catalog_properties, local_writer, tmp_path / "cursor.json").outcome == "tiered"
    result = tier(cdc, server, catalog_properties, local_writer, tmp_path / "cdc.json")
    assert result.outcome is RoundOutcome.TIERED and result.metrics.rows == len(ROWS)
    by_select, by_binlog = lake(catalog_properties, "by_cursor"), lake(catalog_properties, "by_binlog")
    assert by_binlog.schema.equals(by_select.schema, check_metadata=False), (by_binlog.schema, by_select.schema)
    for column in COLUMNS:
        assert by_binlog.column(column).to_pylist() == by_select.column(column).to_pylist(), column
    # The values themselves, against the rows as PyMySQL reads them (not through the product's readers).
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SELECT id, d2, dtt, ts, u, i6, l1, st FROM by_binlog ORDER BY id")
        selected = cur.fetchall()
    first = {c: by_binlog.column(c)[0].as_py() for c in ("d2", "dtt", "ts", "u", "i6", "l1", "st")}
    assert first["d2"] == selected[0][1] == Decimal("1234567890123456789012345678.0123456789")
    assert first["dtt"] == selected[0][2] and first["ts"] == selected[0][3].replace(tzinfo=UTC)
    assert (first["u"], first["i6"], first["l1"], first["st"]) == selected[0][4:7] + ("x,z",)
    assert by_binlog.column("bu")[0].as_py() == Decimal(18446744073709551615)

    # Every row updated: its before and after images both decoded.
    for name in ("by_cursor", "by_binlog"):
        with server.connect(autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE `{name}` SET ii = COALESCE(ii, 0) + 1, vc = CONCAT(COALESCE(vc, ''), '!')")
    # (the cursor source cannot see updates: its table is loaded again into a fresh lake table)
    cursor_again = spec_of("by_cursor", cursor_column="id") | {"lake": {"namespace": "types", "table": "by_cursor_2"}}
    assert tier(cursor_again, server, catalog_properties, local_writer, tmp_path / "c2.json").outcome == "tiered"
    assert tier(cdc, server, catalog_properties, local_writer, tmp_path / "cdc.json").outcome is RoundOutcome.TIERED
    by_select, by_binlog = lake(catalog_properties, "by_cursor_2"), lake(catalog_properties, "by_binlog")
    for column in COLUMNS:
        assert by_binlog.column(column).to_pylist() == by_select.column(column).to_pylist(), column


@pytest.mark.parametrize("column, value", [("dt", "0000-00-00"), ("dtt", "2024-00-10 00:00:00"), ("tm0", "-01:00:00")])
def test_a_value_no_lake_type_holds_fails_the_round_both_ways(
    server: MariaDBServer,
    catalog_properties: dict[str, str],
    local_writer: Any,
    tmp_path: Path,
    column: str,
    value: str,
) -> None:
    name = f"bad_{column}"
    create(server, name)
    cdc = spec_of(name, kind="mysql_cdc")
    assert tier(cdc, server, catalog_properties, local_writer, tmp_path / "cdc.json").outcome is RoundOutcome.TIERED
    with server.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"INSERT INTO `{name}` (id, `{column}`) VALUES (1, %s)", (value,))
    with pytest.raises(SourceError, match=column):
        tier(cdc, server, catalog_properties, local_writer, tmp_path / "cdc.json")
    with pytest.raises(SourceError):
        tier(spec_of(name, cursor_column="id") | {"lake": {"namespace": "types", "table": f"{name}_c"}}, server,
             catalog_properties, local_writer, tmp_path / "cursor.json")  # fmt: skip
