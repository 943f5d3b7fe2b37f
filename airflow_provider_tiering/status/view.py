"""One tiered table's status as the status surfaces show it: its asset, its state and maintenance documents, and
the record (``status/records.py``) they are shown as."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.documents import to_document
from airflow_provider_tiering.core.maintenance import MaintenanceStatus
from airflow_provider_tiering.core.offsets import cursor_lag_seconds
from airflow_provider_tiering.core.state import TableState, TableStatus, utcnow
from airflow_provider_tiering.core.status_rows import StatusRow, status_row
from airflow_provider_tiering.core.stream_state import StreamGroupState
from airflow_provider_tiering.hooks.asset_state import STATE_KEY
from airflow_provider_tiering.status.records import TableStatusRecord


@dataclass(frozen=True)
class TieringStatus:
    """One tiered table as the status surfaces show it; ``state`` is its whole state document."""

    asset_id: int
    asset_name: str
    asset_uri: str
    namespace: str
    lake_table: str
    dag_id: str | None
    task_id: str | None
    state: TableState
    maintenance: MaintenanceStatus | None = None
    #: A table of a stream group: its group's state document (None: not one, or its reader never ran).
    stream: StreamGroupState | None = None
    #: The key of its state document in its asset's state store (a declared database's table: its own).
    state_key: str = STATE_KEY

    @property
    def table(self) -> str:
        return self.state.table

    @property
    def catalog_conn_id(self) -> str:
        """The connection of the lake's catalog, from the asset's URI (``iceberg://<conn id>/<namespace>/<table>``)."""
        return self.asset_uri.removeprefix("iceberg://").split("/", 1)[0]

    def status_row(self, now: datetime) -> StatusRow:
        """The table's row in its catalog's status table (``sys.lake_tiering_status``)."""
        return status_row(
            namespace=self.namespace, table=self.lake_table, asset=self.asset_name, dag_id=self.dag_id,
            tiered_table=self.table, state=self.state, now=now, group=self.stream,
        )  # fmt: skip

    @property
    def status(self) -> TableStatus:
        return self.state.status

    @property
    def quarantined(self) -> bool:
        return self.state.quarantined_since is not None

    @property
    def last_round_rows(self) -> int | None:
        return None if self.state.last_round is None else self.state.last_round.rows

    @property
    def lag_seconds(self) -> float | None:
        """How far the lake's newest row is behind its round's end, for time cursors (from the last round)."""
        return None if self.state.last_round is None else self.state.last_round.lag_seconds

    @property
    def backlog_rows(self) -> int | None:
        """Rows the last round saw in the hot store beyond what it tiered (the per-round cap), where known."""
        return None if self.state.last_round is None else self.state.last_round.backlog_rows

    def newest_data_age_seconds(self, now: datetime | None = None) -> float | None:
        """How old the newest row in the lake is now, for time cursors (its cursor value); None for other cursors."""
        committed = self.state.committed
        return None if committed is None else cursor_lag_seconds(committed.end_offsets, now or utcnow())

    def staleness_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since the table was last tiered."""
        last = self.state.last_tiered_time
        return None if last is None else round(((now or utcnow()) - last).total_seconds(), 1)

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """The record as JSON (the CLI's ``-o json``; the REST API's body)."""
        found: dict[str, Any] = self.record(now).model_dump(mode="json")
        return found

    def record(self, now: datetime | None = None) -> TableStatusRecord:
        """The table's status record, shown by the REST API, the CLI and the page."""
        state = self.state
        return TableStatusRecord.model_validate(
            {
                "table": self.table,
                "namespace": self.namespace,
                "lake_table": self.lake_table,
                "asset": self.asset_name,
                "asset_id": self.asset_id,
                "dag_id": self.dag_id,
                "task_id": self.task_id,
                "status": state.status.value,
                "epoch": state.epoch,
                "last_tiered_time": (state.last_tiered_time),
                "last_checked_time": (state.last_checked_time),
                "staleness_seconds": self.staleness_seconds(now),
                "lag_seconds": self.lag_seconds,
                "newest_data_age_seconds": self.newest_data_age_seconds(now),
                "backlog_rows": self.backlog_rows,
                "last_round_rows": self.last_round_rows,
                "committed_offsets": None if state.committed is None else state.committed.end_offsets,
                "snapshot_id": None if state.committed is None else state.committed.snapshot_id,
                "consecutive_failures": state.consecutive_failures,
                "next_retry_at": (state.next_retry_at),
                "quarantined": self.quarantined,
                "quarantined_since": (state.quarantined_since),
                "last_error": state.last_error,
                "last_error_time": (state.last_error_time),
                "watermark_blockers": state.watermark_blockers,
                "note": state.note,
                "last_round_evicted_rows": None if state.last_round is None else state.last_round.evicted_rows,
                "evicted_rows_total": state.evicted_rows_total,
                "eviction_note": state.eviction_note,
                "maintenance": _maintenance_json(self.maintenance),
                "mode": state.mode,
                "merge_key": state.merge_key,
                "last_round_inserted_rows": None if state.last_round is None else state.last_round.inserted_rows,
                "last_round_updated_rows": None if state.last_round is None else state.last_round.updated_rows,
                "last_round_deleted_rows": None if state.last_round is None else state.last_round.deleted_rows,
                "last_round_merge": _merge_json(state),
                "change_stream": state.change_stream,
                "in_place_changes": _in_place_json(state.in_place_changes),
                "shape_change": state.shape_change,
                "replaced_hot_table": state.replaced_hot_table,
                "stream_group": stream_group_json(self.stream, state, now or utcnow()),
                **self._lake_deletes(),
            }
        )

    def _lake_deletes(self) -> dict[str, int | None]:
        """The lake's position-delete files and the rows they delete, as the later of the last round and the last
        maintenance run (a compaction applies them) saw them."""
        state, maintenance = self.state, self.maintenance
        from_round = {"lake_delete_files": state.lake_delete_files, "lake_deleted_rows": state.lake_deleted_rows}
        if maintenance is None or maintenance.last_run_at is None or maintenance.delete_files is None:
            return from_round
        if state.last_tiered_time is not None and state.last_tiered_time > maintenance.last_run_at:
            return from_round
        return {"lake_delete_files": maintenance.delete_files, "lake_deleted_rows": maintenance.deleted_rows}


def stream_group_json(stream: StreamGroupState | None, state: TableState, now: datetime) -> dict[str, Any] | None:
    """A table's stream group as the status shows it: its reader, and the table in it."""
    if stream is None:
        return None
    member = stream.table_named(state.table)
    return {
        "name": stream.group,
        "status": stream.status,
        "position": stream.position,
        "lag_seconds": stream.lag_seconds(now),
        "last_read_time": stream.last_read_time,
        "last_error": stream.last_error,
        "last_error_time": stream.last_error_time,
        "consecutive_failures": stream.consecutive_failures,
        "log": stream.log,
        "joined_at": None if member is None else member.joined_at,
        "backlog_changes": None if member is None else member.backlog_changes,
        "backlog_counted_at": None if member is None else member.backlog_counted_at,
        "note": None if member is None else member.note,
    }


def _merge_json(state: TableState) -> dict[str, Any] | None:
    """Where and at what cost the last round's merge wrote files again."""
    merge = None if state.last_round is None else state.last_round.merge
    return None if merge is None else to_document(merge)


def _in_place_json(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """An append table's rows changed in place, without the raw counters they are computed from."""
    return None if found is None else {k: v for k, v in found.items() if k != "counters"}


def _maintenance_json(status: MaintenanceStatus | None) -> dict[str, Any] | None:
    """The maintenance fields of the status record (None before the table's first maintenance run)."""
    if status is None:
        return None
    compaction = status.last_compaction
    return {
        "last_run_at": (status.last_run_at),
        "last_outcome": status.last_outcome,
        "data_files": status.data_files,
        "snapshots": status.snapshots,
        "delete_files": status.delete_files,
        "deleted_rows": status.deleted_rows,
        "last_compaction_at": (status.last_compaction_at),
        "files_before_compaction": None if compaction is None else compaction.files_before,
        "files_after_compaction": None if compaction is None else compaction.files_after,
        "last_compaction_check": None if status.last_check is None else status.last_check.outcome,
        "snapshots_expired": status.snapshots_expired,
        "snapshots_expired_total": status.snapshots_expired_total,
        "orphans_removed": status.orphans_removed,
        "orphans_removed_total": status.orphans_removed_total,
        "consecutive_failures": status.consecutive_failures,
        "last_error": status.last_error,
        "last_error_time": (status.last_error_time),
    }
