"""A stream group in Airflow: its state document in its asset's state store, what its reader announced of each table
(for the tables' probes), and its reader built from Airflow's connections (the hot database's, the catalog's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.core.stream_state import STREAM_STATE_KEY, StreamGroupState

if TYPE_CHECKING:
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.sources.change_stream.group_reader import GroupReader


class AssetStreamStateStore:
    """A stream group's state document over ``context["asset_state_store"][group asset]`` (one key, one value)."""

    def __init__(self, accessor: Any) -> None:
        self.accessor = accessor

    def load(self) -> StreamGroupState | None:
        doc = self.accessor.get(STREAM_STATE_KEY, default=None)
        return None if not doc else StreamGroupState.from_json(doc)

    def save(self, state: StreamGroupState) -> None:
        self.accessor.set(STREAM_STATE_KEY, state.to_json())


def announced_by(store: AssetStreamStateStore) -> Callable[[str], tuple[int, int] | None]:
    """What the group's reader announced of each table (read once, on the first question): the position from which
    the change log holds its changes and that of its newest change there, or being written there (0: none yet); None
    when the reader does not know the table yet (or its document cannot be read: a probe then runs the round)."""
    loaded: list[StreamGroupState | None] = []

    def announced(table: str) -> tuple[int, int] | None:
        if not loaded:
            try:
                loaded.append(store.load())
            except Exception:  # a probe that cannot tell says "maybe"
                loaded.append(None)
        state = loaded[0]
        found = None if state is None else state.tables.get(table)
        if found is None or found.held_from is None:
            return None
        return found.held_from, found.announced() or 0

    return announced


class StreamReaderHook(BaseHook):
    """The reader of a stream group, from Airflow's connections: the group's hot database and its tables' catalog."""

    hook_name = "Tiering stream group"

    def __init__(self, group: StreamGroupSpec, tables: Sequence[TableSpec]) -> None:
        super().__init__()
        self.group = group
        self.tables = list(tables)
        self._secrets: list[str] = []

    def secrets(self) -> list[str]:
        return self._secrets

    def build(self, store: AssetStreamStateStore, observe: Callable[[str], None] | None = None) -> GroupReader:
        from airflow_provider_tiering.build import TableConnections, build_stream_reader
        from airflow_provider_tiering.hooks.connections import connection_info
        from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook

        source = connection_info(self.get_connection(self.group.conn_id))
        catalog = IcebergCatalogHook(self.group.change_log.catalog_conn_id).catalog_config()
        connections = TableConnections(source=source, catalog=catalog)
        self._secrets = connections.secrets()
        return build_stream_reader(self.group, self.tables, connections, store, observe=observe)
