"""Column types real tables have, against real PostgreSQL and MariaDB servers: every mapped type reaches the lake
(read back with pyiceberg, compared with what psycopg / PyMySQL read from the hot table), and a type or value the
lake cannot hold fails the first round, naming the column and the way out, with nothing committed and the table
quarantined at once instead of failing round after round."""

from __future__ import annotations

import ipaddress
import json
import re
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.errors import QuarantinedError, UnsupportedColumnType
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import MariaDBHot, PostgresHot
from testbed.lake_check import lake_rows, mariadb_rows
from testbed.mariadb_server import MariaDBServer
from testbed.pg_server import PostgresServer
from testbed.rounds import round_parts

NAMESPACE = "types"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_spec(table: str, conn_id: str = "hot", **options: Any) -> TableSpec:
    source = {"conn_id": conn_id, "table": table, "cursor_column": "id", **options.pop("source", {})}
    return TableSpec.parse(
        {"name": table, "source": source, "lake": {"namespace": NAMESPACE, "table": table}, **options}
    )


def no_spark_writer() -> Any:
    """Writes a round of one split in this process; a master nobody listens on fails any round that needs Spark."""
    return build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)


def lake_table(catalog_properties: dict[str, str], table: str) -> Any:
    return load_catalog("default", **catalog_properties).load_table((NAMESPACE, table))


def lake_has_table(catalog_properties: dict[str, str], table: str) -> bool:
    return load_catalog("default", **catalog_properties).table_exists((NAMESPACE, table))


def retry_in_30s(error: BaseException) -> timedelta:
    return timedelta(seconds=30)


# -- PostgreSQL -------------------------------------------------------------------------------------------------
PG_COLUMNS = {
    "u": "uuid",
    "j": "json",
    "jb": "jsonb",
    "m": "{enum}",
    "ia": "integer[]",
    "ta": "text[]",
    "iv": "interval",
    "ip": "inet",
    "cn": "cidr",
    "n": "numeric",
    "n3": "numeric(12,3)",
    "ua": "uuid[]",
    "ma": "{enum}[]",
}
#: The Iceberg type each column is tiered as ("Column types" in docs/tables.md).
PG_LAKE_TYPES = {
    "u": "string",
    "j": "string",
    "jb": "string",
    "m": "string",
    "ia": "list<int>",
    "ta": "list<string>",
    "iv": "string",
    "ip": "string",
    "cn": "string",
    "n": "decimal(38, 18)",
    "n3": "decimal(12, 3)",
    "ua": "list<string>",
    "ma": "list<string>",
}
MOODS = ("sad", "ok", "happy, really")
INTERVALS = (
    "1 year 2 months 3 days 04:05:06.789",
    "-3 days 02:00:00",
    "00:00:00.000001",
    "-1 year -2 months",
    "40 days",
)
ADDRESSES = ("10.0.0.1", "192.168.7.9/24", "2001:db8::1", "2001:db8::17/64")
NETWORKS = ("10.1.0.0/16", "192.168.0.0/24", "2001:db8::/32", "0.0.0.0/0")


def pg_row(i: int, enum_type: str) -> tuple[Any, ...]:
    document = {"i": i, "name": f"row {i}", "tags": ["a", 'b "quoted"'], "nested": {"x": i / 4}}
    return (
        i,
        uuid.uuid4(),
        f'{{"i": {i},  "spaced":   true}}',  # json keeps its text as written
        json.dumps(document),
        MOODS[i % len(MOODS)],
        [i, None, -i] if i % 2 else [],
        [f"t{i}", "with, comma", 'with "quote"', None],
        INTERVALS[i % len(INTERVALS)],
        ADDRESSES[i % len(ADDRESSES)],
        NETWORKS[i % len(NETWORKS)],
        Decimal(f"{i}123456789.123456789012345678") * (-1 if i % 3 else 1),
        Decimal(f"{i}.125"),
        [uuid.uuid4(), uuid.uuid4()],
        [MOODS[0], MOODS[2]],
    )


def create_pg_table(dsn: str, table: str, enum_type: str) -> None:
    definitions = ", ".join(f'"{name}" {sql.format(enum=enum_type)}' for name, sql in PG_COLUMNS.items())
    with psycopg.connect(dsn, autocommit=True) as conn:
        labels = ", ".join("'" + label + "'" for label in MOODS)
        conn.execute(f'CREATE TYPE "{enum_type}" AS ENUM ({labels})')
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, {definitions})')


def insert_pg_rows(dsn: str, table: str, enum_type: str, ids: range) -> None:
    marks = ", ".join(["%s"] * (len(PG_COLUMNS) + 1))
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{table}" VALUES ({marks})', [pg_row(i, enum_type) for i in ids])
        cur.execute(f'INSERT INTO "{table}" (id) VALUES (%s)', (ids.stop,))  # every other column NULL


_ISO_DURATION = re.compile(
    r"^P(?:(?P<y>-?\d+)Y)?(?:(?P<mo>-?\d+)M)?(?:(?P<d>-?\d+)D)?"
    r"(?:T(?:(?P<h>-?\d+)H)?(?:(?P<mi>-?\d+)M)?(?:(?P<s>-?\d+(?:\.\d+)?)S)?)?$"
)


def iso_duration_parts(text: str) -> tuple[int, int, Decimal]:
    """(months, days, seconds) of an ISO 8601 duration as PostgreSQL prints one (signs per component)."""
    match = _ISO_DURATION.match(text)
    assert match, f"not an ISO 8601 duration: {text!r}"
    part = {k: v or "0" for k, v in match.groupdict().items()}
    seconds = int(part["h"]) * 3600 + int(part["mi"]) * 60 + Decimal(part["s"])
    return int(part["y"]) * 12 + int(part["mo"]), int(part["d"]), seconds


def hot_pg_rows(dsn: str, table: str) -> dict[int, dict[str, Any]]:
    """The hot rows as psycopg reads them (its own types), each interval as (months, days, seconds) from extract."""
    # psycopg knows neither the test's enum array nor every interval: those two are read as text.
    columns = ", ".join({"ma": "ma::text[]", "iv": "iv::text"}.get(c, f'"{c}"') for c in PG_COLUMNS)
    parts = (
        "extract(year FROM iv) * 12 + extract(month FROM iv), extract(day FROM iv), "
        "extract(hour FROM iv) * 3600 + extract(minute FROM iv) * 60 + extract(second FROM iv)"
    )
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT id, {columns}, {parts} FROM "{table}" ORDER BY id').fetchall()
    hot = {}
    for row in rows:
        record = dict(zip(["id", *PG_COLUMNS], row[: len(PG_COLUMNS) + 1]))
        months, days, seconds = row[len(PG_COLUMNS) + 1 :]
        record["iv"] = None if record["iv"] is None else (int(months), int(days), Decimal(seconds))
        hot[record["id"]] = record
    return hot


def lake_as_hot(row: dict[str, Any]) -> dict[str, Any]:
    """A lake row in the hot store's terms, by docs/tables.md's mapping: text parsed back into each type's value."""

    def each(values: list[Any] | None, convert: Any) -> list[Any] | None:
        return None if values is None else [None if v is None else convert(v) for v in values]

    out = dict(row)
    out["u"] = None if row["u"] is None else uuid.UUID(row["u"])
    out["j"] = row["j"]
    out["jb"] = None if row["jb"] is None else json.loads(row["jb"])
    out["iv"] = None if row["iv"] is None else iso_duration_parts(row["iv"])
    out["ip"] = None if row["ip"] is None else ipaddress.ip_interface(row["ip"])
    out["cn"] = None if row["cn"] is None else ipaddress.ip_network(row["cn"])
    out["ua"] = each(row["ua"], uuid.UUID)
    return out


def hot_in_common_terms(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    # psycopg reads json as Python values; the lake keeps json's text: compare the parsed text with them below.
    out["j"] = row["j"]
    out["ip"] = None if row["ip"] is None else ipaddress.ip_interface(row["ip"])
    return out


def assert_pg_lake_equals_hot(dsn: str, table: str, catalog_properties: dict[str, str]) -> int:
    hot = hot_pg_rows(dsn, table)
    lake = {
        r["id"]: r
        for r in (
            dict(zip(["id", *PG_COLUMNS], t))
            for t in lake_rows(catalog_properties, (NAMESPACE, table), ["id", *PG_COLUMNS])
        )
    }
    assert sorted(lake) == sorted(hot)
    for key, expected in hot.items():
        got = lake_as_hot(lake[key])
        expected = hot_in_common_terms(expected)
        json_text, json_value = got.pop("j"), expected.pop("j")
        assert (None if json_text is None else json.loads(json_text)) == json_value, key
        assert got == expected, key
    return len(hot)


def test_every_postgres_type_listed_reaches_the_lake(
    pg_server: PostgresServer, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table, enum_type = unique("types"), unique("mood")
    create_pg_table(pg_server.dsn, table, enum_type)
    spec = make_spec(table, target_rows_per_split=40)
    state = JsonFileStateStore(tmp_path / "state.json")

    # Round 1: one split, written by this process; round 2: several splits on Spark, one exported snapshot.
    insert_pg_rows(pg_server.dsn, table, enum_type, range(1, 20))
    first = round_parts(spec, PostgresHot(pg_server.dsn), catalog_properties, writer=no_spark_writer()).run(state)
    assert first.outcome == "tiered" and first.metrics.splits == 1 and first.metrics.rows == 20
    insert_pg_rows(pg_server.dsn, table, enum_type, range(21, 140))
    second = round_parts(spec, PostgresHot(pg_server.dsn), catalog_properties, writer=spark_writer).run(state)
    assert second.outcome == "tiered" and second.metrics.splits > 1 and second.metrics.rows == 120

    schema = lake_table(catalog_properties, table).schema()
    assert {name: str(schema.find_field(name).field_type) for name in PG_COLUMNS} == PG_LAKE_TYPES
    assert assert_pg_lake_equals_hot(pg_server.dsn, table, catalog_properties) == 140

    # The text forms docs/tables.md promises, spot-checked: canonical uuid, json exactly as written, ISO 8601
    # intervals, a host address without /32.
    rows = lake_table(catalog_properties, table).scan(row_filter="id IN (4, 5)").to_arrow().to_pylist()
    four, five = sorted(rows, key=lambda r: r["id"])
    with psycopg.connect(pg_server.dsn) as conn:
        u, j = conn.execute(f'SELECT u, j::text FROM "{table}" WHERE id = 4').fetchone()
    assert four["u"] == str(u) and four["j"] == j == pg_row(4, enum_type)[2]
    assert INTERVALS[5 % len(INTERVALS)] == "1 year 2 months 3 days 04:05:06.789"
    assert five["iv"] == "P1Y2M3DT4H5M6.789S"
    assert ADDRESSES[4 % len(ADDRESSES)] == "10.0.0.1" and four["ip"] == "10.0.0.1"


def test_a_postgres_column_of_a_type_the_lake_cannot_hold_fails_the_first_round_and_quarantines_at_once(
    pg_server: PostgresServer, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    table = unique("geo")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, name text, spot point, words tsvector)')
        conn.execute(
            f"INSERT INTO \"{table}\" SELECT i, 'n' || i, point(i, i), to_tsvector('a b') FROM generate_series(1, 50) i"
        )
    spec = make_spec(table, max_consecutive_failures=5)
    state = JsonFileStateStore(tmp_path / "state.json")

    def round_(spec: TableSpec = spec) -> Any:
        return round_parts(spec, PostgresHot(pg_server.dsn), catalog_properties, writer=no_spark_writer()).run(
            state, retry_delay=retry_in_30s
        )

    with pytest.raises(UnsupportedColumnType) as failure:
        round_()
    message = str(failure.value)
    assert f"public.{table}" in message and "column 'spot'" in message and "point" in message
    assert "source.columns" in message
    document = state.load()
    assert document.status is TableStatus.FAILED and document.consecutive_failures == 1
    assert document.quarantined_since is not None and document.next_retry_at is None
    assert "column 'spot'" in document.last_error
    assert not lake_has_table(catalog_properties, table)  # nothing written: not even the lake table

    # Quarantined at once: the next round refuses without touching anything, and does not count another failure.
    with pytest.raises(QuarantinedError, match="column 'spot'"):
        round_()
    assert state.load().consecutive_failures == 1

    # The way out the error names: list the columns to tier, then reset.
    fixed = make_spec(table, source={"columns": ["id", "name"]})
    document = state.load()
    document.reset(document.last_error_time)
    state.save(document)
    result = round_(fixed)
    assert result.outcome == "tiered" and result.metrics.rows == 50
    assert [f.name for f in lake_table(catalog_properties, table).schema().fields] == ["id", "name"]


def test_an_unconstrained_numeric_value_beyond_decimal_38_18_fails_the_first_round_naming_the_column(
    pg_server: PostgresServer, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    """Unconstrained numeric is tiered as decimal(38,18): a value with more than 20 integer digits does not fit, and
    no retry changes that; the round fails once, quarantined, with nothing committed."""
    table = unique("wide_numeric")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, amount numeric)')
        conn.execute(f'INSERT INTO "{table}" VALUES (1, 12.5), (2, 1e25), (3, 7)')
    state = JsonFileStateStore(tmp_path / "state.json")
    parts = round_parts(make_spec(table), PostgresHot(pg_server.dsn), catalog_properties, writer=no_spark_writer())
    with pytest.raises(
        UnsupportedColumnType, match=rf"public.{table}: column 'amount'.*decimal128\(38, 18\).*source\.columns"
    ):
        parts.run(state, retry_delay=retry_in_30s)
    document = state.load()
    assert document.quarantined_since is not None and document.next_retry_at is None
    assert "column 'amount'" in (document.last_error or "")
    assert not lake_table(catalog_properties, table).snapshots()


def test_the_tier_task_fails_a_table_with_an_unmappable_column_once_without_airflow_retries(
    pg_server: PostgresServer, catalog_properties: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Airflow layer: the task fails with AirflowFailException (Airflow does not retry it, whatever the task's
    ``retries``), its state is quarantined, and the task of a later run skips as quarantined."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context
    from testbed.tiering_env import pg_conn

    table = unique("geo_task")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, spot point)')
        conn.execute(f'INSERT INTO "{table}" SELECT i, point(i, i) FROM generate_series(1, 20) i')
    monkeypatch.setenv("AIRFLOW_CONN_HOT_PG_TYPES", pg_conn(pg_server, pg_server.password))
    catalog = json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}})
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_TYPES", catalog)
    declaration = {
        "name": table,
        "source": {"conn_id": "hot_pg_types", "table": table, "cursor_column": "id"},
        "lake": {"namespace": NAMESPACE, "table": table, "catalog_conn_id": "iceberg_types"},
        "retries": 3,
    }
    operator = TierTableOperator(table=declaration)
    assert operator.retries == 3
    context = task_context(operator.table_asset, None)
    with pytest.raises(AirflowFailException, match="column 'spot' has type point"):
        operator.execute(context)
    state = saved_state(context, operator.table_asset)
    assert state.status is TableStatus.FAILED and state.quarantined_since is not None and state.next_retry_at is None
    assert not lake_has_table(catalog_properties, table)

    later = task_context(operator.table_asset, state)
    with pytest.raises(AirflowSkipException, match="quarantined"):
        TierTableOperator(table=declaration).execute(later)
    assert saved_state(later, operator.table_asset).consecutive_failures == 1


def test_a_multi_dimensional_array_value_fails_the_round_naming_the_column_with_nothing_committed(
    pg_server: PostgresServer, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    # PostgreSQL does not enforce an array column's dimensions; the driver would flatten {{1,2},{3,4}} silently.
    table = unique("grid")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, cells integer[])')
        conn.execute(f'INSERT INTO "{table}" SELECT i, ARRAY[i, i + 1] FROM generate_series(1, 99) i')
        conn.execute(f"INSERT INTO \"{table}\" VALUES (100, '{{{{1,2}},{{3,4}}}}')")
    for name, writer, splits in (("in-process", no_spark_writer(), 1000), ("spark", spark_writer, 30)):
        state = JsonFileStateStore(tmp_path / f"{name}.json")
        spec = make_spec(table, target_rows_per_split=splits)
        with pytest.raises(UnsupportedColumnType, match="column cells holds a multi-dimensional array"):
            round_parts(spec, PostgresHot(pg_server.dsn), catalog_properties, writer=writer).run(
                state, retry_delay=retry_in_30s
            )
        document = state.load()
        assert document.quarantined_since is not None and document.next_retry_at is None, name
        assert lake_table(catalog_properties, table).current_snapshot() is None, name  # nothing committed


# -- MariaDB ----------------------------------------------------------------------------------------------------
MARIADB_TYPES = {
    "t_json": ("JSON", '{"a": [1, 2], "b": "x"}', "string"),
    "t_enum": ("ENUM('sad','ok','happy')", "happy", "string"),
    "t_set": ("SET('a','b','c')", "a,c", "string"),
    "t_bit": ("BIT(10)", b"\x02\x01", "binary"),
    "t_year": ("YEAR", 2024, "int"),
    "t_time": ("TIME(6)", timedelta(hours=7, minutes=8, seconds=9, microseconds=10), "time"),
    "t_uuid": ("UUID", str(uuid.uuid4()), "string"),
    "t_inet4": ("INET4", "10.0.0.1", "string"),
    "t_inet6": ("INET6", "2001:db8::1", "string"),
}


def _mariadb_version(server: MariaDBServer) -> tuple[int, ...]:
    return tuple(int(p) for p in server.version.split(".")[:2])


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBHot:
    if _mariadb_version(mariadb_server) < (10, 10):
        pytest.skip(f"UUID and INET4 need MariaDB 10.10; the server is {mariadb_server.version}")
    return MariaDBHot(mariadb_server.url)


def comparable_mariadb(column: str, value: Any) -> Any:
    if isinstance(value, timedelta):  # PyMySQL reads TIME as a duration; the lake holds a time of day
        return (timedelta(0) + value).total_seconds()
    if column == "t_time" and value is not None:
        return value.hour * 3600 + value.minute * 60 + value.second + value.microsecond / 1e6
    if column == "t_set" and isinstance(value, set):  # PyMySQL reads SET as a set of its members
        return ",".join(sorted(value))
    if column == "t_json" and value is not None:
        return json.loads(value)
    return value


def test_mariadb_types_reach_the_lake(
    maria: MariaDBHot, catalog_properties: dict[str, str], spark_writer: Any, tmp_path: Path
) -> None:
    table = unique("mtypes")
    columns = list(MARIADB_TYPES)
    with maria.connect() as conn, conn.cursor() as cur:
        definitions = ", ".join(f"`{name}` {sql_type}" for name, (sql_type, _, _) in MARIADB_TYPES.items())
        cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, {definitions})")
        marks = ", ".join(["%s"] * (len(columns) + 1))
        values = [value for _, value, _ in MARIADB_TYPES.values()]
        cur.executemany(f"INSERT INTO `{table}` VALUES ({marks})", [[i, *values] for i in range(1, 60)])
        cur.execute(f"INSERT INTO `{table}` (id) VALUES (60)")  # every other column NULL
    spec = make_spec(table, target_rows_per_split=20, source={"consistent_snapshot": False})
    result = round_parts(spec, maria, catalog_properties, writer=spark_writer).run(JsonFileStateStore(tmp_path / "s"))
    assert result.outcome == "tiered" and result.metrics.rows == 60 and result.metrics.splits > 1
    schema = lake_table(catalog_properties, table).schema()
    assert {name: str(schema.find_field(name).field_type) for name in columns} == {
        name: lake_type for name, (_, _, lake_type) in MARIADB_TYPES.items()
    }
    lake = sorted(lake_rows(catalog_properties, (NAMESPACE, table), ["id", *columns]))
    hot = sorted(mariadb_rows(maria.url, table, ["id", *columns]))
    names = ["id", *columns]
    assert [[comparable_mariadb(n, v) for n, v in zip(names, row)] for row in lake] == [
        [comparable_mariadb(n, v) for n, v in zip(names, row)] for row in hot
    ]


def test_mariadb_values_and_types_the_lake_cannot_hold_fail_the_first_round(
    maria: MariaDBHot, catalog_properties: dict[str, str], tmp_path: Path
) -> None:
    shapes = unique("shapes")
    durations = unique("durations")
    with maria.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{shapes}` (id BIGINT PRIMARY KEY, spot POINT)")
        cur.execute(f"INSERT INTO `{shapes}` VALUES (1, POINT(1, 2))")
        cur.execute(f"CREATE TABLE `{durations}` (id BIGINT PRIMARY KEY, took TIME(6))")
        cur.executemany(f"INSERT INTO `{durations}` VALUES (%s, %s)", [(1, "01:00:00"), (2, "-12:34:56.5")])

    state = JsonFileStateStore(tmp_path / "shapes.json")
    with pytest.raises(UnsupportedColumnType, match=rf"{shapes}: column 'spot' has type point.*source\.columns"):
        round_parts(make_spec(shapes), maria, catalog_properties, writer=no_spark_writer()).run(
            state, retry_delay=retry_in_30s
        )
    assert state.load().quarantined_since is not None and not lake_has_table(catalog_properties, shapes)

    state = JsonFileStateStore(tmp_path / "durations.json")
    with pytest.raises(UnsupportedColumnType, match=r"column 'took' holds TIME -12:34:56\.500000"):
        round_parts(make_spec(durations), maria, catalog_properties, writer=no_spark_writer()).run(
            state, retry_delay=retry_in_30s
        )
    document = state.load()
    assert document.quarantined_since is not None and document.next_retry_at is None
    assert lake_table(catalog_properties, durations).current_snapshot() is None


def test_a_spark_tasks_refusal_reaches_the_round_with_its_class_and_message(spark_writer: Any, tmp_path: Path) -> None:
    """An error no retry cures, raised in a Spark task, is handed back as the task's result (pickled, class and
    arguments kept), not rebuilt from the worker's traceback text; the other splits' files are left to cleanup."""
    import pyarrow as pa

    from airflow_provider_tiering.core.planner import RangeSplit
    from airflow_provider_tiering.core.ports import WriteTarget
    from testbed.split_faults import RefusingReader

    schema = pa.schema([pa.field("id", pa.int64())])
    splits = [RangeSplit(i, i, i + 1, 10) for i in range(3)]
    target = WriteTarget(f"file://{tmp_path}/staging", schema)
    with pytest.raises(UnsupportedColumnType) as refused:
        spark_writer.write(RefusingReader(refuse=1), splits, schema, target)
    assert type(refused.value) is UnsupportedColumnType
    assert refused.value.args == ("split 1: column 'c' holds a value no lake type can hold",)
    files = spark_writer.write(RefusingReader(refuse=-1), splits, schema, target)
    assert sorted(f.split_index for f in files) == [0, 1, 2] and sum(f.rows for f in files) == 30
