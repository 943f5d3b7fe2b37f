"""A table of a stream group, as its own task reads it: its changes come from the group's change log
(``lake/change_log.py``), written there by the group's reader, instead of from the database's log; everything else
(placing, typing, reducing and merging the changes, its first load, its shape and identity) is its change stream's.

:class:`GroupMember` goes before a database's change-stream source in a class's bases and replaces what reads the
log: the log's session is the change log's state (its position, and the tables it reads), a read of the log is the
table's rows of the change log turned back into messages (``change_log_rows.py``), and nothing on the server moves
after the lake's commit (the reader moves the slot). The lake's offsets are the group's log positions (the database's
own: an LSN, a binlog position), so a table's offsets read the same in a group and on a stream of its own.

A table is read from the log only after it joined it (its ``joined_at``): its first round waits for the reader to take
it in (the reader runs every ``read_every_seconds``). A table that moves into a group from a stream of its own has a
lake standing before the log holds its changes: its rounds read its own log (its slot, or the binlog) up to the
position it joined at, then the change log (its own slot and publication are dropped once the lake passes there). A
lake standing before what the log holds, with no such log of its own left (the log expired its changes, the slot is
gone), fails loudly, asking for a new load. A probe asks the group's state document (what the reader announced it
wrote of the table), not the lake: one read through Airflow's API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.core.ports import ChangeLogState, ChangeLogTable, SafeWatermark, StreamMember
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.change_log_rows import SEEN_BY_LOAD, messages_of
from airflow_provider_tiering.sources.change_stream.messages import Message
from airflow_provider_tiering.sources.change_stream.reduce import ChangeSet
from airflow_provider_tiering.sources.change_stream.source import ChangeStreamSource, closing_messages

log = logging.getLogger(__name__)

#: How long a table's first round waits for the group's reader to take it into the change log (two of the reader's
#: intervals, at least the first and at most the second: a waiting round holds a worker slot), and how often it looks.
JOIN_WAIT_SECONDS = 90.0
JOIN_WAIT_MAX_SECONDS = 300.0
JOIN_POLL_SECONDS = 2.0
#: What a probe is told of a table: the position from which the log holds its changes and the position of the newest
#: one (0: none written), or None when it is not known (the table is not in the group's state document yet).
Announced = Callable[[str], "tuple[int, int] | None"]


class GroupMember(ChangeStreamSource):
    """The part of a stream group's table that reads the group's change log (see the module's description).
    A database's class puts it first among its bases: ``class PostgresGroupMember(GroupMember, PostgresCdcSource)``,
    and sets ``stream`` and ``member_table``."""

    reads_change_log = True
    #: The group, and the table as its database qualifies it (its rows' ``source_table`` in the log).
    stream: StreamGroupSpec
    member_table: str
    change_log: ChangeLogTable | None = None
    announced: Announced | None = None
    #: The change log as this round last read it, and the lake's position it checked (None: not yet).
    _log_state: ChangeLogState | None = None
    _lake_at: int | None = None
    #: A lake standing before the change log holds the table, which its own log still holds: this round reads that
    #: log up to this position (where the table joined the group), after which the change log holds it.
    _bridge_to: int | None = None

    def bind_change_log(self, change_log: ChangeLogTable | None, announced: Announced | None = None) -> None:
        """The group's change log (a round's), or only what the reader announced (a probe's)."""
        self.change_log, self.announced = change_log, announced

    def _begin_round(self) -> None:
        super()._begin_round()
        self._log_state, self._lake_at, self._bridge_to = None, None, None

    # -- the change log ------------------------------------------------------------------------------------
    def _require_log(self) -> ChangeLogTable:
        if self.change_log is None:
            raise SourceError(f"{self.display_name}: the stream group's change log is not bound to this source")
        return self.change_log

    def _member_state(self, *, wait: bool) -> tuple[ChangeLogState, StreamMember]:
        """The change log as it stands, and the table in it; with ``wait``, waits a while for the reader to take the
        table in.

        Raises:
            SourceError: the reader has not taken the table in (after the wait).
        """
        waits = max(JOIN_WAIT_SECONDS, min(2 * self.stream.read_every_seconds, JOIN_WAIT_MAX_SECONDS)) if wait else 0
        deadline = time.monotonic() + waits
        while True:
            state = self._require_log().state()
            member = None if state is None else state.member(self.member_table)
            if state is not None and member is not None and state.end is not None:
                self._log_state = state
                return state, member
            if time.monotonic() >= deadline:
                raise SourceError(
                    f"{self.display_name}: stream group {self.stream.name}'s reader has not taken the table into its "
                    f"change log {self._require_log().name} yet (its DAG reads every "
                    f"{self.stream.read_every_seconds:g} s: is it unpaused, and does its last run say why, e.g. a "
                    "table without a replica identity?)"
                )
            time.sleep(JOIN_POLL_SECONDS)

    def _log_session(self) -> AbstractContextManager[Any]:
        if self._bridge_to is not None:  # the database's own (the class after this one in a member's bases)
            return super()._log_session()  # type: ignore[safe-super]
        return nullcontext(self._require_log())  # the change log holds its own reads: no session to open

    def _messages(
        self, session: Any, start: int, end: int | None, budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        if self._bridge_to is not None:
            return super()._messages(session, start, end, budget)  # type: ignore[safe-super]
        batches = self._require_log().changes(self.member_table, start, end)
        return closing_messages(messages_of(batches, self.display_name, skip=self._seen_by_load()))

    def _seen_by_load(self) -> Callable[[int, int], bool] | None:
        """Which transactions of the log the table's first load saw already (None: none)."""
        return None

    def _skipped_origins(self) -> frozenset[str]:
        return super()._skipped_origins() | {SEEN_BY_LOAD}

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
        if self._bridge_to is not None:
            return super()._changes(session, start, end, max_changes=max_changes, stop_after=stop_after, spill=spill)
        # The kernel's own: the change log reads no more than it is asked (a database's may re-read its log).
        return ChangeStreamSource._changes(
            self, session, start, end, max_changes=max_changes, stop_after=stop_after, spill=spill
        )

    def _stream_position(self, session: Any, committed: Offsets) -> int:
        """The lake's position, after checking the change log holds every change of the table since it (or, while
        the table moves into the group, that its own log does)."""
        if self._bridge_to is not None:
            position = super()._stream_position(session, committed)  # type: ignore[safe-super]
            self._lake_at = position
            return position
        position = self._position(committed)
        _, member = self._member_state(wait=False)
        if position < member.held_from:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: the lake stands at {self.describe_position(position)}, but stream group "
                f"{self.stream.name}'s change log holds the table's changes only from "
                f"{self.describe_position(member.held_from)} (it joined the group then, or the log expired older "
                "ones): the changes in between cannot be read. Load the table again: drop its lake table, then "
                "reset the table"
            )
        self._lake_at = position
        return position

    def _log_end(self, session: Any) -> int:
        if self._bridge_to is not None:
            return self._bridge_to
        state = self._log_state or self._member_state(wait=False)[0]
        if state.end is None:
            raise SourceError(f"{self.display_name}: the change log has no position yet")
        return self._position(state.end)

    def _safe_end(self, end: SafeEnd) -> tuple[int, int | None]:
        if self._bridge_to is not None:
            return super()._safe_end(end)
        # The change log's position is where a reader's commit ended: a round with nothing of the table left before
        # it ends there, so the lake says it holds everything the log held then.
        position = self._position(end)
        return position, position

    def _worth_advancing(self, start: int, end: int) -> bool:
        return False  # nothing of the server's is held for the table: its lake moves with its own changes

    def _check_table(self) -> None:
        """The table's own checks, every round (its key carried by the log, its privileges)."""
        return None

    # -- moving into a group from a stream of its own ----------------------------------------------------------
    def _own_log_holds(self, position: int) -> bool:
        """Whether the table's own log (its stream before it joined the group) still holds its changes after
        ``position`` (a database says how: its slot, the binlog)."""
        return False

    def _bridge_end(self, position: int) -> Offsets:
        """The safe end of a round that reads the table's own log up to ``position`` (where it joined)."""
        return self._offsets(position)

    def _release_own_log(self) -> None:
        """Let the table's own log go, once the lake stands where the change log holds the table."""
        return None

    # -- what a round asks -----------------------------------------------------------------------------------
    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """Every change the log holds is committed: a round may read to the log's position. Its first round waits
        for the reader to take the table in (its checks follow: before that, the group's publication lacks it)."""
        state, member = self._member_state(wait=committed is None)
        self._check_table()
        end = state.end
        assert end is not None  # a member's log has a position
        if committed is not None and self._position(committed) < member.held_from:
            if self._own_log_holds(self._position(committed)):
                self._bridge_to = member.held_from
                log.info(
                    "%s: moving into stream group %s: its own log read up to %s, where the change log takes over",
                    self.display_name, self.stream.name, self.describe_position(member.held_from),
                )  # fmt: skip
                bridge = self._bridge_end(member.held_from)
                return SafeWatermark(end=bridge, observed=bridge)
        if committed is not None and self._stream_position(None, committed) >= self._position(end):
            return SafeWatermark(end=committed, observed=end)
        return SafeWatermark(end=end, observed=end)

    def has_rows_after(self, committed: Offsets | None) -> bool:
        """Whether the reader wrote (or is writing) a change of the table past the lake's position: asked of what it
        announced when that is bound (a probe), else of the change log."""
        if committed is None or (self.announced is None and self.change_log is None):
            return True  # nothing to ask (a deferred sensor's trigger): "maybe"
        position = self._position(committed)
        if self.announced is not None:
            found = self.announced(self.member_table)
            # Unknown, or a lake standing before the log holds the table (moving into the group): "maybe".
            return found is None or position < found[0] or found[1] > position
        _, member = self._member_state(wait=False)
        if position < member.held_from:
            return True
        self._stream_position(None, committed)
        return self._require_log().changes_after(self.member_table, position) > 0

    def after_commit(self, committed: Offsets) -> int:
        self._lake_at = self._position(committed)  # the reader moves the server's retention point, not the table
        if self._bridge_to is not None and self._lake_at >= self._bridge_to:
            self._release_own_log()
        return 0

    def stream_status(self) -> JsonObject:
        """The table's place in its group's change log: where its lake stands, where the log stands, and how many
        of its changes wait there (its backlog)."""
        found: JsonObject = {
            "stream_group": self.stream.name,
            "change_log": self.change_log.name if self.change_log is not None else None,
            "backlog_alert_changes": self.stream.backlog_alert_changes,
        }
        state = self._log_state
        member = None if state is None else state.member(self.member_table)
        if state is not None and state.end is not None:
            found["log_position"] = self.describe_position(self._position(state.end))
        if member is not None:
            found["joined_at"] = self.describe_position(member.joined_at)
        if self._lake_at is not None:
            found["position"] = self.describe_position(self._lake_at)
            try:
                found["log_backlog_changes"] = self._require_log().changes_after(self.member_table, self._lake_at)
            except Exception as exc:  # reporting: never fails the round
                log.warning("%s: its backlog in the change log is not known: %s", self.display_name, exc)
        return found
