"""The bad-input catalogue (issue 8): what each kind of bad input does, exactly, in one place.

Every failing case asserts that the table's own round raises a clear error naming the problem, that the
error is recorded in that table's state (status FAILED, ``last_error`` at most 2 KiB, no password), that
nothing is committed to its Iceberg table, and that a sibling table in the same hot store and the same
catalog still tiers afterwards (lake equals hot: row count and content).

Real parts throughout: the session's PostgreSQL (``pg_server``), a pyiceberg SQL catalog, and a
``SparkSplitWriter(local[2], local_single_split=True)`` with one-split rounds, so no Spark JVM starts
(checked) except in case 9.

 1. source table missing                      -> SourceError "... does not exist"
 2. cursor column (or a declared column) missing -> SourceError "column(s) ... not found"
 3. NULLs in the cursor column                -> SourceError naming the column and the count of NULL rows
    (such rows are in no cursor range; they were silently left out before), first round or later
 4. a cursor type that cannot be ordered (json, jsonb, bytea, boolean, uuid, text) -> SourceError naming it
 5. unsupported column types (point, interval, arrays, money, numeric wider than 38) -> column and type named;
    the same table tiers once ``columns`` leaves the column out
 6. wrong password                             -> "password authentication failed", no password anywhere
 7. unreachable host (a closed port)           -> "Connection refused", fast
 8. catalog unreachable (SQLite catalog under a regular file, PostgreSQL catalog on a closed port)
    -> LakeError "Iceberg catalog ... cannot be loaded", recorded by the round (also through the operator)
    A missing Airflow connection, or one of a type we cannot use, fails the task before any round starts and
    is recorded the same way (counted towards the quarantine; maintenance records it as its ``setup`` step)
 9. Spark master unreachable                   -> SparkUnavailable naming the master and the cause, at once
10. quotes, semicolons, SQL keywords in names  -> refused at spec parse time naming the field; keyword
    names are tiered with quoting; a canary table is untouched
11. a 1 MB error message                       -> ``last_error`` truncated to 2 KiB
12. duplicate table names in one DAG           -> DAG parse-time InvalidTableSpec naming the name
13. an empty table                             -> nothing to tier: the lake table is created, no snapshot
14. a 1,000-column table                       -> tiered, lake equals hot
15. a spec with an unknown field               -> InvalidTableSpec naming the field
16. freshness of zero, negative or NaN         -> refused at parse time naming ``freshness_seconds``
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_lake, build_writer
from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.error_text import MAX_ERROR_BYTES
from airflow_provider_tiering.core.errors import (
    InvalidTableSpec,
    LakeError,
    SourceError,
    SparkUnavailable,
    UnsupportedColumnType,
)
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus, utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.history_table import LakeHistoryTable
from airflow_provider_tiering.lake.tiering_commits import END_PROPERTY
from airflow_provider_tiering.sources.registry import build_source
from airflow_provider_tiering.spark.session import SparkSettings
from airflow_provider_tiering.spark.write_job import SparkSplitWriter
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows, postgres_rows
from testbed.pg_server import PostgresServer
from testbed.ports import find_free_port
from testbed.rounds import catalog as catalog_config

NAMESPACE = "bad"


# -- helpers ---------------------------------------------------------------------------------------
def unique(prefix: str) -> str:
    """A table name of its own in the session's shared PostgreSQL database."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_spec(name: str, *, cursor: str = "id", **extra: Any) -> TableSpec:
    source: dict[str, Any] = {"conn_id": "unused", "table": name, "cursor_column": cursor}
    source.update(extra.pop("source", {}))
    return TableSpec.parse({"name": name, "source": source, "lake": {"namespace": NAMESPACE, "table": name}, **extra})


def run(
    spec: TableSpec,
    source: Any,
    catalog_handle: CatalogHandle,
    state_path: Path,
    writer: Any,
) -> RoundResult:
    return run_round(spec, source, build_lake(spec.lake, catalog_handle), writer, JsonFileStateStore(state_path))


def catalog_of(catalog_properties: dict[str, str]) -> CatalogHandle:
    return catalog_config(catalog_properties).handle()


def execute(sql: str | Sequence[str], dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in [sql] if isinstance(sql, str) else sql:
            conn.execute(statement)  # type: ignore[arg-type]


def assert_failed_round(state_path: Path, *needles: str, secrets: Sequence[str] = ()) -> TableState:
    """The table's own state recorded the failure: FAILED, once, with the error named, bounded and masked."""
    state = JsonFileStateStore(state_path).load()
    assert state is not None
    assert state.status is TableStatus.FAILED
    assert state.consecutive_failures == 1 and state.last_error_time is not None
    assert state.last_error is not None and len(state.last_error.encode()) <= MAX_ERROR_BYTES
    for needle in needles:
        assert needle in state.last_error, state.last_error
    document = state_path.read_text()
    for secret in secrets:
        assert secret not in document
    return state


def assert_nothing_committed(catalog_properties: dict[str, str], table: str, *, exists: bool) -> None:
    catalog = load_catalog("default", **catalog_properties)
    assert catalog.table_exists((NAMESPACE, table)) is exists
    if exists:
        assert catalog.load_table((NAMESPACE, table)).snapshots() == []


def assert_lake_equals_hot(dsn: str, catalog_properties: dict[str, str], table: str, columns: Sequence[str]) -> int:
    hot = postgres_rows(dsn, table, columns)
    lake = lake_rows(catalog_properties, (NAMESPACE, table), columns)
    assert digest(lake) == digest(hot)
    return len(hot)


def assert_sibling_tiers(pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: Any) -> None:
    """A sibling table of the same hot store, into the same catalog, tiers fine after the bad one failed."""
    name = unique("sibling")
    pg.create(name)
    pg.insert(name, 1, 300)
    spec = make_spec(name)
    state_path = tmp_path / f"{name}.json"
    result = run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert result.outcome == "tiered" and result.metrics is not None and result.metrics.rows == 300
    assert assert_lake_equals_hot(pg.dsn, catalog_properties, name, COLUMNS) == 300
    state = JsonFileStateStore(state_path).load()
    assert state is not None and state.status is TableStatus.TIERED and state.last_error is None


@pytest.fixture
def pg(pg_server: PostgresServer) -> PostgresHot:
    return PostgresHot(pg_server.dsn)


@pytest.fixture
def writer() -> Iterator[SparkSplitWriter]:
    """One-split rounds are written by this process: no Spark JVM may start."""
    spark_writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
    yield spark_writer
    assert spark_writer._spark is None, "a small round started a Spark session"


# -- 1, 2: missing table, missing column -----------------------------------------------------------
def test_01_missing_source_table(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    name = unique("missing")
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    with pytest.raises(SourceError, match=rf"postgres table public\.{name} does not exist"):
        run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert_failed_round(state_path, f"SourceError: postgres table public.{name} does not exist")
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        pytest.param({"cursor_column": "updated_at"}, "updated_at", id="cursor-column"),
        pytest.param({"columns": ["id", "region", "colour"]}, "colour", id="declared-column"),
    ],
)
def test_02_missing_column(
    pg: PostgresHot,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    writer: SparkSplitWriter,
    source: dict[str, Any],
    missing: str,
) -> None:
    name = unique("nocol")
    pg.create(name)
    pg.insert(name, 1, 20)
    spec = make_spec(name, source=source)
    state_path = tmp_path / "state.json"
    with pytest.raises(SourceError, match=rf"column\(s\) {missing} not found"):
        run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert_failed_round(state_path, f"postgres table public.{name}: column(s) {missing} not found")
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


# -- 3: NULL cursors -----------------------------------------------------------------------------
@pytest.mark.parametrize("tiered_before", [False, True], ids=["first-round", "after-a-tiered-round"])
def test_03_null_cursor_rows_fail_the_round_instead_of_being_lost(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter, tiered_before: bool
) -> None:
    """A row whose cursor is NULL is in no ``(lower, upper]`` range: tiering the other rows would lose it for
    good. The round fails naming the column and the count, until the rows get a cursor value."""
    name = unique("nullcur")
    execute([f'CREATE TABLE "{name}" (id bigint, note text)'], pg.dsn)  # a nullable cursor column
    execute(f"""INSERT INTO "{name}" SELECT g, 'row ' || g FROM generate_series(1, 40) g""", pg.dsn)
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    catalog = catalog_of(catalog_properties)
    before: RoundResult | None = None
    if tiered_before:
        before = run(spec, pg.source(spec.source), catalog, state_path, writer)
        assert before.outcome == "tiered" and before.end_offsets == {"cursor": 40}
        execute(f"""INSERT INTO "{name}" SELECT g, 'row ' || g FROM generate_series(41, 45) g""", pg.dsn)
    execute(f"""INSERT INTO "{name}" VALUES (NULL, 'no cursor a'), (NULL, 'no cursor b'), (NULL, NULL)""", pg.dsn)

    source = pg.source(spec.source)
    with pytest.raises(SourceError, match=r"3 row\(s\) have a NULL in cursor column 'id'"):
        run(spec, source, catalog, state_path, writer)
    state = JsonFileStateStore(state_path).load()
    assert state is not None and state.status is TableStatus.FAILED
    assert f"postgres table public.{name}: 3 row(s) have a NULL in cursor column 'id'" in (state.last_error or "")
    assert state.consecutive_failures == 1
    iceberg = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name))
    if before is None:
        assert iceberg.snapshots() == []
    else:  # offsets unchanged: the lake still ends at 40, in the one snapshot of the first round
        assert [s.snapshot_id for s in iceberg.snapshots()] == [before.snapshot_id]
        assert iceberg.current_snapshot().summary[END_PROPERTY] == '{"cursor":40}'
        assert state.committed is not None and state.committed.end_offsets == {"cursor": 40}
    # The cheap "anything new?" probe (skip before the round) sees them too, so the table is not skipped as idle.
    assert source.has_rows_after({"cursor": 45}) is True
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)

    # Given cursor values, every row is tiered: none was lost.
    execute(
        f'WITH n AS (SELECT ctid, row_number() OVER () AS r FROM "{name}" WHERE id IS NULL) '
        f'UPDATE "{name}" SET id = 100 + n.r FROM n WHERE "{name}".ctid = n.ctid',
        pg.dsn,
    )
    done = run(spec, pg.source(spec.source), catalog, state_path, writer)
    assert done.outcome == "tiered"
    assert assert_lake_equals_hot(pg.dsn, catalog_properties, name, ("id", "note")) == (48 if tiered_before else 43)


# -- 4, 5: types -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql_type", "value", "arrow_type"),
    [
        ("json", "json_build_object('g', g)", "string"),
        ("jsonb", "jsonb_build_object('g', g)", "string"),
        ("bytea", "int4send(g)", "binary"),
        ("boolean", "g % 2 = 0", "bool"),
        ("uuid", "md5(g::text)::uuid", "string"),
        ("text", "g::text", "string"),
        ("double precision", "g / 3.0", "double"),
    ],
)
def test_04_cursor_type_that_cannot_be_ordered(
    pg: PostgresHot,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    writer: SparkSplitWriter,
    sql_type: str,
    value: str,
    arrow_type: str,
) -> None:
    name = unique("badcur")
    execute(
        [
            f'CREATE TABLE "{name}" (id bigint, c {sql_type})',
            f'INSERT INTO "{name}" SELECT g, {value} FROM generate_series(1, 5) g',
        ],
        pg.dsn,
    )
    spec = make_spec(name, cursor="c")
    state_path = tmp_path / "state.json"
    message = f"cursor column 'c' has type {arrow_type}; an integer, date or timestamp column is needed"
    with pytest.raises(SourceError, match=message):
        run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert_failed_round(state_path, f"postgres table public.{name}: {message}")
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


@pytest.mark.parametrize(
    ("sql_type", "value", "message"),
    [
        ("point", "point(g, g)", "column 'bad' has type point, which cannot be tiered (no lake type is mapped"),
        ("tsvector", "to_tsvector('a b')", "column 'bad' has type tsvector, which cannot be tiered"),
        ("int4range", "int4range(g, g + 1)", "column 'bad' has type int4range, which cannot be tiered (a range type"),
        ("money", "g::numeric::money", "column 'bad' has type money, which cannot be tiered"),
        (
            "numeric(50, 2)",
            "g",
            "column 'bad' has type numeric(50,2), which cannot be tiered (numeric(50,2) is wider than Iceberg's "
            "decimal(38))",
        ),
    ],
)
def test_05_unsupported_column_type(
    pg: PostgresHot,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    writer: SparkSplitWriter,
    sql_type: str,
    value: str,
    message: str,
) -> None:
    name = unique("badtype")
    execute(
        [
            f'CREATE TABLE "{name}" (id bigint NOT NULL, note text, bad {sql_type})',
            f"""INSERT INTO "{name}" SELECT g, 'n' || g, {value} FROM generate_series(1, 30) g""",
        ],
        pg.dsn,
    )
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    with pytest.raises(UnsupportedColumnType, match=re.escape(message)):
        run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    failed = assert_failed_round(state_path, f"UnsupportedColumnType: postgres table public.{name}: {message}")
    assert "source.columns" in (failed.last_error or "")
    assert failed.quarantined_since is not None and failed.next_retry_at is None  # no retry cures it
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)

    # Leaving the column out of ``columns`` (and resetting the quarantine) tiers the rest of the same table.
    failed.reset(utcnow())
    JsonFileStateStore(state_path).save(failed)
    narrowed = make_spec(name, source={"columns": ["id", "note"]})
    done = run(narrowed, pg.source(narrowed.source), catalog_of(catalog_properties), state_path, writer)
    assert done.outcome == "tiered" and done.metrics is not None and done.metrics.rows == 30
    assert assert_lake_equals_hot(pg.dsn, catalog_properties, name, ("id", "note")) == 30


# -- 6, 7: credentials and reachability of the hot store ------------------------------------------
def test_06_wrong_password_is_named_and_never_shown(
    pg: PostgresHot,
    pg_server: PostgresServer,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    writer: SparkSplitWriter,
) -> None:
    name = unique("wrongpw")
    pg.create(name)
    pg.insert(name, 1, 10)
    wrong = "Wr0ng-pw-" + uuid.uuid4().hex[:10]
    dsn = pg_server.dsn.replace(f":{pg_server.password}@", f":{wrong}@")
    assert wrong in dsn
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    with pytest.raises(SourceError, match="password authentication failed") as raised:
        run(
            spec,
            build_source(spec.source, ConnectionInfo.from_uri(dsn)),
            catalog_of(catalog_properties),
            state_path,
            writer,
        )
    for secret in (wrong, pg_server.password):
        assert secret not in str(raised.value) and secret not in repr(raised.value)
    assert_failed_round(
        state_path,
        f"postgres table public.{name}: cannot connect",
        "password authentication failed",
        secrets=(wrong, pg_server.password),
    )
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


def test_07_unreachable_host_fails_fast(
    pg: PostgresHot,
    pg_server: PostgresServer,
    catalog_properties: dict[str, str],
    tmp_path: Path,
    writer: SparkSplitWriter,
) -> None:
    name = unique("nohost")
    closed = find_free_port()
    dsn = pg_server.dsn.replace(f"127.0.0.1:{pg_server.port}", f"127.0.0.1:{closed}")
    assert f":{closed}/" in dsn
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    started = time.monotonic()
    with pytest.raises(SourceError, match="Connection refused"):
        run(
            spec,
            build_source(spec.source, ConnectionInfo.from_uri(dsn)),
            catalog_of(catalog_properties),
            state_path,
            writer,
        )
    assert time.monotonic() - started < 30
    assert_failed_round(
        state_path, f"postgres table public.{name}: cannot connect", f"port {closed} failed: Connection refused"
    )
    assert_nothing_committed(catalog_properties, name, exists=False)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


# -- 8: catalog ------------------------------------------------------------------------------------
CATALOG_SECRET = "cat-Secret-" + uuid.uuid4().hex[:8]


def unreachable_catalog(kind: str, tmp_path: Path) -> tuple[dict[str, str], str]:
    """Properties of a catalog that cannot be loaded, and the text its error must contain.

    A SQLite catalog in a directory that does not exist is not an error: ``load_catalog`` creates the directory
    (for its lock file) and SQLite the database. One whose directory is a regular file cannot be opened.
    """
    if kind == "sqlite-under-a-file":
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("")
        return {"type": "sql", "uri": f"sqlite:///{blocker}/catalog.db", "warehouse": f"file://{tmp_path}/w"}, (
            str(blocker)
        )
    port = find_free_port()
    uri = f"postgresql+psycopg://tiering:{CATALOG_SECRET}@127.0.0.1:{port}/catalog"
    return {"type": "sql", "uri": uri, "warehouse": f"file://{tmp_path}/w"}, "Connection refused"


@pytest.mark.parametrize("kind", ["sqlite-under-a-file", "postgres-closed-port"])
def test_08_unreachable_catalog_fails_the_round(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter, kind: str
) -> None:
    name = unique("nocat")
    pg.create(name)
    pg.insert(name, 1, 10)
    properties, cause = unreachable_catalog(kind, tmp_path)
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    broken = catalog_config(properties).handle()
    broken.description = "'iceberg_bad'"
    started = time.monotonic()
    with pytest.raises(LakeError, match="Iceberg catalog 'iceberg_bad' cannot be loaded") as raised:
        run(spec, pg.source(spec.source), broken, state_path, writer)
    assert time.monotonic() - started < 60
    assert cause in str(raised.value)
    assert_failed_round(
        state_path, "LakeError: Iceberg catalog 'iceberg_bad' cannot be loaded", cause, secrets=(CATALOG_SECRET,)
    )
    assert not (tmp_path / "w").exists()  # nothing was written to the warehouse
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


def test_08_unreachable_catalog_is_recorded_by_the_operator(
    pg_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``TierTableOperator`` (in-process task context): the catalog is loaded inside the round, so the
    table's state in the asset state store holds the error, not only the task log."""
    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context

    name = unique("nocatop")
    pg = PostgresHot(pg_server.dsn)
    pg.create(name)
    pg.insert(name, 1, 10)
    properties, cause = unreachable_catalog("sqlite-under-a-file", tmp_path)
    hot_conn = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": pg_server.port,
        "login": pg_server.user,
        "password": pg_server.password,
        "schema": pg_server.dbname,
    }
    monkeypatch.setenv("AIRFLOW_CONN_HOT_PG_BAD_INPUT", json.dumps(hot_conn))
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_BAD_INPUT", json.dumps({"conn_type": "iceberg", "extra": properties}))
    operator = TierTableOperator(
        table={
            "name": name,
            "source": {"conn_id": "hot_pg_bad_input", "table": name, "cursor_column": "id"},
            "lake": {"namespace": NAMESPACE, "table": name, "catalog_conn_id": "iceberg_bad_input"},
            "retries": 0,
        }
    )
    context = task_context(operator.table_asset, None)
    with pytest.raises(LakeError, match="Iceberg catalog 'iceberg_bad_input' cannot be loaded"):
        operator.execute(context)
    state = saved_state(context, operator.table_asset)
    assert state.status is TableStatus.FAILED and state.consecutive_failures == 1
    assert "Iceberg catalog 'iceberg_bad_input' cannot be loaded" in (state.last_error or "")
    assert cause in (state.last_error or "") and pg_server.password not in (state.last_error or "")


@pytest.mark.parametrize("which", ["source-missing", "source-unsupported-type", "catalog-missing"])
def test_08_missing_or_unusable_connection_is_the_tables_recorded_failure(
    pg_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """A connection that is missing or of a type we cannot use fails the task before any round starts; it is
    still the table's failed round in its state (FAILED, ``last_error``, no password), counted towards the
    quarantine, after which the task skips instead of failing again (or fails without retry on its own retry)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context

    name = unique("noconn")
    pg = PostgresHot(pg_server.dsn)
    pg.create(name)
    pg.insert(name, 1, 10)
    secret = f"conn-secret-{uuid.uuid4().hex[:8]}"
    unsupported = which == "source-unsupported-type"
    hot_conn: dict[str, Any] = {
        "conn_type": "oracle" if unsupported else "postgres",
        "host": "127.0.0.1",
        "port": pg_server.port,
        "login": pg_server.user,
        "password": secret if unsupported else pg_server.password,
        "schema": pg_server.dbname,
    }
    source_conn, catalog_conn = "hot_pg_conn_bad_input", "iceberg_conn_bad_input"
    monkeypatch.setenv(f"AIRFLOW_CONN_{source_conn.upper()}", json.dumps(hot_conn))
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": f"file://{tmp_path}/w"}
    catalog_json = json.dumps({"conn_type": "iceberg", "extra": properties})
    monkeypatch.setenv(f"AIRFLOW_CONN_{catalog_conn.upper()}", catalog_json)
    if which == "source-missing":
        source_conn = expected = "nowhere_src_bad_input"
    elif which == "catalog-missing":
        catalog_conn = expected = "nowhere_cat_bad_input"
    else:
        expected = f"connection {source_conn!r} has type 'oracle'"
    operator = TierTableOperator(
        table={
            "name": name,
            "source": {"conn_id": source_conn, "table": name, "cursor_column": "id"},
            "lake": {"namespace": NAMESPACE, "table": name, "catalog_conn_id": catalog_conn},
            "retries": 1,
            "max_consecutive_failures": 2,
        }
    )
    context = task_context(operator.table_asset, None)
    for failures in (1, 2):
        with pytest.raises(Exception, match=re.escape(expected)):
            operator.execute(context)
        state = saved_state(context, operator.table_asset)
        assert state.status is TableStatus.FAILED and state.consecutive_failures == failures
        assert expected in (state.last_error or "") and len((state.last_error or "").encode()) <= MAX_ERROR_BYTES
        assert secret not in (state.last_error or "") and pg_server.password not in (state.last_error or "")
        assert state.epoch == 0  # no round started: no epoch acquired
    assert state.quarantined_since is not None
    with pytest.raises(AirflowSkipException, match="quarantined"):
        operator.execute(context)
    context["ti"].try_number = 2
    with pytest.raises(AirflowFailException, match="quarantined"):
        operator.execute(context)
    assert saved_state(context, operator.table_asset).consecutive_failures == 2  # a quarantined table is not retried
    if which == "catalog-missing":
        assert not (tmp_path / "w").exists()  # nothing was written to the warehouse
        return
    # The table's lake table was never made; its two failed rounds (not the quarantined skips) are in the history.
    assert not load_catalog(catalog_conn, **properties).table_exists((NAMESPACE, name))  # named as the connection
    rows = LakeHistoryTable(catalog_config(properties, catalog_conn).handle()).rows().to_pylist()
    mine = [row for row in rows if row["table_name"] == name]
    assert [row["outcome"] for row in mine] == ["failed", "failed"] and all(expected in row["error"] for row in mine)
    assert not any(secret in row["error"] or pg_server.password in row["error"] for row in mine)


def test_08_missing_catalog_connection_is_the_recorded_maintenance_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The maintenance task records a catalog connection it cannot resolve as a failed run (step ``setup``)."""
    from airflow_provider_tiering.core.maintenance import MaintenanceFailed
    from airflow_provider_tiering.hooks.asset_state import MaintenanceStateStore
    from airflow_provider_tiering.operators.maintain_table import MaintainTableOperator
    from testbed.airflow_context import task_context

    name = unique("nocatmaint")
    operator = MaintainTableOperator(
        table={
            "name": name,
            "source": {"conn_id": "unused", "table": name, "cursor_column": "id"},
            "lake": {"namespace": NAMESPACE, "table": name, "catalog_conn_id": "nowhere_maint_bad_input"},
        }
    )
    context = task_context(operator.table_asset, None)
    with pytest.raises(MaintenanceFailed, match="nowhere_maint_bad_input"):
        operator.execute(context)
    status = MaintenanceStateStore(context["asset_state_store"][operator.table_asset]).load()
    assert status is not None and status.last_outcome == "failed" and status.last_error_step == "setup"
    assert "nowhere_maint_bad_input" in (status.last_error or "") and status.consecutive_failures == 1


# -- 9: Spark master -------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_09_unreachable_spark_master_fails_readably_in_bounded_time(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    """Spark's own standalone client retries a dead master for a minute (3 registrations of 20 s, fixed in Spark)
    and then says only "Cannot call methods on a stopped SparkContext": the session probes the master first."""
    name = unique("nomaster")
    pg.create(name)
    pg.insert(name, 1, 2500)
    spec = make_spec(name, target_rows_per_split=1000)
    state_path = tmp_path / "state.json"
    master = f"spark://127.0.0.1:{find_free_port()}"
    spark_writer = build_writer(SparkSettings(master=master), local_single_split=False)
    started = time.monotonic()
    try:
        with pytest.raises(SparkUnavailable, match=f"Spark master {master} is unreachable"):
            run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, spark_writer)
    finally:
        spark_writer.stop()
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"an unreachable Spark master took {elapsed:.0f}s to fail"
    state = assert_failed_round(state_path, f"SparkUnavailable: Spark master {master} is unreachable")
    assert "Connection refused" in (state.last_error or "")
    assert state.epoch == 1  # the round had acquired its epoch: it failed in the write step
    assert_nothing_committed(catalog_properties, name, exists=True)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


# -- 10: names -------------------------------------------------------------------------------------
INJECTIONS = [
    pytest.param({"source": {"table": 'x"; DROP TABLE {canary}; --'}}, "source.table", id="table-quote-semicolon"),
    pytest.param({"source": {"cursor_column": 'id" FROM {canary}; --'}}, "source.cursor_column", id="cursor-quote"),
    pytest.param({"source": {"columns": ["id", "a;b"]}}, "source.columns.1", id="column-semicolon"),
    pytest.param({"source": {"db_schema": "public; DROP TABLE {canary}"}}, "source.db_schema", id="schema"),
    pytest.param({"lake": {"table": 'o"; DROP'}}, "lake.table", id="lake-table"),
    pytest.param({"lake": {"namespace": "a.b"}}, "lake.namespace", id="lake-namespace-dot"),
    pytest.param({"name": "x; DROP TABLE y"}, "name", id="name"),
]


def make_canary(dsn: str) -> str:
    canary = unique("canary")
    execute([f'CREATE TABLE "{canary}" (k int)', f'INSERT INTO "{canary}" VALUES (1), (2), (3)'], dsn)
    return canary


def assert_canary_intact(dsn: str, canary: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute(f'SELECT k FROM "{canary}" ORDER BY k').fetchall() == [(1,), (2,), (3,)]


@pytest.mark.parametrize(("override", "field"), INJECTIONS)
def test_10_quotes_and_semicolons_in_names_are_refused_at_parse_time(
    pg_server: PostgresServer, override: dict[str, Any], field: str
) -> None:
    canary = make_canary(pg_server.dsn)
    data: dict[str, Any] = {
        "name": "orders",
        "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
        "lake": {"namespace": "sales", "table": "orders"},
    }
    for key, value in override.items():
        if isinstance(value, dict):
            data[key] = {**data[key], **{k: _fill(v, canary) for k, v in value.items()}}
        else:
            data[key] = _fill(value, canary)
    with pytest.raises(InvalidTableSpec, match=rf"field '{field}'"):
        TableSpec.parse(data)
    assert_canary_intact(pg_server.dsn, canary)


def _fill(value: Any, canary: str) -> Any:
    return value.format(canary=canary) if isinstance(value, str) else value


def test_10_sql_keyword_names_are_tiered_with_quoting(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    """Table, schema and columns named after SQL keywords (and a mixed-case one) are quoted everywhere."""
    canary = make_canary(pg.dsn)
    schema = unique("where")
    execute(
        [
            f'CREATE SCHEMA "{schema}"',
            f'CREATE TABLE "{schema}"."select" ("select" bigint NOT NULL, "from" text, "Order" numeric(8,2), '
            '"table" timestamp)',
            f"""INSERT INTO "{schema}"."select" SELECT g, 'f' || g, g / 4.0, timestamp '2026-01-01' + g * interval '1s'
                FROM generate_series(1, 120) g""",
        ],
        pg.dsn,
    )
    spec = TableSpec.parse(
        {
            "name": "select",
            "source": {"conn_id": "unused", "db_schema": schema, "table": "select", "cursor_column": "select"},
            "lake": {"namespace": "group", "table": "select"},
        }
    )
    result = run(spec, pg.source(spec.source), catalog_of(catalog_properties), tmp_path / "state.json", writer)
    assert result.outcome == "tiered" and result.end_offsets == {"cursor": 120}
    columns = ("select", "from", "Order", "table")
    quoted = ", ".join(f'"{c}"' for c in columns)
    with psycopg.connect(pg.dsn) as conn:
        hot = conn.execute(f'SELECT {quoted} FROM "{schema}"."select"').fetchall()
    assert digest(lake_rows(catalog_properties, ("group", "select"), columns)) == digest(hot)
    assert len(hot) == 120
    assert_canary_intact(pg.dsn, canary)


# -- 11: a huge error message ----------------------------------------------------------------------
def test_11_a_one_megabyte_error_is_stored_truncated_to_2_kib(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    """A view whose column calls a function that raises a 1 MB message (PL/pgSQL RAISE EXCEPTION)."""
    name = unique("huge")
    base = f"{name}_base"
    pg.create(base)
    pg.insert(base, 1, 10)
    execute(
        [
            f"""CREATE FUNCTION "{name}_boom"(i bigint) RETURNS text LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'row %: %', i, repeat('x', 1000000); END $$""",
            f'CREATE VIEW "{name}" AS SELECT id, "{name}_boom"(id) AS boom FROM "{base}"',
        ],
        pg.dsn,
    )
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    with pytest.raises(SourceError) as raised:
        run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert len(str(raised.value)) > 1_000_000  # the message did arrive whole
    state = assert_failed_round(state_path, f"SourceError: postgres table public.{name}: ", "failed: row 1: xxxx")
    assert state.last_error is not None and state.last_error.endswith(" …[truncated]")
    assert 2000 < len(state.last_error.encode()) <= 2048
    assert state_path.stat().st_size < 8 * 1024
    assert_nothing_committed(catalog_properties, name, exists=True)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


# -- 12: duplicate names in a DAG ------------------------------------------------------------------
def test_12_duplicate_table_names_fail_at_dag_parse_time() -> None:
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    tables = [
        {
            "name": "orders",
            "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
            "lake": {"namespace": "sales", "table": "orders"},
        },
        {
            "name": "orders",
            "source": {"conn_id": "hot", "table": "orders_v2", "cursor_column": "id"},
            "lake": {"namespace": "sales", "table": "orders_v2"},
        },
    ]
    with pytest.raises(InvalidTableSpec, match=r"^table 'orders': field 'name': declared more than once$"):
        build_tiering_dag("dup", tables)


# -- 13, 14: empty and wide tables -----------------------------------------------------------------
def test_13_empty_table_tiers_nothing_and_creates_the_lake_table(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    name = unique("empty")
    pg.create(name)
    spec = make_spec(name)
    state_path = tmp_path / "state.json"
    result = run(spec, pg.source(spec.source), catalog_of(catalog_properties), state_path, writer)
    assert result.outcome == "nothing_to_tier"
    assert (result.epoch, result.snapshot_id, result.start_offsets, result.end_offsets) == (0, None, None, None)
    iceberg = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name))
    assert [f.name for f in iceberg.schema().fields] == list(COLUMNS)
    assert iceberg.snapshots() == [] and iceberg.scan().to_arrow().num_rows == 0
    state = JsonFileStateStore(state_path).load()
    assert state is not None and state.status is TableStatus.SCHEDULED
    assert (state.epoch, state.committed, state.last_error, state.consecutive_failures) == (0, None, None, 0)
    assert_sibling_tiers(pg, catalog_properties, tmp_path, writer)


WIDE_TYPES = (("integer", "g * {i}"), ("text", "'v' || g || '_' || {i}"), ("boolean", "(g + {i}) % 2 = 0"),
              ("numeric(10,2)", "(g * {i}) / 100.0"))  # fmt: skip


def test_14_a_table_of_1000_columns_is_tiered(
    pg: PostgresHot, catalog_properties: dict[str, str], tmp_path: Path, writer: SparkSplitWriter
) -> None:
    name = unique("wide")
    columns = ["id", *(f"c{i:03d}" for i in range(1, 1000))]
    types = [WIDE_TYPES[i % len(WIDE_TYPES)] for i in range(1, 1000)]
    definition = ", ".join(f"{c} {t}" for c, (t, _) in zip(columns[1:], types))
    values = ", ".join(v.format(i=i) for i, (_, v) in enumerate(types, start=1))
    execute(
        [
            f'CREATE TABLE "{name}" (id bigint NOT NULL, {definition})',
            f'INSERT INTO "{name}" SELECT g, {values} FROM generate_series(1, 40) g',
            f"""UPDATE "{name}" SET c001 = NULL, c002 = NULL WHERE id % 7 = 0""",
        ],
        pg.dsn,
    )
    spec = make_spec(name)
    result = run(spec, pg.source(spec.source), catalog_of(catalog_properties), tmp_path / "state.json", writer)
    assert result.outcome == "tiered" and result.metrics is not None and result.metrics.rows == 40
    iceberg = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name))
    assert [f.name for f in iceberg.schema().fields] == columns
    assert assert_lake_equals_hot(pg.dsn, catalog_properties, name, columns) == 40


# -- 15, 16: spec validation -----------------------------------------------------------------------
def base_spec() -> dict[str, Any]:
    return {
        "name": "orders",
        "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
        "lake": {"namespace": "sales", "table": "orders"},
        "spark": {"conn_id": "spark_default"},
    }


@pytest.mark.parametrize("where", [None, "source", "lake", "spark"])
def test_15_unknown_field_is_refused_naming_it(where: str | None) -> None:
    data = base_spec()
    if where is None:
        data["colour"] = "blue"
    else:
        data[where] = {**data[where], "colour": "blue"}
    field = "colour" if where is None else f"{where}.colour"
    with pytest.raises(InvalidTableSpec) as raised:
        TableSpec.parse(data)
    assert str(raised.value) == f"table 'orders': field '{field}': Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("freshness", "problem"),
    [
        (0, "Input should be greater than 0"),
        (0.0, "Input should be greater than 0"),
        (-1, "Input should be greater than 0"),
        (-300.5, "Input should be greater than 0"),
        (float("nan"), "Input should be a finite number"),
        (float("inf"), "Input should be a finite number"),
    ],
    ids=repr,
)
def test_16_zero_negative_nan_or_infinite_freshness_is_refused(freshness: float, problem: str) -> None:
    with pytest.raises(InvalidTableSpec) as raised:
        TableSpec.parse({**base_spec(), "freshness_seconds": freshness})
    assert str(raised.value) == f"table 'orders': field 'freshness_seconds': {problem}"
