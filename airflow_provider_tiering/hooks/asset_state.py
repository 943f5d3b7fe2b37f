"""A table's state document, and its maintenance status, in Airflow 3.3's asset state store (one key, one JSON
value each)."""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering.core.maintenance import MaintenanceStatus
from airflow_provider_tiering.core.state import TableState

STATE_KEY = "tiering_state"
MAINTENANCE_KEY = "tiering_maintenance"


class AssetStateStore:
    """:class:`~airflow_provider_tiering.core.state_store.StateStore` over ``context["asset_state_store"][asset]``.

    The whole document is one value under one key, so each save is one atomic write through
    Airflow's execution API (task code never touches the metadata database itself).
    """

    def __init__(self, accessor: Any, key: str = STATE_KEY) -> None:
        self.accessor = accessor
        #: A table of a declared database keeps its document under a key of its own in the database's asset.
        self.key = key

    def load(self) -> TableState | None:
        doc = self.accessor.get(self.key, default=None)
        return None if not doc else TableState.from_json(doc)

    def save(self, state: TableState) -> None:
        self.accessor.set(self.key, state.to_json())


class MaintenanceStateStore:
    """A table's maintenance status, beside its state document under its own key (a maintenance task never
    writes the document a round reads and writes)."""

    def __init__(self, accessor: Any, key: str = MAINTENANCE_KEY) -> None:
        self.accessor = accessor
        self.key = key

    def load(self) -> MaintenanceStatus | None:
        doc = self.accessor.get(self.key, default=None)
        return None if not doc else MaintenanceStatus.from_json(doc)

    def save(self, status: MaintenanceStatus) -> None:
        self.accessor.set(self.key, status.to_json())
