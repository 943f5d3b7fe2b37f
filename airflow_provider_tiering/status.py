"""Read every tiered table's state document from Airflow's metadata database.

For processes that may use the database: the CLI, the API server's plugin, scripts. Task code
reads state through the execution API instead (``context["asset_state_store"]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from airflow_provider_tiering.core.state import TableState
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


def list_tiering_statuses(namespace: str | None = None) -> list[TieringStatus]:
    """Every tiered table that has a state document, sorted by namespace and table."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (
        select(AssetModel.name, AssetModel.uri, AssetStateStoreModel.value)
        .join(AssetStateStoreModel, AssetStateStoreModel.asset_id == AssetModel.id)
        .where(AssetStateStoreModel.key == STATE_KEY, AssetModel.group == ASSET_GROUP)
    )
    statuses = []
    with create_session() as session:
        for name, uri, value in session.execute(query):
            _, ns, table = uri.rstrip("/").rsplit("/", 2)
            if namespace is not None and ns != namespace:
                continue
            statuses.append(TieringStatus(name, uri, ns, table, TableState.from_json(json.loads(value))))
    return sorted(statuses, key=lambda s: (s.namespace, s.lake_table))
