"""A MariaDB or MySQL table, as every reader of it sees it: its connection (PyMySQL for the small queries, connectorx's
Arrow stream for reads), its columns and their lake types, its identity, and its reads in one snapshot. Read by a
cursor in ``cursor_source.py``, from its binlog in ``change_stream_source.py``.

Reader, measured on TPC-H lineitem SF 1 (6,001,215 rows) from a local MariaDB 10.11: connectorx's Arrow stream 830,000
rows/s at 103 MB peak, against PyMySQL (unbuffered cursor into Arrow) 74,000-104,000 rows/s, the ``mariadb`` connector
263,000 rows/s (it also returned a partial result without an error when its connection was killed) and mysql-connector
119,000 rows/s. connectorx's own conversions are exact except for decimals (all read as ``decimal128(38, 10)`` through a
28-digit decimal: a wider scale is rounded, more than 18 digits before the point fail), so decimals that do not fit that
are selected as text and cast here, exactly; TIMESTAMP values are read in UTC; every batch is cast to the table's types,
which raises rather than rounds. connectorx queues batches without bound when the writer is slower: a split's memory is
bounded by its size (``target_rows_per_split``; about 180 MB for a million lineitem rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import ConnectionNotUsable, SourceError, UnsupportedColumnType
from airflow_provider_tiering.core.ports import LineageDataset
from airflow_provider_tiering.core.shape import HotIdentity
from airflow_provider_tiering.sources.sql_table import Bindings, Rows, SqlTable, TableNaming, quote_identifier

#: Every session reads and compares times in UTC (TIMESTAMP columns are stored in UTC, shown in the session's zone).
SESSION_TIME_ZONE = "SET time_zone = '+00:00'"
#: The widest decimal connectorx reads exactly (it reads every decimal as decimal128(38, 10)): its scale...
CONNECTORX_DECIMAL_SCALE = 10
#: ... and its digits before the point: 28 significant digits (rust_decimal's 96 bits) held at scale 10, so a value with
#: more than 18 fails to read ("decimal scale is not equal to expected scale", measured on 10.11).
CONNECTORX_DECIMAL_DIGITS = 18
#: PyMySQL's error codes for a refused privilege (1227: "you need the PROCESS privilege"; 1142: a table).
ACCESS_DENIED = frozenset({1227, 1142, 1044})

#: Unsigned types become the next wider signed one: Iceberg's integers are signed.
_INTEGER_TYPES: dict[tuple[str, bool], pa.DataType] = {
    ("tinyint", False): pa.int8(),
    ("tinyint", True): pa.int16(),
    ("smallint", False): pa.int16(),
    ("smallint", True): pa.int32(),
    ("mediumint", False): pa.int32(),
    ("mediumint", True): pa.int32(),
    ("int", False): pa.int32(),
    ("int", True): pa.int64(),
    ("bigint", False): pa.int64(),
}
_SCALAR_TYPES: dict[str, pa.DataType] = {
    "float": pa.float32(),
    "double": pa.float64(),
    "char": pa.string(),
    "varchar": pa.string(),
    "tinytext": pa.string(),
    "text": pa.string(),
    "mediumtext": pa.string(),
    "longtext": pa.string(),
    "enum": pa.string(),
    "set": pa.string(),
    "json": pa.string(),  # MariaDB's JSON is LONGTEXT (with a check): it reads as longtext
    "uuid": pa.string(),
    "inet4": pa.string(),
    "inet6": pa.string(),
    "binary": pa.binary(),
    "varbinary": pa.binary(),
    "tinyblob": pa.binary(),
    "blob": pa.binary(),
    "mediumblob": pa.binary(),
    "longblob": pa.binary(),
    "bit": pa.binary(),
    "date": pa.date32(),
    "datetime": pa.timestamp("us"),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "time": pa.time64("us"),  # a time of day: a TIME outside 00:00:00-23:59:59.999999 fails the round
    "year": pa.int16(),
}
#: TIME values are selected as signed microseconds (connectorx cannot read a negative or >24 h TIME at all).
_MICROSECONDS_PER_DAY = 86_400_000_000


def _unsupported(column: str, column_type: str, why: str) -> UnsupportedColumnType:
    return UnsupportedColumnType(
        f"column {column!r} has type {column_type}, which cannot be tiered ({why}): leave it out by listing the "
        "columns to tier in the spec's source.columns, or change its type (see 'Column types' in docs/tables.md); "
        "nothing was tiered"
    )


def arrow_type(column: str, data_type: str, column_type: str, precision: int | None, scale: int | None) -> pa.DataType:
    """The Arrow type a MariaDB/MySQL column is tiered as (its ``information_schema.COLUMNS`` fields)."""
    data_type = data_type.lower()
    unsigned = "unsigned" in column_type.lower()
    if data_type == "bigint" and unsigned:
        return pa.decimal128(20, 0)  # up to 2**64 - 1: more than Iceberg's long holds
    if (data_type, unsigned) in _INTEGER_TYPES:
        return _INTEGER_TYPES[(data_type, unsigned)]
    if data_type == "decimal":
        digits = int(precision or 10)
        if digits > 38:
            raise _unsupported(column, column_type, "wider than Iceberg's decimal(38)")
        return pa.decimal128(digits, int(scale or 0))
    try:
        return _SCALAR_TYPES[data_type]
    except KeyError as exc:
        raise _unsupported(column, column_type, "no lake type is mapped to it") from exc


def time_of_day(microseconds: pa.Array[Any], column: str) -> pa.Array[Any]:
    """TIME values read as signed microseconds, as the lake's time of day; a value outside one day (MariaDB's TIME
    also holds durations, -838:59:59 to 838:59:59) raises :class:`UnsupportedColumnType` naming it."""
    values = pc.cast(microseconds, pa.int64())
    low, high = pc.min_max(values).values()
    for bad in (low.as_py(), high.as_py()):
        if bad is not None and not 0 <= bad < _MICROSECONDS_PER_DAY:
            sign, magnitude = ("-" if bad < 0 else ""), abs(bad)
            seconds, micros = divmod(magnitude, 1_000_000)
            shown = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"
            raise UnsupportedColumnType(
                f"column {column!r} holds TIME {shown}, which is no time of day: TIME columns are tiered as "
                "Iceberg's time (00:00:00 to 23:59:59.999999). Store durations as a number, or leave the column "
                "out with the spec's source.columns; nothing was tiered"
            )
    return pc.cast(values, pa.time64("us"))


def _read_as_text(field: pa.Field[Any]) -> bool:
    """A decimal connectorx cannot read (more scale than its 10, or more digits before the point than 18)."""
    kind = field.type
    return pa.types.is_decimal(kind) and (
        kind.scale > CONNECTORX_DECIMAL_SCALE or kind.precision - kind.scale > CONNECTORX_DECIMAL_DIGITS
    )


def _arrow_values(values: Sequence[Any], field: pa.Field[Any]) -> pa.Array[Any]:
    """PyMySQL's Python values of one column as an Arrow array of the field's type (small reads: eviction, across
    tiers), selected as :meth:`MySqlSource.select_expression` says."""
    kind = field.type
    if pa.types.is_time(kind):
        return time_of_day(pa.array(values, pa.int64()), field.name)
    if pa.types.is_string(kind):
        values = [None if v is None else v if isinstance(v, str) else ",".join(sorted(v)) for v in values]
    return pa.array(values, kind)


def rows_batch(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows)) if rows else [() for _ in schema]
    try:
        return pa.RecordBatch.from_arrays([_arrow_values(c, f) for c, f in zip(columns, schema)], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SourceError(f"cannot convert MariaDB values to {schema}: {exc}") from exc


def session_connect(connection: ConnectionInfo, database: str, display_name: str) -> Any:
    """A PyMySQL session on ``database``, autocommit, in UTC (every small query's and the binlog readers' own).

    Raises:
        SourceError: it cannot connect (the message starts with ``display_name``).
    """
    import pymysql

    from airflow_provider_tiering.sources.mysql.connections import connect

    extra = connection.extra
    try:
        return connect(
            host=connection.host or "localhost",
            port=connection.port or 3306,
            user=connection.login,
            password=connection.password or "",
            database=database,
            charset=str(extra.get("charset", "utf8mb4")),
            connect_timeout=int(extra.get("connect_timeout", 10)),
            autocommit=True,
            init_command=SESSION_TIME_ZONE,
        )
    except pymysql.MySQLError as exc:
        raise SourceError(f"{display_name}: cannot connect: {exc}") from exc


class MySqlTable(SqlTable):
    """A MariaDB or MySQL table, reached with the fields of a ``mysql`` (or ``mariadb``) connection; the connection's
    schema is the database unless the spec's ``db_schema`` names another."""

    def __init__(self, spec: TableNaming, connection: ConnectionInfo) -> None:
        super().__init__(spec)
        database = spec.db_schema or connection.schema
        if not database:
            raise ConnectionNotUsable(
                f"connection {connection.describe()}: a mysql connection needs the database as its schema "
                "(or the table spec's db_schema)"
            )
        self.connection = connection
        self.database = database
        self.display_name = f"mysql table {database}.{spec.table}"
        #: Each column's ``information_schema`` data type (filled with the schema).
        self._data_types: dict[str, str] = {}
        self._primary_key: tuple[str, ...] | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._data_types, self._primary_key = {}, None

    def data_type(self, column: str) -> str | None:
        """A column's data type as ``information_schema`` names it (``uuid``, ``inet6``, ``datetime``...)."""
        self.schema()
        return self._data_types.get(column)

    # -- connections ---------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        return self.connection.secrets()

    def lineage_dataset(self) -> LineageDataset:
        host, port = self.connection.host or "localhost", self.connection.port or 3306
        return LineageDataset(f"mysql://{host}:{port}", f"{self.database}.{self.spec.table}")

    def _url(self) -> str:
        """The connectorx URL (credentials percent-encoded by SQLAlchemy's URL, Airflow's own dependency)."""
        from sqlalchemy.engine import URL

        url = URL.create(
            "mysql",
            username=self.connection.login,
            password=self.connection.password,
            host=self.connection.host or "localhost",
            port=self.connection.port or 3306,
            database=self.database,
        )
        return url.render_as_string(hide_password=False)

    def _connect(self) -> Any:
        return session_connect(self.connection, self.database, self.display_name)

    def _placeholder(self, position: int) -> str:
        return "%s"

    def quote(self, name: str) -> str:
        return quote_identifier(name, "`")

    @property
    def table_ref(self) -> str:
        return f"{self.quote(self.database)}.{self.quote(self.spec.table)}"

    def _query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        import pymysql

        with self._query_connection() as conn, conn.cursor() as cur:
            try:
                cur.execute(sql, tuple(params))
                return list(cur.fetchall())
            except pymysql.MySQLError as exc:
                raise SourceError(f"{self.display_name}: query failed: {exc}") from exc

    # -- schema --------------------------------------------------------------------------------

    def _load_schema(self) -> pa.Schema:
        rows = self._query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, IS_NULLABLE "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (self.database, self.spec.table),
        )
        if not rows:
            raise SourceError(f"{self.display_name} does not exist (or is not visible to this user)")
        fields = []
        wanted = self._columns_to_read()
        for name, data_type, column_type, precision, scale, nullable in rows:
            self._data_types[str(name)] = str(data_type).lower()
            if wanted is not None and name not in wanted:
                continue
            try:
                kind = arrow_type(name, str(data_type), str(column_type), precision, scale)
            except UnsupportedColumnType as exc:
                raise UnsupportedColumnType(f"{self.display_name}: {exc}") from exc
            fields.append(pa.field(name, kind, nullable=nullable == "YES"))
        return pa.schema(fields)

    def _read_identity(self) -> HotIdentity:
        """MariaDB and MySQL keep no id of a table or column that survives what replaces one; InnoDB's table id
        changes with TRUNCATE, a rebuild (OPTIMIZE, ALTER TABLE ... FORCE, a type change) and DROP + CREATE, which is
        when a table may have been replaced: the round then checks its rows. Reading it needs the PROCESS privilege
        (as the safe watermark does); without it the table has no storage id. Each column's declared type and
        nullability, by name, tell a change of columns that rebuilds nothing (an instant ADD or RENAME COLUMN)."""
        import pymysql

        columns = self._query(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (self.database, self.spec.table),
        )
        types = {str(name): f"{kind}{'' if nullable == 'YES' else ' not null'}" for name, kind, nullable in columns}
        name = f"{self.database}/{self.spec.table}"
        # MariaDB's view of InnoDB's tables, then MySQL 8's (which renamed it).
        for view in ("INNODB_SYS_TABLES", "INNODB_TABLES"):
            try:
                rows = self._query(f"SELECT TABLE_ID FROM information_schema.{view} WHERE NAME = %s", (name,))
            except SourceError as exc:
                code = exc.__cause__.args[:1] if isinstance(exc.__cause__, pymysql.MySQLError) else ()
                if code == (1109,):  # no such view in this server
                    continue
                if code in ((1227,), (1142,)):  # no PROCESS privilege (the watermark names it): no storage id
                    return HotIdentity(types=types)
                raise
            return HotIdentity(storage=f"innodb table {rows[0][0]}" if rows else None, types=types)
        return HotIdentity(types=types)

    def _as_text(self, expression: str) -> str:
        return f"CAST({expression} AS CHAR)"

    def select_expression(self, field: pa.Field[Any]) -> str:
        name = self.quote(field.name)
        if pa.types.is_time(field.type):
            return f"CAST(TIME_TO_SEC({name}) * 1000000 AS SIGNED) AS {name}"
        return f"CAST({name} AS CHAR) AS {name}" if _read_as_text(field) else name

    # -- reading -------------------------------------------------------------------------------

    def _execute_arrow(self, sql: str, schema: pa.Schema, setup: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
        """connectorx's types (the caller casts each batch to ``schema``), TIME columns made times of day; ``setup``:
        statements the session runs first (see :meth:`_stream`)."""
        times = [f.name for f in schema if pa.types.is_time(f.type)]
        for batch in self._stream(sql, setup):
            for name in times:
                try:
                    checked = time_of_day(batch.column(name), name)
                except UnsupportedColumnType as exc:
                    raise UnsupportedColumnType(f"{self.display_name}: {exc}") from exc
                batch = batch.set_column(batch.schema.get_field_index(name), name, checked)
            yield batch

    def _stream(self, sql: str, setup: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
        """A query's result streamed as Arrow batches by connectorx, in a UTC session that runs ``setup`` first (a
        transaction it reads in)."""
        import connectorx

        try:
            reader = connectorx.read_sql(
                self._url(), sql, return_type="arrow_stream", pre_execution_query=[SESSION_TIME_ZONE, *setup]
            )
            yield from reader
        except BaseException as exc:
            if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                raise  # KeyboardInterrupt, SystemExit, GeneratorExit: not a read error
            # connectorx reports a failed read (a refused login, a value it cannot convert) as a panic, which is
            # no Exception subclass.
            raise SourceError(f"{self.display_name}: reading a split failed: {exc}") from exc

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[[str, Sequence[Any], pa.Schema], Iterator[pa.RecordBatch]]]:
        import pymysql

        conn = self._connect()
        try:
            cur = conn.cursor()
            try:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            except pymysql.MySQLError as exc:
                raise SourceError(f"{self.display_name}: cannot start a read transaction: {exc}") from exc

            def run(sql: str, params: Sequence[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
                try:
                    cur.execute(sql, tuple(params))
                    while rows := cur.fetchmany(65_536):
                        yield rows_batch(rows, schema)
                except pymysql.MySQLError as exc:
                    raise SourceError(f"{self.display_name}: reading failed: {exc}") from exc

            yield run
            conn.commit()
        finally:
            conn.close()

    # -- eviction ------------------------------------------------------------------------------

    def _age_before(self, column: str, field: pa.Field[Any], cutoff: datetime, bindings: Bindings) -> str:
        utc = cutoff.astimezone(UTC).replace(tzinfo=None)
        value: date | datetime = utc if pa.types.is_timestamp(field.type) else utc.date()
        return f"{column} < {bindings.bind(value)}"

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns in key order; () when it has none."""
        if self._primary_key is None:
            rows = self._query(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                (self.database, self.spec.table),
            )
            self._primary_key = tuple(str(row[0]) for row in rows)
        return self._primary_key

    def _eviction_key(self) -> tuple[str, ...]:
        """What an evicted batch is deleted by (InnoDB has no usable row id): the primary key."""
        key = self.primary_key()
        if not key:
            raise SourceError(
                f"{self.display_name}: eviction deletes rows by primary key, and the table has none; "
                "add one or turn eviction off (nothing was evicted)"
            )
        return key

    def _row_id_sql(self) -> str:
        return f"JSON_ARRAY({', '.join(self.quote(c) for c in self._eviction_key())}) AS __row_id"

    def _eviction_connection(self) -> Any:
        return self._connect()
