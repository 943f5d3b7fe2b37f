"""Apply a table's decoded change stream, in commit order, to what a round merges into the lake: per key, the
row's latest version or its deletion.

Only transactions whose commit ends in ``(start, end]`` count: a slot re-delivers what the lake may already
hold (it is advanced after the lake's commit), and the offsets say where the lake stands. Transactions tagged
with a filtered replication origin (the tiering's own eviction) are skipped whole.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, TableTruncated
from airflow_provider_tiering.sources.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Change,
    Commit,
    Message,
    Origin,
    Relation,
    Truncate,
    Value,
    format_lsn,
)

Key = tuple[str | None, ...]

#: A transaction's changes are held until its commit up to this many; a larger one's are applied as they come
#: (its commit is then known to fall in the window from its Begin message), so memory does not grow with it.
BUFFERED_CHANGES = 10_000


@dataclass
class RowVersion:
    """A key's latest version: its columns' text values. ``fill_from`` names the key whose stored lake row holds
    the values of ``unchanged`` (TOAST values an update left alone that no earlier change of the round carried)."""

    values: dict[str, Value]
    unchanged: tuple[str, ...] = ()
    fill_from: Key | None = None


@dataclass
class ChangeSet:
    """A round's changes, reduced to what the lake must hold."""

    #: key -> the latest version, or None when the key was deleted last.
    rows: dict[Key, RowVersion | None] = field(default_factory=dict)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    #: The commit end of the last transaction applied or skipped (None: none).
    last_end_lsn: int | None = None
    transactions: int = 0
    #: Transactions skipped whole for their origin (eviction's): nothing to apply, but the lake's LSN may pass them.
    skipped: int = 0
    #: False when the changes held more keys than were kept in memory: ``rows`` is empty, the counts are complete.
    rows_complete: bool = True

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted


def apply_changes(
    messages: Iterable[Message],
    *,
    key: Sequence[str],
    start_lsn: int,
    end_lsn: int | None,
    skip_origins: frozenset[str] = frozenset(),
    table: str = "the table",
    names: Callable[[Relation], tuple[str | None, ...]] | None = None,
    keys_in_memory: int | None = None,
    stop_after_lsn: int | None = None,
) -> ChangeSet:
    """Apply ``messages`` (one slot's, in order) to a :class:`ChangeSet`. ``names`` gives, for a Relation message,
    the name each of its columns has now (None: a column whose values no longer count); by default its own names.
    With ``keys_in_memory``, the rows are dropped once they hold more keys than that (``rows_complete`` is then
    False): what was read is counted, its rows are read again in chunks (:func:`changes_in_chunks`). With
    ``stop_after_lsn``, no transaction is applied after the first one ending at or past it.

    Raises:
        TableTruncated: a transaction in the window truncated the table.
        ChangeStreamUnavailable: a change does not carry the key columns (the table's replica identity lacks them).
    """
    reducing = changes_in_chunks(
        messages,
        key=key,
        start_lsn=start_lsn,
        end_lsn=end_lsn,
        skip_origins=skip_origins,
        table=table,
        names=names,
        keys_per_chunk=keys_in_memory,
        stop_after_lsn=stop_after_lsn,
    )
    chunked = Chunks(reducing)
    chunks = 0
    rows: dict[Key, RowVersion | None] = {}
    for chunk in chunked:
        chunks, rows = chunks + 1, chunk  # only the last is kept: the whole of them when there is one
    result = chunked.counts
    if chunks == 1 and result.rows_complete:
        result.rows = rows
    else:  # counted only: more keys than a round holds in memory, or a transaction cut by the window's end
        result.rows = {}
        result.rows_complete = chunks == 0 and result.rows_complete
    return result


class Chunks:
    """The chunks of :func:`changes_in_chunks`, to iterate; once they are exhausted, ``counts`` holds what it
    returned (a generator hands its return value only to ``yield from`` or in ``StopIteration``)."""

    def __init__(self, chunks: Generator[dict[Key, RowVersion | None], None, ChangeSet]) -> None:
        self._chunks = chunks
        self.counts = ChangeSet()

    def __iter__(self) -> Generator[dict[Key, RowVersion | None], None, None]:
        self.counts = yield from self._chunks


def changes_in_chunks(
    messages: Iterable[Message],
    *,
    key: Sequence[str],
    start_lsn: int,
    end_lsn: int | None,
    skip_origins: frozenset[str] = frozenset(),
    table: str = "the table",
    names: Callable[[Relation], tuple[str | None, ...]] | None = None,
    keys_per_chunk: int | None = None,
    stop_after_lsn: int | None = None,
) -> Generator[dict[Key, RowVersion | None], None, ChangeSet]:
    """Apply ``messages`` as :func:`apply_changes` does, yielding the rows in chunks of at most about
    ``keys_per_chunk`` keys (None: one chunk), in order: a key's version in a later chunk supersedes its versions in
    earlier ones, and an update there whose unchanged TOAST values no change of its own chunk carried names the key
    to take them from (``fill_from``), in the earlier chunks or the lake. A chunk may end inside a transaction.
    Returns the counts (a :class:`ChangeSet` without rows)."""
    result = ChangeSet()
    relations: dict[int, tuple[str | None, ...]] = {}
    pending: list[Change | Truncate] = []
    begin: Begin | None = None
    origin: str | None = None
    streaming = False  # the transaction is large: its changes are applied as they come, not held until its commit
    counted = (0, 0, 0)

    def apply(change: Change | Truncate, commit_lsn: int) -> Iterator[dict[Key, RowVersion | None]]:
        if isinstance(change, Truncate):
            raise TableTruncated(
                f"{table} was truncated (transaction committed at {format_lsn(commit_lsn)}): the lake still holds "
                "its rows, and a truncate says nothing about which of them to remove. Ways out: drop the lake table "
                "and reset the table (the next round loads it again); or keep the lake's rows as history and tier "
                "the table as it is now from its start: airflow tiering reset <table> --adopt-hot-table; or restore "
                "the rows. Nothing after the truncate was tiered"
            )
        _apply(result, change, relations[change.relation], key, table)
        if keys_per_chunk is not None and len(result.rows) >= keys_per_chunk:
            yield result.rows
            result.rows = {}

    for message in messages:
        if isinstance(message, Relation):
            relations[message.oid] = message.columns if names is None else names(message)
        elif isinstance(message, Begin):
            # The window's bounds are record boundaries (a commit's end, or an insert position read before the
            # flushed one): a transaction commits in it exactly when its commit record starts in it.
            if end_lsn is not None and message.final_lsn >= end_lsn:
                break
            pending, begin, origin, streaming = [], message, None, False
            counted = (result.inserted, result.updated, result.deleted)
        elif isinstance(message, Origin):
            origin = message.name
        elif isinstance(message, (Change, Truncate)):
            if streaming:
                yield from apply(message, begin.final_lsn if begin is not None else 0)
                continue
            pending.append(message)
            counts = begin is not None and begin.final_lsn >= start_lsn and origin not in skip_origins
            if len(pending) >= BUFFERED_CHANGES and counts and begin is not None:
                streaming = True
                for change in pending:
                    yield from apply(change, begin.final_lsn)
                pending = []
            elif len(pending) >= BUFFERED_CHANGES:
                pending = []  # a transaction the lake holds, or eviction's: nothing of it is applied
        elif isinstance(message, Commit):
            commit_end = message.end_lsn
            if end_lsn is not None and commit_end > end_lsn:
                if streaming:
                    # An end that is not a record boundary (a plan's flushed position) fell inside this large
                    # transaction's commit record, and its changes are applied already: they are not counted, and
                    # the rows are incomplete (read again up to a record boundary).
                    result.inserted, result.updated, result.deleted = counted
                    result.rows_complete = False
                break
            if commit_end <= start_lsn:
                continue
            if origin in skip_origins:
                result.skipped += 1
            else:
                if not streaming:
                    for change in pending:
                        yield from apply(change, message.commit_lsn)
                result.transactions += 1
            pending, streaming = [], False
            result.last_end_lsn = commit_end
            if stop_after_lsn is not None and commit_end >= stop_after_lsn:
                break
    if result.rows:
        yield result.rows
        result.rows = {}
    return result


def _key_of(values: dict[str, Value], key: Sequence[str], table: str) -> Key:
    found: list[str | None] = []
    for column in key:
        value = values.get(column)
        if value is None or value is UNCHANGED_TOAST:
            raise ChangeStreamUnavailable(
                f"{table}: a change does not carry key column {column!r}: the table's replica identity must hold "
                "the merge key (ALTER TABLE ... REPLICA IDENTITY USING INDEX <the key's unique index>, or FULL)"
            )
        found.append(str(value))
    return tuple(found)


def _row(columns: tuple[str | None, ...], values: tuple[Value, ...] | None) -> dict[str, Value] | None:
    if values is None:
        return None
    return {name: value for name, value in zip(columns, values, strict=True) if name is not None}


def _apply(result: ChangeSet, change: Change, columns: tuple[str | None, ...], key: Sequence[str], table: str) -> None:
    new, old = _row(columns, change.new), _row(columns, change.old)
    if change.op == "I" and new is not None:
        result.rows[_key_of(new, key, table)] = RowVersion(new)
        result.inserted += 1
    elif change.op == "D" and old is not None:
        result.rows[_key_of(old, key, table)] = None
        result.deleted += 1
    elif change.op == "U" and new is not None:
        new_key = _key_of(new, key, table)
        # The old key is sent only when the key changed (or under REPLICA IDENTITY FULL: the whole old row).
        old_key = new_key if old is None else _key_of(old, key, table)
        before = result.rows.get(old_key) if old_key in result.rows else None
        if old_key != new_key:
            result.rows[old_key] = None
        unchanged = [column for column, value in new.items() if value is UNCHANGED_TOAST]
        fill_from: Key | None = None
        if unchanged and before is not None:  # an earlier change of the round carried them (or left them too)
            new.update({column: before.values.get(column) for column in unchanged})
            unchanged = [column for column in unchanged if new[column] is UNCHANGED_TOAST]
            fill_from = before.fill_from
        elif unchanged and old is not None and change.old_is_row:  # REPLICA IDENTITY FULL: the old row has them
            new.update({column: old.get(column) for column in unchanged if old.get(column) is not UNCHANGED_TOAST})
            unchanged = [column for column in unchanged if new[column] is UNCHANGED_TOAST]
        if unchanged and fill_from is None:
            fill_from = old_key
        result.rows[new_key] = RowVersion(new, tuple(unchanged), fill_from)
        result.updated += 1
