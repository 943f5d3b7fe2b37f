"""The Iceberg catalog of an Airflow ``iceberg`` connection, as a hook of Airflow's Iceberg provider.

Its own module, apart from ``hooks/tiering.py``: importing the provider's hook imports pyiceberg's catalog, which a
task that ends without loading the lake (nothing new, not due) never needs.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_provider_tiering.hooks.connections import catalog_config

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from airflow_provider_tiering.build import CatalogConfig


class IcebergCatalogHook(IcebergHook):
    """The Iceberg catalog of Airflow's own ``iceberg`` connection type (Airflow's Iceberg provider,
    ``IcebergHook``, whose methods it keeps: ``list_tables``, ``load_table``...), read as that provider reads it;
    see :func:`catalog_config`. Example (the embedded default, a SQL catalog)::

        AIRFLOW_CONN_ICEBERG_DEFAULT='{"conn_type": "iceberg", "extra": {"type": "sql",
            "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/warehouse"}}'

    and a REST catalog with OAuth2 client credentials::

        AIRFLOW_CONN_ICEBERG_DEFAULT='{"conn_type": "iceberg", "host": "https://catalog.example.com/api/catalog",
            "login": "client-id", "password": "client-secret", "extra": {"warehouse": "analytics"}}'
    """

    hook_name = "Iceberg catalog (tiering)"

    def __init__(self, iceberg_conn_id: str = IcebergHook.default_conn_name) -> None:
        super().__init__(iceberg_conn_id)
        self.iceberg_conn_id = iceberg_conn_id
        self._secrets: list[str] = []

    def catalog_config(self) -> CatalogConfig:
        """The catalog's name and properties, resolved from the connection (the catalog is not loaded)."""
        config = catalog_config(self.iceberg_conn_id, self.get_connection(self.iceberg_conn_id))
        self._secrets = list(config.secrets)
        return config

    async def acatalog_config(self) -> CatalogConfig:
        """:meth:`catalog_config` for triggers: the connection is looked up without blocking the event loop."""
        config = catalog_config(self.iceberg_conn_id, await self.aget_connection(self.iceberg_conn_id))
        self._secrets = list(config.secrets)
        return config

    def catalog_properties(self) -> dict[str, str]:
        return dict(self.catalog_config().properties)

    @cached_property
    def catalog(self) -> Catalog:
        """The loaded pyiceberg catalog (the Iceberg provider's methods read it)."""
        loaded: Catalog = self.catalog_config().handle().get()
        return loaded

    def get_conn(self) -> Catalog:
        return self.catalog

    def secrets(self) -> list[str]:
        return list(self._secrets)
