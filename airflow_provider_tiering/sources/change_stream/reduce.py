"""Apply one table's change stream (``messages.py``), in commit order, to what a round merges into the lake: per key,
the row's latest version or its deletion. This is the database-free part of every change stream: a log reader of
each database feeds it, and its result is typed and written by ``source.py``.

Only transactions whose commit ends in ``(start, end]`` count: a log is re-read from where the lake stands (a slot is
advanced, a binlog position kept, only after the lake's commit), so a round that died re-reads what the lake may
already hold, and the offsets say where the lake stands. Transactions tagged with a filtered origin (the tiering's
own eviction) are skipped whole.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol, cast

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, TableTruncated
from airflow_provider_tiering.sources.change_stream.messages import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    Message,
    Origin,
    Relation,
    Truncate,
    Value,
)

#: A row's key: its key columns' values as the log carries them.
Key = tuple[Hashable, ...]

#: A transaction's changes are held until its commit up to this many; a larger one's are applied as they come
#: (its commit is then known to fall in the window from its Begin message), so memory does not grow with it.
BUFFERED_CHANGES = 10_000


@dataclass(slots=True)
class RowVersion:
    """A key's latest version: its columns' values as the log carries them. ``fill_from`` names the key whose stored
    lake row holds the values of ``unchanged`` (values an update left alone and did not carry, PostgreSQL's TOAST
    values, that no earlier change of the round carried). ``read_again``: the change's columns could not be placed
    (see :class:`RelationColumns`), ``values`` holds the key only, and the key's row is read again from the hot
    table, as it is when the round reads it."""

    values: dict[str, Value]
    unchanged: tuple[str, ...] = ()
    fill_from: Key | None = None
    read_again: bool = False


@dataclass(frozen=True)
class RelationColumns:
    """What the columns of a Relation message are called now (None: a column whose values no longer count, dropped
    since). ``placed`` False: only the key's columns could be told apart, and the rows the changes under the message
    insert or update are read again by key."""

    names: tuple[str | None, ...]
    placed: bool = True
    #: Every column still counts (none dropped): a change's values zip with ``names`` as they are.
    complete: bool = field(init=False, default=False)
    #: Each counted column's place among a change's values.
    at: dict[str, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:  # once per Relation, not once per change
        object.__setattr__(self, "complete", None not in self.names)
        object.__setattr__(self, "at", {name: n for n, name in enumerate(self.names) if name is not None})


@dataclass
class ChangeSet:
    """A round's changes, reduced to what the lake must hold."""

    #: key -> the latest version, or None when the key was deleted last.
    rows: dict[Key, RowVersion | None] = field(default_factory=dict)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    #: The commit end of the last transaction applied or skipped (None: none).
    last_end: int | None = None
    transactions: int = 0
    #: Transactions skipped whole for their origin (eviction's): nothing to apply, but the lake's position may pass
    #: them.
    skipped: int = 0
    #: False when the changes held more keys than were kept in memory and none were spilled, or when the window's
    #: end cut a transaction: ``rows`` is empty, the counts are complete.
    rows_complete: bool = True
    #: Where the rows went, in chunks, when they held more keys than were kept in memory (``rows`` is empty).
    spilled: ChunkSpill | None = None

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted


class ChunkSpill(Protocol):
    """Where :func:`apply_changes` puts the chunks of a change set too large to hold, in order, as they come."""

    def write(self, rows: dict[Key, RowVersion | None]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ChangeWindow:
    """Which of one log's changes a round applies, and by what: the transactions committed in ``(start, end]``
    (None: no end), none after the first one ending at or past ``stop_after`` or holding the ``max_changes``-th
    applied change, none of the ``skip_origins`` (eviction's own); rows keyed by ``key``; ``names`` places, for a
    Relation message, each of its columns among the table's now (by default by its own names); ``read_again``, rows
    read again by key after the changes."""

    key: Sequence[str]
    start: int
    end: int | None
    skip_origins: frozenset[str] = frozenset()
    table: str = "the table"
    names: Callable[[Relation], RelationColumns] | None = None
    stop_after: int | None = None
    #: Keys whose rows are read again whatever the stream says of them (after a rewrite it does not carry).
    read_again: tuple[Key, ...] = ()
    max_changes: int | None = None
    #: A position as the log's own (an LSN's ``X/Y``, a binlog's ``file:offset``), for messages.
    describe: Callable[[int], str] = str
    #: What makes every change carry the key, for the message of a change that does not.
    key_carried_by: str = "the log must carry the key of every change"


def apply_changes(
    messages: Iterable[Message],
    window: ChangeWindow,
    *,
    keys_in_memory: int | None = None,
    spill: ChunkSpill | None = None,
) -> ChangeSet:
    """Apply ``messages`` (one log's, in order) in ``window`` to a :class:`ChangeSet`. With ``keys_in_memory``, once
    the rows hold more keys than that they are written to ``spill`` in chunks of that many (``ChangeSet.spilled``);
    without ``spill`` they are dropped (``rows_complete`` is then False): what was read is counted, and its rows are
    read again in chunks (:func:`changes_in_chunks`).

    Raises:
        TableTruncated: a transaction in the window truncated the table.
        ChangeStreamUnavailable: a change does not carry the key columns (``ChangeWindow.key_carried_by``).
    """
    chunked = Chunks(changes_in_chunks(messages, window, keys_per_chunk=keys_in_memory))
    chunks = 0
    rows: dict[Key, RowVersion | None] = {}
    with collector_paused():
        for chunk in chunked:
            if chunks and spill is not None:
                spill.write(rows)
            chunks, rows = chunks + 1, chunk  # the last is kept: the whole of them when there is one
    result = chunked.counts
    if chunks == 1 and result.rows_complete:
        result.rows = rows
    elif chunks > 1 and result.rows_complete and spill is not None:
        spill.write(rows)
        result.rows, result.spilled = {}, spill
    else:  # counted only: more keys than a round holds in memory, or a transaction cut by the window's end
        result.rows = {}
        result.rows_complete = chunks == 0 and result.rows_complete
    return result


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a round reads its changes: they are hundreds of thousands of
    small objects that live until the round writes them and form no cycles, and the collector walked all of them
    again and again as they grew (measured: a third of the CPU of a round of 150,000 changes). Memory is freed by
    reference counting as before; only cycles made meanwhile wait for the collector, which is on again after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Chunks:
    """The chunks of :func:`changes_in_chunks`, to iterate; once they are exhausted, ``counts`` holds what it
    returned (a generator hands its return value only to ``yield from`` or in ``StopIteration``)."""

    def __init__(self, chunks: Generator[dict[Key, RowVersion | None], None, ChangeSet]) -> None:
        self._chunks = chunks
        self.counts = ChangeSet()

    def __iter__(self) -> Generator[dict[Key, RowVersion | None], None, None]:
        self.counts = yield from self._chunks


def changes_in_chunks(
    messages: Iterable[Message], window: ChangeWindow, *, keys_per_chunk: int | None = None
) -> Generator[dict[Key, RowVersion | None], None, ChangeSet]:
    """Apply ``messages`` as :func:`apply_changes` does, yielding the rows in chunks of at most about
    ``keys_per_chunk`` keys (None: one chunk), in order: a key's version in a later chunk supersedes its versions in
    earlier ones, and an update there whose unchanged values no change of its own chunk carried names the key
    to take them from (``fill_from``), in the earlier chunks or the lake. A chunk may end inside a transaction.
    Returns the counts (a :class:`ChangeSet` without rows)."""
    reducer = _Reducer(window, keys_per_chunk)
    ready = reducer.ready
    take = reducer.take
    for message in messages:
        ends = take(message)
        if ready:
            yield from ready
            ready.clear()
        if ends:
            break
    else:
        reducer.ended()
    for row_key in window.read_again:  # read as the table is now: later than any change read
        reducer.result.rows[row_key] = RowVersion(dict(zip(window.key, row_key, strict=True)), read_again=True)
        reducer.result.updated += 1
    if reducer.result.rows:
        yield reducer.result.rows
        reducer.result.rows = {}
    return reducer.result


@dataclass
class _Reducer:
    """The state of :func:`changes_in_chunks` between messages: the transaction being read and what is applied."""

    window: ChangeWindow
    keys_per_chunk: int | None
    result: ChangeSet = field(default_factory=ChangeSet)
    relations: dict[int, RelationColumns] = field(default_factory=dict)
    pending: list[Change | Truncate] = field(default_factory=list)
    begin: Begin | None = None
    origin: str | None = None
    #: The transaction is large: its changes are applied as they come, not held until its commit.
    streaming: bool = False
    #: The counts before the transaction being read.
    counted: tuple[int, int, int] = (0, 0, 0)
    #: Chunks filled by the messages taken, for the caller to hand on (plain calls, not generators: a generator made
    #: per message was a tenth of reducing them).
    ready: list[dict[Key, RowVersion | None]] = field(default_factory=list)

    def take(self, message: Message) -> bool:
        """Apply one message, putting the chunks it fills in ``ready``; returns whether the window ends here."""
        if isinstance(message, Relation):
            names = self.window.names
            self.relations[message.oid] = RelationColumns(message.columns) if names is None else names(message)
        elif isinstance(message, Begin):
            # The window's bounds are record boundaries (a commit's end, or an insert position read before the
            # flushed one): a transaction commits in it exactly when its commit record starts in it.
            if self.window.end is not None and message.commit_at >= self.window.end:
                return True
            self.pending, self.begin, self.origin, self.streaming = [], message, None, False
            self.counted = (self.result.inserted, self.result.updated, self.result.deleted)
        elif isinstance(message, Origin):
            self.origin = message.name
        elif isinstance(message, (Change, Truncate)):
            self._change(message)
        elif isinstance(message, Commit):
            return self._commit(message)
        return False

    def ended(self) -> None:
        """The messages ended inside a large transaction already applied (a log read cut short): its changes are not
        counted, and the rows are incomplete."""
        if self.streaming:
            self.result.inserted, self.result.updated, self.result.deleted = self.counted
            self.result.rows_complete = False

    def _change(self, message: Change | Truncate) -> None:
        begin = self.begin
        if self.streaming:
            self._apply(message, begin.commit_at if begin is not None else 0)
            return
        self.pending.append(message)
        if len(self.pending) < BUFFERED_CHANGES:
            return
        if begin is not None and begin.commit_at >= self.window.start and self.origin not in self.window.skip_origins:
            self.streaming = True
            for change in self.pending:
                self._apply(change, begin.commit_at)
        self.pending = []  # applied; or a transaction the lake holds, or eviction's: nothing of it is applied

    def _commit(self, message: Commit) -> bool:
        result, commit_end = self.result, message.end
        window = self.window
        if window.end is not None and commit_end > window.end:
            if self.streaming:
                # An end that is not a record boundary (a plan's flushed position) fell inside this large
                # transaction's commit record, and its changes are applied already: they are not counted, and
                # the rows are incomplete (read again up to a record boundary).
                result.inserted, result.updated, result.deleted = self.counted
                result.rows_complete = False
            return True
        if commit_end <= window.start:
            return False
        if self.origin in window.skip_origins:
            result.skipped += 1
        else:
            if not self.streaming:
                for change in self.pending:
                    self._apply(change, message.commit_at)
            result.transactions += 1
        self.pending, self.streaming = [], False
        result.last_end = commit_end
        if window.max_changes is not None and result.changes >= window.max_changes:
            return True
        return window.stop_after is not None and commit_end >= window.stop_after

    def _apply(self, change: Change | Truncate, commit_at: int) -> None:
        if isinstance(change, Truncate):
            raise TableTruncated(
                f"{self.window.table} was truncated (transaction committed at {self.window.describe(commit_at)}): "
                "the lake still holds its rows, and a truncate says nothing about which of them to remove. Ways out: "
                "drop the "
                "lake table and reset the table (the next round loads it again); or keep the lake's rows as history "
                "and tier the table as it is now from its start: airflow tiering reset <table> --adopt-hot-table; or "
                "restore the rows. Nothing after the truncate was tiered"
            )
        _apply(self.result, change, self.relations[change.relation], self.window)
        if self.keys_per_chunk is not None and len(self.result.rows) >= self.keys_per_chunk:
            self.ready.append(self.result.rows)
            self.result.rows = {}


def _key_of(values: dict[str, Value], window: ChangeWindow) -> Key:
    found: list[Hashable] = []
    for column in window.key:
        value = values.get(column)
        if value is None or value is UNCHANGED:
            raise ChangeStreamUnavailable(
                f"{window.table}: a change does not carry key column {column!r}: {window.key_carried_by}"
            )
        found.append(value)
    return tuple(found)


def _old_key_of(change: Change, columns: RelationColumns, window: ChangeWindow) -> Key:
    """The old key of a change that carries it (a delete, an update with its old key or row), taken from its values
    without making a row of them (a binlog's update carries its whole old row, only its key is needed)."""
    old, at = cast(tuple[Value, ...], change.old), columns.at
    found: list[Hashable] = []
    for column in window.key:
        value = old[at[column]] if column in at else None
        if value is None or value is UNCHANGED:
            raise ChangeStreamUnavailable(
                f"{window.table}: a change does not carry key column {column!r}: {window.key_carried_by}"
            )
        found.append(value)
    return tuple(found)


def _row(columns: RelationColumns, values: tuple[Value, ...] | None) -> dict[str, Value] | None:
    if values is None:
        return None
    if columns.complete:  # the usual case, at C speed (a comprehension was a tenth of decoding)
        return dict(zip(cast(tuple[str, ...], columns.names), values))  # a change carries a value per column
    return {name: value for name, value in zip(columns.names, values, strict=True) if name is not None}


def _apply(result: ChangeSet, change: Change, columns: RelationColumns, window: ChangeWindow) -> None:
    new = _row(columns, change.new)
    if not columns.placed and change.op in ("I", "U") and new is not None:
        _read_again(result, change, new, _row(columns, change.old), window)
    elif change.op == "I" and new is not None:
        result.rows[_key_of(new, window)] = RowVersion(new)
        result.inserted += 1
    elif change.op == "D" and change.old is not None:
        result.rows[_old_key_of(change, columns, window)] = None
        result.deleted += 1
    elif change.op == "U" and new is not None:
        new_key = _key_of(new, window)
        # The old key comes only when the key changed, or with the whole old row (REPLICA IDENTITY FULL, a binlog).
        old_key = new_key if change.old is None else _old_key_of(change, columns, window)
        before = result.rows.get(old_key) if old_key in result.rows else None
        if old_key != new_key:
            result.rows[old_key] = None
        unchanged = (
            [column for column, value in new.items() if value is UNCHANGED] if UNCHANGED in (change.new or ()) else []
        )
        fill_from: Key | None = None
        if unchanged and before is not None and before.read_again:  # what it left alone is read again too
            result.rows[new_key] = RowVersion({c: new[c] for c in window.key}, read_again=True)
            result.updated += 1
            return
        if unchanged and before is not None:  # an earlier change of the round carried them (or left them too)
            new.update({column: before.values.get(column) for column in unchanged})
            unchanged = [column for column in unchanged if new[column] is UNCHANGED]
            fill_from = before.fill_from
        elif unchanged and change.old is not None and change.old_is_row:  # the whole old row has them
            old = cast(dict[str, Value], _row(columns, change.old))
            new.update({column: old.get(column) for column in unchanged if old.get(column) is not UNCHANGED})
            unchanged = [column for column in unchanged if new[column] is UNCHANGED]
        if unchanged and fill_from is None:
            fill_from = old_key
        result.rows[new_key] = RowVersion(new, tuple(unchanged), fill_from)
        result.updated += 1


def _read_again(
    result: ChangeSet, change: Change, new: dict[str, Value], old: dict[str, Value] | None, window: ChangeWindow
) -> None:
    """An insert or update whose columns could not be placed: its key's row is read again by key (an update of the
    key deletes the old one)."""
    new_key = _key_of(new, window)
    if change.op == "U" and old is not None:
        old_key = _key_of(old, window)
        if old_key != new_key:
            result.rows[old_key] = None
    result.rows[new_key] = RowVersion({c: new[c] for c in window.key}, read_again=True)
    if change.op == "I":
        result.inserted += 1
    else:
        result.updated += 1


def versions_before(messages: Iterable[Message], window: ChangeWindow) -> dict[Key, dict[str, Value] | None]:
    """Each key's version just before its first change in ``window`` (the transactions committed in ``(start,
    end]``): None when that change inserted it (it was absent), else the change's whole old row. What rolls a read of
    the table taken at ``end`` back to ``start``: its rows of these keys are replaced by these versions (a first load
    read in several snapshots, each standing at ``start``). Needs changes that carry whole old rows (a binlog with
    ``binlog_row_image = FULL``).

    Raises:
        TableTruncated: a transaction in the window truncated the table.
        ChangeStreamUnavailable: a change does not carry its whole old row, or its key.
    """
    found: dict[Key, dict[str, Value] | None] = {}
    relations: dict[int, RelationColumns] = {}
    inside = False
    for message in messages:
        if isinstance(message, Relation):
            names = window.names
            relations[message.oid] = RelationColumns(message.columns) if names is None else names(message)
        elif isinstance(message, Begin):
            if window.end is not None and message.commit_at >= window.end:
                break
            inside = message.commit_at >= window.start
        elif isinstance(message, Truncate) and inside:
            raise TableTruncated(f"{window.table} was truncated at {window.describe(window.start)} or after it")
        elif isinstance(message, Change) and inside:
            columns = relations[message.relation]
            new, old = _row(columns, message.new), _row(columns, message.old)
            if message.op == "I" and new is not None:
                found.setdefault(_key_of(new, window), None)
                continue
            if old is None or not message.old_is_row:
                raise ChangeStreamUnavailable(f"{window.table}: a change does not carry its whole old row")
            old_key = _key_of(old, window)
            found.setdefault(old_key, old)
            if message.op == "U" and new is not None:
                found.setdefault(_key_of(new, window), None)  # a key changed: the new key was absent before
    return found
