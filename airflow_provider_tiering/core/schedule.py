"""When a table is due for a round: freshness-driven scheduling, decided from the state document alone."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow_provider_tiering.core.state import TableState, TableStatus

# A table resting in one of these states has a freshness clock; any other state means "act now"
# (never tiered, failed and retrying, or an attempt that must be recovered).
_RESTING = frozenset({TableStatus.TIERED, TableStatus.SCHEDULED})


def due_at(state: TableState | None, freshness_seconds: float) -> datetime | None:
    """When the table next needs a round; None means now."""
    if state is None or state.status not in _RESTING or state.last_tiered_time is None:
        return None
    return state.last_tiered_time + timedelta(seconds=freshness_seconds)


def is_due(state: TableState | None, freshness_seconds: float, now: datetime) -> bool:
    """Due once ``freshness_seconds`` have passed since the last tiered round (or at once when never tiered,
    failed, or left mid-round). Whether there are new rows is the round's own, cheap, first question."""
    when = due_at(state, freshness_seconds)
    return when is None or now >= when


def record_not_due(state: TableState, now: datetime) -> None:
    """A check that found the table not due: it rests in SCHEDULED until its freshness interval passes."""
    if state.status is TableStatus.TIERED:
        state.transition(TableStatus.SCHEDULED)
    state.last_checked_time = now


def settled_offsets(state: TableState | None) -> dict[str, Any] | None:
    """The committed offsets of a table at rest after a good round, none pending (no failure, quarantine or
    unconfirmed watermark): if the hot store has no row beyond them, a round has nothing to do."""
    if (
        state is None
        or state.status not in _RESTING
        or state.committed is None
        or state.consecutive_failures
        or state.quarantined_since is not None
        or state.watermark_candidate is not None
    ):
        return None
    return state.committed.end_offsets
