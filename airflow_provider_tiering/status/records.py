"""The one record of a tiered table's status that the REST API, the CLI and the Tiering page all show (the state
and maintenance documents, flattened, with what is computed from them), and of one committed round."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.state import TableStatus


class MaintenanceRecord(BaseModel):
    """The table's lake maintenance: its last run, what compaction, expiry and orphan removal did, its last error."""

    last_run_at: datetime | None
    last_outcome: str | None = Field(description='"maintained" or "failed"')
    data_files: int | None = Field(description="Data files of the current snapshot after the last run")
    snapshots: int | None = Field(description="Snapshots of the table after the last run")
    delete_files: int | None = Field(default=None, description="Position-delete files of the current snapshot then")
    deleted_rows: int | None = Field(default=None, description="Rows those delete files delete")
    last_compaction_at: datetime | None
    files_before_compaction: int | None
    files_after_compaction: int | None
    last_compaction_check: str | None = Field(description='"compacted", "below_threshold", "gave_up" or "skipped"')
    snapshots_expired: int
    snapshots_expired_total: int
    orphans_removed: int
    orphans_removed_total: int
    consecutive_failures: int
    last_error: str | None = Field(description="The failing step and its root cause, masked; kept after a success")
    last_error_time: datetime | None


class TableStatusRecord(BaseModel):
    """One tiered table: its status, position, last round and last error (the state document, flattened)."""

    table: str = Field(description="Name of the table in its DAG spec (the task id)")
    namespace: str
    lake_table: str
    asset: str = Field(description="The Airflow asset of the table, tiering/<namespace>/<table>")
    asset_id: int
    dag_id: str | None = Field(description="DAG that tiers the table (the newest one emitting its asset)")
    task_id: str | None
    status: TableStatus
    epoch: int
    last_tiered_time: datetime | None
    last_checked_time: datetime | None
    staleness_seconds: float | None = Field(description="Seconds since the table was last tiered")
    lag_seconds: float | None = Field(
        description="For time cursors: how old the last round's newest row was when the round ended; else null"
    )
    newest_data_age_seconds: float | None = Field(
        description="For time cursors: how old the lake's newest row is now; null for other cursors (an integer "
        "cursor says nothing about time)"
    )
    backlog_rows: int | None = Field(
        description="Rows beyond its end the last round saw and left for later rounds (its max_rows_per_round cap); "
        "rows that arrived since are not counted (null: no round yet)"
    )
    last_round_rows: int | None
    committed_offsets: Offsets | None
    snapshot_id: int | None
    consecutive_failures: int
    next_retry_at: datetime | None
    quarantined: bool
    quarantined_since: datetime | None
    last_error: str | None = Field(description="Last error, masked and truncated to 2 KiB; kept after a success")
    last_error_time: datetime | None
    watermark_blockers: list[dict[str, Any]] = Field(description="Open transactions holding the safe watermark")
    note: str | None
    last_round_evicted_rows: int | None = Field(description="Tiered rows the last round deleted from the hot store")
    evicted_rows_total: int = Field(description="Tiered rows deleted from the hot store so far (eviction)")
    eviction_note: str | None = Field(description="Why the last round's eviction did not run or stopped")
    maintenance: MaintenanceRecord | None = Field(description="None before the table's first maintenance run")
    mode: str | None = Field(default=None, description="append, merge (by cursor) or change_stream (CDC)")
    merge_key: list[str] | None = Field(default=None, description="The key a merge or change-stream table merges by")
    last_round_inserted_rows: int | None = Field(default=None, description="Keys the last merge added to the lake")
    last_round_updated_rows: int | None = Field(default=None, description="Keys whose lake row the last merge replaced")
    last_round_deleted_rows: int | None = Field(default=None, description="Keys the last merge removed from the lake")
    last_round_merge: dict[str, Any] | None = Field(
        default=None,
        description="Where the last merge wrote files again and at what cost: ran_on (task_process or spark), tasks, "
        "files_rewritten, bytes_read, bytes_written",
    )
    change_stream: dict[str, Any] | None = Field(
        default=None,
        description="A change-stream table's log as its last round saw it. Every stream: position (the lake's, as "
        "the database writes it), log_needed_bytes (the log the server keeps that the table still needs: a slot's "
        "retained WAL, or the binlog from the lake's position to its end), log_backlog_bytes (what a capped round left "
        "for the next ones; its changes, estimated, are backlog_rows). PostgreSQL: slot, confirmed_flush_lsn, "
        "retained_wal_bytes, max_retained_wal_bytes, backlog_wal_bytes. MariaDB/MySQL: binlog_end, "
        "oldest_binlog_file, binlog_files, binlog_expire_logs_seconds, server_id",
    )
    in_place_changes: dict[str, Any] | None = Field(
        default=None,
        description="An append table's hot rows updated and deleted in place behind the lake's back (PostgreSQL "
        "counts them): updated_since_last_round, deleted_since_last_round, updated_total, deleted_total, "
        "watched_since",
    )
    shape_change: dict[str, Any] | None = Field(
        default=None, description="The last change of the hot table's shape the lake followed: at, changes, reload"
    )
    lake_delete_files: int | None = Field(
        default=None,
        description="A merge or change-stream table's position-delete files in the lake (merge-on-read rounds write "
        "them, compaction applies them), as the later of its last round and its last maintenance run saw them",
    )
    lake_deleted_rows: int | None = Field(default=None, description="The lake rows those delete files delete")
    replaced_hot_table: dict[str, Any] | None = Field(
        default=None,
        description="The hot table a round refused as another one (dropped and created again, or its rows "
        "replaced): what a reset with adopt_hot_table continues with",
    )
    stream_group: dict[str, Any] | None = Field(
        default=None,
        description="A table of a stream group: its group's reader as its state document shows it (name, status, "
        "position: the change log's, lag_seconds: since it last read to the end of the database's log, last_read_time, "
        "last_error and its time, consecutive_failures, log: the server's side, its slot and retained WAL or the "
        "binlog it needs) and the table in it (joined_at, backlog_changes: its changes waiting in the change log as "
        "the reader last counted them, backlog_counted_at, note: why it is not read yet)",
    )


@dataclass(frozen=True)
class TieringRound:
    """One committed round of a table: from its asset event (``recovered`` when a later round announced it for a
    round that died first), or read from the lake's snapshot where no event announced it (``source="lake"``)."""

    timestamp: datetime
    epoch: int | None
    snapshot_id: int | None
    rows: int
    bytes: int
    files: int
    duration_seconds: float | None
    lag_seconds: float | None
    start_offsets: Offsets | None
    end_offsets: Offsets | None
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    recovered: bool = False
    source: str = "event"

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "timestamp": self.timestamp.isoformat()}


@dataclass(frozen=True)
class DataAgeRound:
    """One round of a table as the lake's history table (``sys.lake_tiering_history``) holds it: when it ran, how it
    ended, and the data age at its start and its end (how long the lake had not caught up with the hot store)."""

    started_at: datetime
    ended_at: datetime
    outcome: str
    epoch: int
    rows_in: int | None
    data_age_before_seconds: float | None
    data_age_after_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "started_at": self.started_at.isoformat(), "ended_at": self.ended_at.isoformat()}


@dataclass(frozen=True)
class DataAges:
    """A table's rounds from the history table, oldest first; ``unavailable`` says why there are none when the
    history table could not be read (its catalog unreachable, the status namespace off)."""

    table: str
    rounds: list[DataAgeRound]
    unavailable: str | None = None
