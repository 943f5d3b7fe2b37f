"""What a database's log reader hands the change-stream kernel: one table's committed transactions, in commit order,
as a sequence of messages.

A transaction is a :class:`Begin`, perhaps an :class:`Origin`, its row changes (:class:`Change`, :class:`Truncate`),
each after the :class:`Relation` that describes the columns it was made under, and a :class:`Commit`. Positions are
integers that order like the log's own (PostgreSQL's LSN as is; a binlog's file number and offset packed into one):
the kernel compares them with a round's window and never looks inside them. A log reader turns its database's
messages into these and knows nothing of lakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


class Unchanged:
    """A column an update left alone and did not carry (PostgreSQL's unchanged TOAST value): the key's earlier version
    in the round, or the lake's row, holds it."""

    _instance: Unchanged | None = None

    def __new__(cls) -> Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = Unchanged()
#: A column's value as a change carries it: the log's own form (PostgreSQL's text, a binlog's decoded value), None for
#: NULL, or UNCHANGED.
Value = object


@dataclass(frozen=True)
class Relation:
    """A table's columns as the log describes them for the changes after it (until the next one of the same ``oid``):
    their names then, in order, and their type ids then."""

    oid: int
    columns: tuple[str, ...]
    type_ids: tuple[int, ...] = ()
    #: The table's schema (or database) and name, as the log names it (empty where a reader of one table's log
    #: leaves them out).
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class Begin:
    #: Where the transaction's commit lies: it belongs to a window ``(start, end]`` of commit ends exactly when
    #: ``start <= commit_at < end`` (PostgreSQL: its commit record's LSN; a binlog: where its group starts, since the
    #: binlog holds whole committed transactions).
    commit_at: int
    xid: int = 0
    #: When the transaction committed, in microseconds since 1970-01-01 UTC (None: the log does not say).
    committed_at_us: int | None = None


@dataclass(frozen=True)
class Commit:
    commit_at: int
    #: Just past the transaction: where the lake stands once it is applied, and where a later read starts.
    end: int


@dataclass(frozen=True)
class Origin:
    """The transaction was made by a session tagged ``name`` (the tiering's own eviction: skipped whole)."""

    name: str


@dataclass(slots=True)  # not frozen: a frozen dataclass is made three times slower, and one is made per change
class Change:
    """A row's INSERT ("I"), UPDATE ("U") or DELETE ("D"), its values aligned with its relation's columns. ``old`` is
    the old key (or the whole old row) of a delete, or of an update that changed the key (or that carries its whole
    old row); ``new`` the new row of an insert or update."""

    op: str
    relation: int
    new: tuple[Value, ...] | None = None
    old: tuple[Value, ...] | None = None
    #: ``old`` is the whole old row, not only its key columns.
    old_is_row: bool = False


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]


@dataclass(frozen=True)
class Unreadable:
    """A change of a group's table that the log carries in a form the stream cannot apply (a statement logged as text
    that replaced the table, ``replaced``, or changed its rows without a row event each): a group's reader writes it
    to the change log, and the table's task fails when it reaches it. (A table's own stream fails at once instead.)"""

    namespace: str
    name: str
    replaced: bool
    reason: str


@dataclass(frozen=True)
class Other:
    """A message a tiering round has no use for."""

    kind: str


Message = Relation | Begin | Commit | Origin | Change | Truncate | Unreadable | Other
