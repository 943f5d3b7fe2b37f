"""A tiered table's status as SQL users read it: one row of the lake's status table (``sys.lake_tiering_status``,
``lake/status_table.py``), derived from the table's state document alone.

The first columns are those of the lake-tiering status table of the systems this provider follows (a database, a
table, its tiering status and epoch, when it was last tiered, its last error and when); this provider's own follow:
where Airflow tiers it, its quarantine and retries, its last round, how old the lake's data is, and a change
stream's backlog. ``last_error`` is NULL while the table is healthy (the seed's meaning); the error kept after a
later success (a flapping table) is ``recent_error``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.staleness import stale_for_seconds
from airflow_provider_tiering.core.state import TableState, TableStatus
from airflow_provider_tiering.core.stream_state import StreamGroupState

#: The status table's name in its namespace (``sys`` unless configured otherwise).
STATUS_TABLE = "lake_tiering_status"


@dataclass(frozen=True)
class StatusRow:
    """One tiered table in the status table (see the module's description); ``as_of`` is when the row was written."""

    database_name: str
    table_name: str
    status: str
    tiering_epoch: int
    last_tiered_time: datetime | None
    last_error: str | None
    last_error_time: datetime | None
    airflow_asset: str
    airflow_dag_id: str | None
    tiered_table: str
    quarantined: bool
    consecutive_failures: int
    next_retry_at: datetime | None
    last_round_rows: int | None
    last_round_duration_seconds: float | None
    snapshot_id: int | None
    data_age_seconds: float | None
    backlog_rows: int | None
    backlog_wal_bytes: int | None
    retained_wal_bytes: int | None
    log_position: str | None
    log_backlog_bytes: int | None
    log_needed_bytes: int | None
    recent_error: str | None
    recent_error_time: datetime | None
    as_of: datetime
    #: A table of a stream group: its group, its changes waiting in the group's change log, and the group's reader
    #: (its status, its error while failing, and how long since it last read to the end of the database's log).
    stream_group: str | None = None
    log_backlog_changes: int | None = None
    stream_reader_status: str | None = None
    stream_reader_error: str | None = None
    stream_reader_lag_seconds: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.database_name, self.table_name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def status_row(
    *,
    namespace: str,
    table: str,
    asset: str,
    dag_id: str | None,
    tiered_table: str,
    state: TableState | None,
    now: datetime,
    group: StreamGroupState | None = None,
) -> StatusRow:
    """The status table's row of one tiered table (``namespace.table`` in the lake) from its state document (None:
    never tiered, ``NEW``), and a table of a stream group's from its group's document too (``group``)."""
    state = state or TableState(table=tiered_table)
    failing = state.status is TableStatus.FAILED or state.quarantined_since is not None
    last_round = state.last_round
    stream = state.change_stream or {}
    return StatusRow(
        database_name=namespace,
        table_name=table,
        status=state.status.value,
        tiering_epoch=state.epoch,
        last_tiered_time=state.last_tiered_time,
        last_error=state.last_error if failing else None,
        last_error_time=state.last_error_time if failing else None,
        airflow_asset=asset,
        airflow_dag_id=dag_id,
        tiered_table=tiered_table,
        quarantined=state.quarantined_since is not None,
        consecutive_failures=state.consecutive_failures,
        next_retry_at=state.next_retry_at,
        last_round_rows=None if last_round is None else last_round.rows,
        last_round_duration_seconds=None if last_round is None else last_round.duration_seconds,
        snapshot_id=None if state.committed is None else state.committed.snapshot_id,
        data_age_seconds=stale_for_seconds(state, now),
        backlog_rows=None if last_round is None else last_round.backlog_rows,
        backlog_wal_bytes=_int_or_none(stream.get("backlog_wal_bytes")),
        retained_wal_bytes=_int_or_none(stream.get("retained_wal_bytes")),
        log_position=None if stream.get("position") is None else str(stream["position"]),
        log_backlog_bytes=_int_or_none(stream.get("log_backlog_bytes")),
        log_needed_bytes=_int_or_none(stream.get("log_needed_bytes")),
        recent_error=state.last_error,
        recent_error_time=state.last_error_time,
        as_of=now,
        stream_group=_str_or_none(stream.get("stream_group")) if group is None else group.group,
        log_backlog_changes=_int_or_none(stream.get("log_backlog_changes"))
        if group is None
        else _backlog(group, state),
        stream_reader_status=None if group is None else group.status,
        stream_reader_error=None if group is None or group.status != "failed" else group.last_error,
        stream_reader_lag_seconds=None if group is None else group.lag_seconds(now),
    )


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _backlog(stream: StreamGroupState, state: TableState) -> int | None:
    """A group's table's changes waiting in the change log: the later count of its last round's and the reader's."""
    member = stream.table_named(state.table)
    counted = (state.change_stream or {}).get("log_backlog_changes")
    if member is None or member.backlog_changes is None or member.backlog_counted_at is None:
        return _int_or_none(counted)
    if (
        counted is not None
        and state.last_checked_time is not None
        and state.last_checked_time > member.backlog_counted_at
    ):
        return _int_or_none(counted)
    return member.backlog_changes


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(str(value))
