"""Per-table tiering state: the state machine and the JSON state document (``docs/design.md``, "State")."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from airflow_provider_tiering.core.documents import (
    DocumentOffsets,
    DocumentTime,
    JsonObject,
    from_document,
    to_document,
)
from airflow_provider_tiering.core.errors import IllegalTransition


class TableStatus(enum.StrEnum):
    NEW = "NEW"
    INITIALIZED = "INITIALIZED"
    SCHEDULED = "SCHEDULED"
    PENDING = "PENDING"
    TIERING = "TIERING"
    TIERED = "TIERED"
    FAILED = "FAILED"


# After Fluss' LakeTableTieringManager. Two additions: PENDING -> SCHEDULED (the plan found
# nothing to tier) and PENDING -> FAILED (planning itself failed, e.g. the source is unreachable).
ALLOWED_TRANSITIONS: dict[TableStatus, frozenset[TableStatus]] = {
    TableStatus.NEW: frozenset({TableStatus.INITIALIZED}),
    TableStatus.INITIALIZED: frozenset({TableStatus.SCHEDULED}),
    TableStatus.SCHEDULED: frozenset({TableStatus.PENDING}),
    TableStatus.PENDING: frozenset({TableStatus.TIERING, TableStatus.SCHEDULED, TableStatus.FAILED}),
    TableStatus.TIERING: frozenset({TableStatus.TIERED, TableStatus.FAILED}),
    TableStatus.TIERED: frozenset({TableStatus.SCHEDULED}),
    TableStatus.FAILED: frozenset({TableStatus.PENDING}),
}


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class CommittedSnapshot:
    """What the lake holds, as of the last recorded round (a cache of the lake snapshot)."""

    snapshot_id: int
    epoch: int
    end_offsets: DocumentOffsets
    committed_at: DocumentTime | None = None


@dataclass
class MergeRewriteMetrics:
    """How a merge rewrote the lake's files holding changed keys (those losing most of their rows) and the round's
    files holding superseded versions: ``ran_on`` is ``task_process`` (the rewrite fit one split) or ``spark``; and
    how it deleted the superseded rows of the other lake files by position (merge-on-read)."""

    ran_on: Literal["task_process", "spark"]
    tasks: int
    files_rewritten: int
    bytes_read: int
    bytes_written: int
    files_given_deletes: int = 0
    rows_deleted_by_position: int = 0
    delete_files_written: int = 0
    delete_bytes_written: int = 0


@dataclass
class RoundMetrics:
    rows: int
    bytes: int
    files: int
    splits: int
    duration_seconds: float
    lag_seconds: float | None = None
    #: Estimated rows the hot store held beyond this round's end (left by the per-round cap).
    backlog_rows: int | None = None
    #: Bad records the round routed to the table's side table (``on_bad_record="side_table"``).
    rejected_rows: int = 0
    #: Tiered rows the round deleted from the hot store after its commit (``eviction``).
    evicted_rows: int = 0
    #: A merge table's round (None for appends): keys new to the lake, keys whose row it replaced, keys it removed.
    inserted_rows: int | None = None
    updated_rows: int | None = None
    deleted_rows: int | None = None
    #: Where and at what cost a merge table's round wrote files again (None for appends).
    merge: MergeRewriteMetrics | None = None


@dataclass
class TableState:
    """The state document of one tiered table, stored as one JSON value."""

    table: str
    status: TableStatus = TableStatus.NEW
    epoch: int = 0
    last_tiered_time: DocumentTime | None = None
    last_checked_time: DocumentTime | None = None
    #: When the lake last held every row the hot store had (a round that left nothing behind, or found nothing
    #: new with no open transaction holding the watermark back): what staleness is measured from.
    caught_up_time: DocumentTime | None = None
    committed: CommittedSnapshot | None = None
    last_error: str | None = None
    last_error_time: DocumentTime | None = None
    consecutive_failures: int = 0
    next_retry_at: DocumentTime | None = None
    last_round: RoundMetrics | None = None
    watermark_blockers: list[dict[str, Any]] = field(default_factory=list)
    watermark_candidate: JsonObject | None = None
    attempt: str | None = None
    cleaned_through_epoch: int = 0
    quarantined_since: DocumentTime | None = None
    note: str | None = None
    evicted_rows_total: int = 0
    #: A stretch at or below the committed offsets that the hot store emptied (its newest rows are gone), watched
    #: for rows arriving in it (see ``Source.look_behind``).
    emptied_range: JsonObject | None = None
    #: Why the last round's eviction did not run or stopped (its rows stay in the hot store); None when it ran.
    eviction_note: str | None = None
    #: A change-stream table's replication slot as the last round saw it (``Source.stream_status``): its name,
    #: position, the WAL it holds back on the hot server and the bound past which that alerts.
    change_stream: dict[str, Any] | None = None
    #: How rounds write: "append", "merge" (by key, through the cursor) or "change_stream" (by key, from CDC).
    mode: str | None = None
    #: The key a merge or change-stream table is merged by.
    merge_key: list[str] | None = None
    #: When a merge table's round last removed the keys its hot table no longer has (``reconcile_keys_every_seconds``).
    keys_reconciled_at: DocumentTime | None = None
    #: The hot table's identity when a round refused it as another table than the lake's (``HotTableReplaced``):
    #: what ``reset(adopt_hot_table=True)`` lets the next round continue with.
    replaced_hot_table: dict[str, Any] | None = None
    #: An identity an operator chose to continue with, keeping the lake's rows: the next round reads that table from
    #: its start; cleared once a commit records it.
    adopt_hot_table: dict[str, Any] | None = None
    #: The last change of the hot table's shape the lake followed: when, what changed, and why the whole table is
    #: read again if it must be (``core/follow_shape.py``).
    shape_change: dict[str, Any] | None = None
    #: The hot table's identity and shape (``HotIdentity.shape_json``) as the last round that planned with it left the
    #: lake: a due table's probe compares the hot table's with it, and any difference runs the round (which follows
    #: the change or refuses it) instead of "nothing new". None: no round recorded it yet.
    hot_shape: dict[str, Any] | None = None
    #: A merge or change-stream table's lake: its position-delete files and the rows they delete, as its last round
    #: left them (merge-on-read; compaction applies them).
    lake_delete_files: int | None = None
    lake_deleted_rows: int | None = None
    #: An append table's rows updated and deleted in place behind the lake's back (PostgreSQL's counters): since the
    #: last round, in all since they were first watched, and the counters last seen.
    in_place_changes: dict[str, Any] | None = None
    #: Rounds' rows the history table could not be appended to yet (``core/round_history.py``), oldest first.
    history_backlog: list[dict[str, Any]] = field(default_factory=list)

    def keys_reconciliation_due(self, every_seconds: float | None, now: datetime) -> bool:
        """Whether this round of a merge table reads every hot key to find hard deletes and changed keys."""
        if every_seconds is None:
            return False
        return self.keys_reconciled_at is None or now >= self.keys_reconciled_at + timedelta(seconds=every_seconds)

    def transition(self, target: TableStatus) -> None:
        """Move to ``target``; raises IllegalTransition for a move the state machine forbids."""
        if target not in ALLOWED_TRANSITIONS[self.status]:
            raise IllegalTransition(f"table {self.table!r}: {self.status.value} -> {target.value} is not allowed")
        self.status = target

    def walk_to_pending(self) -> None:
        """Take the shortest legal path from a resting status to PENDING (the start of a round)."""
        path = {
            TableStatus.NEW: (TableStatus.INITIALIZED, TableStatus.SCHEDULED, TableStatus.PENDING),
            TableStatus.INITIALIZED: (TableStatus.SCHEDULED, TableStatus.PENDING),
            TableStatus.SCHEDULED: (TableStatus.PENDING,),
            TableStatus.TIERED: (TableStatus.SCHEDULED, TableStatus.PENDING),
            TableStatus.FAILED: (TableStatus.PENDING,),
            TableStatus.PENDING: (),
        }
        if self.status not in path:
            raise IllegalTransition(f"table {self.table!r}: cannot start a round from {self.status.value}")
        for step in path[self.status]:
            self.transition(step)

    def walk_to_idle(self) -> None:
        """After a round that found nothing to tier: TIERED and SCHEDULED stay, others settle on SCHEDULED."""
        if self.status in (TableStatus.TIERED, TableStatus.SCHEDULED):
            return
        if self.status in (TableStatus.NEW, TableStatus.INITIALIZED):
            if self.status is TableStatus.NEW:
                self.transition(TableStatus.INITIALIZED)
            self.transition(TableStatus.SCHEDULED)
            return
        self.walk_to_pending()
        self.transition(TableStatus.SCHEDULED)

    def record_failure(self, error: str, now: datetime, *, counted: bool = True) -> None:
        """FAILED with ``error``; ``counted=False`` (the deployment's fault, not the table's: a missing extra)
        leaves ``consecutive_failures``, and so the quarantine, alone."""
        self.transition(TableStatus.FAILED)
        self.last_error = error
        self.last_error_time = now
        if counted:
            self.consecutive_failures += 1

    def quarantine_if_exhausted(self, max_consecutive_failures: int, now: datetime) -> None:
        """After ``max_consecutive_failures`` failed rounds in a row, stop tiering until a reset."""
        if self.consecutive_failures >= max_consecutive_failures and self.quarantined_since is None:
            self.quarantined_since = now
            self.note = (
                f"quarantined after {self.consecutive_failures} consecutive failed rounds; "
                "reset the table to tier it again"
            )

    def quarantine_now(self, now: datetime) -> None:
        """Stop tiering until a reset after a failure no retry can cure (``NotRetryable``)."""
        if self.quarantined_since is None:
            self.quarantined_since = now
            self.note = (
                "quarantined at once: no retry can cure this error (see last_error); fix it, then reset the table "
                "to tier it again"
            )

    def reset(self, now: datetime, *, adopt_hot_table: bool = False) -> None:
        """Lift a quarantine (an operator's decision): the next round is tried again. With ``adopt_hot_table``, after
        a round refused the hot table as another one (dropped and created again, truncated and reloaded), the next
        round continues with that table from its start, keeping the lake's rows as history.

        Raises:
            ValueError: ``adopt_hot_table`` without a refused hot table to continue with.
        """
        if adopt_hot_table:
            if self.replaced_hot_table is None:
                raise ValueError(
                    f"table {self.table!r}: no round refused its hot table as another one; nothing to continue with"
                )
            self.adopt_hot_table = dict(self.replaced_hot_table)
        self.quarantined_since = None
        self.consecutive_failures = 0
        self.next_retry_at = None
        adopting = "; the next round tiers the new hot table from its start, keeping the lake's rows"
        self.note = f"reset at {now.isoformat()}" + (adopting if adopt_hot_table else "")

    def to_json(self) -> dict[str, Any]:
        return to_document(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TableState:
        return from_document(cls, doc)
