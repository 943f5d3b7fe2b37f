"""A PostgreSQL table tiered from its change stream: logical replication through a slot and a publication of its
own, decoded with the built-in ``pgoutput`` plugin; the stream's machinery is the kernel's (``sources/change_stream/``).

The offsets are the LSN the lake has applied (``{"lsn": "0/1A2B3C"}``): every transaction whose commit ends at or
before it is in the lake. The slot is read with ``pg_logical_slot_peek_binary_changes`` (reading never consumes)
and advanced only after the lake's commit (``after_commit``), so a round that dies re-reads changes the lake may
already hold; those end at or before the lake's LSN and are skipped (``change_stream/reduce.py``).

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
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd, lsn_offsets
from airflow_provider_tiering.core.ports import KeyedEvictionSource, SafeWatermark
from airflow_provider_tiering.core.source_specs import PostgresCdcSourceSpec
from airflow_provider_tiering.sources.change_stream.messages import Message, Relation
from airflow_provider_tiering.sources.change_stream.reduce import (
    ChangeSet,
    Key,
    RelationColumns,
    RowVersion,
    collector_paused,
)
from airflow_provider_tiering.sources.change_stream.source import (
    ChangePlan,
    ChangeSplit,
    ChangeStreamSource,
    closing_messages,
)
from airflow_provider_tiering.sources.change_stream.typed_changes import with_change_columns
from airflow_provider_tiering.sources.conform import conform_batch
from airflow_provider_tiering.sources.postgres.pgoutput import UNCHANGED_TOAST, format_lsn, parse_lsn
from airflow_provider_tiering.sources.postgres.relation_columns import ColumnLayout, MessageColumn
from airflow_provider_tiering.sources.postgres.replication import Replication
from airflow_provider_tiering.sources.postgres.streamed_table import StreamedTable, key_text
from airflow_provider_tiering.sources.postgres.text_casts import TextCast, text_cast, typed_columns
from airflow_provider_tiering.sources.sql_table import quote_identifier, quote_string

log = logging.getLogger(__name__)

#: The replication origins eviction sessions set (this, ``_`` and the table's slot name: one per table, since a
#: PostgreSQL 15 origin serves one session at a time), so their deletes never reach the lake as deletes.
EVICTION_ORIGIN = "airflow_provider_tiering_eviction"
#: Changes typed by the server per query.
TYPING_BATCH_ROWS = 20_000
#: Rows per 8 KiB block assumed for a table never analyzed (``reltuples`` unknown), to cut its first load.
ROWS_PER_BLOCK_GUESS = 60


@dataclass(frozen=True)
class SnapshotLoad:
    """A first load: the table's rows in the slot's exported ``snapshot``, in ``blocks`` blocks (its size measured
    after the slot was created: every row the snapshot sees lies in them)."""

    snapshot: str
    blocks: int


@dataclass(frozen=True)
class BlockRange:
    """A split of the first load: the rows in blocks ``[first_block, end_block)`` (either bound None: open), read in
    the exported ``snapshot``."""

    snapshot: str
    first_block: int | None = None
    end_block: int | None = None


def _fill_key(position: int) -> str:
    """The column that carries the ``position``-th key value of the row an update's unchanged values come from."""
    return f"__fill_key_{position}"


class PostgresCdcSource(ChangeStreamSource):
    """A PostgreSQL table read through its logical replication slot (see the module's docstring)."""

    key_carried_by = (
        "the table's replica identity must hold the merge key (ALTER TABLE ... REPLICA IDENTITY USING INDEX <the "
        "key's unique index>, or FULL)"
    )

    def __init__(self, spec: PostgresCdcSourceSpec, connection: ConnectionInfo) -> None:
        table = StreamedTable(spec, connection)
        super().__init__(
            spec, connection, table, f"postgres table {spec.db_schema or 'public'}.{spec.table} (change stream)"
        )
        self.spec = spec
        self.table: StreamedTable = table
        schema = quote_identifier(spec.db_schema or "public")
        self.replication = Replication(
            self.display_name, table.conninfo, f"{schema}.{quote_identifier(spec.table)}", spec.slot(),
            spec.publication(),
        )  # fmt: skip

    def _check_server(self, conn: Any) -> None:
        self.replication.check_server(conn, lambda: self.schema().names, lambda: self.merge_key)

    def stream_status(self) -> JsonObject:
        """The slot as the server shows it, and what every stream's status tells (``position``, ``log_needed_bytes``:
        the WAL the slot holds back, ``log_backlog_bytes``)."""
        found = self.replication.status().to_json()
        found["publication"] = self.replication.publication
        found["max_retained_wal_bytes"] = int(self.spec.max_retained_wal_mb * 1024 * 1024)
        found["position"] = found.get("confirmed_flush_lsn")
        found["log_needed_bytes"] = found.get("retained_wal_bytes")
        if self._backlog_bytes is not None:  # a round that failed before planning does not know it
            found["backlog_wal_bytes"] = found["log_backlog_bytes"] = self._backlog_bytes
        return found

    # -- positions: the WAL's LSN ----------------------------------------------------------------
    def _position(self, offsets: SafeEnd) -> int:
        return parse_lsn(lsn_offsets(offsets)["lsn"])

    def _offsets(self, position: int) -> Offsets:
        return {"lsn": format_lsn(position)}

    def describe_position(self, position: int) -> str:
        return f"LSN {format_lsn(position)}"

    def _safe_end(self, end: SafeEnd) -> tuple[int, int | None]:
        found = lsn_offsets(end)
        boundary = found.get("boundary")
        return parse_lsn(found["lsn"]), None if boundary is None else parse_lsn(boundary)

    def _stop_after(self, start: int) -> int | None:
        bound = self.spec.max_wal_mb_per_round
        return None if bound is None else start + int(bound * 1024 * 1024)

    def _idle_advance_bytes(self) -> int:
        # The slot is never moved past the lake, so an idle table holds back up to this much WAL.
        return min(super()._idle_advance_bytes(), int(self.spec.max_retained_wal_mb * 1024 * 1024) // 4)

    def _key_value(self, value: object, kind: pa.DataType) -> Hashable:
        return key_text(value)  # the stream carries a key as its text

    # -- the slot's changes --------------------------------------------------------------------
    def _log_session(self) -> AbstractContextManager[Any]:
        return self.replication.connect()  # a psycopg connection

    def _messages(
        self, session: Any, start: int, end: int | None, budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        # Closed whatever happens: an unfinished stream holds the connection's lock, which closing it needs.
        return closing_messages(self.replication.peek(session, end, budget))

    def _log_end(self, session: Any) -> int:
        (flushed,) = session.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        return parse_lsn(flushed)

    def _skipped_origins(self) -> frozenset[str]:
        return frozenset({self.eviction_origin})

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
        """As the kernel's, with the server stopping early: it counts the messages it sends, skipped transactions'
        too (eviction's, already in the lake, are thousands of deletes), so a read that sent as many messages as it
        was allowed without finding enough changes is repeated over more."""
        budget = max_changes
        window = self._window(start, end, stop_after, max_changes)
        while True:
            sent = 0

            def counted(messages: Iterator[Message]) -> Generator[Message, None, None]:
                nonlocal sent
                for message in messages:
                    sent += 1
                    yield message

            found = self._applied(closing_messages(counted(self.replication.peek(session, end, budget))), window, spill)
            if max_changes is None or budget is None or found.changes >= max_changes or sent < budget:
                return found
            if stop_after is not None and found.last_end is not None and found.last_end >= stop_after:
                return found
            if found.spilled is not None:
                found.spilled.close()
            budget *= 8

    def _placement(self) -> Callable[[Relation], RelationColumns]:
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
                return layout.place(columns, self.merge_key)
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

    def _stream_position(self, session: Any, committed: Offsets) -> int:
        """The lake's LSN, after checking the slot still holds every change since it. A slot behind it (a round
        died between the lake's commit and ``after_commit``) is moved up to it first: a peek for what is new reads
        from the slot's position, and would otherwise see only changes the lake holds."""
        lsn = self._position(committed)
        slot = self.replication.slot
        position = self.replication.position(session)
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
            self.replication.advance(session, lsn)
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
            at, boundary = self.replication.wal_end(conn)
            flushed = format_lsn(at)
            if committed is None:
                return SafeWatermark(end={"lsn": flushed}, observed={"lsn": flushed})
            self.replication.check_publication(conn)
            if self._stream_position(conn, committed) >= at:
                return SafeWatermark(end=committed, observed={"lsn": flushed})
        end = None if boundary is None else format_lsn(boundary)
        return SafeWatermark(end={"lsn": flushed, "boundary": end}, observed={"lsn": flushed})

    # -- the first load: the slot's exported snapshot -------------------------------------------
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
            consistent_point, None, max(estimate, 1), load=SnapshotLoad(snapshot, int(blocks or 0)), session=exporting
        )

    def _cut_first_load(self, plan: ChangePlan, target_rows_per_split: int, parallelism: int) -> list[ChangeSplit]:
        """Ranges of the table's blocks of about equal size, as many as its estimated rows ask for (a multiple of
        ``parallelism``, as for cursor ranges); each split reads its blocks in the slot's exported snapshot (a TID
        range scan), the last one to the table's end."""
        load = plan.load
        if not isinstance(load, SnapshotLoad):
            raise SourceError(f"{self.display_name}: a first load without its snapshot")
        if not load.blocks:
            return [ChangeSplit(0, plan.end, None, BlockRange(load.snapshot))]
        slots = max(1, parallelism)
        count = max(1, min(load.blocks, slots * math.ceil(plan.changes / (target_rows_per_split * slots))))
        edges: list[int | None] = [None, *(load.blocks * i // count for i in range(1, count)), None]
        return [ChangeSplit(i, plan.end, None, BlockRange(load.snapshot, edges[i], edges[i + 1])) for i in range(count)]

    def _first_load_keys(self, plan: ChangePlan, splits: Sequence[ChangeSplit]) -> pa.Table:
        load = plan.load
        if not isinstance(load, SnapshotLoad):
            raise SourceError(f"{self.display_name}: a first load without its snapshot")
        schema = self.schema()
        key_schema = pa.schema([schema.field(c) for c in self.merge_key])
        batches = [b.select(key_schema.names) for b in self._read_snapshot(load.snapshot, key_schema)]
        return pa.Table.from_batches([conform_batch(b, key_schema) for b in batches], schema=key_schema)

    def _read_first_load(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        part = split.load
        if not isinstance(part, BlockRange):
            raise SourceError(f"{self.display_name}: a split of the first load without its blocks")
        return self._read_snapshot(part.snapshot, schema, part)

    def _select_list(self, schema: pa.Schema) -> str:
        return ", ".join(self.table.select_expression(field) for field in schema)

    def _read_snapshot(
        self, snapshot: str, schema: pa.Schema, blocks: BlockRange | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The table's rows in the exported ``snapshot`` (those of ``blocks`` when given)."""
        bounds = []
        if blocks is not None and blocks.first_block is not None:
            bounds.append(f"ctid >= '({int(blocks.first_block)},0)'::tid")
        if blocks is not None and blocks.end_block is not None:
            bounds.append(f"ctid < '({int(blocks.end_block)},0)'::tid")
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
                yield with_change_columns(batch, deleted=None, fill=None)
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
        key = self.merge_key
        again = [k for k, v in rows.items() if v is not None and v.read_again]
        if again:
            found, gone = self._current_rows(session(), again, schema, key)
            yield with_change_columns(found, deleted=None, fill=None, chunk=chunk)
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
                typed_batch = with_change_columns(typed, deleted=deleted, fill=fills, chunk=chunk)
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

    def after_commit(self, committed: Offsets) -> int:
        """Move the slot to the lake's LSN: the server may now recycle the WAL before it."""
        with self.replication.connect() as conn:
            self.replication.advance(conn, self._position(committed))
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
        # The stream carries a key's values as text.
        key_columns = [[cast(str | None, fill_from[at]) for _, fill_from in filling] for at in range(len(key))]
        typed_keys = typed_columns(key_columns, key_casts, key_fields)
        if typed_keys is None:
            return None
        key_values = [array.to_pylist() for array in typed_keys]
        for row, (number, _) in enumerate(filling):
            fill_keys[number] = [str(values[row]) for values in key_values]
    nullable = pa.schema([f.with_nullable(True) for f in schema])
    return pa.RecordBatch.from_arrays(typed, schema=nullable), fill_keys
