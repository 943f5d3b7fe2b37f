"""Resolve a table's Airflow connections (hot store, Iceberg catalog, Spark) and build its round from them.

Credentials only ever come from Airflow connections; every secret resolved here is also handed on, so that
errors stored in the state document can be masked. What a round is built from is decided in ``build.py``;
this module only turns Airflow's connections into the plain values it takes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.core.source_specs import SourceSpecBase
from airflow_provider_tiering.core.spec import LakeSpec, SparkSpec, TableSpec
from airflow_provider_tiering.hooks.connections import catalog_config, connection_info
from airflow_provider_tiering.spark.session import DEFAULT_MASTER, SparkSettings

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_provider_tiering.build import CatalogConfig, MaintenanceParts, RoundParts, TableConnections
    from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook
    from airflow_provider_tiering.lake.iceberg import IcebergLake

log = logging.getLogger(__name__)

#: Extras of the Spark provider's ``spark`` connection that have a Spark conf of their own in a session
#: (the others, such as ``deploy-mode`` or ``spark-binary``, are spark-submit's and do not apply in-process).
SPARK_EXTRA_CONF = {
    "queue": "spark.yarn.queue",
    "namespace": "spark.kubernetes.namespace",
    "principal": "spark.kerberos.principal",
}


class TieringSourceHook(BaseHook):
    """Builds the :class:`~airflow_provider_tiering.core.ports.Source` of a table's hot store from its spec and
    Airflow connection (through ``sources/registry.py``). A landing zone of files needs a connection only for
    object-store credentials.

    With the table's ``lake``, a source that reads its offsets from the lake (a landing zone's offsets log) is bound
    to the storage properties of the lake's catalog connection, so a probe reads them as the round would (the
    catalog itself is not loaded)."""

    conn_name_attr = "conn_id"
    hook_name = "Tiering source"

    def __init__(self, spec: SourceSpecBase, lake: LakeSpec | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.lake = lake

    def connection(self) -> ConnectionInfo | None:
        return None if self.spec.conn_id is None else connection_info(self.get_connection(self.spec.conn_id))

    def get_source(self) -> AnySource:
        from airflow_provider_tiering.sources.registry import build_source

        source = build_source(self.spec, self.connection())
        if self.lake is not None and source.reads_offsets_from_lake:
            conn_id = self.lake.catalog_conn_id
            source.bind_lake(None, lake_storage_of(catalog_config(conn_id, self.get_connection(conn_id))))
        return source

    async def aget_source(self) -> AnySource:
        """:meth:`get_source` for triggers, which run in the triggerer's event loop."""
        from airflow_provider_tiering.sources.registry import build_source

        conn_id = self.spec.conn_id
        info = None if conn_id is None else connection_info(await self.aget_connection(conn_id))
        source = await asyncio.to_thread(build_source, self.spec, info)
        if self.lake is not None and source.reads_offsets_from_lake:
            catalog_conn_id = self.lake.catalog_conn_id
            config = catalog_config(catalog_conn_id, await self.aget_connection(catalog_conn_id))
            source.bind_lake(None, lake_storage_of(config))
        return source


def lake_storage_of(config: CatalogConfig) -> dict[str, str]:
    """The storage properties among a catalog's (``lake/warehouse.py``)."""
    from airflow_provider_tiering.lake.warehouse import storage_properties

    return storage_properties(config.properties)


#: The name of the hook before landing zones existed.
SqlSourceHook = TieringSourceHook


def spark_settings(spec: SparkSpec) -> SparkSettings:
    """Spark settings from the Spark provider's connections: ``spark`` (a master URL; its extras that are Spark conf
    become conf) or ``spark_connect``. Without such a connection, Spark runs in local mode (``local[*]``). The
    spec's own ``conf`` wins over the connection's."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(spec.conn_id)
    except AirflowNotFoundException:
        return SparkSettings(master=DEFAULT_MASTER, conf=dict(spec.conf), class_data_sharing=spec.class_data_sharing)
    settings = SPARK_CONNECTION_TYPES.get((conn.conn_type or "").lower(), _spark_master_settings)
    return settings(spec, conn)


def _spark_connect_settings(spec: SparkSpec, conn: Connection) -> SparkSettings:
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkSettings(remote=SparkConnectHook(conn_id=spec.conn_id).get_connection_url(), conf=dict(spec.conf))


def _spark_master_settings(spec: SparkSpec, conn: Connection) -> SparkSettings:
    # The master as the Spark provider's SparkSubmitHook resolves it (its resolver is private and builds
    # spark-submit arguments, not a session).
    host = conn.host or DEFAULT_MASTER
    if "://" not in host and not host.startswith(("local", "yarn")):
        host = f"spark://{host}"
    if conn.port and host.startswith("spark://") and host.count(":") == 1:
        host = f"{host}:{conn.port}"
    conf: dict[str, str] = {}
    for key, value in (conn.extra_dejson or {}).items():
        if key.startswith("spark."):
            conf[key] = str(value)
        elif key in SPARK_EXTRA_CONF:
            conf[SPARK_EXTRA_CONF[key]] = str(value)
        else:
            log.info("spark connection %r: extra %r is spark-submit's; a session does not use it", spec.conn_id, key)
    conf.update(spec.conf)
    return SparkSettings(master=host, conf=conf, class_data_sharing=spec.class_data_sharing)


#: The Spark provider's connection types other than a master URL's (``spark``, the default), by what they build.
SPARK_CONNECTION_TYPES: dict[str, Callable[[SparkSpec, Connection], SparkSettings]] = {
    "spark_connect": _spark_connect_settings,
}


class TieringHook(BaseHook):
    """Everything a table's round needs, from its Airflow connections: the hot store's, the catalog's, Spark's.

    Each resolution is separate, so a task can record which one failed (they are the table's failed rounds)."""

    hook_name = "Tiering"

    def __init__(self, spec: TableSpec, *, announced: Callable[[str], tuple[int, int] | None] | None = None) -> None:
        super().__init__()
        self.spec = spec
        #: A table of a stream group: what the group's reader announced of each table, which its probe asks.
        self.announced = announced

    @cached_property
    def catalog_hook(self) -> IcebergCatalogHook:
        # Imported on first use: a task that skips (nothing new, not due) never needs the Iceberg provider's hook,
        # whose import (pyiceberg's catalog) costs a fresh task process about 0.17 s.
        from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook

        return IcebergCatalogHook(self.spec.lake.catalog_conn_id)

    def get_source(self) -> AnySource:
        source = TieringSourceHook(self.spec.source, self.spec.lake).get_source()
        if source.reads_change_log:
            source.bind_change_log(None, self.announced)
        return source

    def connections(self) -> TableConnections:
        from airflow_provider_tiering.build import TableConnections

        return TableConnections(
            source=TieringSourceHook(self.spec.source).connection(),
            catalog=self.catalog_hook.catalog_config(),
            spark=spark_settings(self.spec.spark),
        )

    def secrets(self) -> list[str]:
        return self.catalog_hook.secrets()

    def build_round(self, source: AnySource | None = None) -> RoundParts:
        from airflow_provider_tiering.build import build_round

        return build_round(self.spec, self.connections(), source=source)

    def build_maintenance(self) -> MaintenanceParts:
        from airflow_provider_tiering.build import build_maintenance

        return build_maintenance(self.spec, self.catalog_hook.catalog_config(), spark_settings(self.spec.spark))


def lake_of(lake: LakeSpec) -> IcebergLake:
    """The Iceberg table of a spec's lake part, its catalog from Airflow (loaded on first use)."""
    from airflow_provider_tiering.build import build_lake
    from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook

    return build_lake(lake, IcebergCatalogHook(lake.catalog_conn_id).catalog_config().handle())
