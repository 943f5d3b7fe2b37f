"""Per-table tiering state: the state machine of DESIGN §3 and the JSON state document."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass
class CommittedSnapshot:
    """What the lake holds, as of the last recorded round (a cache of the lake snapshot)."""

    snapshot_id: int
    epoch: int
    end_offsets: dict[str, Any]
    committed_at: datetime | None = None


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


@dataclass
class TableState:
    """The state document of one tiered table, stored as one JSON value."""

    table: str
    status: TableStatus = TableStatus.NEW
    epoch: int = 0
    last_tiered_time: datetime | None = None
    last_checked_time: datetime | None = None
    committed: CommittedSnapshot | None = None
    last_error: str | None = None
    last_error_time: datetime | None = None
    consecutive_failures: int = 0
    next_retry_at: datetime | None = None
    last_round: RoundMetrics | None = None
    watermark_blockers: list[dict[str, Any]] = field(default_factory=list)
    watermark_candidate: dict[str, Any] | None = None
    attempt: str | None = None
    cleaned_through_epoch: int = 0
    quarantined_since: datetime | None = None
    note: str | None = None
    evicted_rows_total: int = 0
    #: Why the last round's eviction did not run or stopped (its rows stay in the hot store); None when it ran.
    eviction_note: str | None = None

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

    def record_failure(self, error: str, now: datetime) -> None:
        self.transition(TableStatus.FAILED)
        self.last_error = error
        self.last_error_time = now
        self.consecutive_failures += 1

    def quarantine_if_exhausted(self, max_consecutive_failures: int, now: datetime) -> None:
        """After ``max_consecutive_failures`` failed rounds in a row, stop tiering until a reset."""
        if self.consecutive_failures >= max_consecutive_failures and self.quarantined_since is None:
            self.quarantined_since = now
            self.note = (
                f"quarantined after {self.consecutive_failures} consecutive failed rounds; "
                "reset the table to tier it again"
            )

    def reset(self, now: datetime) -> None:
        """Lift a quarantine (an operator's decision): the next round is tried again."""
        self.quarantined_since = None
        self.consecutive_failures = 0
        self.next_retry_at = None
        self.note = f"reset at {now.isoformat()}"

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["status"] = self.status.value
        for key in ("last_tiered_time", "last_checked_time", "last_error_time", "next_retry_at", "quarantined_since"):
            doc[key] = _iso(getattr(self, key))
        if self.committed is not None:
            doc["committed"]["committed_at"] = _iso(self.committed.committed_at)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TableState:
        committed = doc.get("committed")
        last_round = doc.get("last_round")
        return cls(
            table=doc["table"],
            status=TableStatus(doc.get("status", TableStatus.NEW.value)),
            epoch=int(doc.get("epoch", 0)),
            last_tiered_time=_parse_time(doc.get("last_tiered_time")),
            last_checked_time=_parse_time(doc.get("last_checked_time")),
            committed=None
            if committed is None
            else CommittedSnapshot(
                snapshot_id=int(committed["snapshot_id"]),
                epoch=int(committed["epoch"]),
                end_offsets=dict(committed["end_offsets"]),
                committed_at=_parse_time(committed.get("committed_at")),
            ),
            last_error=doc.get("last_error"),
            last_error_time=_parse_time(doc.get("last_error_time")),
            consecutive_failures=int(doc.get("consecutive_failures", 0)),
            next_retry_at=_parse_time(doc.get("next_retry_at")),
            last_round=None if last_round is None else RoundMetrics(**last_round),
            watermark_blockers=list(doc.get("watermark_blockers") or []),
            watermark_candidate=doc.get("watermark_candidate"),
            attempt=doc.get("attempt"),
            cleaned_through_epoch=int(doc.get("cleaned_through_epoch", 0)),
            quarantined_since=_parse_time(doc.get("quarantined_since")),
            note=doc.get("note"),
            evicted_rows_total=int(doc.get("evicted_rows_total", 0)),
            eviction_note=doc.get("eviction_note"),
        )
