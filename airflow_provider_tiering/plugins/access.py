"""Who may do what on the tiering app, decided by Airflow's own auth manager (no rules of our own).

Reading (the page, every GET) needs read access to assets, since each tiered table is an asset and its state
lives in the asset state store; then every list and lookup keeps only the tables whose asset the user may read,
asked per asset (``is_authorized_asset`` with the asset's id), so an auth manager that grants some assets and not
others hides the rest: their names, states and existence. A reset writes that state, so it needs edit access to
the table's asset; a trigger starts DAG runs, so it needs to create runs of each DAG involved. The caller is the
user of the ``Authorization: Bearer`` token or, from the browser, of the ``_token`` cookie Airflow's login sets.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails, DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_asset
from airflow.models.dag import DagModel
from fastapi import Depends, HTTPException, status

from airflow_provider_tiering.status import ReadableFilter, TieredAsset

#: Router dependency of every route: an authenticated user allowed to read assets (401/403 otherwise).
can_read = Depends(requires_access_asset("GET"))

__all__ = ["GetUserDep", "authorize_reset", "authorize_trigger", "can_read", "readable_by"]


def readable_by(user: BaseUser) -> ReadableFilter:
    """The filter keeping the tiered tables whose asset ``user`` may read.

    Airflow 3.3's auth managers decide one asset at a time (they have no bulk asset filter, as they have for DAGs
    and connections), so each asset is asked about, as the default of the per-asset filtering Airflow later added
    to its own asset lists does (apache/airflow#72682). Called after the coarse ``can_read`` check and before any
    state is read, so unreadable tables cost no read.
    """
    manager = get_auth_manager()

    def keep(assets: Sequence[TieredAsset]) -> list[TieredAsset]:
        return [
            asset
            for asset in assets
            if manager.is_authorized_asset(method="GET", details=AssetDetails(id=str(asset.id)), user=user)
        ]

    return keep


def _forbidden(what: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, f"Forbidden: {what}")


def authorize_reset(user: BaseUser, asset_id: int, table: str) -> None:
    """Raise 403 unless ``user`` may edit the table's asset."""
    if not get_auth_manager().is_authorized_asset(method="PUT", details=AssetDetails(id=str(asset_id)), user=user):
        raise _forbidden(f"resetting table {table!r} needs edit access to its asset")


def authorize_trigger(user: BaseUser, dag_ids: set[str]) -> None:
    """Raise 403 unless ``user`` may create runs of every DAG in ``dag_ids``."""
    manager = get_auth_manager()
    denied = sorted(
        dag_id
        for dag_id in dag_ids
        if not manager.is_authorized_dag(
            method="POST",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)),
            user=user,
        )
    )
    if denied:
        raise _forbidden(f"triggering needs permission to create runs of DAG(s) {', '.join(denied)}")
