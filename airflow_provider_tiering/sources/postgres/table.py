"""A PostgreSQL table as the package reads it, with or without a cursor: psycopg for small queries, binary COPY into
Arrow (ADBC) for reads, the catalogue's column types, the table's identity (``oid``, storage, ``attnum``), and
eviction's deletes of locked rows. The cursor-read source (``cursor_source.py``) and the table behind a change stream
(``streamed_table.py``) both build on it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import MissingDependency, SourceError, UnsupportedColumnType
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import LineageDataset, VerifyRows
from airflow_provider_tiering.core.shape import AddedValues, AddedValuesKind, HotIdentity, InPlaceChanges
from airflow_provider_tiering.sources.postgres.column_types import (
    MULTI_DIMENSIONAL,
    ColumnRead,
    PgColumn,
    column_read,
    select_expression,
)
from airflow_provider_tiering.sources.postgres.relation_columns import Attribute
from airflow_provider_tiering.sources.sql_table import (
    Bindings,
    Rows,
    RunInTransaction,
    SqlTable,
    TableNaming,
    first_value,
    quote_string,
)

#: Our own sessions carry this name, so the watermark does not wait for our (read-only) readers.
APPLICATION_NAME = "airflow-provider-tiering"
#: Extras of Airflow's postgres connection form that are Airflow's own, not libpq parameters (after the Postgres
#: provider's ``PostgresHook.ignored_extra_options``; the provider is not a dependency). Every other extra goes to
#: libpq as it is, so a wrong one fails the connection loudly instead of being dropped.
AIRFLOW_ONLY_EXTRAS = frozenset(
    {
        "iam",
        "redshift",
        "redshift-serverless",
        "cursor",
        "cluster-identifier",
        "workgroup-name",
        "aws_conn_id",
        "azure_conn_id",
        "sqlalchemy_scheme",
        "sqlalchemy_query",
        "enable_log_db_messages",
    }
)
#: Every session prints intervals in ISO 8601 (``P1Y2M3DT4H``), the form interval columns are tiered in.
SESSION_OPTIONS = "-c IntervalStyle=iso_8601"
#: A split's session ends its query within seconds of its reader's death (a round stopped at its timeout, its Spark
#: job cancelled): without it, PostgreSQL goes on until it next flushes rows to the dead socket, which a slow query
#: may not do for minutes. PostgreSQL 14+ on Linux, macOS and the BSDs; elsewhere the setting is left alone.
_CHECK_CLIENT = (
    "DO $$ BEGIN PERFORM set_config('client_connection_check_interval', '5s', false); "
    "EXCEPTION WHEN undefined_object OR invalid_parameter_value THEN NULL; END $$"
)
#: A column's description from the catalog: information_schema's view of it (domains resolved to their base
#: type), its declared type, and for arrays the element's base type and modifier.
_COLUMNS_SQL = (
    "SELECT c.column_name, c.data_type, c.numeric_precision, c.numeric_scale, c.is_nullable, "
    "format_type(a.atttypid, a.atttypmod), t.typtype, format_type(eb.oid, NULL), eb.typtype, "
    "CASE WHEN e.typtype = 'd' THEN e.typtypmod ELSE a.atttypmod END, a.attndims "
    "FROM information_schema.columns c "
    "JOIN pg_attribute a ON a.attrelid = to_regclass(format('%I.%I', c.table_schema, c.table_name)) "
    "AND a.attname = c.column_name "
    "JOIN pg_namespace n ON n.nspname = c.udt_schema "
    "JOIN pg_type t ON t.typnamespace = n.oid AND t.typname = c.udt_name "
    "LEFT JOIN pg_type e ON t.typcategory = 'A' AND e.oid = t.typelem "
    "LEFT JOIN pg_type eb ON eb.oid = CASE WHEN e.typtype = 'd' THEN e.typbasetype ELSE e.oid END "
    "WHERE c.table_schema = $1 AND c.table_name = $2 ORDER BY c.ordinal_position"
)


def libpq_conninfo(connection: ConnectionInfo) -> str:
    """A libpq connection string (``key=value``, quoted by psycopg) from a connection's fields; its extras become
    libpq parameters (``sslmode``, ``connect_timeout``...), values that are not scalars as JSON text."""
    from psycopg.conninfo import make_conninfo

    parameters: dict[str, Any] = {
        "host": connection.host or "localhost",
        "port": connection.port,
        "user": connection.login,
        "password": connection.password,
        "dbname": connection.schema or "postgres",
    }
    for key, value in connection.extra.items():
        if key not in AIRFLOW_ONLY_EXTRAS:
            parameters[key] = value if isinstance(value, (str, int, float, bool)) else json.dumps(value)
    return make_conninfo("", **{k: v for k, v in parameters.items() if v is not None})


def psycopg_connect(display_name: str, conninfo: str, **options: Any) -> Any:
    """A new autocommit psycopg connection named after this package (the watermark tells its sessions apart by the
    name); ``options`` are psycopg's (``cursor_factory``, ``replication``...). SourceError when it cannot connect."""
    import psycopg

    try:
        return psycopg.connect(conninfo, application_name=APPLICATION_NAME, autocommit=True, **options)
    except psycopg.Error as exc:
        raise SourceError(f"{display_name}: cannot connect: {exc}") from exc


class PostgresTable(SqlTable):
    """A PostgreSQL table, reached with the fields of a ``postgres`` connection."""

    def __init__(self, spec: TableNaming, connection: ConnectionInfo) -> None:
        super().__init__(spec)
        self.connection = connection
        self.conninfo = libpq_conninfo(connection)
        self.display_name = f"postgres table {spec.db_schema or 'public'}.{spec.table}"
        #: How each tiered column is read (filled with the schema).
        self._columns: dict[str, tuple[PgColumn, ColumnRead]] = {}

    def _begin_round(self) -> None:
        super()._begin_round()
        self._columns = {}

    def secrets(self) -> list[str]:
        return self.connection.secrets()

    def lineage_dataset(self) -> LineageDataset:
        database = self.connection.schema or "postgres"
        name = f"{database}.{self.spec.db_schema or 'public'}.{self.spec.table}"
        return LineageDataset(f"postgres://{self.connection.host}:{self.connection.port or 5432}", name)

    def _connect(self) -> Any:
        """A psycopg connection for the small queries (``_query`` and the planning's): it connects in about a
        tenth of ADBC's client time, which reads all of ``pg_type`` on every connect. PostgreSQL's own ``$n``
        placeholders (a raw cursor), so every statement is written once for both drivers."""
        from psycopg import RawCursor

        return psycopg_connect(self.display_name, self._conninfo(), cursor_factory=RawCursor)

    def _connect_arrow(self) -> Any:
        """An ADBC connection, for what is read as Arrow: splits, snapshots, rows to evict."""
        try:
            import adbc_driver_postgresql.dbapi as pg_dbapi
        except ImportError as exc:
            raise MissingDependency(
                "PostgreSQL hot tables need the ADBC PostgreSQL driver: "
                "pip install 'airflow-provider-tiering[postgres]'"
            ) from exc
        try:
            return pg_dbapi.connect(self._conninfo(), autocommit=True)
        except Exception as exc:  # the driver raises its own hierarchy; keep the root message
            raise SourceError(f"{self.display_name}: cannot connect: {exc}") from exc

    def _conninfo(self) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        options = " ".join(filter(None, [str(conninfo_to_dict(self.conninfo).get("options") or ""), SESSION_OPTIONS]))
        return make_conninfo(self.conninfo, application_name=APPLICATION_NAME, options=options)

    def _placeholder(self, position: int) -> str:
        return f"${position}"

    def _query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        with self._query_connection() as conn, conn.cursor() as cur:
            try:
                cur.execute(sql, tuple(params) or None)
                return list(cur.fetchall())
            except Exception as exc:
                raise SourceError(f"{self.display_name}: query failed: {exc}") from exc

    def _load_schema(self) -> pa.Schema:
        rows = self._query(_COLUMNS_SQL, (self.spec.db_schema or "public", self.spec.table))
        if not rows:
            raise SourceError(f"{self.display_name} does not exist (or is not visible to this user)")
        fields = []
        wanted = self._columns_to_read()
        for name, data_type, precision, scale, nullable, declared, kind, element, element_kind, typmod, dims in rows:
            if wanted is not None and name not in wanted:
                continue
            column = PgColumn(
                name, data_type, declared, kind, precision, scale, element, element_kind, int(typmod), int(dims or 0)
            )
            try:
                read = column_read(column)
            except UnsupportedColumnType as exc:
                raise UnsupportedColumnType(f"{self.display_name}: {exc}") from exc
            self._columns[name] = (column, read)
            fields.append(pa.field(name, read.arrow_type, nullable=nullable == "YES"))
        return pa.schema(fields)

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns in key order; () when it has none."""
        rows = self._query(
            "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY k.n",
            (self._qualified_name(),),
        )
        return tuple(str(name) for (name,) in rows)

    # -- identity and shape --------------------------------------------------------------------
    def _read_identity(self) -> HotIdentity:
        """The table's ``oid`` (another table once dropped and created again), its ``relfilenode`` (new storage after
        TRUNCATE, VACUUM FULL, CLUSTER or a rewriting ALTER TABLE), each column's ``attnum`` (kept by a rename, new
        for a column dropped and added again), declared type and nullability, and what a change stream aligns its
        older descriptions of the columns with (each column's type id, ``relnatts``): one catalogue query."""
        rows = self._query(
            "SELECT c.oid::int8, pg_relation_filenode(c.oid)::int8, a.attname::text, a.attnum::int8, "
            "CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text) AS int8), "
            "format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, "
            "a.atttypid::int8, a.attgenerated <> '', c.relnatts::int8 "
            "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "WHERE c.oid = to_regclass($1)",
            (self._qualified_name(),),
        )
        if not rows:
            raise SourceError(f"{self.display_name} does not exist (or is not visible to this user)")
        oid, filenode, horizon, natts = rows[0][0], rows[0][1], rows[0][4], rows[0][8]
        return HotIdentity(
            table=str(oid),
            storage=None if filenode is None else str(filenode),
            columns={str(row[2]): int(row[3]) for row in rows},
            horizon=str(horizon),
            types={str(row[2]): str(row[5]) for row in rows},
            type_ids={int(row[3]): int(row[6]) for row in rows if not row[7]},
            last_column_id=int(natts),
        )

    def attributes(self) -> list[Attribute]:
        """Every attribute of the table, dropped ones included (``pg_attribute`` keeps them, renamed and untyped):
        what a change stream places the columns of its older Relation messages among."""
        rows = self._query(
            "SELECT attnum::int8, CASE WHEN attisdropped THEN NULL ELSE attname::text END, atttypid::int8, "
            "attgenerated <> '' FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 ORDER BY attnum",
            (self._qualified_name(),),
        )
        return [Attribute(int(n), name, int(kind), bool(generated)) for n, name, kind, generated in rows]

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None:
        """Whether every row at or below ``tiered`` (None: every row) was written after ``horizon`` (a next
        transaction id): a rewriting ALTER TABLE gives every row its own transaction id, and so does a reload after
        a TRUNCATE, while VACUUM FULL and CLUSTER keep them. One scan, stopping at the first older row. None when
        too many transactions have passed since to tell (2^31: ``age`` wraps)."""
        bindings = self.bindings()
        predicate = self._rows_upto(tiered, bindings)
        since = bindings.bind(int(horizon))
        ((passed, older),) = self._query(
            "WITH x AS (SELECT CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text) AS int8) "
            f"- {since} AS passed) "
            f"SELECT passed, EXISTS (SELECT 1 FROM {self.table_ref} WHERE {predicate} AND age(xmin) > passed) FROM x",
            bindings.values,
        )
        if passed is None or int(passed) >= 2**31 - 1:
            return None
        return not older

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        """The rows at or below ``tiered`` are looked at (``SqlTable.added_column_values``): a migration may have
        updated them since the column was added (``ADD COLUMN c DEFAULT 0; UPDATE t SET c = ...``), which the
        catalogue does not tell. Every row of a change stream's table (``tiered`` None) is another matter: a row
        changed since the ALTER comes through the stream with its value, so what the rows hold that the lake has is
        what the ALTER gave them, which PostgreSQL 11+ stores once for a constant default (``attmissingval``: exact,
        and costs nothing); without one, NULL unless the table was rewritten since (a volatile default gives each row
        its own value, and any rewrite clears ``attmissingval``): then the rows are looked at too."""
        if tiered is not None:
            return super().added_column_values(column, tiered, rewritten)
        relation, name = quote_string(self._qualified_name()), quote_string(column)
        missing = self._query(
            "SELECT atthasmissing FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2",
            (self._qualified_name(), column),
        )
        if missing and missing[0][0]:
            field = self.schema().field(column)
            pg_column, read = self._columns[column]
            # attmissingval is an anyarray of one element: through text[] its element's text, cast to the type.
            value_sql = (
                f"SELECT {select_expression(self.quote(column), pg_column, read)} FROM (SELECT "
                f"CAST((CAST(a.attmissingval AS text)::text[])[1] AS {pg_column.declared}) AS {self.quote(column)} "
                f"FROM pg_attribute a WHERE a.attrelid = to_regclass({relation}) AND a.attname = {name}) s"
            )
            value = first_value(list(self._execute_arrow(value_sql, pa.schema([field]))), field)
            return AddedValues(AddedValuesKind.CONSTANT, value, how=f"the column's stored default {value!r}")
        if not rewritten:
            return AddedValues(AddedValuesKind.NULL, how="it was added without a default and the table not rewritten")
        return super().added_column_values(column, tiered, rewritten)

    def in_place_changes(self) -> InPlaceChanges | None:
        """Updates and deletes of the table so far (``pg_stat_user_tables``, cumulative; PostgreSQL publishes a
        session's counts when it goes idle, at most about once a second, and counts rolled-back ones too)."""
        rows = self._query(
            "SELECT n_tup_upd::int8, n_tup_del::int8 FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
            (self._qualified_name(),),
        )
        if not rows or rows[0][0] is None:
            return None
        return InPlaceChanges(updated=int(rows[0][0]), deleted=int(rows[0][1]))

    def declared_type(self, name: str) -> str:
        """A tiered column's type as PostgreSQL names it (``numeric(12,3)``, ``mood[]``), for casts."""
        self.schema()
        return self._columns[name][0].declared

    def column_description(self, name: str) -> tuple[PgColumn, ColumnRead]:
        """A tiered column as the catalog describes it, and how it is read."""
        self.schema()
        return self._columns[name]

    def select_expression(self, field: pa.Field[Any], name: str | None = None) -> str:
        """How a tiered column is selected (``name``: from a column of that name holding its values, e.g. a typed
        copy of it, and named so)."""
        # numeric as text is exact and about twice as fast on the wire as the binary numeric
        # (measured: 1.4 s vs 2.8 s for four numeric columns of 1M rows); Arrow parses it into decimal128.
        # Types the driver reads as Arrow extension types are read as text too (``column_types.py``).
        self.schema()
        column, read = self._columns[field.name]
        return select_expression(self.quote(name or field.name), column, read)

    def _read_failed(self, what: str, exc: Exception) -> SourceError:
        """A failed read; a multi-dimensional array value (see ``column_types.select_expression``) is one no retry
        cures."""
        if MULTI_DIMENSIONAL in str(exc):
            return UnsupportedColumnType(
                f"{self.display_name}: {what} failed: {exc}. Arrays are tiered as one-dimensional lists: make the "
                "value one-dimensional, or leave the column out with the spec's source.columns; nothing was tiered"
            )
        return SourceError(f"{self.display_name}: {what} failed: {exc}")

    def _qualified_name(self) -> str:
        """The table's name as ``regclass`` reads it (quoted, so case and odd characters survive)."""
        return self.table_ref if self.spec.db_schema else f"{self.quote('public')}.{self.table_ref}"

    # -- eviction's deletes ----------------------------------------------------------------------
    def _age_before(self, column: str, field: pa.Field[Any], cutoff: datetime, bindings: Bindings) -> str:
        utc = cutoff.astimezone(UTC)
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            return f"{column} < CAST({bindings.bind(utc.isoformat())} AS timestamptz)"
        naive = utc.replace(tzinfo=None).isoformat()
        sql_type = "timestamp" if pa.types.is_timestamp(field.type) else "date"
        return f"{column} < CAST({bindings.bind(naive)} AS {sql_type})"

    def _row_id_sql(self) -> str:
        return "ctid::text AS __row_id"

    def _evict_in_transaction(
        self, select_sql: str, params: Sequence[Any], schema: pa.Schema, verify: VerifyRows
    ) -> int:
        def every_row(rows: pa.Table) -> None:
            verify(rows)  # raises to keep the whole batch

        return self.delete_locked_rows(select_sql, params, schema, every_row)[1]

    @contextmanager
    def _deleting_session(self, cur: Any) -> Iterator[None]:
        """Around one eviction transaction, on its session (a change stream's table tags it with its origin)."""
        yield

    def delete_locked_rows(
        self,
        select_sql: str,
        params: Sequence[Any],
        schema: pa.Schema,
        choose: Callable[[pa.Table], Sequence[bool] | None],
    ) -> tuple[pa.Table, int]:
        """In one transaction: read the rows of ``select_sql`` (its first column the row id, ``__row_id``) locked
        against change, hand them (without the row id, as ``schema``) to ``choose``, which raises to roll back or
        returns which rows to delete (None: all), then delete exactly those by row id. Returns the rows read and how
        many were deleted."""
        from airflow_provider_tiering.sources.conform import conform_batch

        conn = self._evict_conn or self._connect_arrow()
        try:
            cur = conn.cursor()
            with self._deleting_session(cur):
                try:
                    cur.execute("BEGIN")
                    # A batch is the next LIMIT rows in cursor (or key) order: walk the index. Without fresh
                    # statistics the planner picks a bitmap scan of the whole remaining range plus a sort, per batch.
                    cur.execute("SET LOCAL enable_sort = off")
                    cur.execute(f"{select_sql} FOR UPDATE", parameters=tuple(params))  # what is verified is deleted
                    found = cur.fetch_arrow_table()
                except Exception as exc:
                    cur.execute("ROLLBACK")
                    raise self._read_failed("reading rows to evict", exc) from exc
                rows = pa.Table.from_batches(
                    [conform_batch(b, schema) for b in found.drop_columns(["__row_id"]).to_batches()], schema=schema
                )
                if found.num_rows == 0:
                    cur.execute("ROLLBACK")
                    choose(rows)
                    return rows, 0
                try:
                    chosen = choose(rows)
                    row_ids = found.column("__row_id").to_pylist()
                    if chosen is not None:
                        row_ids = [row_id for row_id, take in zip(row_ids, chosen, strict=True) if take]
                    if row_ids:
                        # The row ids as one bound array literal ("{"(0,1)","(0,2)"}"), cast to tid[] by the server.
                        literal = "{" + ",".join(f'"{v}"' for v in row_ids) + "}"
                        cur.execute(
                            f"DELETE FROM {self.table_ref} WHERE ctid = ANY(CAST($1 AS tid[]))", parameters=(literal,)
                        )
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT" if row_ids else "ROLLBACK")
                return rows, len(row_ids)
        finally:
            if conn is not self._evict_conn:
                conn.close()

    def _eviction_connection(self) -> Any:
        return self._connect_arrow()

    # -- reading -------------------------------------------------------------------------------
    @contextmanager
    def _snapshot(self) -> Iterator[Callable[[str, Sequence[Any], pa.Schema], Iterator[pa.RecordBatch]]]:
        with self._read_transaction("SELECT 1", "cannot start a read transaction") as (cur, _):
            yield self._running_in(cur)

    @contextmanager
    def _read_transaction(self, first_query: str, failed: str) -> Iterator[tuple[Any, Any]]:
        """A read-only REPEATABLE READ transaction on an ADBC connection of its own, committed when the block ends:
        yields its cursor and the value of ``first_query``, the query that takes the transaction's snapshot (used by
        all its later queries). ``failed`` says what failed when it cannot start."""
        conn = self._connect_arrow()
        try:
            cur = conn.cursor()
            try:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute(first_query)
                (value,) = cur.fetchone()
            except Exception as exc:
                raise SourceError(f"{self.display_name}: {failed}: {exc}") from exc
            yield cur, value
            cur.execute("COMMIT")
        finally:
            conn.close()

    def _running_in(self, cur: Any) -> RunInTransaction:
        """A function that runs a query in ``cur``'s open transaction and streams its rows as Arrow batches."""

        def run(sql: str, params: Sequence[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
            try:
                cur.execute(sql, parameters=tuple(params) or None)
                reader = cur.fetch_record_batch()
            except Exception as exc:
                raise self._read_failed("reading", exc) from exc
            yield from self._batches(reader, "reading")

        return run

    def _execute_arrow(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        return self.read_arrow(sql, None)

    def read_arrow(self, sql: str, snapshot_id: str | None) -> Iterator[pa.RecordBatch]:
        """Stream a query's rows as Arrow batches on a connection of its own, in the exported ``snapshot_id``
        when given (see ``ImportedSnapshot``)."""
        conn = self._connect_arrow()
        try:
            cur = conn.cursor()
            try:
                cur.execute(_CHECK_CLIENT)
                if snapshot_id is not None:
                    cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    # SET TRANSACTION SNAPSHOT takes no bound parameter; the id comes from the server itself.
                    cur.execute(f"SET TRANSACTION SNAPSHOT {quote_string(snapshot_id)}")
                cur.execute(sql)
                reader = cur.fetch_record_batch()
            except Exception as exc:
                raise self._read_failed("reading a split", exc) from exc
            yield from self._batches(reader, "reading a split")
        finally:
            conn.close()

    def _batches(self, reader: Any, what: str) -> Iterator[pa.RecordBatch]:
        """A stream's batches; an error the server sends while streaming is a failed read too."""
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except Exception as exc:
                raise self._read_failed(what, exc) from exc
            yield batch
