"""Every round as SQL users read it: one row of the lake's history table (``sys.lake_tiering_history``,
``lake/history_table.py``) per round a table's task ran, failed rounds included.

A row is made from what the task saw: the table's state before and after the round, and the round's result when it
ended (None when it failed). Its data age is the product's own (``core/staleness.py``): how long the lake had not
caught up with the hot store, at the round's start and at its end (a round that caught up ends behind by no more
than its own duration: the lake holds what the hot store had when the round read it).

Appending never fails nor slows the round: the row is appended after it, and one that could not be appended (the
catalog unreachable) is kept in the table's state (``TableState.history_backlog``, at most
:data:`BACKLOG_LIMIT` rows, the oldest dropped first and counted) for the next round's append to catch up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from airflow_provider_tiering.core.round_result import RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import stale_for_seconds
from airflow_provider_tiering.core.state import TableState
from airflow_provider_tiering.core.state_store import StateStore

log = logging.getLogger(__name__)

#: The history table's name in its namespace (the status table's: ``sys`` unless configured otherwise).
HISTORY_TABLE = "lake_tiering_history"
#: Rows a table keeps in its state while the history table cannot be appended to.
BACKLOG_LIMIT = 500


@dataclass(frozen=True)
class HistoryRow:
    """One round (see the module's description); ``outcome`` is ``tiered``, ``nothing_to_tier`` or ``failed``."""

    database_name: str
    table_name: str
    tiered_table: str
    airflow_dag_id: str | None
    airflow_run_id: str | None
    tiering_epoch: int
    started_at: datetime
    ended_at: datetime
    outcome: str
    rows_in: int | None
    rows_inserted: int | None
    rows_updated: int | None
    rows_deleted: int | None
    bytes_written: int | None
    snapshot_id: int | None
    data_age_before_seconds: float | None
    data_age_after_seconds: float | None
    error: str | None

    def to_document(self) -> dict[str, Any]:
        found = asdict(self)
        found["started_at"], found["ended_at"] = self.started_at.isoformat(), self.ended_at.isoformat()
        return found

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> HistoryRow:
        found = dict(document)
        found["started_at"] = datetime.fromisoformat(str(found["started_at"]))
        found["ended_at"] = datetime.fromisoformat(str(found["ended_at"]))
        return cls(**found)


def history_row(
    spec: TableSpec,
    *,
    dag_id: str | None,
    run_id: str | None,
    before: TableState | None,
    after: TableState | None,
    started_at: datetime,
    ended_at: datetime,
    result: RoundResult | None,
) -> HistoryRow:
    """The row of a round that ended with ``result``, or failed (``result`` None: its error is the state's)."""
    metrics = None if result is None else result.metrics
    failed = result is None
    error = None
    if failed and after is not None and after.last_error_time is not None and after.last_error_time >= started_at:
        error = after.last_error
    return HistoryRow(
        database_name=spec.lake.namespace,
        table_name=spec.lake.table,
        tiered_table=spec.name,
        airflow_dag_id=dag_id,
        airflow_run_id=run_id,
        tiering_epoch=(result.epoch if result is not None else after.epoch if after is not None else 0),
        started_at=started_at,
        ended_at=ended_at,
        outcome="failed" if result is None else result.outcome.value,
        rows_in=None if metrics is None else metrics.rows,
        rows_inserted=None if metrics is None else metrics.inserted_rows,
        rows_updated=None if metrics is None else metrics.updated_rows,
        rows_deleted=None if metrics is None else metrics.deleted_rows,
        bytes_written=None if metrics is None else metrics.bytes,
        snapshot_id=None if result is None else result.snapshot_id,
        data_age_before_seconds=stale_for_seconds(before, started_at),
        data_age_after_seconds=stale_for_seconds(after, ended_at),
        error=error,
    )


class HistorySink(Protocol):
    """Appends rounds' rows to the history table (``hooks/history_table.py``): whether they were appended. Never
    raises: a failure is logged and counted where it happens."""

    def __call__(self, rows: Sequence[HistoryRow]) -> bool: ...


def record_history(state_store: StateStore, sink: HistorySink, row: HistoryRow) -> None:
    """Append ``row``, after the rows earlier appends could not, and keep in the table's state what this append could
    not (see the module's description). Never raises: the round is over, and its history is reporting."""
    try:
        state = state_store.load()
        backlog = [HistoryRow.from_document(d) for d in (state.history_backlog if state is not None else [])]
        if sink([*backlog, row]):
            if backlog and state is not None:
                state.history_backlog = []
                state_store.save(state)
            return
        if state is None:
            return
        kept = [*state.history_backlog, row.to_document()]
        if len(kept) > BACKLOG_LIMIT:
            log.warning(
                "%s: the history table could not be appended to for %d rounds; the oldest %d rows are dropped",
                row.tiered_table, len(kept), len(kept) - BACKLOG_LIMIT,
            )  # fmt: skip
        state.history_backlog = kept[-BACKLOG_LIMIT:]
        state_store.save(state)
    except Exception as exc:  # the round's own outcome stands whatever its history does
        log.warning("%s: the round's history row was not recorded: %s", row.tiered_table, exc)
