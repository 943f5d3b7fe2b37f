"""The tiering REST API (JSON, described by the app's OpenAPI document): statuses, history, reset, trigger.

Every route reads or writes Airflow's metadata database through :mod:`airflow_provider_tiering.status` and
:mod:`airflow_provider_tiering.control`; the routes are plain functions, so FastAPI runs them in its thread pool.
Lists and lookups see only the tables whose asset the caller may read (:func:`access.readable_by`): a table the
caller may not read is not found, and does not make a name ambiguous.
"""

from __future__ import annotations

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
    DataAgeRound,
    TableStatusRecord,
    TieringRound,
    TieringStatus,
    get_tiering_status,
    list_tiering_statuses,
    reset_table,
    session_scope,
    tiering_data_ages,
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


class TableListResponse(BaseModel):
    tables: list[TableStatusRecord]
    total_entries: int


class HistoryResponse(BaseModel):
    table: str
    rounds: list[TieringRound] = Field(description="Newest first; each round as its asset event recorded it")


class DataAgeResponse(BaseModel):
    table: str
    rounds: list[DataAgeRound] = Field(
        description="Oldest first; each round (failed ones included) as the lake's history table holds it"
    )
    unavailable: str | None = Field(description="Why there are no rounds: the history table could not be read")


class TriggerRequest(BaseModel):
    tables: list[str] = Field(min_length=1, description="Tables to tier now, due or not")


class TriggeredRunResponse(BaseModel):
    dag_id: str
    run_id: str
    tasks: dict[str, str] = Field(description="Each triggered table and its task id")
    paused: bool = Field(description="The DAG is paused: the run waits until it is unpaused")


class TriggerResponse(BaseModel):
    runs: list[TriggeredRunResponse]


def _response(found: TieringStatus) -> TableStatusRecord:
    return found.record()


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


# ``{table:path}``: an asset's name and URI hold slashes. The history, data-age and reset routes come first, so a
# path ending in /history, /data-age or /reset is theirs.
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


@router.get(
    "/tables/{table:path}/data-age",
    response_model=DataAgeResponse,
    summary="A table's recent rounds with the data age at their start and end, from sys.lake_tiering_history",
    responses={400: {}, 404: {}},
)
def get_data_age(
    table: TablePath,
    user: GetUserDep,
    hours: Annotated[float, Query(gt=0, le=24 * 31, description="Rounds that ended in the last hours")] = 24,
    limit: Annotated[int, Query(ge=1, le=5000, description="Most recent rounds to return")] = 500,
) -> DataAgeResponse:
    try:
        found = tiering_data_ages(table, hours=hours, limit=limit, readable=readable_by(user))
    except TableNotFound as err:
        raise _not_found(err) from err
    except AmbiguousTable as err:
        raise _ambiguous(err) from err
    return DataAgeResponse(table=found.table, rounds=found.rounds, unavailable=found.unavailable)


@router.post(
    "/tables/{table:path}/reset",
    response_model=TableStatusRecord,
    summary="Lift a table's quarantine so its next round runs",
    responses={400: {}, 403: {}, 404: {}},
)
def reset(table: TablePath, user: GetUserDep) -> TableStatusRecord:
    with session_scope(None) as session:
        found = _one(table, user, session)
        authorize_reset(user, found.asset_id, found.table)
        reset_table(found.asset_name, session=session)  # the asset's name: one table, whatever ``table`` said
        session.flush()
        return _response(get_tiering_status(found.asset_name, session=session))


@router.get(
    "/tables/{table:path}",
    response_model=TableStatusRecord,
    summary="One table's status",
    responses={400: {}, 404: {}},
)
def get_table(table: TablePath, user: GetUserDep) -> TableStatusRecord:
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
