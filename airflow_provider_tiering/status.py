"""Read every tiered table's state document from Airflow's metadata database.

For processes that may use the database: the CLI, the API server's plugin, scripts. Task code
reads state through the execution API instead (``context["asset_state_store"]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.hooks.asset_state import STATE_KEY

ASSET_GROUP = "tiering"


@dataclass(frozen=True)
class TieringStatus:
    """One tiered table as the status surfaces show it."""

    asset_name: str
    asset_uri: str
    namespace: str
    lake_table: str
    state: TableState

    @property
    def table(self) -> str:
        return self.state.table


def _state_rows(session: Any) -> list[tuple[int, str, str, str]]:
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from sqlalchemy import select

    query = (
        select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetStateStoreModel.value)
        .join(AssetStateStoreModel, AssetStateStoreModel.asset_id == AssetModel.id)
        .where(AssetStateStoreModel.key == STATE_KEY, AssetModel.group == ASSET_GROUP)
    )
    return [tuple(row) for row in session.execute(query)]


def list_tiering_statuses(namespace: str | None = None) -> list[TieringStatus]:
    """Every tiered table that has a state document, sorted by namespace and table."""
    from airflow.utils.session import create_session

    statuses = []
    with create_session() as session:
        for _asset_id, name, uri, value in _state_rows(session):
            _, ns, table = uri.rstrip("/").rsplit("/", 2)
            if namespace is not None and ns != namespace:
                continue
            statuses.append(TieringStatus(name, uri, ns, table, TableState.from_json(json.loads(value))))
    return sorted(statuses, key=lambda s: (s.namespace, s.lake_table))


def reset_table(table: str) -> TableState:
    """Lift the quarantine of a tiered table (by its name in the DAG) so its next round runs again.

    Writes the state document through Airflow's state backend, as the CLI and UI will.
    Raises KeyError when no tiered table of that name has a state document.
    """
    from airflow._shared.state import AssetScope
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session

    with create_session() as session:
        for asset_id, _name, _uri, value in _state_rows(session):
            state = TableState.from_json(json.loads(value))
            if state.table == table:
                state.reset(utcnow())
                get_state_backend().set(
                    AssetScope(asset_id=asset_id), STATE_KEY, json.dumps(state.to_json()), session=session
                )
                return state
    raise KeyError(f"no tiered table named {table!r} has a state document")
