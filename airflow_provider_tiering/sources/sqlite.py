"""SQLite hot store: the embedded default, a database file that needs no server."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ConnectionNotUsable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, cursor_of
from airflow_provider_tiering.core.planner import CursorDistribution, stride_quantiles
from airflow_provider_tiering.core.ports import LineageDataset, SafeWatermark, VerifyRows
from airflow_provider_tiering.core.shape import HotIdentity
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.sql import SqlSource, cursor_to_json
from airflow_provider_tiering.sources.sql_table import Bindings, Rows, quote_identifier, quote_string

if TYPE_CHECKING:  # pyarrow is imported where used: probing for new rows needs none of it (0.26 s of 0.28 s)
    import pyarrow as pa

BATCH_ROWS = 65_536
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def arrow_type_for_declared(declared: str) -> pa.DataType:
    """Map a declared SQLite column type to Arrow, following SQLite's affinity rules where they apply."""
    import pyarrow as pa

    upper = declared.upper()
    if "TIMESTAMP" in upper or "DATETIME" in upper:
        return pa.timestamp("us")
    if upper.startswith("DATE"):
        return pa.date32()
    if "BOOL" in upper:
        return pa.bool_()
    if "INT" in upper:
        return pa.int64()
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if "BLOB" in upper or not upper:
        return pa.binary()
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    match = _DECIMAL.search(upper)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2) or 0))
    return pa.float64()


class SqliteSource(SqlSource):
    """A table in a SQLite database file (a ``sqlite`` connection's host, or its schema).

    SQLite has one writer at a time, so rows cannot commit out of cursor order between
    transactions; ``settle_lag_seconds`` still applies to timestamp cursors set by clients.
    """

    def __init__(self, spec: SqlSourceSpec, connection: ConnectionInfo) -> None:
        super().__init__(spec)
        path = connection.host or connection.schema
        if not path:
            raise ConnectionNotUsable(
                f"connection {connection.describe()}: a sqlite connection needs the database path as host"
            )
        self.path = path
        self.display_name = f"sqlite table {spec.table}"

    def lineage_dataset(self) -> LineageDataset:
        return LineageDataset(f"sqlite://{Path(self.path).resolve()}", self.spec.table)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: cannot open {self.path}: {exc}") from exc
        return conn

    def _placeholder(self, position: int) -> str:
        return "?"

    def _query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        conn = self._connect()
        try:
            return conn.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: query failed: {exc}") from exc
        finally:
            conn.close()

    def _load_schema(self) -> pa.Schema:
        import pyarrow as pa

        rows = self._query('SELECT name, type, "notnull", pk FROM pragma_table_info(?)', (self.spec.table,))
        if not rows:
            raise SourceError(f"{self.display_name} does not exist in {self.path}")
        return pa.schema(
            [
                pa.field(name, arrow_type_for_declared(declared or ""), nullable=not notnull and not pk)
                for name, declared, notnull, pk in rows
            ]
        )

    def _read_identity(self) -> HotIdentity:
        """SQLite keeps no id of a table or column that survives what replaces one (a dropped and re-created table
        often gets its root page back, and VACUUM moves root pages); its schema version changes with every DDL and
        VACUUM in the database, which is when a table may have been replaced: the round then checks its rows."""
        ((version,),) = self._query("PRAGMA schema_version")
        return HotIdentity(storage=f"schema version {version}")

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns in key order; () when it has none."""
        rows = self._query("SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", (self.spec.table,))
        return tuple(str(name) for (name,) in rows)

    def _string_cursor_allowed(self) -> bool:
        return True

    def _cursor_literal(self, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SourceError(f"{self.display_name}: offset {value!r} is not a valid cursor value")
        return str(value) if isinstance(value, int) else quote_string(value)

    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        self.check_cursor_not_null()
        lower = cursor_of(committed)
        bindings = self.bindings()
        predicate = self.range_predicate(lower, None, bindings.bind_cursor)
        lag = self.settle_lag()
        if lag:
            settled = (datetime.now(UTC) - timedelta(seconds=lag)).strftime("%Y-%m-%d %H:%M:%S.%f")
            predicate += f" AND {self.cursor_ref} <= {bindings.bind(settled)}"
        sql = f"SELECT max({self.cursor_ref}) FROM {self.table_ref} WHERE {predicate}"
        (high,) = self._query(sql, bindings.values)[0]
        if high is None:
            return SafeWatermark(end=None, observed=None)
        observed: Offsets = {"cursor": cursor_to_json(high)}
        return SafeWatermark(end=observed, observed=observed)

    def _distribution(self, lower: Any | None, upper: Any) -> CursorDistribution:
        conn = self._connect()
        bindings = self.bindings()
        predicate = self.range_predicate(lower, upper, bindings.bind_cursor)
        try:
            values = [
                row[0]
                for row in conn.execute(
                    f"SELECT {self.cursor_ref} FROM {self.table_ref} WHERE {predicate} ORDER BY {self.cursor_ref}",
                    tuple(bindings.values),
                )
            ]
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: planning the round failed: {exc}") from exc
        finally:
            conn.close()
        return CursorDistribution(lower, upper, len(values), stride_quantiles(values))

    @property
    def table_ref(self) -> str:
        return quote_identifier(self.spec.table)

    def _execute_arrow(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        conn = self._connect()
        try:
            yield from self._batches(conn, sql, (), schema)
        finally:
            conn.close()

    def _batches(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any], schema: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        try:
            cur = conn.execute(sql, tuple(params))
            while rows := cur.fetchmany(BATCH_ROWS):
                columns = list(zip(*rows))
                try:
                    arrays = [self._to_arrow(values, field) for values, field in zip(columns, schema)]
                except SourceError as exc:
                    raise SourceError(f"{self.display_name}: {exc}") from exc
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: reading failed: {exc}") from exc

    def _age_before(self, column: str, field: pa.Field[Any], cutoff: datetime, bindings: Bindings) -> str:
        # SQLite keeps times as text: datetime() normalizes both sides ('T' or ' ', fractions) before comparing.
        naive = cutoff.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
        return f"datetime({column}) < datetime({bindings.bind(naive)})"

    def _row_id_sql(self) -> str:
        return "rowid AS __row_id"

    @contextmanager
    def evicting(self) -> Iterator[None]:
        self._refuse_reusable_rowid_cursor()
        with super().evicting():
            yield

    def _refuse_reusable_rowid_cursor(self) -> None:
        """Refuse eviction when the cursor is the table's rowid without AUTOINCREMENT: SQLite gives a new row
        ``max(rowid) + 1``, so once eviction has deleted the newest rows, new rows would reuse ids at or below the
        committed offset and no round would read them."""
        rows = self._query(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
            (self.spec.table,),
        )
        create_sql = str(rows[0][0]) if rows else ""
        if re.search(r"\bAUTOINCREMENT\b", create_sql, re.IGNORECASE) or re.search(
            r"\bWITHOUT\s+ROWID\s*$", create_sql, re.IGNORECASE
        ):
            return
        key = [
            (name, declared)
            for _, name, declared, _, _, pk in self._query(f"PRAGMA table_info({self.table_ref})")
            if pk
        ]
        if len(key) == 1 and key[0][0] == self.spec.cursor_column and str(key[0][1]).upper() == "INTEGER":
            raise SourceError(
                f"{self.display_name}: eviction refused: cursor column {self.spec.cursor_column!r} is the table's "
                "rowid (INTEGER PRIMARY KEY without AUTOINCREMENT), which SQLite reuses: once eviction deleted the "
                "newest rows, new rows would get ids at or below the lake's committed offset and never be tiered. "
                "Declare it INTEGER PRIMARY KEY AUTOINCREMENT (rebuild the table), or tier by a timestamp cursor"
            )

    def _evict_in_transaction(
        self, select_sql: str, params: Sequence[Any], schema: pa.Schema, verify: VerifyRows
    ) -> int:
        import pyarrow as pa

        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # writable, unlike _connect
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: cannot open {self.path}: {exc}") from exc
        try:
            conn.execute("BEGIN IMMEDIATE")  # the database's write lock: nothing changes until COMMIT
            try:
                with_id = pa.schema([pa.field("__row_id", pa.int64()), *schema])
                found = pa.Table.from_batches(list(self._batches(conn, select_sql, params, with_id)), schema=with_id)
                rows = found.drop_columns(["__row_id"])
                verify(rows)
                if rows.num_rows:
                    row_ids = [(int(v),) for v in found.column("__row_id").to_pylist() if v is not None]
                    conn.executemany(f"DELETE FROM {self.table_ref} WHERE rowid = ?", row_ids)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return rows.num_rows
        except sqlite3.Error as exc:
            raise SourceError(f"{self.display_name}: evicting tiered rows failed: {exc}") from exc
        finally:
            conn.close()

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[[str, Sequence[Any], pa.Schema], Iterator[pa.RecordBatch]]]:
        conn = self._connect()
        conn.isolation_level = None  # transactions by hand
        try:
            try:
                # A read transaction: its first read fixes what it sees (a WAL snapshot, or a shared lock that
                # holds writers off until it ends).
                conn.execute("BEGIN")
                conn.execute(f"SELECT 1 FROM {self.table_ref} LIMIT 1").fetchall()
            except sqlite3.Error as exc:
                raise SourceError(f"{self.display_name}: cannot start a read transaction: {exc}") from exc
            yield lambda sql, params, schema: self._batches(conn, sql, params, schema)
            conn.execute("COMMIT")
        finally:
            conn.close()

    @staticmethod
    def _to_arrow(values: tuple[Any, ...], field: pa.Field[Any]) -> pa.Array[Any]:
        import pyarrow as pa

        target = field.type
        try:
            if pa.types.is_timestamp(target) or pa.types.is_date(target):
                # SQLite keeps times as ISO text; Arrow parses ISO-8601 in its cast.
                raw = pa.array([None if v is None else str(v).replace("T", " ") for v in values], pa.string())
                if pa.types.is_date(target):
                    return raw.cast(pa.timestamp("us")).cast(target)
                return raw.cast(target)
            if pa.types.is_decimal(target):
                return pa.array([None if v is None else str(v) for v in values], pa.string()).cast(target)
            return pa.array(values, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SourceError(f"column {field.name!r}: cannot convert SQLite values to {target}: {exc}") from exc
