"""What a round reports: the phases it passes (to an observer) and the result it returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import TieringCommit
from airflow_provider_tiering.core.state import RoundMetrics

if TYPE_CHECKING:
    import pyarrow as pa


class RoundPhase(enum.StrEnum):
    """The phases a round reports to its observer, in order."""

    PLANNED = "planned"
    ACQUIRED = "acquired"
    WRITING = "writing"
    WRITTEN = "written"
    COMMITTED = "committed"
    RECORDED = "recorded"
    CLEANED = "cleaned"
    EVICTED = "evicted"


class RoundOutcome(enum.StrEnum):
    TIERED = "tiered"
    NOTHING_TO_TIER = "nothing_to_tier"


@dataclass
class RoundResult:
    """What a round did; ``event_extra()`` is the payload of the table's asset event."""

    table: str
    outcome: RoundOutcome
    epoch: int
    snapshot_id: int | None
    start_offsets: Offsets | None
    end_offsets: Offsets | None
    metrics: RoundMetrics | None = None
    blockers: list[dict[str, Any]] = field(default_factory=list)
    cleaned_files: int = 0
    note: str | None = None
    #: Earlier commits that no asset event announced (see ``run_round``'s ``announced_epoch``), oldest first.
    unannounced: tuple[TieringCommit, ...] = ()
    #: The hot table's columns as the round read them (a round that tiered rows): its lineage's fields.
    read_schema: pa.Schema | None = field(default=None, compare=False, repr=False)

    def announcements(self) -> list[dict[str, Any]]:
        """The asset events this round owes, oldest first: its unannounced predecessors (``recovered``), then its
        own when it tiered rows."""
        owed = [commit.event_extra(self.table) for commit in self.unannounced]
        if self.outcome is RoundOutcome.TIERED:
            owed.append(self.event_extra())
        return owed

    def event_extra(self) -> dict[str, Any]:
        metrics = self.metrics
        return {
            "table": self.table,
            "epoch": self.epoch,
            "snapshot_id": self.snapshot_id,
            "start_offsets": self.start_offsets,
            "end_offsets": self.end_offsets,
            "rows": metrics.rows if metrics else 0,
            "bytes": metrics.bytes if metrics else 0,
            "files": metrics.files if metrics else 0,
            "duration_seconds": metrics.duration_seconds if metrics else 0.0,
            "lag_seconds": metrics.lag_seconds if metrics else None,
            "backlog_rows": metrics.backlog_rows if metrics else None,
            "rejected_rows": metrics.rejected_rows if metrics else 0,
            "evicted_rows": metrics.evicted_rows if metrics else 0,
            **(
                {
                    "inserted_rows": metrics.inserted_rows,
                    "updated_rows": metrics.updated_rows,
                    "deleted_rows": metrics.deleted_rows,
                }
                if metrics is not None and metrics.inserted_rows is not None
                else {}
            ),
        }
