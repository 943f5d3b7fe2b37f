"""A table tiered from its database's change stream: the part of every such source that no database owns.

A round of a change stream is the same machine whatever the database. Its first round loads the table from a
snapshot whose log position is known and commits that position as the lake's offsets; every later round reads the
whole transactions committed in ``(the lake's position, the log's end]`` (``reduce.py``), reduces them per key,
types them (in chunks of ``keys_in_memory`` keys, spilled to local disk past that: ``typed_changes.py``) and merges
them into the lake merge-on-read, through the same fenced commit as every round. A round with no change of the table
commits nothing, unless the log other tables wrote since the lake's position grew past a bound: it then commits only
the new position (``ChangePlan.advance``), so the log the table needs does not grow without end. A capped round
leaves a backlog, measured in log bytes and estimated in changes.

What a database adds (:class:`ChangeStreamSource`'s abstract methods): how its log is read between two positions
(turned into ``messages.py``'s messages), how a change's columns are placed among the table's now, how its values
are typed, how the first load is taken and cut into splits, which server settings and privileges it checks, and
where its log stands (positions as integers that order like the log's own; offsets as the lake keeps them).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.core.ports import (
    HeldRows,
    KeyBatch,
    LineageDataset,
    MergeKey,
    RoundRead,
    Source,
    TiersReader,
)
from airflow_provider_tiering.core.shape import AddedValues, ColumnHistory, HotIdentity
from airflow_provider_tiering.sources.change_stream.messages import Begin, Commit, Message, Relation, Truncate
from airflow_provider_tiering.sources.change_stream.plans import ChangePlan, ChangeSplit
from airflow_provider_tiering.sources.change_stream.reduce import (
    ChangeSet,
    ChangeWindow,
    Chunks,
    Key,
    RelationColumns,
    RowVersion,
    apply_changes,
    changes_in_chunks,
)
from airflow_provider_tiering.sources.change_stream.typed_changes import PlannedChanges, TypedChunks

log = logging.getLogger(__name__)

#: An idle table's round moves the lake's position once the log written since it is this large (or a quarter of the
#: stream's bound on the log it may hold, when smaller): an offsets-only snapshot now and then, not one per round.
IDLE_ADVANCE_BYTES = 16 * 1024 * 1024


class StreamTable(Protocol):
    """The hot table behind a change stream, as a bulk reader sees it: its columns, key, identity and reads."""

    def for_round(self) -> Any: ...

    def connected(self) -> AbstractContextManager[None]: ...

    def schema(self) -> pa.Schema: ...

    def primary_key(self) -> tuple[str, ...]: ...

    def identity(self) -> HotIdentity: ...

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues: ...

    def check_shape_unchanged(self) -> None: ...

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None: ...

    def column_values(self, columns: Sequence[str]) -> pa.Table: ...

    def lineage_dataset(self) -> LineageDataset: ...

    def rows_after_reader(self) -> AbstractContextManager[Callable[[Offsets | None], pa.Table]]: ...

    def evicting(self) -> AbstractContextManager[None]: ...

    def evict_key_batch(
        self,
        key: Sequence[str],
        after: tuple[object, ...] | None,
        cutoff: datetime,
        age_column: str,
        limit: int,
        held: HeldRows,
    ) -> KeyBatch: ...


class StreamSpec(Protocol):
    """What the kernel reads of a change stream's spec."""

    @property
    def keys_in_memory(self) -> int: ...


class WholeTableReader:
    """Reads every row of a streamed table in one snapshot (``TiersReader``): a change-stream table holds every live
    row (never evicted), so a read across tiers needs nothing from the lake, and sees deletes and key changes the
    lake has yet to get."""

    holds_every_row = True

    def __init__(self, table: StreamTable) -> None:
        self._table = table

    @contextmanager
    def rows_after_reader(self) -> Iterator[Callable[[Offsets | None], pa.Table]]:
        with self._table.rows_after_reader() as read:
            yield lambda offsets: read(None)  # every row: the offsets (a log position) bound no column


class ChangeStreamSource(Source[ChangePlan, ChangeSplit]):
    """A table read through its database's change stream (see the module's description)."""

    def __init__(self, spec: StreamSpec, connection: ConnectionInfo, table: StreamTable, display_name: str) -> None:
        self.stream_spec = spec
        self.connection = connection
        self.table = table
        self.display_name = display_name
        self.key: tuple[str, ...] | None = None
        #: What the lake knows of former column names and initial defaults (``bind_column_history``).
        self._history = ColumnHistory()
        #: The log this round's plan left for later rounds (its cap), for the status; None before it planned.
        self._backlog_bytes: int | None = None
        #: Keys whose rows this round reads again (``read_again``), as the log carries their key columns.
        self._keys_read_again: tuple[Key, ...] = ()

    def _begin_round(self) -> None:
        super()._begin_round()
        self.table = self.table.for_round()
        self.key, self._history, self._backlog_bytes, self._keys_read_again = None, ColumnHistory(), None, ()

    # -- where the database's log stands ---------------------------------------------------------------------
    @abstractmethod
    def _position(self, offsets: SafeEnd) -> int:
        """The lake's offsets (or a safe end) as a position that orders like the log's.

        Raises:
            OffsetsKindMismatch: the offsets are another kind of source's.
        """

    @abstractmethod
    def _offsets(self, position: int) -> Offsets:
        """A position as the lake keeps it."""

    @abstractmethod
    def describe_position(self, position: int) -> str:
        """A position as the database writes it, for messages."""

    def _safe_end(self, end: SafeEnd) -> tuple[int, int | None]:
        """The end a plan may read to, and the last position at or below it where a transaction may end (a plan
        that finds no change of the table ends there)."""
        position = self._position(end)
        return position, position

    @abstractmethod
    def _log_session(self) -> AbstractContextManager[Any]:
        """A session on the log, held for the reads of one step (a PostgreSQL connection; a binlog's settings)."""

    @abstractmethod
    def _messages(
        self, session: Any, start: int, end: int | None, budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        """The log's messages of the table from ``start`` (the lake's position; transactions ending at or before it
        may come again) up to ``end`` (None: the log's end now), in commit order. ``budget``: about how many
        messages a read needs (a log that can stop early may stop at the first transaction boundary past it)."""

    @abstractmethod
    def _stream_position(self, session: Any, committed: Offsets) -> int:
        """The lake's position, after checking the log still holds every change since it.

        Raises:
            ChangeStreamUnavailable: the log no longer holds the changes after the lake's position.
        """

    @abstractmethod
    def _log_end(self, session: Any) -> int:
        """Where the log ends now (the end of its last whole transaction)."""

    def _log_bytes(self, start: int, end: int) -> int:
        """The log's bytes between two positions."""
        return max(0, end - start)

    def _stop_after(self, start: int) -> int | None:
        """No transaction after the first one ending at or past this position is read in a round (None: no bound
        but ``max_rows_per_round``)."""
        return None

    def _idle_advance_bytes(self) -> int:
        return IDLE_ADVANCE_BYTES

    # -- how the database's changes are placed and typed -----------------------------------------------------
    @abstractmethod
    def _placement(self) -> Callable[[Relation], RelationColumns]:
        """Where each Relation message's columns stand among the table's columns now."""

    @abstractmethod
    def typed(self, rows: dict[Key, RowVersion | None], schema: pa.Schema, chunk: int) -> Iterator[pa.RecordBatch]:
        """A chunk of the change set's rows typed as ``schema``, each with its change columns
        (``typed_changes.with_change_columns``), chunk number ``chunk``. A key whose changes could not be placed
        (``RowVersion.read_again``) is read again from the table as it is now; gone from it, it is deleted."""

    def _skipped_origins(self) -> frozenset[str]:
        """The origins whose transactions the stream skips whole (the tiering's own eviction)."""
        return frozenset()

    #: What makes every change carry the key, for the message of a change that does not.
    key_carried_by = "the log must carry the key of every change"

    def _key_value(self, value: object, kind: pa.DataType) -> Hashable:
        """A key value of Arrow type ``kind`` read from the table, as the log carries it (``read_again``)."""
        return value

    # -- the first load --------------------------------------------------------------------------------------
    @abstractmethod
    def _plan_first_load(self) -> ChangePlan:
        """Take the snapshot the first load reads, and the log position it stands at (the plan's end)."""

    @abstractmethod
    def _cut_first_load(self, plan: ChangePlan, target_rows_per_split: int, parallelism: int) -> list[ChangeSplit]:
        """The first load's splits (``ChangeSplit.load``), of about equal size."""

    @abstractmethod
    def _read_first_load(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """A split of the first load: the table's rows of its part as they were at the plan's end."""

    @abstractmethod
    def _first_load_keys(self, plan: ChangePlan, splits: Sequence[ChangeSplit]) -> pa.Table:
        """Every key of the table as it was at the plan's end (a reload's reconciliation)."""

    # -- what the kernel asks of every source ----------------------------------------------------------------
    def connected(self) -> AbstractContextManager[None]:
        return self.table.connected()  # the catalogue's queries; the log's sessions are its own

    def schema(self) -> pa.Schema:
        return self.table.schema()

    def primary_key(self) -> tuple[str, ...]:
        return self.table.primary_key()

    def bind_key(self, key: MergeKey) -> None:
        self.key = key.columns

    @property
    def merge_key(self) -> tuple[str, ...]:
        return self.key or self.primary_key()

    def secrets(self) -> list[str]:
        return self.connection.secrets()

    def lineage_dataset(self) -> LineageDataset:
        return self.table.lineage_dataset()

    def tiers_reader(self) -> TiersReader:
        return WholeTableReader(self.table)

    # -- the table's shape and identity ----------------------------------------------------------------------
    def identity(self) -> HotIdentity:
        return self.table.identity()

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        # Every row of the table is in the lake (as of its position): all of them count.
        return self.table.added_column_values(column, None, rewritten)

    def check_shape_unchanged(self) -> None:
        self.table.check_shape_unchanged()

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None:
        return self.table.rows_rewritten(horizon, None)  # every row of the table is in the lake

    def truncated_since(self, committed: Offsets) -> bool:
        """Whether a transaction committed after the lake's position truncated the table: the messages are only
        looked at, not applied (their columns may have names the lake's history is yet to map)."""
        with self._log_session() as session:
            start = self._stream_position(session, committed)
            truncated = False
            with self._messages(session, start, None, None) as messages:
                for message in messages:
                    if isinstance(message, Begin):
                        truncated = False
                    elif isinstance(message, Truncate):
                        truncated = True
                    elif isinstance(message, Commit) and truncated and message.end > start:
                        return True
        return False

    def bind_column_history(self, history: ColumnHistory) -> None:
        self._history = history

    def tiered_column_values(self, columns: Sequence[str], tiered: Offsets) -> pa.Table:
        return self.table.column_values(columns)  # every row of the table is in the lake

    def read_again(self, keys: pa.Table) -> bool:
        """The rows of ``keys`` are read again by key with the round's changes, after them (``ChangeWindow``)."""
        kinds = [(f.name, f.type) for f in keys.schema]
        self._keys_read_again = tuple(
            tuple(None if row[c] is None else self._key_value(row[c], kind) for c, kind in kinds)
            for row in keys.to_pylist()
        )
        return True

    def _current_names(self, relation: Relation, current: set[str]) -> tuple[str | None, ...]:
        """The name each column of a Relation message has now, by name, or None for a column whose values no longer
        count (dropped since). A Relation describes the table as it was when the change after it was made: one sent
        before a rename or a drop names columns by their former names, which the lake's history maps. A name the
        table has now is its own; one added while the round ran fails the round later, when its columns are checked
        again before the commit.

        ``current``: the table's columns now.

        Raises:
            ChangeStreamUnavailable: a column neither the table nor the lake knows (renamed more than once, or added
                and dropped, between two rounds): its values cannot be placed.
        """
        former = self._history.former_names
        found: list[str | None] = []
        for name in relation.columns:
            if name in current:
                found.append(name)
            elif name in former:
                found.append(former[name])
            else:
                raise ChangeStreamUnavailable(
                    f"{self.display_name}: a change in its stream carries column {name!r}, which the table no "
                    "longer has and the lake never knew (renamed more than once, or added and dropped, between two "
                    "rounds): its values cannot be placed. Load the table again: drop the lake table, then reset "
                    "the table (the next round takes a new snapshot). Nothing was tiered"
                )
        return tuple(found)

    # -- the log's changes -----------------------------------------------------------------------------------
    def _window(
        self, start: int, end: int | None, stop_after: int | None = None, max_changes: int | None = None
    ) -> ChangeWindow:
        """The changes of transactions committed in ``(start, end]``, keyed, eviction's own skipped."""
        return ChangeWindow(
            self.merge_key, start, end, self._skipped_origins(), self.display_name, self._placement(), stop_after,
            self._keys_read_again, max_changes, self.describe_position, self.key_carried_by,
        )  # fmt: skip

    def _applied(
        self, messages: AbstractContextManager[Iterator[Message]], window: ChangeWindow, spill: bool
    ) -> ChangeSet:
        """``messages`` applied in ``window``. Past ``keys_in_memory`` keys, the rows are typed in chunks as they
        come and kept on local disk with ``spill`` (``ChangeSet.spilled``, :class:`TypedChunks`), else dropped and
        only counted (``ChangeSet.rows_complete``)."""
        chunks = TypedChunks(self, self.schema()) if spill else None
        try:
            with messages as read:
                found = apply_changes(read, window, keys_in_memory=self.stream_spec.keys_in_memory, spill=chunks)
        except BaseException:
            if chunks is not None:
                chunks.close()
            raise
        if chunks is not None and found.spilled is None:
            chunks.close()
        return found

    def _changes(
        self,
        session: Any,
        start: int,
        end: int | None,
        *,
        max_changes: int | None = None,
        stop_after: int | None = None,
        spill: bool = False,
    ) -> ChangeSet:
        """The changes of transactions committed in ``(start, end]``; with ``max_changes``, those of the first
        transactions holding at least that many applied changes (or all there are); with ``stop_after``, none after
        the first transaction ending at or past it."""
        window = self._window(start, end, stop_after, max_changes)
        return self._applied(self._messages(session, start, end, max_changes), window, spill)

    def _change_chunks(self, session: Any, start: int, end: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The changes of transactions committed in ``(start, end]``, typed, in chunks of ``keys_in_memory`` keys
        (numbered from 1: a key's version in a later chunk supersedes its earlier ones)."""
        with self._messages(session, start, end, None) as messages:
            window = self._window(start, end)
            chunks = Chunks(changes_in_chunks(messages, window, keys_per_chunk=self.stream_spec.keys_in_memory))
            number = 0
            for number, rows in enumerate(chunks, start=1):
                yield from self.typed(rows, schema, number)
        counts = chunks.counts
        if not counts.rows_complete:  # never with a plan's end, a boundary: the written chunks are dropped
            raise SourceError(
                f"{self.display_name}: a transaction committed across the round's end {self.describe_position(end)} "
                "(or the log's read ended inside one); the round is retried from the lake's position"
            )
        log.info(
            "%s: %d transactions: %d inserts, %d updates, %d deletes, read in %d chunks", self.display_name,
            counts.transactions, counts.inserted, counts.updated, counts.deleted, number,
        )  # fmt: skip

    def _worth_advancing(self, start: int, end: int) -> bool:
        """Whether the log other tables wrote since the lake's position is worth a round that only moves the
        position: a table idle for long would otherwise need more and more of it."""
        return self._log_bytes(start, end) >= self._idle_advance_bytes()

    def has_rows_after(self, committed: Offsets | None) -> bool:
        if committed is None:
            return True
        with self._log_session() as session:
            start = self._stream_position(session, committed)
            found = self._changes(session, start, None, max_changes=1)
            if found.changes > 0 or found.skipped > 0:
                return True
            return self._worth_advancing(start, self._log_end(session))  # a round that only moves the position

    # -- planning --------------------------------------------------------------------------------------------
    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> ChangePlan:
        if start is None:
            return self._plan_first_load()
        start_at = self._position(start)
        upto, boundary = self._safe_end(end)
        stop_after = self._stop_after(start_at)
        with self._log_session() as session:
            found = self._changes(session, start_at, upto, max_changes=max_rows, stop_after=stop_after, spill=True)
        capped = found.changes >= max_rows or (
            stop_after is not None and found.last_end is not None and found.last_end >= stop_after
        )
        # A transaction's end, or the last boundary the log's end allows; never past it.
        ends = [at for at in (found.last_end, None if capped else boundary) if at is not None]
        plan_end = max(ends, default=start_at)
        idle = found.changes == 0 and found.skipped == 0
        plan = ChangePlan(
            plan_end,
            start_at,
            found.changes,
            found.skipped,
            capped=capped,
            backlog_bytes=self._log_bytes(plan_end, upto) if capped else 0,
            advance=idle and boundary is not None and self._worth_advancing(start_at, boundary),
        )
        self._backlog_bytes = plan.backlog_bytes
        # Exactly the transactions ending in (start, plan end]: what read_split would read again (held in memory or
        # spilled to local disk; when the plan's end cut a transaction, it reads them again up to the plan's end).
        return replace(plan, found=found) if found.rows_complete else plan

    def cut_splits(self, plan: ChangePlan, target_rows_per_split: int, parallelism: int) -> list[ChangeSplit]:
        """A first load is cut as its database cuts it; a round of changes is one split."""
        if plan.load is not None:
            return self._cut_first_load(plan, target_rows_per_split, parallelism)
        return [ChangeSplit(0, plan.end, plan.start)]

    def end_offsets(self, plan: ChangePlan) -> Offsets:
        return self._offsets(plan.end)

    @contextmanager
    def reading_one_snapshot(
        self,
        plan: ChangePlan | None,
        splits: Sequence[ChangeSplit],
        *,
        read_here: bool = False,
        with_keys: bool = False,
    ) -> Iterator[RoundRead[ChangeSplit]]:
        """The first load reads its snapshot, whose session is closed once the load is written. A load that
        reconciles (a reload of a table the lake holds) reads every key as of the plan's end first
        (``RoundRead.keys``): the lake's keys that are not among them were deleted since its position. A round of
        changes read here is typed from the changes its plan read."""
        try:
            keys = None
            if with_keys and plan is not None and plan.load is not None:
                keys = self._first_load_keys(plan, splits)
            found = None if plan is None or not read_here else plan.found
            yield RoundRead(self if found is None else PlannedChanges(self, found), keys)
        finally:
            if plan is not None and plan.session is not None:
                plan.session.close()
            if plan is not None and plan.found is not None and plan.found.spilled is not None:
                plan.found.spilled.close()  # the typed chunks' file

    # -- reading ---------------------------------------------------------------------------------------------
    def read_split(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        if split.load is not None:
            yield from self._read_first_load(split, schema)
            return
        if split.start is None:
            raise SourceError(f"{self.display_name}: a split of changes without a start")
        with self._log_session() as session:
            yield from self._change_chunks(session, split.start, split.end, schema)

    # -- eviction --------------------------------------------------------------------------------------------
    def evict_key_batch(
        self,
        key: Sequence[str],
        after: tuple[object, ...] | None,
        cutoff: datetime,
        age_column: str,
        limit: int,
        held: HeldRows,
    ) -> KeyBatch:
        return self.table.evict_key_batch(key, after, cutoff, age_column, limit, held)


def closing_messages(messages: Iterator[Message]) -> AbstractContextManager[Iterator[Message]]:
    """A generator of messages as a context that closes it: an unfinished read may hold its connection's lock (or a
    dump thread on the server), which closing it releases."""
    return closing(messages)  # type: ignore[type-var]  # a generator, which has close()
