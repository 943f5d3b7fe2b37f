"""A stream group's reader: one read of a hot database's log for every table of the group, written to the group's
change log (``lake/change_log.py``) before the server's retention point moves. What a database adds is its
:class:`GroupLog`; this module is the part no database owns.

A run, in phases (each crash point leaves the log whole; the next run starts from the log's committed position):

1. **Join and leave.** The tables declared in the group that the log does not read yet join it (PostgreSQL: added to
   the group's publication; the log holds each one's changes from its ``joined_at``); the tables no longer declared
   leave it (their rows in the log go; their lake tables stay). A crash after a table was added to the publication but
   before the log recorded it joins it again, at a later position.
2. **Read** the database's log from the change log's position ``R`` to its end now, whole transactions, at most
   ``max_changes_per_read`` changes; each change of a member table becomes a row (``change_log_rows.py``). Nothing is
   written: a crash re-reads.
3. **Record the intent**: the group's state document notes, per table, the position of the last change about to be
   written, so a table's cheap probe never says "nothing new" while its change lies in the log.
4. **Commit** the rows in one snapshot of the change log, fenced on ``R`` and the reader's epoch (a stale run commits
   nothing). The log now holds everything up to its new position ``E``.
5. **Release**: move the server's retention point (PostgreSQL's slot) to ``E``. A crash before leaves the slot behind
   the log; the next run moves it up first, and transactions ending at or before ``E`` it reads again are skipped.
6. **Record** the run in the state document; then, every ``expire_every_seconds``, **expire** each table's rows its
   lake applied (read from the tables' lakes) and count what each still has waiting (its backlog).
"""

from __future__ import annotations

import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pyarrow as pa

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.core.ports import ChangeLogState, StreamMember
from airflow_provider_tiering.core.source_specs import ChangeStreamSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.core.stream_state import StreamGroupState, StreamTableState
from airflow_provider_tiering.core.units import count, duration
from airflow_provider_tiering.sources.change_stream.change_log_rows import LogRows, LogRowsReader, LogWindow
from airflow_provider_tiering.sources.change_stream.messages import Message, Relation
from airflow_provider_tiering.sources.held_connection import HeldConnection

log = logging.getLogger(__name__)


class GroupLog(ABC):
    """A hot database's log, read once for every table of a stream group (PostgreSQL's slot and publication, MariaDB's
    binlog): what the reader needs of the database."""

    display_name: str

    def __init__(self) -> None:
        #: The connection a run's steps share (see :meth:`session`).
        self._connections = HeldConnection()

    @abstractmethod
    def _connect(self) -> Any:
        """A new autocommit connection to the server (DB-API)."""

    def session(self) -> AbstractContextManager[None]:
        """Keep one connection for the steps of a run made inside: a run otherwise opens one for each of its steps
        (about seven), each a server process and an authentication, several times a second back to back."""
        return self._connections.held()

    def _connection(self) -> AbstractContextManager[Any]:
        """A connection for one step: inside :meth:`session` the kept one, else one of its own, closed after."""
        return self._connections.connection(self._connect)

    @abstractmethod
    def table_name(self, source: ChangeStreamSpec) -> str:
        """A member's hot table as the database qualifies it (``schema.table``): its rows' ``source_table``."""

    @abstractmethod
    def check(self) -> None:
        """The server, its settings and the role's privileges allow the stream.

        Raises:
            ChangeStreamUnavailable: they do not (the message names what to change).
        """

    @abstractmethod
    def start(self) -> int:
        """Where a new change log starts: the position from which the server holds the log for the group (PostgreSQL
        creates the group's slot, or takes the one a run that never committed left)."""

    @abstractmethod
    def held_from(self, position: int) -> None:
        """Check that the server still holds every change after ``position`` (the change log's), moving a retention
        point left behind by a run that died after its commit up to it.

        Raises:
            ChangeStreamUnavailable: it does not (the slot is gone, the binlog purged): the group must start again.
        """

    @abstractmethod
    def end(self) -> tuple[int, int | None]:
        """Where the log ends now, and the last position at or below it where a run that read to it may stand."""

    @abstractmethod
    def messages(
        self, start: int, end: int | None, tables: Sequence[str], budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        """The log's messages of ``tables`` from ``start`` (transactions ending at or before it may come again) up to
        ``end``, in commit order; ``budget``: a log that can stop early stops at the first transaction boundary past
        that many messages."""

    @abstractmethod
    def join(self, tables: Sequence[str], position: int, members: Sequence[str]) -> Mapping[str, int | str]:
        """Make the log carry ``tables`` (``members``: those it carries already); for each, the position from which
        it holds all of the table's changes, or why it cannot yet (a note: the next run tries again)."""

    @abstractmethod
    def leave(self, tables: Sequence[str], members: Sequence[str]) -> None:
        """Stop carrying ``tables`` (``members``: those that stay)."""

    def lost(self, members: Sequence[str]) -> list[str]:
        """The tables the log no longer carries although they joined (PostgreSQL: dropped and created again, the
        publication lost them): they join again, from a later position (their lakes, older, then need a new load)."""
        return []

    @abstractmethod
    def release(self, position: int) -> None:
        """The change log holds everything up to ``position``: the server may let the log before it go."""

    @abstractmethod
    def table_of(self, relation: Relation) -> str | None:
        """The hot table a Relation message describes (None: a table the group does not read)."""

    @abstractmethod
    def key_of(self, table: str, relation: Relation) -> Sequence[str]:
        """The key columns of a change of ``table`` made under ``relation`` (the log's ``key``)."""

    @abstractmethod
    def offsets(self, position: int) -> Offsets:
        """A position as offsets (what the change log's commits and the tables' lakes keep)."""

    @abstractmethod
    def position(self, offsets: SafeEnd) -> int:
        """Offsets as a position."""

    @abstractmethod
    def describe(self, position: int) -> str:
        """A position as the database writes it."""

    def log_bytes(self, start: int, end: int) -> int:
        return max(0, end - start)

    @abstractmethod
    def idle_advance_bytes(self) -> int:
        """The log past the change log's position that makes a run with no change commit the new position alone
        (PostgreSQL: the slot then lets that WAL go)."""

    def status(self) -> JsonObject:
        """The server's side of the stream (slot or binlog), for the state document."""
        return {}

    def alert(self, status: JsonObject) -> str | None:
        """Why the reader's task should fail with an alert although it read (the slot holds back too much WAL)."""
        return None


class ChangeLogWriter(Protocol):
    """The change log as its reader writes it (``lake/change_log.py: IcebergChangeLog``)."""

    @property
    def name(self) -> str: ...

    def ensure(self) -> None: ...

    def state(self) -> ChangeLogState | None: ...

    def append(
        self,
        rows: pa.Table,
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        members: Mapping[str, StreamMember],
        group: str,
        attempt: str,
    ) -> int: ...

    def expire(
        self,
        epoch: int,
        applied: Mapping[str, int],
        members: Mapping[str, StreamMember],
        *,
        left: Sequence[str] = (),
        before: datetime | None = None,
    ) -> int: ...

    def changes_after(self, table: str, after: int) -> int: ...

    def backlogs(self, after: Mapping[str, int]) -> dict[str, int]:
        """How many changes of each table of ``after`` committed past its position there the log holds now, in one
        read of the log (a hundred tables' counts in one scan, not a hundred)."""
        ...


class StreamStateStore(Protocol):
    """Where the group's state document lives (Airflow's asset state store, in a task)."""

    def load(self) -> StreamGroupState | None: ...

    def save(self, state: StreamGroupState) -> None: ...


@dataclass(frozen=True)
class ReaderRun:
    """What one run of the reader did."""

    group: str
    epoch: int
    start: str | None
    end: str | None
    changes: Mapping[str, int] = field(default_factory=dict)
    transactions: int = 0
    joined: Mapping[str, str] = field(default_factory=dict)
    left: tuple[str, ...] = ()
    waiting: Mapping[str, str] = field(default_factory=dict)
    capped: bool = False
    snapshot_id: int | None = None
    expired: int | None = None
    alert: str | None = None

    @property
    def change_count(self) -> int:
        return sum(self.changes.values())

    def to_json(self) -> JsonObject:
        return {
            "epoch": self.epoch, "start": self.start, "end": self.end, "changes": self.change_count,
            "tables_changed": len(self.changes), "transactions": self.transactions, "joined": dict(self.joined),
            "left": list(self.left), "waiting": dict(self.waiting), "capped": self.capped,
            "snapshot_id": self.snapshot_id, "expired": self.expired,
        }  # fmt: skip


#: The reader's phases, told to ``observe`` (the crash tests kill a run at each).
READ, INTENT, COMMITTED, RELEASED, RECORDED, EXPIRED = "read", "intent", "committed", "released", "recorded", "expired"


@dataclass
class GroupReader:
    """One stream group's reader (see the module's description): its spec, its tables (hot table -> name in the
    DAG), the database's log, the change log, where its state document lives, and how to learn the position each
    table's lake applied (for expiry)."""

    group: StreamGroupSpec
    members: Mapping[str, str]
    log: GroupLog
    change_log: ChangeLogWriter
    store: StreamStateStore
    applied: Callable[[], Mapping[str, int]] = dict
    secrets: Sequence[str] = ()
    observe: Callable[[str], None] = lambda phase: None
    clock: Callable[[], datetime] = utcnow

    def run(self) -> ReaderRun:
        """One run of the reader. Raises what failed it, once recorded in the state document."""
        state = self.store.load() or StreamGroupState(self.group.name)
        started = time.monotonic()
        try:
            with self.log.session():
                run = self._run(state)
        except Exception as exc:
            state.status = "failed"
            state.last_error = describe_error(exc, self.secrets)
            state.last_error_time = self.clock()
            state.consecutive_failures += 1
            self._record_log_status(state)
            self.store.save(state)
            raise
        log.info(
            "%s: read %s changes of %d tables in %d transactions, %s -> %s, in %s%s", self.group.name,
            count(run.change_count), len(run.changes), run.transactions, run.start, run.end,
            duration(time.monotonic() - started), " (capped: more to read)" if run.capped else "",
        )  # fmt: skip
        return run

    def _run(self, state: StreamGroupState) -> ReaderRun:
        self.log.check()
        found = self.change_log.state()
        if found is None:  # the group's first run
            self.change_log.ensure()
            found = self.change_log.state()
        members = dict(found.members) if found is not None else {}
        epoch = (found.epoch if found is not None else 0) + 1
        start_offsets = None if found is None else found.end
        start = self.log.start() if start_offsets is None else self.log.position(start_offsets)
        self.log.held_from(start)
        lost = self.log.lost(sorted(members))
        for table in lost:
            log.warning("%s: table %s is no longer in the log (dropped and created again?): it joins again",
                        self.group.name, table)  # fmt: skip
            del members[table]
        left = tuple(sorted(set(members) - set(self.members)))
        if left:
            self.log.leave(left, [t for t in members if t not in left])
            for table in left:
                del members[table]
        joined, waiting = self._join(members, start)
        end, boundary = self.log.end()
        window = LogWindow(
            start, end, {t: m.joined_at for t, m in members.items()}, self.log.table_of, self.log.key_of,
            self.log.describe, self.group.max_changes_per_read,
        )  # fmt: skip
        budget, sent = self.group.max_changes_per_read, [0]

        def counted(messages: Iterator[Message]) -> Iterator[Message]:
            for message in messages:
                sent[0] += 1
                yield message

        with self.log.messages(start, end, sorted(members), budget) as messages:
            rows = LogRowsReader(window).read(counted(messages))
        self.observe(READ)
        # The log may have stopped at its budget before the window's end: the rest is the next run's.
        capped = rows.count >= self.group.max_changes_per_read or sent[0] >= budget
        new_end = rows.last_end if rows.last_end is not None else start
        if not capped and not rows.cut and boundary is not None:
            new_end = max(new_end, boundary)
        worth = rows.count > 0 or joined or left or lost or start_offsets is None
        worth = worth or self.log.log_bytes(start, new_end) >= self.log.idle_advance_bytes()
        run = ReaderRun(
            self.group.name, epoch, self.log.describe(start), self.log.describe(new_end), dict(rows.changes),
            rows.transactions, {t: self.log.describe(p) for t, p in joined.items()}, left, waiting, capped,
        )  # fmt: skip
        if worth:
            run = self._commit(state, run, rows, members, epoch, start_offsets, new_end, left)
        else:
            run = ReaderRun(self.group.name, epoch - 1, run.start, run.start, waiting=waiting)
        self._recorded(state, run, rows, members, caught_up=not capped and not rows.cut)
        if worth:
            self.observe(RECORDED)
        expired = self._expire_if_due(state, run.epoch, members, left)
        if expired is not None:
            self.observe(EXPIRED)
        return replace(run, expired=expired, alert=self.log.alert(state.log or {}))

    def _join(self, members: dict[str, StreamMember], start: int) -> tuple[dict[str, int], dict[str, str]]:
        """Tables declared but not read yet join the log (see :meth:`GroupLog.join`)."""
        wanted = sorted(set(self.members) - set(members))
        if not wanted:
            return {}, {}
        joined: dict[str, int] = {}
        waiting: dict[str, str] = {}
        for table, found in self.log.join(wanted, start, sorted(members)).items():
            if isinstance(found, str):
                waiting[table] = found
                continue
            joined[table] = found
            members[table] = StreamMember(table, self.members[table], found)
            log.info("%s: table %s joins the change log at %s", self.group.name, table, self.log.describe(found))
        return joined, waiting

    def _commit(
        self,
        state: StreamGroupState,
        run: ReaderRun,
        rows: LogRows,
        members: Mapping[str, StreamMember],
        epoch: int,
        start_offsets: Offsets | None,
        new_end: int,
        left: Sequence[str],
    ) -> ReaderRun:
        table = rows.table()
        last = _last_change_per_table(table)
        for name, position in last.items():
            self._table_state(state, name).pending_change_at = position
        state.status = "reading"
        self.store.save(state)
        self.observe(INTENT)
        snapshot_id = self.change_log.append(
            table, epoch=epoch, start=start_offsets, end=self.log.offsets(new_end), members=members,
            group=self.group.name, attempt=uuid.uuid4().hex[:16],
        )  # fmt: skip
        self.observe(COMMITTED)
        self.log.release(new_end)
        self.observe(RELEASED)
        for name, position in last.items():
            found = self._table_state(state, name)
            found.last_change_at, found.pending_change_at = position, None
            found.changes_written += rows.changes.get(name, 0)
        for name in left:
            state.tables.pop(name, None)
        if rows.last_committed_us is not None:
            state.last_commit_time = datetime.fromtimestamp(rows.last_committed_us / 1e6, UTC)
        return replace(run, snapshot_id=snapshot_id)

    def _recorded(
        self, state: StreamGroupState, run: ReaderRun, rows: LogRows, members: Mapping[str, StreamMember],
        caught_up: bool,
    ) -> None:  # fmt: skip
        now = self.clock()
        state.status, state.epoch, state.position = "read", run.epoch, run.end
        state.last_read_time = now
        if caught_up:
            state.caught_up_time = now
        state.consecutive_failures = 0
        state.last_run = run.to_json()
        for table, member in members.items():
            found = self._table_state(state, table)
            found.name, found.joined_at, found.note = member.name, self.log.describe(member.joined_at), None
            found.held_from = member.held_from
        for table, note in run.waiting.items():
            self._table_state(state, table).note = note
        for table in list(state.tables):
            if table not in self.members:
                del state.tables[table]
        self._record_log_status(state)
        self.store.save(state)

    def _table_state(self, state: StreamGroupState, table: str) -> StreamTableState:
        found = state.tables.get(table)
        if found is None:
            found = state.tables[table] = StreamTableState(self.members.get(table, table))
        return found

    def _record_log_status(self, state: StreamGroupState) -> None:
        try:
            state.log = self.log.status()
        except Exception as exc:  # reporting: never hides what the run did
            log.warning("%s: the server's side of the stream is not known: %s", self.group.name, exc)

    # -- expiry ------------------------------------------------------------------------------------------
    def _expire_if_due(
        self, state: StreamGroupState, epoch: int, members: Mapping[str, StreamMember], left: Sequence[str]
    ) -> int | None:
        """Every ``expire_every_seconds`` (and when tables left): each table's rows its lake applied go, and each
        table's backlog is counted. Best effort: a failure is logged and left to a later run."""
        now = self.clock()
        every = timedelta(seconds=self.group.expire_every_seconds)
        if not left and state.last_expiry_time is not None and now - state.last_expiry_time < every:
            return None
        try:
            applied = {t: p for t, p in self.applied().items() if t in members}
            kept = {
                t: StreamMember(t, m.name, m.joined_at, max(m.expired_upto or 0, applied.get(t, 0)) or m.expired_upto)
                for t, m in members.items()
            }
            before = now - timedelta(days=self.group.keep_days) if self.group.keep_days else None
            expired = self.change_log.expire(epoch, applied, kept, left=left, before=before)
            self._count_backlogs(state, applied, members, now)
        except Exception as exc:
            log.warning("%s: expiring the change log left to a later run: %s", self.group.name, exc)
            return None
        state.last_expiry_time = now
        state.expired_changes_total += expired
        self.store.save(state)
        if expired:
            log.info("%s: %s changes its tables applied expired from %s", self.group.name, count(expired),
                     self.change_log.name)  # fmt: skip
        return expired

    def _count_backlogs(
        self, state: StreamGroupState, applied: Mapping[str, int], members: Mapping[str, StreamMember], now: datetime
    ) -> None:
        after = {table: applied.get(table, member.held_from) for table, member in members.items()}
        for table, waiting in self.change_log.backlogs(after).items():
            found = self._table_state(state, table)
            found.backlog_changes, found.backlog_counted_at = waiting, now


def _last_change_per_table(rows: pa.Table) -> dict[str, int]:
    """Each table's greatest position among ``rows``."""
    if rows.num_rows == 0:
        return {}
    grouped = rows.group_by("source_table").aggregate([("position", "max")])
    tables, positions = grouped.column("source_table").to_pylist(), grouped.column("position_max").to_pylist()
    return {str(t): int(p) for t, p in zip(tables, positions, strict=True) if p is not None}
