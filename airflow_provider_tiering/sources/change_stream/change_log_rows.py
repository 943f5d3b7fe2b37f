"""A stream group's changes as the change log's rows (``lake/change_log.py``), and back: the reader turns the messages
its database's log reader hands it, for every table of the group, into rows; each table's task turns its own rows
back into the same messages (``messages.py``), which the one change-stream kernel applies as if it read the log.

A row's values are JSON: an object of the table's columns (in the order of the Relation its change was made under)
to each value as the log carried it: PostgreSQL's text; a binlog's decoded value (numbers, strings; dates as days and
times and timestamps as microseconds since 1970-01-01, as ``row_images.py`` decodes them). What JSON cannot hold
exactly is tagged: ``{"$bytes": <base64>}``, ``{"$decimal": "1.50"}``, ``{"$float": "nan"}``, and an update's
unchanged TOAST value ``{"$unchanged": true}``. Decoding gives back the very values, so a table applies the same
changes from the log as from its own stream.

Only whole transactions count, as in the kernel's window (``reduce.py``): those whose commit ends in ``(start,
end]``; the reader stops after the transaction holding the ``max_changes``-th change.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, HotTableReplaced
from airflow_provider_tiering.lake.change_log import CHANGE_LOG_SCHEMA
from airflow_provider_tiering.sources.change_stream.messages import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    Message,
    Origin,
    Relation,
    Truncate,
    Unreadable,
    Value,
)

_OPS = {"I": "insert", "U": "update", "D": "delete"}
_CODES = {name: code for code, name in _OPS.items()}
#: Ops a reader writes for a change the stream cannot apply to the table (``note`` says why): its task fails there.
REPLACED, UNREADABLE = "replaced", "unreadable"
#: The origin :func:`messages_of` gives the transactions it is told to leave out (a first load saw them): the kernel
#: skips them whole, as eviction's, and still moves the lake's position past them.
SEEN_BY_LOAD = "airflow_provider_tiering_seen_by_load"


def _tagged(value: object) -> object:
    """``json.dumps``'s hook for what JSON cannot hold exactly."""
    if value is UNCHANGED:
        return {"$unchanged": True}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    raise TypeError(f"a change's value of type {type(value).__name__} cannot be kept in the change log")


def _exact(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def encode_values(columns: Sequence[str], values: Sequence[Value]) -> str:
    """A change's values as the log's JSON object of its columns."""
    found: Iterable[object] = values
    if float in map(type, values):  # NaN and the infinities are not JSON
        found = [_exact(v) for v in values]
    row = dict(zip(columns, found, strict=True))
    return json.dumps(row, default=_tagged, separators=(",", ":"), ensure_ascii=False)


def _untagged(value: dict[str, Any]) -> Value:
    if "$unchanged" in value:
        return UNCHANGED
    if "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    if "$decimal" in value:
        return Decimal(value["$decimal"])
    if "$float" in value:
        return float(value["$float"])
    raise ValueError(f"unknown value in the change log: {value!r}")


def decode_values(text: str) -> tuple[Value, ...]:
    """A change's values back from the log's JSON object, in its columns' order."""
    found = json.loads(text)
    return tuple(_untagged(v) if type(v) is dict else v for v in found.values())


# -- the reader: messages of every table of the group -> rows -------------------------------------------------
@dataclass
class LogRows:
    """Rows for the change log, column by column (the log's schema), and what they hold."""

    columns: dict[str, list[object]] = field(default_factory=lambda: {name: [] for name in CHANGE_LOG_SCHEMA.names})
    #: Changes written per table.
    changes: dict[str, int] = field(default_factory=dict)
    #: The commit end of the last transaction read (None: none).
    last_end: int | None = None
    #: When that transaction committed (microseconds since 1970-01-01 UTC).
    last_committed_us: int | None = None
    transactions: int = 0
    #: The read ended inside a transaction (or a transaction crossed the window's end): what follows is read again.
    cut: bool = False

    @property
    def count(self) -> int:
        return len(self.columns["position"])

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.columns, schema=CHANGE_LOG_SCHEMA)


@dataclass(frozen=True)
class LogWindow:
    """Which transactions of the database's log a reader run writes: those committed in ``(start, end]`` (``end``
    None: to where the read stops), each table's only from its ``joined`` position on, at most ``max_changes``
    changes (whole transactions). ``table_of`` names a Relation's table (None: not one of the group's);
    ``key_of`` its key columns; ``describe`` writes a position as the database does."""

    start: int
    end: int | None
    joined: Mapping[str, int]
    table_of: Callable[[Relation], str | None]
    key_of: Callable[[str, Relation], Sequence[str]]
    describe: Callable[[int], str]
    max_changes: int | None = None


@dataclass
class _Pending:
    """A transaction being read: its Begin, and its rows (a list per column) until its commit."""

    begin: Begin
    rows: list[tuple[object, ...]] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)


class LogRowsReader:
    """Turns one read of the database's log into the change log's rows (see the module's description)."""

    def __init__(self, window: LogWindow) -> None:
        self.window = window
        self.rows = LogRows()
        self._relations: dict[int, tuple[str | None, Relation, str, tuple[str, ...]]] = {}
        self._pending: _Pending | None = None

    def read(self, messages: Iterable[Message]) -> LogRows:
        """Take ``messages`` until the window ends; the rows of the whole transactions in it."""
        for message in messages:
            if self._take(message):
                return self.rows
        if self._pending is not None:
            self.rows.cut = True
        return self.rows

    def _take(self, message: Message) -> bool:
        window = self.window
        if isinstance(message, Relation):
            table = window.table_of(message)
            described = json.dumps(
                {"id": message.oid, "columns": list(message.columns), "type_ids": list(message.type_ids)},
                separators=(",", ":"),
            )
            key = tuple(window.key_of(table, message)) if table is not None else ()
            self._relations[message.oid] = (table, message, described, key)
        elif isinstance(message, Begin):
            if window.end is not None and message.commit_at >= window.end:
                return True
            self._pending = _Pending(message)
        elif isinstance(message, (Change, Truncate)):
            self._change(message)
        elif isinstance(message, Commit):
            return self._commit(message)
        elif isinstance(message, Unreadable):
            self._unreadable(message)
        return False

    def _unreadable(self, message: Unreadable) -> None:
        """A change the stream cannot apply to one of the group's tables: a row that fails its task there."""
        pending, table = self._pending, f"{message.namespace}.{message.name}"
        if pending is None or table not in self.window.joined:
            return
        if pending.begin.commit_at < self.window.joined[table]:
            return
        pending.rows.append(refused_row(table, REPLACED if message.replaced else UNREADABLE, message.reason))
        pending.changes[table] = pending.changes.get(table, 0) + 1

    def _change(self, message: Change | Truncate) -> None:
        pending = self._pending
        if pending is None:
            return
        relations = (message.relation,) if isinstance(message, Change) else message.relations
        for oid in relations:
            found = self._relations.get(oid)
            if found is None:
                continue
            table, relation, described, key = found
            if table is None or pending.begin.commit_at < self.window.joined.get(table, pending.begin.commit_at + 1):
                continue
            pending.rows.append(_row(table, message, relation, described, key))
            pending.changes[table] = pending.changes.get(table, 0) + 1

    def _commit(self, message: Commit) -> bool:
        pending, self._pending = self._pending, None
        window, rows = self.window, self.rows
        if window.end is not None and message.end > window.end:
            rows.cut = True
            return True
        if message.end <= window.start or pending is None:
            return False
        text = window.describe(message.end)
        begin = pending.begin
        for seq, (table, op, key, new, old, old_is_row, relation, note) in enumerate(pending.rows):
            for name, value in (
                ("source_table", table), ("position", message.end), ("log_position", text),
                ("commit_at", message.commit_at), ("xid", begin.xid), ("commit_time", begin.committed_at_us),
                ("seq", seq), ("op", op), ("key", key), ("row", new), ("old", old), ("old_is_row", old_is_row),
                ("relation", relation), ("note", note),
            ):  # fmt: skip
                rows.columns[name].append(value)
        for table, count in pending.changes.items():
            rows.changes[table] = rows.changes.get(table, 0) + count
        rows.last_end, rows.last_committed_us = message.end, begin.committed_at_us
        rows.transactions += 1
        return window.max_changes is not None and rows.count >= window.max_changes


def _row(
    table: str, message: Change | Truncate, relation: Relation, described: str, key: Sequence[str]
) -> tuple[object, ...]:
    """A change's row: table, op, key, new row, old key or row, whether it is the whole old row, relation, note."""
    if isinstance(message, Truncate):
        return (table, "truncate", None, None, None, None, described, None)
    columns = relation.columns
    new = None if message.new is None else encode_values(columns, message.new)
    old = None if message.old is None else encode_values(columns, message.old)
    keyed = message.new if message.new is not None else message.old
    at = {name: number for number, name in enumerate(columns)}
    key_text = None
    if keyed is not None and key and all(c in at for c in key):
        key_text = encode_values(key, [keyed[at[c]] for c in key])
    return (table, _OPS[message.op], key_text, new, old, message.old_is_row, described, None)


def refused_row(table: str, op: str, note: str) -> tuple[object, ...]:
    """The row of a change the stream cannot apply to ``table`` (``op``: :data:`REPLACED` or :data:`UNREADABLE`),
    which fails the table's task when it reaches it."""
    return (table, op, None, None, None, None, None, note)


# -- a table's task: its rows -> the kernel's messages ---------------------------------------------------------
def messages_of(
    batches: Iterable[pa.RecordBatch],
    table: str,
    *,
    skip: Callable[[int, int], bool] | None = None,
) -> Iterator[Message]:
    """The messages of one table's rows of the change log (in commit order): per transaction a Begin, a Relation
    whenever the columns its changes were made under differ from the last one's, its changes, and a Commit ending at
    the row's ``position``. ``skip(xid, commit_at)``: transactions left out (those a first load's snapshot saw): their
    Begin and Commit come with the origin :data:`SEEN_BY_LOAD`, and none of their changes.

    Raises:
        HotTableReplaced: a row says the table was dropped, renamed away or replaced.
        ChangeStreamUnavailable: a row says the stream could not read a change of the table.
    """
    relation_text: str | None = None
    relation_id = 0
    position: int | None = None
    begin: Begin | None = None
    skipping = False
    for batch in batches:
        columns = batch.to_pydict()
        for at in range(batch.num_rows):
            end = columns["position"][at]
            if end != position:
                if begin is not None:
                    yield Commit(begin.commit_at, position)  # type: ignore[arg-type]  # set with begin
                position = end
                commit_at, xid = columns["commit_at"][at], columns["xid"][at] or 0
                skipping = skip is not None and skip(xid, commit_at)
                begin = Begin(commit_at, xid)
                yield begin
                if skipping:
                    yield Origin(SEEN_BY_LOAD)
            if skipping:
                continue
            op = columns["op"][at]
            if op in (REPLACED, UNREADABLE):
                error = HotTableReplaced if op == REPLACED else ChangeStreamUnavailable
                raise error(f"{table}: {columns['note'][at]}")
            described = columns["relation"][at]
            if described != relation_text:
                relation_text = described
                found = json.loads(described)
                relation_id = int(found["id"])
                yield Relation(relation_id, tuple(found["columns"]), tuple(found["type_ids"]))
            if op == "truncate":
                yield Truncate((relation_id,))
                continue
            new, old = columns["row"][at], columns["old"][at]
            yield Change(
                _CODES[op],
                relation_id,
                new=None if new is None else decode_values(new),
                old=None if old is None else decode_values(old),
                old_is_row=bool(columns["old_is_row"][at]),
            )
    if begin is not None:
        yield Commit(begin.commit_at, position)  # type: ignore[arg-type]  # set with begin
