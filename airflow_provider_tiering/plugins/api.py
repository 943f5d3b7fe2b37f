"""The tiering REST API (JSON, described by the app's OpenAPI document): statuses, history, reset, trigger.

Every route reads or writes Airflow's metadata database through :mod:`airflow_provider_tiering.status` and
:mod:`airflow_provider_tiering.control`; the routes are plain functions, so FastAPI runs them in its thread pool.
Lists and lookups see only the tables whose asset the caller may read (:func:`access.readable_by`): a table the
caller may not read is not found, and does not make a name ambiguous.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel, Field

from airflow_provider_tiering.control import table_tasks, trigger_tables
from airflow_provider_tiering.core.errors import AmbiguousTable, InvalidRunConf, TableNotFound
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.plugins.access import (
    GetUserDep,
    authorize_reset,
    authorize_trigger,
    can_read,
    readable_by,
)
from airflow_provider_tiering.status import (
    TieringRound,
    TieringStatus,
    get_tiering_status,
    list_tiering_statuses,
    reset_table,
    session_scope,
    tiering_history,
)

router = APIRouter(prefix="/api", tags=["tiering"], dependencies=[can_read])

TablePath = Annotated[
    str,
    Path(
        description="The tiered table: its name in its DAG (its task id), <namespace>.<table> (its lake identifier), "
        "or its asset's name or URI (a name several readable tables share is refused with 400, naming them)"
    ),
]


class MaintenanceResponse(BaseModel):
    """The table's lake maintenance: its last run, what compaction, expiry and orphan removal did, its last error."""

    last_run_at: datetime | None
    last_outcome: str | None = Field(description='"maintained" or "failed"')
    data_files: int | None = Field(description="Data files of the current snapshot after the last run")
    snapshots: int | None = Field(description="Snapshots of the table after the last run")
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


class TableStatusResponse(BaseModel):
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
    committed_offsets: dict[str, Any] | None
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
    maintenance: MaintenanceResponse | None = Field(description="None before the table's first maintenance run")
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
        description="A change-stream table's replication slot as its last round saw it: slot, position, "
        "retained_wal_bytes, max_retained_wal_bytes, backlog_wal_bytes (the WAL a capped round left for the next "
        "ones; its changes, estimated, are backlog_rows)",
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
    replaced_hot_table: dict[str, Any] | None = Field(
        default=None,
        description="The hot table a round refused as another one (dropped and created again, or its rows "
        "replaced): what a reset with adopt_hot_table continues with",
    )


class TableListResponse(BaseModel):
    tables: list[TableStatusResponse]
    total_entries: int


class HistoryResponse(BaseModel):
    table: str
    rounds: list[TieringRound] = Field(description="Newest first; each round as its asset event recorded it")


class TriggerRequest(BaseModel):
    tables: list[str] = Field(min_length=1, description="Tables to tier now, due or not")


class TriggeredRunResponse(BaseModel):
    dag_id: str
    run_id: str
    tasks: dict[str, str] = Field(description="Each triggered table and its task id")
    paused: bool = Field(description="The DAG is paused: the run waits until it is unpaused")


class TriggerResponse(BaseModel):
    runs: list[TriggeredRunResponse]


def _response(found: TieringStatus) -> TableStatusResponse:
    return TableStatusResponse.model_validate(found.to_json())


def _not_found(err: TableNotFound) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, str(err) or "no such table")


def _ambiguous(err: AmbiguousTable) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, str(err))


def _one(table: str, user: Any, session: Any | None = None) -> TieringStatus:
    """The table ``table`` names among those ``user`` may read; 404 or 400 (ambiguous) otherwise."""
    try:
        return get_tiering_status(table, readable=readable_by(user), session=session)
    except TableNotFound as err:
        raise _not_found(err) from err
    except AmbiguousTable as err:
        raise _ambiguous(err) from err


@router.get("/tables", response_model=TableListResponse, summary="Every tiered table's status the caller may read")
def list_tables(
    user: GetUserDep,
    namespace: Annotated[str | None, Query(description="Only tables of this lake namespace")] = None,
    table_status: Annotated[TableStatus | None, Query(alias="status", description="Only tables in this status")] = None,
) -> TableListResponse:
    found = list_tiering_statuses(namespace=namespace, status=table_status, readable=readable_by(user))
    tables = [_response(s) for s in found]
    return TableListResponse(tables=tables, total_entries=len(tables))


# ``{table:path}``: an asset's name and URI hold slashes. The history and reset routes come first, so a path
# ending in /history or /reset is theirs.
@router.get(
    "/tables/{table:path}/history",
    response_model=HistoryResponse,
    summary="A table's recent successful rounds",
    responses={400: {}, 404: {}},
)
def get_history(
    table: TablePath,
    user: GetUserDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most recent rounds to return")] = 50,
) -> HistoryResponse:
    try:
        rounds = tiering_history(table, limit, readable=readable_by(user))
    except TableNotFound as err:
        raise _not_found(err) from err
    except AmbiguousTable as err:
        raise _ambiguous(err) from err
    return HistoryResponse(table=table, rounds=rounds)


@router.post(
    "/tables/{table:path}/reset",
    response_model=TableStatusResponse,
    summary="Lift a table's quarantine so its next round runs",
    responses={400: {}, 403: {}, 404: {}},
)
def reset(table: TablePath, user: GetUserDep) -> TableStatusResponse:
    with session_scope(None) as session:
        found = _one(table, user, session)
        authorize_reset(user, found.asset_id, found.table)
        reset_table(found.asset_name, session=session)  # the asset's name: one table, whatever ``table`` said
        session.flush()
        return _response(get_tiering_status(found.asset_name, session=session))


@router.get(
    "/tables/{table:path}",
    response_model=TableStatusResponse,
    summary="One table's status",
    responses={400: {}, 404: {}},
)
def get_table(table: TablePath, user: GetUserDep) -> TableStatusResponse:
    return _response(_one(table, user))


@router.post(
    "/trigger",
    response_model=TriggerResponse,
    summary="Start a run of each DAG involved that tiers only the named tables",
    responses={400: {}, 403: {}, 404: {}},
)
def trigger(body: TriggerRequest, user: GetUserDep) -> TriggerResponse:
    known = table_tasks()
    unknown = [name for name in body.tables if name not in known]
    if unknown:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no DAG tiers table(s) {', '.join(sorted(unknown))}")
    authorize_trigger(user, {place.dag_id for name in body.tables for place in known[name]})
    try:
        runs = trigger_tables(body.tables, triggered_by="rest_api", user=user.get_name())
    except TableNotFound as err:
        raise _not_found(err) from err
    except (AmbiguousTable, InvalidRunConf) as err:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(err)) from err
    return TriggerResponse(runs=[TriggeredRunResponse(**run.__dict__) for run in runs])
