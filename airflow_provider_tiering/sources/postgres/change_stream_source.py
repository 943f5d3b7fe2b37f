"""A PostgreSQL table tiered from its change stream: logical replication through a slot and a publication of its
own, decoded with the built-in ``pgoutput`` plugin.

The offsets are the LSN the lake has applied (``{"lsn": "0/1A2B3C"}``): every transaction whose commit ends at or
before it is in the lake. The slot is read with ``pg_logical_slot_peek_binary_changes`` (reading never consumes)
and advanced only after the lake's commit (``after_commit``), so a round that dies re-reads changes the lake may
already hold; those end at or before the lake's LSN and are skipped (``change_stream.apply_changes``).

The first round creates the slot over a replication connection that exports the snapshot the slot starts from,
and loads the table in that snapshot: every change committed after it comes from the slot, none twice, none
missed. The connection is held until the load is read (the snapshot lives only that long).

Changes carry their values as text. They are typed in this process by Arrow's casts where every column's type
allows (``text_casts.py``); otherwise by the server itself (``json_to_recordset`` and a cast to each column's declared
type), then read with the same select expressions as a bulk read. Either way a row has the same Arrow types and
values whichever way it reached the lake.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import itemgetter
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd, lsn_offsets
from airflow_provider_tiering.core.ports import (
    CHANGE_CHUNK,
    CHANGE_DELETED,
    CHANGE_FILL,
    HeldRows,
    KeyBatch,
    KeyedEvictionSource,
    KeyValues,
    LineageDataset,
    MergeKey,
    RejectedRecord,
    RoundRead,
    SafeWatermark,
    Source,
    TiersReader,
)
from airflow_provider_tiering.core.shape import AddedValues, ColumnHistory, HotIdentity
from airflow_provider_tiering.core.source_specs import PostgresCdcSourceSpec
from airflow_provider_tiering.sources.change_stream import (
    ChangeSet,
    ChangeWindow,
    Chunks,
    Key,
    RelationColumns,
    RowVersion,
    apply_changes,
    changes_in_chunks,
    collector_paused,
)
from airflow_provider_tiering.sources.conform import conform_batch
from airflow_provider_tiering.sources.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Message,
    Relation,
    Truncate,
    format_lsn,
    parse_lsn,
)
from airflow_provider_tiering.sources.postgres.relation_columns import ColumnLayout, MessageColumn
from airflow_provider_tiering.sources.postgres.replication import Replication
from airflow_provider_tiering.sources.postgres.streamed_table import (
    StreamedTable,
    WholeTableReader,
    key_text,
)
from airflow_provider_tiering.sources.postgres.text_casts import TextCast, text_cast, typed_columns
from airflow_provider_tiering.sources.spilled_batches import SpilledBatches
from airflow_provider_tiering.sources.sql_table import quote_identifier, quote_string

log = logging.getLogger(__name__)

#: The replication origins eviction sessions set (this, ``_`` and the table's slot name: one per table, since a
#: PostgreSQL 15 origin serves one session at a time), so their deletes never reach the lake as deletes.
EVICTION_ORIGIN = "airflow_provider_tiering_eviction"
#: An idle table's round moves the lake's LSN (and so the slot) once the WAL since it is this large (or a quarter
#: of ``max_retained_wal_mb``, when smaller): an offsets-only snapshot now and then, not one per idle round.
IDLE_ADVANCE_BYTES = 16 * 1024 * 1024
#: Changes typed by the server per query.
TYPING_BATCH_ROWS = 20_000
#: Rows per 8 KiB block assumed for a table never analyzed (``reltuples`` unknown), to cut its first load.
ROWS_PER_BLOCK_GUESS = 60


@dataclass(frozen=True)
class ChangePlan:
    """A round of a change-stream table: the first load (in the slot's exported snapshot), or the transactions
    committed in ``(start_lsn, end_lsn]``."""

    end_lsn: int
    start_lsn: int | None = None
    changes: int = 0
    #: Transactions in the window the stream skips (eviction's): a round of none but these still moves the lake's
    #: LSN past them, so the slot can follow it (it is never ahead of the lake).
    skipped: int = 0
    #: The slot's exported snapshot the first load reads (None: a round of changes).
    snapshot: str | None = None
    #: More changes were waiting than a round takes (``max_rows_per_round`` or ``max_wal_mb_per_round``).
    capped: bool = False
    #: The WAL between the round's end and the flushed position it planned against, when capped: what is left.
    backlog_bytes: int = 0
    #: No change of the table, but the WAL since the lake's LSN grew past ``IDLE_ADVANCE_BYTES``: the round commits
    #: only the new LSN, so the slot can follow and release that WAL.
    advance: bool = False
    #: A first load's table size in blocks, measured after the slot was created (every row its snapshot sees lies
    #: in them): what its splits cut.
    blocks: int | None = None
    #: The round's own state, kept in this process: a first load's exporting session (its snapshot lives while it
    #: is open; ``reading_one_snapshot`` closes it once the load is written), and the changes the plan read when
    #: they fit in memory (a split read here is typed from them, without reading the slot again).
    exporting: Any = field(default=None, compare=False, repr=False)
    found: ChangeSet | None = field(default=None, compare=False, repr=False)

    @property
    def is_empty(self) -> bool:
        return self.snapshot is None and self.changes == 0 and self.skipped == 0 and not self.advance

    @property
    def backlog(self) -> int:
        """Changes left for later rounds, estimated from this round's changes per byte of WAL (the stream is not
        read ahead to count them)."""
        if not self.capped:
            return 0
        span = max(1, self.end_lsn - (self.start_lsn or 0))
        return max(1, round(self.changes * self.backlog_bytes / span))


@dataclass(frozen=True)
class ChangeSplit:
    """One split of a round: the first load's rows in blocks ``[first_block, end_block)`` of the table (either bound
    None: open) read in the slot's exported snapshot, or the round's changes."""

    index: int
    end_lsn: int
    start_lsn: int | None = None
    snapshot: str | None = None
    first_block: int | None = None
    end_block: int | None = None


def _fill_key(position: int) -> str:
    """The column that carries the ``position``-th key value of the row an update's unchanged values come from."""
    return f"__fill_key_{position}"


class PostgresCdcSource(Source[ChangePlan, ChangeSplit]):
    """A PostgreSQL table read through its logical replication slot (see the module's docstring)."""

    def __init__(self, spec: PostgresCdcSourceSpec, connection: ConnectionInfo) -> None:
        self.spec = spec
        self.connection = connection
        self.table = StreamedTable(spec, connection)
        self.display_name = f"postgres table {spec.db_schema or 'public'}.{spec.table} (change stream)"
        schema = quote_identifier(spec.db_schema or "public")
        self.replication = Replication(
            self.display_name, self.table.conninfo, f"{schema}.{quote_identifier(spec.table)}", spec.slot(),
            spec.publication(),
        )  # fmt: skip
        self.key: tuple[str, ...] | None = None
        #: What the lake knows of former column names and initial defaults (``bind_column_history``).
        self._history = ColumnHistory()
        #: The WAL this round's plan left for later rounds (its cap), for the status; None before it planned.
        self._backlog_bytes: int | None = None
        #: Keys whose rows this round reads again (``read_again``), as the stream's text of their key columns.
        self._keys_read_again: tuple[Key, ...] = ()

    def _begin_round(self) -> None:
        super()._begin_round()
        self.table = self.table.for_round()
        self.key, self._history, self._backlog_bytes, self._keys_read_again = None, ColumnHistory(), None, ()

    # -- what the kernel asks of every source ----------------------------------------------------
    def connected(self) -> AbstractContextManager[None]:
        return self.table.connected()  # the catalogue's queries; the slot's sessions are its own

    def schema(self) -> pa.Schema:
        return self.table.schema()

    def primary_key(self) -> tuple[str, ...]:
        return self.table.primary_key()

    def bind_key(self, key: MergeKey) -> None:
        self.key = key.columns

    # -- the table's shape and identity ----------------------------------------------------------
    def identity(self) -> HotIdentity:
        return self.table.identity()

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        # Every row of the table is in the lake (as of its LSN): all of them count.
        return self.table.added_column_values(column, None, rewritten)

    def check_shape_unchanged(self) -> None:
        self.table.check_shape_unchanged()

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None:
        return self.table.rows_rewritten(horizon, None)  # every row of the table is in the lake

    def truncated_since(self, committed: Offsets) -> bool:
        """Whether a transaction committed after the lake's LSN truncated the table: the messages are only looked
        at, not applied (their columns may have names the lake's history is yet to map)."""
        with self.replication.connect() as conn:
            start = self._stream_position(conn, committed)
            truncated = False
            with closing(self.replication.peek(conn, None, None)) as messages:
                for message in messages:
                    if isinstance(message, Begin):
                        truncated = False
                    elif isinstance(message, Truncate):
                        truncated = True
                    elif isinstance(message, Commit) and truncated and message.end_lsn > start:
                        return True
        return False

    def bind_column_history(self, history: ColumnHistory) -> None:
        self._history = history

    def tiered_column_values(self, columns: Sequence[str], tiered: Offsets) -> pa.Table:
        return self.table.column_values(columns)  # every row of the table is in the lake

    def read_again(self, keys: pa.Table) -> bool:
        """The rows of ``keys`` are read again by key with the round's changes, after them (``ChangeWindow``)."""
        names = keys.schema.names
        self._keys_read_again = tuple(
            tuple(None if row[c] is None else key_text(row[c]) for c in names) for row in keys.to_pylist()
        )
        return True

    def _current_names(self, relation: Relation, current: set[str]) -> tuple[str | None, ...]:
        """The name each column of a Relation message has now, by name, for a lake that recorded no layout of the
        table's columns (tiered by an earlier version; its next commit records one, see ``relation_columns.py``), or
        None for a column whose values no longer count (dropped since). A Relation describes the table as it was when
        the change after it was made: one sent before a rename or a drop names columns by their former names, which
        the lake's history maps. A name the table has now is its own (a change of shape that reuses a name for
        another column makes the lake load the table again instead, ``core/follow_shape.py``); one added while the
        round ran fails the round later, when its columns are checked again before the commit.

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

    def tiers_reader(self) -> TiersReader:
        """The whole hot table in one snapshot: a change-stream table holds every live row (never evicted), so a
        read across tiers needs nothing from the lake, and sees deletes and key changes the lake has yet to get."""
        return WholeTableReader(self.table)

    def secrets(self) -> list[str]:
        return self.connection.secrets()

    def lineage_dataset(self) -> LineageDataset:
        return self.table.lineage_dataset()

    def _check_server(self, conn: Any) -> None:
        self.replication.check_server(conn, lambda: self.schema().names, lambda: self.key or self.primary_key())

    def stream_status(self) -> JsonObject:
        found = self.replication.status().to_json()
        found["publication"] = self.replication.publication
        found["max_retained_wal_bytes"] = int(self.spec.max_retained_wal_mb * 1024 * 1024)
        if self._backlog_bytes is not None:  # a round that failed before planning does not know it
            found["backlog_wal_bytes"] = self._backlog_bytes
        return found

    # -- the slot's changes --------------------------------------------------------------------
    def _relation_names(self) -> Callable[[Relation], RelationColumns]:
        """Where each Relation message's columns stand now: by column id, aligned with the layout the lake recorded
        (``relation_columns.py``); by name where it recorded none. The table's columns are read once, on the first."""
        layouts: list[ColumnLayout | None] = []
        current: set[str] = set()

        def names(relation: Relation) -> RelationColumns:
            if not layouts:
                layouts.append(self._column_layout())
            layout = layouts[0]
            if layout is not None:
                columns = [MessageColumn(n, t) for n, t in zip(relation.columns, relation.type_ids, strict=True)]
                return layout.place(columns, self.key or self.primary_key())
            if not current:
                current.update(self.table.identity().columns)
            return RelationColumns(self._current_names(relation, current))

        return names

    def _column_layout(self) -> ColumnLayout | None:
        """The table's columns when the lake's last round planned, and now (dropped ones included); None when the
        lake recorded no layout."""
        start = self._history.start
        if start is None or not start.type_ids or start.last_column_id is None:
            return None
        return ColumnLayout(start.type_ids, start.last_column_id, self.table.attributes(), self.display_name)

    def _changes(
        self,
        conn: Any,
        start: int,
        end: int | None,
        upto_changes: int | None = None,
        stop_after: int | None = None,
        spill: bool = False,
    ) -> ChangeSet:
        """The changes of transactions committed in ``(start, end]``; with ``upto_changes``, those of the first
        transactions holding at least that many applied changes (or all there are); with ``stop_after``, none after
        the first transaction ending at or past it. The server counts the messages it sends, skipped transactions'
        too (eviction's, already in the lake, are thousands of deletes), so a read that sent as many messages as it
        was allowed without finding enough changes is repeated over more. Past ``keys_in_memory`` keys, the rows
        are typed in chunks as they come and kept on local disk with ``spill`` (``ChangeSet.spilled``, a
        :class:`_TypedChunks`), else dropped and only counted (``ChangeSet.rows_complete``)."""
        budget = upto_changes
        window = self._window(start, end, stop_after)

        while True:
            sent = 0

            def counted(messages: Iterator[Message]) -> Iterator[Message]:
                nonlocal sent
                for message in messages:
                    sent += 1
                    yield message

            chunks = _TypedChunks(self, self.schema()) if spill else None
            try:
                # Closed whatever happens: an unfinished stream holds the connection's lock, which closing it needs.
                with closing(self.replication.peek(conn, end, budget)) as messages:
                    found = apply_changes(
                        counted(messages), window, keys_in_memory=self.spec.keys_in_memory, spill=chunks
                    )
            except BaseException:
                if chunks is not None:
                    chunks.close()
                raise
            if chunks is not None and found.spilled is None:
                chunks.close()
            if upto_changes is None or budget is None or found.changes >= upto_changes or sent < budget:
                return found
            if stop_after is not None and found.last_end_lsn is not None and found.last_end_lsn >= stop_after:
                return found
            if chunks is not None:
                chunks.close()
            budget *= 8

    def _window(self, start: int, end: int | None, stop_after: int | None = None) -> ChangeWindow:
        """The changes of transactions committed in ``(start, end]``, keyed, eviction's own skipped."""
        return ChangeWindow(
            self.key or self.primary_key(), start, end, frozenset({self.eviction_origin}), self.display_name,
            self._relation_names(), stop_after, self._keys_read_again,
        )  # fmt: skip

    def _change_chunks(self, conn: Any, start: int, end: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The changes of transactions committed in ``(start, end]``, typed, in chunks of ``keys_in_memory`` keys
        (numbered from 1: a key's version in a later chunk supersedes its earlier ones)."""
        with closing(self.replication.peek(conn, end, None)) as messages:
            window = self._window(start, end)
            chunks = Chunks(changes_in_chunks(messages, window, keys_per_chunk=self.spec.keys_in_memory))
            number = 0
            for number, rows in enumerate(chunks, start=1):
                yield from self.typed(rows, schema, number)
        counts = chunks.counts
        if not counts.rows_complete:  # never with a plan's end, a record boundary: the written chunks are dropped
            raise SourceError(
                f"{self.display_name}: a transaction committed across the round's end LSN {format_lsn(end)}; "
                "the round is retried from the lake's LSN"
            )
        log.info(
            "%s: %d transactions: %d inserts, %d updates, %d deletes, read in %d chunks",
            self.display_name,
            counts.transactions,
            counts.inserted,
            counts.updated,
            counts.deleted,
            number,
        )

    def _stream_position(self, conn: Any, committed: Offsets) -> int:
        """The lake's LSN, after checking the slot still holds every change since it. A slot behind it (a round
        died between the lake's commit and ``after_commit``) is moved up to it first: a peek for what is new reads
        from the slot's position, and would otherwise see only changes the lake holds."""
        lsn = parse_lsn(lsn_offsets(committed)["lsn"])
        slot = self.replication.slot
        position = self.replication.position(conn)
        if position is None or position == -1:
            state = "is gone" if position is None else "lost the WAL it needed (max_slot_wal_keep_size)"
            raise ChangeStreamUnavailable(
                f"{self.display_name}: replication slot {slot} {state}: the changes after the lake's LSN "
                f"{format_lsn(lsn)} can no longer be read. Load the table again: drop the lake table (the next round "
                "creates a new slot and takes a new snapshot), then reset the table"
            )
        if position > lsn:
            # Retried, not quarantined at once: a round of the same table that committed after this one read the
            # lake's offsets moves the slot legitimately; the next try reads the newer offsets.
            raise SourceError(
                f"{self.display_name}: replication slot {slot} is at {format_lsn(position)}, ahead of the "
                f"lake's LSN {format_lsn(lsn)}. A round of this table that committed meanwhile moves it so (the "
                "next try reads its offsets); if none did, the slot was advanced by something else and changes in "
                "between may be missing from the lake: load the table again (drop the lake table, then reset the "
                "table; with eviction enabled, the rows only the lake holds would be lost: keep a copy)"
            )
        if position < lsn:
            self.replication.advance(conn, lsn)
        return lsn

    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """Every committed change is safe to tier (the stream is in commit order): the round may read up to the
        server's flushed WAL (``lsn``; peeking reads only flushed WAL). Whether that holds any change of the table
        is for ``plan`` to find: it reads the slot once, and a round written by this process applies what it read.

        The lake's LSN must never fall inside a WAL record: a commit record that straddles it would be skipped by
        the slot once advanced there, and the flushed position may be mid-record. So the end offsets are a commit's
        end, or ``boundary``: the insert position read *before* the flushed one, a record boundary, when the flush
        has passed it (every transaction committing before it has then been read)."""
        with self.replication.connect() as conn:
            self._check_server(conn)
            try:
                (insert,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                (flushed,) = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            except Exception as exc:
                raise SourceError(f"{self.display_name}: reading the WAL position failed: {exc}") from exc
            boundary = insert if parse_lsn(insert) <= parse_lsn(flushed) else None
            if committed is None:
                return SafeWatermark(end={"lsn": flushed}, observed={"lsn": flushed})
            self.replication.check_publication(conn)
            if self._stream_position(conn, committed) >= parse_lsn(flushed):
                return SafeWatermark(end=committed, observed={"lsn": flushed})
        return SafeWatermark(end={"lsn": flushed, "boundary": boundary}, observed={"lsn": flushed})

    def _worth_advancing(self, start: int, flushed: int) -> bool:
        """Whether the WAL other tables wrote since the lake's LSN is worth a round that only moves the LSN (and
        then the slot): the slot is never moved past the lake, so an idle table holds back up to this much."""
        bound = int(self.spec.max_retained_wal_mb * 1024 * 1024)
        return flushed - start >= min(IDLE_ADVANCE_BYTES, bound // 4)

    def has_rows_after(self, committed: Offsets | None) -> bool:
        if committed is None:
            return True
        with self.replication.connect() as conn:
            start = self._stream_position(conn, committed)
            found = self._changes(conn, start, None, upto_changes=1)
            if found.changes > 0 or found.skipped > 0:
                return True
            (flushed,) = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            return self._worth_advancing(start, parse_lsn(flushed))  # a round that only moves the LSN is due

    # -- planning ------------------------------------------------------------------------------
    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> ChangePlan:
        if start is None:
            return self._plan_first_load()
        safe_end = lsn_offsets(end)
        start_lsn, upto = parse_lsn(lsn_offsets(start)["lsn"]), parse_lsn(safe_end["lsn"])
        found_boundary = safe_end.get("boundary")
        boundary = None if found_boundary is None else parse_lsn(found_boundary)
        bound = self.spec.max_wal_mb_per_round
        stop_after = None if bound is None else start_lsn + int(bound * 1024 * 1024)
        with self.replication.connect() as conn:
            found = self._changes(conn, start_lsn, upto, upto_changes=max_rows, stop_after=stop_after, spill=True)
        capped = found.changes >= max_rows or (
            stop_after is not None and found.last_end_lsn is not None and found.last_end_lsn >= stop_after
        )
        # A commit's end, or the boundary (see safe_watermark); never the flushed position itself.
        ends = [lsn for lsn in (found.last_end_lsn, None if capped else boundary) if lsn is not None]
        plan_end = max(ends, default=start_lsn)
        idle = found.changes == 0 and found.skipped == 0
        plan = ChangePlan(
            plan_end,
            start_lsn,
            found.changes,
            found.skipped,
            capped=capped,
            backlog_bytes=max(0, upto - plan_end) if capped else 0,
            advance=idle and boundary is not None and self._worth_advancing(start_lsn, boundary),
        )
        self._backlog_bytes = plan.backlog_bytes
        # Exactly the transactions ending in (start, plan end]: what read_split would read again (held in memory or
        # spilled to local disk; when the plan's end cut a transaction, it reads them again up to the plan's end).
        return replace(plan, found=found) if found.rows_complete else plan

    def _plan_first_load(self) -> ChangePlan:
        """Create the slot (dropping one left by a first load that never committed: no lake data depends on it)
        and keep its exporting session open for the load."""
        with self.replication.connect() as conn:
            self._check_server(conn)
            self.replication.ensure_publication(conn)
            self.replication.drop_slot_left(conn)
        exporting, consistent_point, snapshot = self.replication.create_slot_exporting_snapshot()
        # Measured after the slot's snapshot: every row it sees lies in these blocks.
        with self.replication.connect() as conn:
            (rows, blocks) = conn.execute(
                "SELECT reltuples::int8, pg_relation_size(oid) / current_setting('block_size')::int8 "
                "FROM pg_class WHERE oid = to_regclass(%s)",
                (self.replication.qualified,),
            ).fetchone()
        # reltuples is -1 before the table's first ANALYZE: an estimate from its size then.
        estimate = int(rows) if rows is not None and rows >= 0 else int(blocks or 0) * ROWS_PER_BLOCK_GUESS
        return ChangePlan(
            consistent_point, None, max(estimate, 1), snapshot=snapshot, blocks=int(blocks or 0), exporting=exporting
        )

    def cut_splits(self, plan: ChangePlan, target_rows_per_split: int, parallelism: int) -> list[ChangeSplit]:
        """A first load is cut into ranges of the table's blocks of about equal size, as many as its estimated rows
        ask for (a multiple of ``parallelism``, as for cursor ranges); each split reads its blocks in the slot's
        exported snapshot (a TID range scan), the last one to the table's end. A round of changes is one split."""
        if plan.snapshot is None or not plan.blocks:
            return [ChangeSplit(0, plan.end_lsn, plan.start_lsn, plan.snapshot)]
        slots = max(1, parallelism)
        count = max(1, min(plan.blocks, slots * math.ceil(plan.changes / (target_rows_per_split * slots))))
        edges: list[int | None] = [None, *(plan.blocks * i // count for i in range(1, count)), None]
        return [
            ChangeSplit(i, plan.end_lsn, None, plan.snapshot, first_block=edges[i], end_block=edges[i + 1])
            for i in range(count)
        ]

    def end_offsets(self, plan: ChangePlan) -> Offsets:
        return {"lsn": format_lsn(plan.end_lsn)}

    @contextmanager
    def reading_one_snapshot(
        self,
        plan: ChangePlan | None,
        splits: Sequence[ChangeSplit],
        *,
        read_here: bool = False,
        with_keys: bool = False,
    ) -> Iterator[RoundRead[ChangeSplit]]:
        """The first load reads the slot's exported snapshot: its session is closed once the load is written. A load
        that reconciles (a reload of a table the lake holds) reads every key in that snapshot first
        (``RoundRead.keys``): the lake's keys that are not among them were deleted since its LSN. A round of changes
        read here is typed from the changes its plan read."""
        try:
            snapshot = splits[0].snapshot if splits else None
            keys = self._read_keys(snapshot) if with_keys and snapshot is not None else None
            found = None if plan is None or not read_here else plan.found
            yield RoundRead(self if found is None else _PlannedChanges(self, found), keys)
        finally:
            if plan is not None and plan.exporting is not None:
                plan.exporting.close()
            if plan is not None and plan.found is not None and plan.found.spilled is not None:
                plan.found.spilled.close()  # the typed chunks' file

    def _read_keys(self, snapshot: str) -> pa.Table:
        schema = self.schema()
        key_schema = pa.schema([schema.field(c) for c in self.key or self.primary_key()])
        batches = [b.select(key_schema.names) for b in self._read_snapshot(snapshot, key_schema)]
        return pa.Table.from_batches([conform_batch(b, key_schema) for b in batches], schema=key_schema)

    # -- reading -------------------------------------------------------------------------------
    def read_split(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        if split.snapshot is not None:
            yield from self._read_snapshot(split.snapshot, schema, split)
            return
        assert split.start_lsn is not None
        with self.replication.connect() as conn:
            yield from self._change_chunks(conn, split.start_lsn, split.end_lsn, schema)

    def _select_list(self, schema: pa.Schema) -> str:
        return ", ".join(self.table.select_expression(field) for field in schema)

    def _read_snapshot(
        self, snapshot: str, schema: pa.Schema, split: ChangeSplit | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The table's rows in the exported ``snapshot`` (those of ``split``'s blocks when given)."""
        bounds = []
        if split is not None and split.first_block is not None:
            bounds.append(f"ctid >= '({int(split.first_block)},0)'::tid")
        if split is not None and split.end_block is not None:
            bounds.append(f"ctid < '({int(split.end_block)},0)'::tid")
        where = f" WHERE {' AND '.join(bounds)}" if bounds else ""
        conn = self.table._connect_arrow()  # the bulk reader's ADBC session (binary COPY into Arrow)
        try:
            cur = conn.cursor()
            try:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                # SET TRANSACTION SNAPSHOT takes no bound parameter; the id comes from the server itself.
                cur.execute(f"SET TRANSACTION SNAPSHOT {quote_string(snapshot)}")
                cur.execute(f"SELECT {self._select_list(schema)} FROM {self.replication.qualified}{where}")
                reader = cur.fetch_record_batch()
            except Exception as exc:
                raise SourceError(f"{self.display_name}: reading the first load failed: {exc}") from exc
            for batch in self.table._batches(reader, "reading the first load"):
                yield _with_change_columns(batch, deleted=None, fill=None)
        finally:
            conn.close()

    def typed(self, rows: dict[Key, RowVersion | None], schema: pa.Schema, chunk: int) -> Iterator[pa.RecordBatch]:
        """A chunk of the change set's rows typed, each with its change columns: in this process by Arrow's casts of
        the values' text (``text_casts.py``) where every column's type allows, else by the server. A column a change
        does not carry (made before the column was added) gets what rows written before it hold: the lake's initial
        default of it, else NULL. The key whose lake row holds an update's unchanged TOAST values is typed too, so it
        compares with the lake's stored keys whatever the key's type (pgoutput's text of a timestamptz or bytea is
        not Python's). A key whose changes could not be placed (``RowVersion.read_again``) is read again from the
        table as it is now; gone from it, it is deleted."""
        if not rows:  # a round of eviction's skipped transactions only: nothing to type, no session
            return
        # At most one bulk-reader session for the chunk's statements, opened when the server is needed: a connection
        # each cost as much as typing 2,000 rows.
        sessions: list[Any] = []

        def session() -> Any:
            if not sessions:
                sessions.append(self.table._connect_arrow())
            return sessions[0]

        try:
            yield from self._typed(session, rows, schema, chunk)
        finally:
            for opened in sessions:
                opened.close()

    def _typed(
        self, session: Callable[[], Any], rows: dict[Key, RowVersion | None], schema: pa.Schema, chunk: int
    ) -> Iterator[pa.RecordBatch]:
        key = self.key or self.primary_key()
        again = [k for k, v in rows.items() if v is not None and v.read_again]
        if again:
            found, gone = self._current_rows(session(), again, schema, key)
            yield _with_change_columns(found, deleted=None, fill=None, chunk=chunk)
            rows = {k: None if k in gone else v for k, v in rows.items() if k in gone or not (v and v.read_again)}
        items = list(rows.items())
        defaults = {c: key_text(v) for c, v in self._history.defaults.items() if c in schema.names}
        casts = self._text_casts(schema)
        for begin in range(0, len(items), TYPING_BATCH_ROWS):
            batch = items[begin : begin + TYPING_BATCH_ROWS]
            with collector_paused():  # the chunk's rows are many small objects, as when they were read
                here = None if casts is None else _typed_here(batch, schema, key, casts, defaults)
                if here is None:
                    here = self._type_on_server(session(), _records(batch, key, defaults), schema, key)
                typed, fill_keys = here
                fills = [
                    None
                    if version is None or not version.unchanged
                    else json.dumps({"key": fill_keys[number], "columns": list(version.unchanged)})
                    for number, (_, version) in enumerate(batch)
                ]
                deleted = [version is None for _, version in batch]
                typed_batch = _with_change_columns(typed, deleted=deleted, fill=fills, chunk=chunk)
            yield typed_batch

    def _text_casts(self, schema: pa.Schema) -> list[TextCast] | None:
        """Each column's cast of its text values in this process, or None when a column's type has none."""
        casts = [text_cast(*self.table.column_description(f.name)) for f in schema]
        return None if any(c is None for c in casts) else [c for c in casts if c is not None]

    def _current_rows(
        self, session: Any, keys: list[Key], schema: pa.Schema, key: Sequence[str]
    ) -> tuple[pa.RecordBatch, set[Key]]:
        """The table's current rows of ``keys`` (the text of their key columns, as the stream carries them), and the
        keys it no longer has. Read now, they may be newer than the round's end: the next round applies the changes
        after it again, each a whole row or a delete, so the lake converges on the table."""
        quote = self.table.quote
        pairs = [(f"__tiering_k{i}", column) for i, column in enumerate(key)]
        definitions = ", ".join(f"{name} text" for name, _ in pairs)
        casts = ", ".join(f"CAST(j.{name} AS {self.table.declared_type(c)}) AS {name}" for name, c in pairs)
        joined = " AND ".join(f"t.{quote(c)} = k.{name}" for name, c in pairs)
        sql = (
            f"SELECT k.__tiering_n, t.ctid IS NULL AS __tiering_gone, {self._select_list(schema)} FROM (SELECT "
            f"j.__tiering_n, {casts} FROM json_to_recordset(CAST($1 AS json)) AS j(__tiering_n int8, {definitions})) k "
            f"LEFT JOIN {self.replication.qualified} t ON {joined} ORDER BY k.__tiering_n"
        )
        records = [
            {"__tiering_n": n, **{name: v for (name, _), v in zip(pairs, values, strict=True)}}
            for n, values in enumerate(keys)
        ]
        table = self._fetch_with_records(session, sql, records, "reading changed rows again by key")
        gone_flags = [bool(flag) for flag in table.column("__tiering_gone").to_pylist()]
        numbers: list[int] = table.column("__tiering_n").to_pylist()  # type: ignore[assignment]  # never NULL
        gone = {keys[n] for n, flag in zip(numbers, gone_flags, strict=True) if flag}
        present = table.filter(pa.array([not flag for flag in gone_flags], pa.bool_()))
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        batch = present.select(schema.names).combine_chunks().to_batches()
        rows = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=nullable)
        log.info("%s: %d changed rows read again by key (%d gone)", self.display_name, len(keys), len(gone))
        return conform_batch(rows, nullable), gone

    def _fetch_with_records(self, session: Any, sql: str, records: list[dict[str, Any]], what: str) -> pa.Table:
        """The result of ``sql``, whose one parameter is ``records`` as JSON, as Arrow (in the bulk reader's
        ``session``)."""
        cur = session.cursor()
        try:
            cur.execute(sql, parameters=(json.dumps(records),))
            return cur.fetch_arrow_table()
        except Exception as exc:
            raise SourceError(f"{self.display_name}: {what} failed: {exc}") from exc
        finally:
            cur.close()

    def _type_on_server(
        self, session: Any, records: list[dict[str, Any]], schema: pa.Schema, key: Sequence[str]
    ) -> tuple[pa.RecordBatch, list[list[str] | None]]:
        """``records`` (text values) typed as ``schema`` by the server, and each record's fill key (its key columns'
        typed values as text; None when it fills from its own key)."""
        quote = self.table.quote
        key_fields = [schema.field(c) for c in key]
        fill_fields = [pa.field(_fill_key(i), f.type) for i, f in enumerate(key_fields)]
        definitions = ", ".join(f"{quote(f.name)} text" for f in [*schema, *fill_fields])
        casts = ", ".join(
            f"CAST(j.{quote(f.name)} AS {self.table.declared_type(source.name)}) AS {quote(f.name)}"
            for f, source in [*((f, f) for f in schema), *zip(fill_fields, key_fields)]
        )
        fill_select = ", ".join(
            self.table.select_expression(source, name=f.name) for f, source in zip(fill_fields, key_fields)
        )
        sql = (
            f"WITH t AS (SELECT j.__n, {casts} FROM json_to_recordset(CAST($1 AS json)) AS j(__n int8, {definitions})) "
            f"SELECT {self._select_list(schema)}, {fill_select} FROM t ORDER BY __n"
        )
        table = self._fetch_with_records(session, sql, records, "typing the changes")
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        if table.num_rows == 0:
            return pa.RecordBatch.from_pylist([], schema=nullable), []
        keys_typed = conform_batch(
            table.select([f.name for f in fill_fields]).combine_chunks().to_batches()[0],
            pa.schema([f.with_nullable(True) for f in fill_fields]),
        )
        fill_keys: list[list[str] | None] = [
            None if row[fill_fields[0].name] is None else [str(row[f.name]) for f in fill_fields]
            for row in keys_typed.to_pylist()
        ]
        values = table.select(schema.names).combine_chunks().to_batches()[0]
        return conform_batch(values, nullable), fill_keys

    # -- eviction ------------------------------------------------------------------------------
    @property
    def eviction_origin(self) -> str:
        return f"{EVICTION_ORIGIN}_{self.replication.slot}"

    def keyed_evictor(self) -> KeyedEvictionSource:
        return self

    @contextmanager
    def evicting(self) -> Iterator[None]:
        self.replication.ensure_origin(self.eviction_origin)
        self.table.eviction_origin = self.eviction_origin
        try:
            with self.table.evicting():
                yield
        finally:
            self.table.eviction_origin = None

    def evict_key_batch(
        self,
        key: Sequence[str],
        after: KeyValues | None,
        cutoff: datetime,
        age_column: str,
        limit: int,
        held: HeldRows,
    ) -> KeyBatch:
        return self.table.evict_key_batch(key, after, cutoff, age_column, limit, held)

    def after_commit(self, committed: Offsets) -> int:
        """Move the slot to the lake's LSN: the server may now recycle the WAL before it."""
        with self.replication.connect() as conn:
            self.replication.advance(conn, parse_lsn(lsn_offsets(committed)["lsn"]))
        return 0


def _fill_from(row_key: Key, version: RowVersion | None) -> Key | None:
    """The key whose lake row holds ``version``'s unchanged values, when it is not the row's own."""
    if version is None or not version.unchanged or version.fill_from is None or version.fill_from == row_key:
        return None
    return version.fill_from


def _records(
    batch: Sequence[tuple[Key, RowVersion | None]], key: Sequence[str], defaults: dict[str, str]
) -> list[dict[str, Any]]:
    """A chunk's rows as records of text values for the server's typing (``_type_on_server``), numbered."""
    records: list[dict[str, Any]] = []
    for number, (row_key, version) in enumerate(batch):
        if version is None:
            record: dict[str, Any] = dict(zip(key, row_key, strict=True))
        else:
            record = {c: None if v is UNCHANGED_TOAST else v for c, v in version.values.items()}
            for column, text in defaults.items():
                record.setdefault(column, text)
            fill_from = _fill_from(row_key, version)
            if fill_from is not None:
                record.update({_fill_key(i): value for i, value in enumerate(fill_from)})
        record["__n"] = number
        records.append(record)
    return records


def _text_columns(
    batch: Sequence[tuple[Key, RowVersion | None]], names: Sequence[str], key: Sequence[str], defaults: dict[str, str]
) -> list[Sequence[str | None]]:
    """The text values of a chunk's rows, column by column (a deleted row's key columns from its key, its others
    NULL; a column a change does not carry, its default)."""
    # Row by row with itemgetter, then transposed by zip: both at C speed (a loop per column and row was a fifth of
    # a round's decoding).
    every = itemgetter(*names)
    at = {column: position for position, column in enumerate(key)}
    key_positions = [at.get(name) for name in names]
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    for row_key, version in batch:
        if version is None:
            append(tuple(None if position is None else row_key[position] for position in key_positions))
            continue
        values = version.values
        try:
            found = every(values)
            row = (found,) if len(names) == 1 else found  # itemgetter of one name gives the value, not a tuple
        except KeyError:  # made before a column was added
            row = tuple(values.get(name, defaults.get(name)) for name in names)
        if UNCHANGED_TOAST in row:
            row = tuple(None if value is UNCHANGED_TOAST else value for value in row)
        append(row)
    return list(zip(*rows, strict=True)) if rows else [() for _ in names]


def _typed_here(
    batch: Sequence[tuple[Key, RowVersion | None]],
    schema: pa.Schema,
    key: Sequence[str],
    casts: Sequence[TextCast],
    defaults: dict[str, str],
) -> tuple[pa.RecordBatch, list[list[str] | None]] | None:
    """A chunk's rows typed in this process (``text_casts.py``), and each row's fill key as the server's typing
    gives it (its key columns' typed values as text; None when it fills from its own key); None when a value is one
    Arrow does not parse exactly."""
    columns = _text_columns(batch, schema.names, key, defaults)
    typed = typed_columns(columns, casts, list(schema))
    if typed is None:
        return None
    fill_keys: list[list[str] | None] = [None] * len(batch)
    filling = [(number, fill_from) for number, (k, v) in enumerate(batch) if (fill_from := _fill_from(k, v))]
    if filling:
        key_fields = [schema.field(c) for c in key]
        key_casts = [casts[schema.get_field_index(c)] for c in key]
        key_columns = [[fill_from[at] for _, fill_from in filling] for at in range(len(key))]
        typed_keys = typed_columns(key_columns, key_casts, key_fields)
        if typed_keys is None:
            return None
        key_values = [array.to_pylist() for array in typed_keys]
        for row, (number, _) in enumerate(filling):
            fill_keys[number] = [str(values[row]) for values in key_values]
    nullable = pa.schema([f.with_nullable(True) for f in schema])
    return pa.RecordBatch.from_arrays(typed, schema=nullable), fill_keys


def _with_change_columns(
    batch: pa.RecordBatch, deleted: list[bool] | None, fill: list[str | None] | None, chunk: int = 0
) -> pa.RecordBatch:
    rows = batch.num_rows
    flags = pa.array(deleted if deleted is not None else [False] * rows, pa.bool_())
    fills = pa.array(fill if fill is not None else [None] * rows, pa.string())
    chunks = pa.array([chunk] * rows, pa.int32())
    return pa.RecordBatch.from_arrays(
        [*batch.columns, flags, fills, chunks],
        schema=pa.schema(
            [
                *(f.with_nullable(True) for f in batch.schema),
                pa.field(CHANGE_DELETED, pa.bool_()),
                pa.field(CHANGE_FILL, pa.string()),
                pa.field(CHANGE_CHUNK, pa.int32()),
            ]
        ),
    )


class _TypedChunks:
    """The chunks of a plan's changes past ``keys_in_memory``, typed as they come (:meth:`PostgresCdcSource.typed`,
    numbered from 1) into record batches on local disk: the round writes them without reading the slot again."""

    def __init__(self, source: PostgresCdcSource, schema: pa.Schema) -> None:
        self.source = source
        self.schema = schema
        self.batches = SpilledBatches()
        self.chunks = 0

    @property
    def closed(self) -> bool:
        return self.batches.closed

    def write(self, rows: dict[Key, RowVersion | None]) -> None:
        self.chunks += 1
        for batch in self.source.typed(rows, self.schema, self.chunks):
            self.batches.write(batch)

    def close(self) -> None:
        self.batches.close()


class _PlannedChanges:
    """A round of changes read by the process that planned it, from the changes its plan read (held, or typed in
    chunks on local disk): the slot is not read a second time. Never pickled: a Spark task reads its split's changes
    itself."""

    def __init__(self, source: PostgresCdcSource, found: ChangeSet) -> None:
        self.source = source
        self.found = found

    @property
    def display_name(self) -> str:
        return self.source.display_name

    def read_split(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        found = self.found
        spilled = found.spilled
        log.info(
            "%s: %d transactions: %d inserts, %d updates, %d deletes -> %s", self.display_name,
            found.transactions, found.inserted, found.updated, found.deleted,
            f"{len(found.rows)} keys" if not isinstance(spilled, _TypedChunks)
            else f"{spilled.batches.rows} keys typed in {spilled.chunks} chunks while planning "
            f"({spilled.batches.bytes / 2**20:.1f} MiB on local disk)",
        )  # fmt: skip
        if not isinstance(spilled, _TypedChunks):
            return self.source.typed(found.rows, schema, 1)
        if spilled.schema != schema:  # never from the round, which reads the source's schema: read the slot again
            return self.source.read_split(split, schema)
        return iter(spilled.batches)

    def take_rejects(self) -> list[RejectedRecord]:
        return []
