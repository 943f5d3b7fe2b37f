"""What every SQL hot store read by a cursor shares: a table (``sql_table.py``) read incrementally by a monotonic
cursor column.

Splits are ``(lower, upper]`` cursor ranges (``core/planner.py``). A dialect (``postgres/cursor_source.py``,
``sqlite.py``, ``mysql/cursor_source.py``) supplies, beside the table's hooks, its cursor literals, distribution, safe
watermark, and a round's consistent read. Values are bound as parameters, except in the statement that reads a split,
where a dialect may inline the cursor bounds as typed literals (the bounds are offsets this package wrote, never user
input): PostgreSQL streams a query as binary COPY only without parameters.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, ClassVar, final

from pydantic import JsonValue, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict below Python 3.12

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import CursorValue, Offsets, SafeEnd, cursor_after, cursor_of, cursor_offsets
from airflow_provider_tiering.core.planner import CursorDistribution, RangePlan, RangeSplit, cut_splits, plan_range
from airflow_provider_tiering.core.ports import (
    BehindLook,
    EvictionSource,
    MergeKey,
    RejectedRecord,
    RoundRead,
    SafeWatermark,
    Source,
    SplitReader,
    TieredSample,
    TiersReader,
    VerifyRows,
    WatermarkBlocker,
)
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.sources.sql_table import Bindings, RunInTransaction, SqlTable

if TYPE_CHECKING:  # pyarrow is imported where used: probing for new rows needs none of it (0.26 s of 0.28 s)
    import pyarrow as pa


@dataclass(frozen=True)
class RoundTransaction:
    """A reconciling round's open transaction (``SqlSource._round_transaction``)."""

    #: Runs a query in it: the round's keys are read with it.
    run: RunInTransaction
    #: What reads the round's splits in its snapshot wherever they run (PostgreSQL's imported snapshot); None when
    #: only a split read in this process, through ``run``, can.
    reader: SplitReader[RangeSplit] | None = None


@contextmanager
def _in_transaction_only(transaction: AbstractContextManager[RunInTransaction]) -> Iterator[RoundTransaction]:
    with transaction as run:
        yield RoundTransaction(run)


def cursor_to_json(value: object) -> CursorValue:
    """Cursor values are kept JSON-native: ints stay ints, times become fixed-format ISO strings."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.isoformat(timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    raise SourceError(f"cursor value {value!r} of type {type(value).__name__} cannot be used as an offset")


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction the watermark waits for: ``key`` identifies it across looks (a transaction id)."""

    key: tuple[Any, ...]
    pid: int | None
    started: datetime | None
    age_seconds: float | None
    prepared: str | None = None

    def blocker(self) -> WatermarkBlocker:
        started = None if self.started is None else self.started.isoformat()
        return WatermarkBlocker(self.pid, started, self.age_seconds, self.prepared)


class SqlSource(SqlTable, Source[RangePlan, RangeSplit], EvictionSource):
    """A table read incrementally by a monotonic cursor column."""

    #: How long the watermark sleeps between looks at the transactions it waits for.
    WATERMARK_POLL_SECONDS = 0.2
    #: Whether separate connections (one per split, in Spark tasks) can read one snapshot; see ``cut_splits``.
    shares_snapshot_across_connections: ClassVar[bool] = False

    #: The hot table holds rows the lake has too, or has evicted: a read across tiers needs both.
    holds_every_row = False

    spec: SqlSourceSpec

    def __init__(self, spec: SqlSourceSpec) -> None:
        super().__init__(spec)
        self._key: MergeKey | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._key = None

    # -- dialect hooks -------------------------------------------------------------------------
    def _cast_cursor(self, placeholder: str) -> str:
        """A bound cursor value as the cursor column's type (for drivers that bind every string as text)."""
        return placeholder

    @abstractmethod
    def _cursor_literal(self, value: Any) -> str:
        """Render a JSON-native cursor value as an SQL literal of the cursor column's type (split reads only)."""

    @abstractmethod
    def _distribution(self, lower: Any | None, upper: Any) -> CursorDistribution:
        """Row count and cursor quantiles in ``(lower, upper]``."""

    def _string_cursor_allowed(self) -> bool:
        return False

    # -- the cursor ----------------------------------------------------------------------------
    def bindings(self) -> Bindings:
        return Bindings(self._placeholder, self._cast_cursor)

    @property
    def cursor_ref(self) -> str:
        return self.quote(self.spec.cursor_column)

    def _columns_to_read(self) -> tuple[str, ...] | None:
        columns = self.spec.columns
        return None if columns is None else (*columns, self.spec.cursor_column)

    def _required_columns(self) -> tuple[str, ...]:
        return (self.spec.cursor_column,)

    def _check_columns(self, full: pa.Schema) -> None:
        import pyarrow as pa

        cursor_type = full.field(self.spec.cursor_column).type
        if not (
            pa.types.is_integer(cursor_type)
            or pa.types.is_timestamp(cursor_type)
            or pa.types.is_date(cursor_type)
            or (pa.types.is_string(cursor_type) and self._string_cursor_allowed())
        ):
            raise SourceError(
                f"{self.display_name}: cursor column {self.spec.cursor_column!r} has type {cursor_type}; "
                "an integer, date or timestamp column is needed"
            )

    def _rows_upto(self, tiered: Offsets | None, bindings: Bindings) -> str:
        return self.range_predicate(None, cursor_of(tiered), bindings.bind_cursor)

    def _rows_after(self, offsets: Offsets | None, bindings: Bindings) -> str:
        return self.range_predicate(cursor_of(offsets), None, bindings.bind_cursor)

    def range_predicate(self, lower: Any | None, upper: Any | None, value: Callable[[Any], str]) -> str:
        """``lower < cursor <= upper`` (either bound may be None), each bound rendered by ``value``: a bound
        parameter (``Bindings.bind_cursor``) or, for split reads, a literal (``_cursor_literal``)."""
        parts = []
        if lower is not None:
            parts.append(f"{self.cursor_ref} > {value(lower)}")
        if upper is not None:
            parts.append(f"{self.cursor_ref} <= {value(upper)}")
        return " AND ".join(parts) if parts else "1 = 1"

    def select_split_sql(self, split: RangeSplit, schema: pa.Schema) -> str:
        columns = ", ".join(self.select_expression(field) for field in schema)
        predicate = self.range_predicate(split.lower, split.upper, self._cursor_literal)
        return f"SELECT {columns} FROM {self.table_ref} WHERE {predicate}"

    def has_rows_after(self, committed: Offsets | None) -> bool:
        # Rows with a NULL cursor count too: the round then fails on them (check_cursor_not_null) instead of the
        # table being skipped as idle while they sit there.
        lower = cursor_of(committed)
        bindings = self.bindings()
        predicate = f"({self.range_predicate(lower, None, bindings.bind_cursor)}) OR {self.cursor_ref} IS NULL"
        return bool(self._query(f"SELECT 1 FROM {self.table_ref} WHERE {predicate} LIMIT 1", bindings.values))

    def look_behind(self, committed: Offsets | None, emptied: JsonObject | None) -> BehindLook:
        """See ``Source.look_behind``. ``emptied`` is ``{"after": newest cursor left (None: the table was empty),
        "through": the committed cursor then}``. Costs one index probe while the newest row is at or beyond the
        committed cursor, plus a count of the rows in the emptied stretch while one is watched."""
        if committed is None:
            return BehindLook()
        through = cursor_of(committed) if emptied is None else emptied["through"]
        if emptied is not None:
            after = emptied["after"]
            bindings = self.bindings()
            predicate = self.range_predicate(after, through, bindings.bind_cursor)
            ((arrived,),) = self._query(f"SELECT count(*) FROM {self.table_ref} WHERE {predicate}", bindings.values)
            if arrived:
                column = self.spec.cursor_column
                where = f"{column} <= {through!r}" if after is None else f"{after!r} < {column} <= {through!r}"
                return BehindLook(int(arrived), emptied, where)
        bindings = self.bindings()
        beyond = f"{self.cursor_ref} >= {bindings.bind_cursor(through)}"
        if self._query(f"SELECT 1 FROM {self.table_ref} WHERE {beyond} LIMIT 1", bindings.values):
            return BehindLook()  # rows at or beyond the stretch again: no sequence or rowid hands out values in it
        ((newest,),) = self._query(f"SELECT max({self.cursor_ref}) FROM {self.table_ref}")
        left = None if newest is None else cursor_to_json(newest)
        return BehindLook(0, {"after": left, "through": through})

    def check_cursor_not_null(self) -> None:
        """Raise SourceError if any row has a NULL cursor: no cursor range holds it, so it could never be tiered,
        and tiering the other rows would lose it silently. Free for a NOT NULL cursor column."""
        if not self.schema().field(self.spec.cursor_column).nullable:
            return
        ((nulls,),) = self._query(f"SELECT count(*) FROM {self.table_ref} WHERE {self.cursor_ref} IS NULL")
        if nulls:
            raise SourceError(
                f"{self.display_name}: {nulls} row(s) have a NULL in cursor column {self.spec.cursor_column!r}; "
                "such rows are in no cursor range and can never be tiered: give them a cursor value (and make "
                "the column NOT NULL); nothing was tiered"
            )

    def settle_lag(self) -> float:
        """``settle_lag_seconds``, which only a time cursor can honour (its rows carry their age); set on an integer
        cursor it would be ignored, so the round fails instead."""
        import pyarrow as pa

        lag = self.spec.settle_lag_seconds
        cursor_type = self.schema().field(self.spec.cursor_column).type
        if lag and not (pa.types.is_timestamp(cursor_type) or pa.types.is_date(cursor_type)):
            raise SourceError(
                f"{self.display_name}: settle_lag_seconds applies to timestamp and date cursors; "
                f"{self.spec.cursor_column!r} is {cursor_type}. Remove it from the spec: rows of an integer cursor "
                "are waited for through the transactions writing them"
            )
        return lag

    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> RangePlan:
        lower = cursor_of(start)
        upper = cursor_offsets(end)["cursor"]
        if lower is not None and not cursor_after(upper, lower):
            return RangePlan(lower, lower, 0, capped=False)
        return plan_range(self._distribution(lower, upper), max_rows)

    def cut_splits(self, plan: RangePlan, target_rows_per_split: int, parallelism: int) -> list[RangeSplit]:
        if self.spec.consistent_snapshot and not self.shares_snapshot_across_connections:
            # One statement reads one snapshot: where connections cannot share one, the round is one split.
            return cut_splits(plan, max(target_rows_per_split, plan.estimated_rows), 1)
        return cut_splits(plan, target_rows_per_split, parallelism)

    def end_offsets(self, plan: RangePlan) -> Offsets:
        return {"cursor": plan.upper}

    def read_split(self, split: RangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        return self.conformed(self._execute_arrow(self.select_split_sql(split, schema), schema), schema)

    # -- the round's one snapshot, and its keys when it reconciles -------------------------------
    def bind_key(self, key: MergeKey) -> None:
        self._key = key

    def _shared_snapshot(self, splits: Sequence[RangeSplit]) -> AbstractContextManager[SplitReader[RangeSplit]]:
        """What lets separate connections read ``splits`` in one snapshot (see ``cut_splits``), and what reads them
        in it, held while they are read; here nothing: the source reads each split itself."""
        return nullcontext(self)

    def _round_transaction(self, splits: Sequence[RangeSplit]) -> AbstractContextManager[RoundTransaction]:
        """A reconciling round's transaction, open while its splits are read: its keys are read in it, and so
        is its split when read in this process (the dialect's consistent read, ``_snapshot``)."""
        return _in_transaction_only(self._snapshot())

    @contextmanager
    def reading_one_snapshot(
        self, plan: RangePlan | None, splits: Sequence[RangeSplit], *, read_here: bool = False, with_keys: bool = False
    ) -> Iterator[RoundRead[RangeSplit]]:
        """One snapshot for the round's splits; a reconciling round (``with_keys``) also reads every key of the
        table in it, before any split (``RoundRead.keys``).

        PostgreSQL exports the transaction's snapshot and every split reader imports it, wherever it runs. SQLite
        and MariaDB read a round as one split: read ``read_here`` (in this process, the local writer), it runs in
        the very transaction the keys were read in. Read in a Spark task, on a connection of its own, it reads a
        later moment: the keys' transaction ends first (a SQLite shared lock held across another connection's read
        would deadlock with a waiting writer). That is safe: every commit after the safe watermark that changes a
        row gives it a cursor beyond the round, so the rows the split reads at or below the watermark were there,
        with those keys, when the keys were read; a key deleted in between stays in the lake until the next
        reconciliation; and the merge never removes a key among the round's own rows."""
        if not with_keys:
            with self._shared_snapshot(splits) as reader:
                yield RoundRead(reader)
            return
        with self._round_transaction(splits) as transaction:
            keys = self._read_keys(transaction.run)
            if transaction.reader is not None or read_here:
                yield RoundRead(transaction.reader or _InTransaction(self, transaction.run), keys)
                return
        yield RoundRead(self, keys)

    def _read_keys(self, run: RunInTransaction) -> pa.Table:
        import pyarrow as pa

        from airflow_provider_tiering.sources.conform import conform_batch

        if self._key is None:
            raise SourceError(f"{self.display_name}: the keys are read for a table merged by key only")
        schema = self.schema()
        key_schema = pa.schema([schema.field(c) for c in self._key.columns])
        columns = ", ".join(self.select_expression(f) for f in key_schema)
        batches = [conform_batch(b, key_schema) for b in run(f"SELECT {columns} FROM {self.table_ref}", (), key_schema)]
        return pa.Table.from_batches(batches, schema=key_schema)

    # -- the hot table's shape (``core/follow_shape.py``) ------------------------------------------
    def tiered_sample(self, tiered: Offsets) -> TieredSample | None:
        """The rows at the greatest cursor value at or below ``tiered`` and the count of rows there, in one
        snapshot: two index probes and a count of the tiered range."""
        import pyarrow as pa

        from airflow_provider_tiering.sources.conform import conform_batch

        schema = self.schema()
        bindings = self.bindings()
        upto = self.range_predicate(None, cursor_of(tiered), bindings.bind_cursor)
        with self._snapshot() as run:
            counted = run(
                f"SELECT count(*) AS n FROM {self.table_ref} WHERE {upto}",
                bindings.values,
                pa.schema([pa.field("n", pa.int64())]),
            )
            count = sum(int(b.column(0)[0].as_py() or 0) for b in counted if b.num_rows)
            if count == 0:
                return TieredSample(self.spec.cursor_column, None, None, 0)
            columns = ", ".join(self.select_expression(f) for f in schema)
            newest = f"(SELECT max({self.cursor_ref}) FROM {self.table_ref} WHERE {upto})"
            batches = [
                conform_batch(b, schema)
                for b in run(
                    f"SELECT {columns} FROM {self.table_ref} WHERE {self.cursor_ref} = {newest}",
                    bindings.values,
                    schema,
                )
            ]
        rows = pa.Table.from_batches(batches, schema=schema)
        cursor = cursor_to_json(rows.column(self.spec.cursor_column)[0].as_py()) if rows.num_rows else None
        return TieredSample(self.spec.cursor_column, cursor, rows, count)

    def tiered_column_values(self, columns: Sequence[str], tiered: Offsets) -> pa.Table | None:
        import pyarrow as pa

        from airflow_provider_tiering.sources.conform import conform_batch

        schema = pa.schema([self.schema().field(c) for c in columns])
        bindings = self.bindings()
        predicate = self.range_predicate(None, cursor_of(tiered), bindings.bind_cursor)
        select = ", ".join(self.select_expression(f) for f in schema)
        with self._snapshot() as run:
            batches = [
                conform_batch(b, schema)
                for b in run(f"SELECT {select} FROM {self.table_ref} WHERE {predicate}", bindings.values, schema)
            ]
        return pa.Table.from_batches(batches, schema=schema)

    # -- safe watermark, for dialects with a view of open transactions -------------------------
    def _watermark_waiting_for_transactions(
        self,
        high: Any,
        committed: Offsets | None,
        candidate: JsonObject | None,
        open_transactions: Callable[[], list[OpenTransaction]],
        method: str,
    ) -> SafeWatermark:
        """Tier only up to a watermark that no open transaction can still commit below.

        ``high`` is the high watermark, and ``open_transactions()`` the transactions, open when it was read, that
        may still commit a smaller cursor value (a sequence value taken early, ``now()`` of an old transaction).
        The round waits, up to ``max_watermark_wait_seconds``, for them to end. If they do not, the round tiers up
        to an earlier observation whose blockers have all ended since (``candidate``, kept only if it was made by
        the same ``method``), or not at all, and reports the blockers.
        """
        lower = cursor_of(committed)
        observed: Offsets = {"cursor": cursor_to_json(high)}
        deadline = time.monotonic() + self.spec.max_watermark_wait_seconds
        blockers = open_transactions()
        keys = {b.key for b in blockers}
        while keys and time.monotonic() < deadline:
            time.sleep(self.WATERMARK_POLL_SECONDS)
            blockers = [b for b in open_transactions() if b.key in keys]
            keys = {b.key for b in blockers}
        if not blockers:
            return SafeWatermark(end=observed, observed=observed)
        still_open = {tuple(_candidate_key(b.key)) for b in open_transactions()}
        new_candidate = _Candidate(offsets=observed, blockers=[_candidate_key(b.key) for b in blockers], method=method)
        safe: Offsets | None = None
        kept = _read_candidate(candidate)
        if kept and kept["method"] == method and not any(tuple(b) in still_open for b in kept["blockers"]):
            kept_cursor = cursor_offsets(kept["offsets"])["cursor"]
            if lower is None or cursor_after(kept_cursor, lower):
                safe = kept["offsets"]
        return SafeWatermark(
            end=safe,
            observed=observed,
            blockers=[b.blocker() for b in blockers],
            candidate=_CANDIDATES.dump_python(new_candidate, mode="json"),
        )

    # -- eviction of tiered rows ----------------------------------------------------------------------
    def evictor(self) -> EvictionSource:
        return self

    def tiers_reader(self) -> TiersReader:
        return self

    @abstractmethod
    def _evict_in_transaction(
        self, select_sql: str, params: Sequence[Any], schema: pa.Schema, verify: VerifyRows
    ) -> int:
        """In one transaction: read the rows of ``select_sql`` (its first column a row id, locked against change),
        hand them (without the row id, as ``schema``) to ``verify``, which raises to roll back, then delete exactly
        those rows. Returns the rows deleted."""

    def evict_batch(
        self,
        after: CursorValue | None,
        upto: CursorValue,
        cutoff: datetime,
        age_column: str | None,
        limit: int,
        verify: VerifyRows,
    ) -> tuple[int, CursorValue | None]:
        field = self._age_field(age_column or self.spec.cursor_column)
        schema = self.schema()
        columns = ", ".join(self.select_expression(f) for f in schema)
        bindings = self.bindings()
        predicate = self.range_predicate(after, upto, bindings.bind_cursor)
        age = self._age_before(self.quote(field.name), field, cutoff, bindings)
        order = f"ORDER BY {self.cursor_ref} LIMIT {bindings.bind(int(limit))}"
        select = f"SELECT {self._row_id_sql()}, {columns} FROM {self.table_ref} WHERE {predicate} AND {age} {order}"
        last: list[Any] = []

        def check(rows: pa.Table) -> None:
            if rows.num_rows:
                last.append(rows.column(self.spec.cursor_column)[-1].as_py())
                verify(rows)

        deleted = self._evict_in_transaction(select, bindings.values, schema, check)
        return deleted, cursor_to_json(last[0]) if last else None


@final
class _Candidate(TypedDict):
    """A watermark observation kept until its blockers end (``SafeWatermark.candidate``), as the state keeps it."""

    offsets: Offsets
    blockers: list[list[JsonValue]]
    #: How the blockers were found: a candidate another method made is not trusted.
    method: str


_CANDIDATES = TypeAdapter(_Candidate)


def _read_candidate(candidate: JsonObject | None) -> _Candidate | None:
    """The candidate an earlier round kept; None when there is none, or it is not one this version reads (a cache:
    losing it only delays)."""
    if candidate is None:
        return None
    try:
        return _CANDIDATES.validate_python(candidate)
    except ValidationError:
        return None


def _candidate_key(key: Sequence[Any]) -> list[JsonValue]:
    """A transaction's key as the state document keeps it (JSON: lists, times as ISO text)."""
    return [value.isoformat() if isinstance(value, datetime) else value for value in key]


class _InTransaction:
    """A SQL table's splits read in its round's open transaction: a reconciling round's, read by this process in the
    snapshot its keys were read in (see ``SqlSource.reading_one_snapshot``). Never pickled: it lives with the
    transaction."""

    def __init__(self, source: SqlSource, run: RunInTransaction) -> None:
        self.source = source
        self.run = run

    @property
    def display_name(self) -> str:
        return self.source.display_name

    def read_split(self, split: RangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        return self.source.conformed(self.run(self.source.select_split_sql(split, schema), (), schema), schema)

    def take_rejects(self) -> list[RejectedRecord]:
        return self.source.take_rejects()
