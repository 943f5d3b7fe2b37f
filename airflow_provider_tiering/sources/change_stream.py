"""Apply a table's decoded change stream, in commit order, to what a round merges into the lake: per key, the
row's latest version or its deletion.

Only transactions whose commit ends in ``(start, end]`` count: a slot re-delivers what the lake may already
hold (it is advanced after the lake's commit), and the offsets say where the lake stands. Transactions tagged
with a filtered replication origin (the tiering's own eviction) are skipped whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
) -> ChangeSet:
    """Apply ``messages`` (one slot's, in order) to a :class:`ChangeSet`. ``names`` gives, for a Relation message,
    the name each of its columns has now (None: a column whose values no longer count); by default its own names.

    Raises:
        TableTruncated: a transaction in the window truncated the table.
        ChangeStreamUnavailable: a change does not carry the key columns (the table's replica identity lacks them).
    """
    result = ChangeSet()
    relations: dict[int, tuple[str | None, ...]] = {}
    pending: list[Change | Truncate] = []
    commit_end: int | None = None
    origin: str | None = None
    for message in messages:
        if isinstance(message, Relation):
            relations[message.oid] = message.columns if names is None else names(message)
        elif isinstance(message, Begin):
            pending, origin = [], None
        elif isinstance(message, Origin):
            origin = message.name
        elif isinstance(message, (Change, Truncate)):
            pending.append(message)
        elif isinstance(message, Commit):
            commit_end = message.end_lsn
            if commit_end <= start_lsn:
                continue
            if end_lsn is not None and commit_end > end_lsn:
                break
            if origin in skip_origins:
                result.skipped += 1
                result.last_end_lsn = commit_end
                continue
            for change in pending:
                if isinstance(change, Truncate):
                    raise TableTruncated(
                        f"{table} was truncated (transaction committed at {format_lsn(message.commit_lsn)}): the "
                        "lake still holds its rows, and a truncate says nothing about which of them to remove. Ways "
                        "out: drop the lake table and reset the table (the next round loads it again); or keep the "
                        "lake's rows as history and tier the table as it is now from its start: airflow tiering "
                        "reset <table> --adopt-hot-table; or restore the rows. Nothing after the truncate was tiered"
                    )
                _apply(result, change, relations[change.relation], key, table)
            result.last_end_lsn = commit_end
            result.transactions += 1
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
