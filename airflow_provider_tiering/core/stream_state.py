"""A stream group's state document: what its reader did last, where it stands, and what each of its tables has
waiting, kept in Airflow's asset state store under the group's asset (one JSON value, one key), as a table's own.

The reader writes it around each run; the tables' tasks read it to probe cheaply (has the reader written a change of
mine past my lake's position?), and the status surfaces show it beside each table of the group. Before the reader
commits a run's changes it records, per table, the position of the last change it is about to write
(``pending_change_at``): a probe that reads the document between that commit and the record after it still sees the
change, so it says "maybe" rather than "no" while a change waits in the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.documents import DocumentTime, JsonObject, from_document, to_document

#: The key of a group's state document in its asset's state store.
STREAM_STATE_KEY = "tiering_stream_state"


@dataclass
class StreamTableState:
    """One table of the group, as its reader knows it."""

    name: str
    #: The log's position (the database's own form) where the table joined, and the position (an integer that orders
    #: like the log) from which the log holds every one of its changes.
    joined_at: str | None = None
    held_from: int | None = None
    #: The position of the table's last change the reader wrote (an integer that orders like the log), and of the
    #: last one it is writing (set before its commit, cleared once the commit is recorded).
    last_change_at: int | None = None
    pending_change_at: int | None = None
    changes_written: int = 0
    #: Changes waiting in the log past the position the table's lake applied, as last counted (None: not yet).
    backlog_changes: int | None = None
    backlog_counted_at: DocumentTime | None = None
    #: Why the table is not read yet (its join waits for older transactions; it does not exist), or None.
    note: str | None = None

    def announced(self) -> int | None:
        """The position of the table's newest change in the log, or being written to it (None: none yet)."""
        found = [p for p in (self.last_change_at, self.pending_change_at) if p is not None]
        return max(found, default=None)


@dataclass
class StreamGroupState:
    """The state document of one stream group."""

    group: str
    #: "reading" while a run is under way, "read" after one that committed, "failed" after one that failed.
    status: str = "new"
    epoch: int = 0
    #: The log's position: the end of the last transaction the change log holds (the database's own form).
    position: str | None = None
    #: When the reader last read to the end of the database's log (what the group's lag is measured from).
    caught_up_time: DocumentTime | None = None
    last_read_time: DocumentTime | None = None
    #: When the newest transaction the log holds committed on the hot database.
    last_commit_time: DocumentTime | None = None
    last_error: str | None = None
    last_error_time: DocumentTime | None = None
    consecutive_failures: int = 0
    #: The last run: changes and transactions written, tables joined and left, whether its cap left some.
    last_run: JsonObject | None = None
    #: The server's side of the stream: the slot or the binlog (position, retained log, its bound).
    log: JsonObject | None = None
    last_expiry_time: DocumentTime | None = None
    expired_changes_total: int = 0
    tables: dict[str, StreamTableState] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return to_document(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> StreamGroupState:
        return from_document(cls, document)

    def table_named(self, name: str) -> StreamTableState | None:
        """The table whose name in the DAG is ``name`` (None: the reader does not know it yet)."""
        return next((t for t in self.tables.values() if t.name == name), None)

    def lag_seconds(self, now: datetime) -> float | None:
        """How long ago the reader last read to the end of the database's log."""
        return None if self.caught_up_time is None else round(max(0.0, (now - self.caught_up_time).total_seconds()), 3)
