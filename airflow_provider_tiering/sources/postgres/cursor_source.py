"""A PostgreSQL table read by a cursor (``table.py`` for the table itself): a safe watermark from open transactions'
locks, cursor ranges planned from quantiles, and every split of a round read in one exported snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import Offsets, cursor_of
from airflow_provider_tiering.core.planner import QUANTILE_FRACTIONS, CursorDistribution, RangeSplit
from airflow_provider_tiering.core.ports import RejectedRecord, SafeWatermark, SplitReader
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.postgres.table import APPLICATION_NAME, PostgresTable
from airflow_provider_tiering.sources.sql import OpenTransaction, RoundTransaction, SqlSource, cursor_to_json
from airflow_provider_tiering.sources.sql_table import RunInTransaction, quote_string

#: Above this many rows in a range, quantiles come from a block sample instead of a full sort.
EXACT_QUANTILE_MAX_ROWS = 2_000_000
SAMPLE_TARGET_ROWS = 200_000
_TIME_CURSOR_TYPES = ("timestamp with time zone", "timestamp without time zone", "date")


class PostgresSource(PostgresTable, SqlSource):
    """A PostgreSQL table read by a cursor, reached with the fields of a ``postgres`` connection."""

    shares_snapshot_across_connections = True
    spec: SqlSourceSpec

    def __init__(self, spec: SqlSourceSpec, connection: ConnectionInfo) -> None:
        super().__init__(spec, connection)
        #: The cursor column's type as ``information_schema`` names it (filled with the schema).
        self._cursor_sql_type: str | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._cursor_sql_type = None

    def _load_schema(self) -> pa.Schema:
        found = super()._load_schema()
        if self.spec.cursor_column in self._columns:
            self._cursor_sql_type = self._columns[self.spec.cursor_column][0].data_type
        return found

    def _cast_cursor(self, placeholder: str) -> str:
        # ADBC binds a Python str as text, which PostgreSQL does not compare with a timestamp or date column.
        self.schema()
        return (
            placeholder
            if self._cursor_sql_type in ("bigint", "integer", "smallint")
            else (f"CAST({placeholder} AS {self._cursor_sql_type})")
        )

    def _cursor_literal(self, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SourceError(f"{self.display_name}: offset {value!r} is not a valid cursor value")
        if isinstance(value, int):
            return str(value)
        self.schema()
        return f"CAST({quote_string(value)} AS {self._cursor_sql_type})"

    # -- safe watermark ------------------------------------------------------------------------
    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """Tier only up to a watermark that no open transaction can still commit below (see
        ``SqlSource._watermark_waiting_for_transactions``).

        Integer cursors: the transactions waited for are those holding a lock that lets them write this table (or
        one of its partitions) when the high watermark has been read. An INSERT, UPDATE, DELETE, COPY or MERGE
        takes it before it takes a value from the column's sequence and keeps it until the transaction ends,
        prepared transactions included. ``pg_locks`` shows these locks to every role, so this needs no grant, and
        a session that only read the table, or wrote another one, never holds it back.

        Time cursors (``timestamp``, ``date``): a transaction's ``now()`` is its start, so any transaction open
        since before the read may still insert a smaller value, even one that has not touched the table yet. They
        are waited for too, which needs their start times: ``pg_stat_activity`` shows other roles' only to members
        of ``pg_read_all_stats``, and without it the round fails naming the grant. Times an application assigns
        itself are covered by ``settle_lag_seconds``: only rows at least that old are tiered."""
        self.check_cursor_not_null()
        lower = cursor_of(committed)
        bindings = self.bindings()
        conditions = [] if lower is None else [self.range_predicate(lower, None, bindings.bind_cursor)]
        time_cursor = self._cursor_sql_type in _TIME_CURSOR_TYPES
        lag = self.settle_lag()
        if lag:
            now = "clock_timestamp()"
            if self._cursor_sql_type != "timestamp with time zone":
                now = "(clock_timestamp() AT TIME ZONE 'UTC')"  # naive cursors hold UTC times
            conditions.append(f"{self.cursor_ref} <= {now} - make_interval(secs => {bindings.bind(float(lag))})")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        with self._query_connection() as conn, conn.cursor() as cur:
            try:
                if time_cursor:
                    self._check_sees_transaction_starts(cur)
                cur.execute(
                    f"SELECT max({self.cursor_ref}), clock_timestamp() FROM {self.table_ref}{where}",
                    tuple(bindings.values) or None,
                )
                high, observed_at = cur.fetchone()
                if high is None:
                    return SafeWatermark(end=None, observed=None)

                # Read after the high watermark: a transaction that took a smaller cursor value before it was read
                # and has not committed still holds its lock (and its start) now.
                def blockers() -> list[OpenTransaction]:
                    writing = self._writing_transactions(cur)
                    if not time_cursor:
                        return writing
                    seen = {t.key for t in writing}
                    return writing + [t for t in self._transactions_started(cur, observed_at) if t.key not in seen]

                return self._watermark_waiting_for_transactions(
                    high, committed, candidate, blockers, method="pg_locks+activity" if time_cursor else "pg_locks"
                )
            except SourceError:
                raise
            except Exception as exc:
                raise SourceError(f"{self.display_name}: reading the high watermark failed: {exc}") from exc

    def _writing_transactions(self, cur: Any) -> list[OpenTransaction]:
        """Transactions of other sessions (and prepared ones) holding a lock on the table, or on a partition of it,
        that lets them write rows; with their start where ``pg_stat_activity`` shows it to this role."""
        cur.execute(
            "SELECT DISTINCT ON (l.virtualtransaction) l.virtualtransaction, l.pid, p.gid, "
            "coalesce(p.prepared, a.xact_start), "
            "EXTRACT(EPOCH FROM clock_timestamp() - coalesce(p.prepared, a.xact_start))::float8 "
            "FROM pg_locks l "
            "LEFT JOIN pg_locks x ON x.locktype = 'transactionid' AND x.virtualtransaction = l.virtualtransaction "
            "LEFT JOIN pg_prepared_xacts p ON p.transaction = x.transactionid "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'relation' AND l.pid IS DISTINCT FROM pg_backend_pid() "
            "AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock') "
            "AND (l.relation = CAST($1 AS regclass) "
            "OR l.relation IN (SELECT relid FROM pg_partition_tree(CAST($1 AS regclass))))",
            (self._qualified_name(),),
        )
        return [
            OpenTransaction((str(vxid),), None if pid is None else int(pid), start, age, gid)
            for vxid, pid, gid, start, age in cur.fetchall()
        ]

    @staticmethod
    def _transactions_started(cur: Any, started_before: datetime) -> list[OpenTransaction]:
        """Client transactions of this database, other than this package's readers, open since before the read."""
        cur.execute(
            "SELECT l.virtualtransaction, a.pid, a.xact_start, "
            "EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8 "
            "FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'virtualxid' "
            "AND l.mode = 'ExclusiveLock' "
            "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() "
            "AND a.backend_type = 'client backend' AND a.xact_start IS NOT NULL "
            "AND a.application_name IS DISTINCT FROM $1 AND a.xact_start <= $2",
            (APPLICATION_NAME, started_before),
        )
        return [OpenTransaction((str(vxid),), int(pid), start, float(age)) for vxid, pid, start, age in cur.fetchall()]

    def _check_sees_transaction_starts(self, cur: Any) -> None:
        cur.execute("SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')")
        if not cur.fetchone()[0]:
            raise SourceError(
                f"{self.display_name}: the safe watermark of a time cursor ({self.spec.cursor_column}) waits for "
                f"every transaction open since before it was read, whose start times this role may not see: "
                f"GRANT pg_read_all_stats TO the connection's user. Without it a row committed below the cursor "
                f"could be lost; nothing was tiered"
            )

    # -- planning ------------------------------------------------------------------------------
    def _distribution(self, lower: Any | None, upper: Any) -> CursorDistribution:
        with self._query_connection() as conn, conn.cursor() as cur:
            try:
                count = self.bindings()
                predicate = self.range_predicate(lower, upper, count.bind_cursor)
                cur.execute(f"SELECT count(*) FROM {self.table_ref} WHERE {predicate}", tuple(count.values))
                rows = int(cur.fetchone()[0])
                if rows == 0:
                    return CursorDistribution(lower, upper, 0)
                quantiles = None
                if rows > EXACT_QUANTILE_MAX_ROWS:
                    percent = min(100.0, 100.0 * SAMPLE_TARGET_ROWS / rows)
                    quantiles = self._quantiles(cur, lower, upper, sample_percent=percent)
                if not quantiles:
                    cur.execute("SET work_mem = '256MB'")
                    quantiles = self._quantiles(cur, lower, upper)
                    cur.execute("RESET work_mem")  # the connection may be kept for the round's next queries
            except Exception as exc:
                raise SourceError(f"{self.display_name}: planning the round failed: {exc}") from exc
        values = [cursor_to_json(v) for v in (quantiles or [])]
        return CursorDistribution(lower, upper, rows, values)

    def _quantiles(self, cur: Any, lower: Any | None, upper: Any, sample_percent: float | None = None) -> list[Any]:
        bindings = self.bindings()
        fractions = bindings.bind("{" + ",".join(repr(f) for f in QUANTILE_FRACTIONS) + "}")
        sample = "" if sample_percent is None else f" TABLESAMPLE SYSTEM ({bindings.bind(sample_percent)})"
        predicate = self.range_predicate(lower, upper, bindings.bind_cursor)
        cur.execute(
            f"SELECT percentile_disc(CAST({fractions} AS float8[])) WITHIN GROUP (ORDER BY {self.cursor_ref}) "
            f"FROM {self.table_ref}{sample} WHERE {predicate}",
            tuple(bindings.values),
        )
        found = cur.fetchone()[0]
        return list(found or [])

    # -- the round's one snapshot ----------------------------------------------------------------
    @contextmanager
    def _shared_snapshot(self, splits: Sequence[RangeSplit]) -> Iterator[SplitReader[RangeSplit]]:
        """Export a snapshot that every split reader imports (``SET TRANSACTION SNAPSHOT``), from a transaction
        held open until the splits are read. Taken after the safe watermark, it sees every row up to it.

        One split is one statement, which reads one snapshot by itself. The transaction holds back vacuum of the
        rows it can see for the length of the write, like any long read."""
        if len(splits) < 2 or not self.spec.consistent_snapshot:
            yield self
            return
        with self._exported_snapshot() as (_, reader):
            yield reader

    @contextmanager
    def _round_transaction(self, splits: Sequence[RangeSplit]) -> Iterator[RoundTransaction]:
        # A reconciling round exports its snapshot even for one split: its keys are read in the exporting
        # transaction, and every split reader imports that very snapshot.
        with self._exported_snapshot() as (run, reader):
            yield RoundTransaction(run, reader)

    @contextmanager
    def _exported_snapshot(self) -> Iterator[tuple[RunInTransaction, ImportedSnapshot]]:
        """A repeatable-read transaction whose snapshot split readers import while it is open, wherever they run:
        runs a query in it, and the reader of splits in its snapshot."""
        with self._read_transaction("SELECT pg_export_snapshot()", "cannot export the round's snapshot") as (cur, id_):
            yield self._running_in(cur), ImportedSnapshot(self, str(id_))


@dataclass(frozen=True)
class ImportedSnapshot:
    """A PostgreSQL round's splits, each read in the snapshot the round exported (``SET TRANSACTION SNAPSHOT``)
    while its transaction is open: pickled with its source to the Spark tasks that read them."""

    source: PostgresSource
    snapshot_id: str

    @property
    def display_name(self) -> str:
        return self.source.display_name

    def read_split(self, split: RangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        sql = self.source.select_split_sql(split, schema)
        return self.source.conformed(self.source.read_arrow(sql, self.snapshot_id), schema)

    def take_rejects(self) -> list[RejectedRecord]:
        return self.source.take_rejects()
