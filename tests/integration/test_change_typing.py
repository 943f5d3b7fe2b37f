"""A change stream's values are typed in the task process by Arrow's casts of their text where every column's type
allows (``sources/postgres/text_casts.py``), else by the server. Both ways must give the same lake, value for
value, whatever the database's own DateStyle, TimeZone and float digits: real PostgreSQL 15, two twin tables
tiered side by side, one forced through the server's typing, read back with pyiceberg and compared with the hot
table read by psycopg."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.sources.postgres.change_stream_source import PostgresCdcSource
from airflow_provider_tiering.sources.registry import build_source
from testbed.lake_check import digest
from testbed.pg_server import PostgresServer, drop_table_slot
from testbed.rounds import lake_of

COLUMNS = (
    "id bigint PRIMARY KEY, i2 smallint, i4 integer, f4 real, f8 double precision, b boolean, t text, "
    "vc varchar(20), ch char(5), n numeric(12,3), nu numeric, d date, ts timestamp, tz timestamptz, u uuid, "
    "j json, jb jsonb, m {mood}, ta text[], ua uuid[], ma {mood}[]"
)
NAMES = ("id", "i2", "i4", "f4", "f8", "b", "t", "vc", "ch", "n", "nu", "d", "ts", "tz", "u", "j", "jb", "m",
         "ta", "ua", "ma")  # fmt: skip
#: Values Arrow (or psycopg's array loader) parses from their text exactly: extremes, special floats, padding, zones,
#: text that needs quoting, arrays with NULLs, quotes, backslashes, braces and bounds.
PARSED_ROWS = [
    "(10, 1, 2, 1.1, 0.1, true, 'plain', 'v', 'ab', 1.5, 2.25, '2026-11-02', '2026-11-02 09:30:00.123456', "
    "'2026-11-02 09:30:00+05:30', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{\"a\":  1}', '{\"b\": [1, 2]}', 'ok', "
    "ARRAY['a', 'b c', NULL, 'NULL', 'q\"uote', 'back\\slash', '', '{x}', 'é漢字'], "
    "ARRAY['A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid, NULL], '{\"happy, really\",sad}')",
    "(11, -32768, 2147483647, 'NaN', 'Infinity', false, E'line\\nbreak \"q\" \\\\ é漢字', 'é', 'x', -99999999.999, "
    "0.000000000000000001, '0001-01-01', '1900-01-01 00:00:00', '1969-12-31 23:59:59.999999-08', "
    "'00000000-0000-0000-0000-000000000000', '[]', '{\"z\": 1, \"a\": 2}', 'happy, really', '{}', '{}', '{}')",
    "(12, 32767, -2147483648, '-0', '-Infinity', true, '', '', '', 0, -12345678901234567890.123456789012345678, "
    "'9999-12-31', '9999-12-31 23:59:59.999999', '2000-02-29 12:00:00+00', "
    "'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', 'null', 'sad', '[0:1]={x,y}', NULL, '{ok}')",
    "(13, NULL, NULL, 3.4028235e38, 1e-300, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL)",
    "(14, 7, 7, 0.30000001, 0.30000000000000004, false, 'seven', 'seven', 'seven', 7.007, 7, '2024-02-29', "
    "'2024-02-29 00:00:00', '2024-02-29 23:30:00-01', '0e1f0e1f-0e1f-0e1f-0e1f-0e1f0e1f0e1f', '7', '7', 'ok', "
    "'{NULL}', '{}', NULL)",
]


@pytest.fixture
def odd_database(pg_server: PostgresServer) -> Iterator[str]:
    """A database whose sessions print dates the SQL way, day first, in a half-hour zone, floats rounded to 2
    digits: the change stream's session must print what this process parses whatever these are."""
    name = f"typing_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{pg_server.user}"')
        conn.execute(f"ALTER DATABASE \"{name}\" SET DateStyle = 'SQL, DMY'")
        conn.execute(f"ALTER DATABASE \"{name}\" SET TimeZone = 'America/St_Johns'")
        conn.execute(f'ALTER DATABASE "{name}" SET extra_float_digits = -13')
    dsn = pg_server.dsn_for(name)
    yield dsn
    for table in ("typed_here", "typed_by_server"):
        drop_table_slot(dsn, table)
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def comparable(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows of a lake table, temporal values as their integers (compared exactly, whatever Python makes of them)."""
    columns = []
    for name in NAMES:
        column = table.column(name)
        if pa.types.is_temporal(column.type):
            column = pc.cast(column, pa.int64() if pa.types.is_timestamp(column.type) else pa.int32())
        columns.append(column.to_pylist())
    return list(zip(*columns, strict=True))


def lake_table(catalog_properties: dict[str, str], name: str) -> pa.Table:
    return load_catalog("default", **catalog_properties).load_table(("it", name)).scan().to_arrow()


def test_values_typed_in_this_process_equal_the_servers_typing(
    odd_database: str, tmp_path, catalog_properties, local_writer, monkeypatch
) -> None:
    mood = "mood_typing"
    conn = psycopg.connect(odd_database, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute(f"CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy, really')")
    for table in ("typed_here", "typed_by_server"):
        conn.execute(f"CREATE TABLE {table} ({COLUMNS.format(mood=mood)})")
        conn.execute(f"INSERT INTO {table} (id, t) VALUES (1, 'loaded first'), (2, 'deleted later')")
    connection = ConnectionInfo.from_uri(odd_database)
    store = JsonFileStateStore(tmp_path / "state.json")

    server_typings: list[int] = []
    type_on_server = PostgresCdcSource._type_on_server

    def counted(self: PostgresCdcSource, session: Any, records: list[dict[str, Any]], *args: Any) -> Any:
        server_typings.append(len(records))
        return type_on_server(self, session, records, *args)

    monkeypatch.setattr(PostgresCdcSource, "_type_on_server", counted)

    def tier(table: str) -> None:
        spec = TableSpec.parse(
            {
                "name": table,
                "source": {"kind": "postgres_cdc", "conn_id": "hot", "table": table},
                "lake": {"namespace": "it", "table": table},
            }
        )
        source = build_source(spec.source, connection)
        if table == "typed_by_server":
            monkeypatch.setattr(source, "_text_casts", lambda schema: None)
        result = run_round(spec, source, lake_of(spec, catalog_properties), local_writer, store)
        assert result.outcome is RoundOutcome.TIERED, result

    for table in ("typed_here", "typed_by_server"):
        tier(table)  # the first load
        conn.execute(f"INSERT INTO {table} VALUES {', '.join(PARSED_ROWS)}")
        conn.execute(f"UPDATE {table} SET t = t || ' updated', f8 = f8 * 2 WHERE id IN (1, 12)")
        conn.execute(f"DELETE FROM {table} WHERE id = 2")
    tier("typed_here")
    assert server_typings == [], "values Arrow parses exactly were sent to the server to be typed"
    tier("typed_by_server")
    assert server_typings, "the twin was not typed by the server"

    here, by_server = lake_table(catalog_properties, "typed_here"), lake_table(catalog_properties, "typed_by_server")
    assert here.schema == by_server.schema
    assert digest(comparable(here)) == digest(comparable(by_server))
    conn.execute("SET DateStyle = ISO; SET extra_float_digits = 1")  # for psycopg's own reading of the hot rows
    # The lake's terms: a real's exact value, json's text as written, jsonb's as the server normalises it.
    as_lake = {"f4": "f4::float8", "j": "j::text", "jb": "jb::text", "ua": "ua::text[]", "ma": "ma::text[]"}
    hot = conn.execute(f"SELECT {', '.join(as_lake.get(c, c) for c in NAMES)} FROM typed_here").fetchall()
    assert digest(zip(*(here.column(c).to_pylist() for c in NAMES), strict=True)) == digest(hot)
    assert here.num_rows == len(hot) == 6
    conn.close()
