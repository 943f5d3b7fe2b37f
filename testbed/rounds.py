"""Rounds without Airflow, for tests, benchmarks and the chaos worker: the package's own builder (``build.py``)
fed with explicit connections, as a task would feed it with Airflow's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from airflow_provider_tiering.build import CatalogConfig, RoundParts, TableConnections, build_lake, build_round
from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.ports import SplitWriter
from airflow_provider_tiering.core.spec import LakeSpec, TableSpec
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.spark.session import SparkSettings

#: The catalog name tests give their embedded SQL catalogs (pyiceberg keeps a SQL catalog's tables per name).
CATALOG_NAME = "default"


class HasConnection(Protocol):
    def connection(self) -> ConnectionInfo: ...


def catalog(properties: Mapping[str, str], name: str = CATALOG_NAME) -> CatalogConfig:
    """A catalog from pyiceberg properties, as an ``iceberg`` connection would give them (with the secrets among
    them, as ``hooks/tiering.py`` finds them, for masking)."""
    secrets = ConnectionInfo(conn_type="iceberg", extra=dict(properties)).secrets()
    return CatalogConfig(name, dict(properties), repr(name), tuple(secrets))


def connections(
    hot: HasConnection | ConnectionInfo | None,
    catalog_properties: Mapping[str, str],
    spark: SparkSettings | None = None,
) -> TableConnections:
    """A table's connections: its hot store (a test hot table, a connection, or none), catalog and Spark."""
    source = hot if hot is None or isinstance(hot, ConnectionInfo) else hot.connection()
    return TableConnections(source, catalog(catalog_properties), spark or SparkSettings())


def round_parts(
    spec: TableSpec,
    hot: HasConnection | ConnectionInfo | None,
    catalog_properties: Mapping[str, str],
    *,
    writer: SplitWriter | None = None,
    catalog_handle: CatalogHandle | None = None,
    spark: SparkSettings | None = None,
    **options: Any,
) -> RoundParts:
    """The parts of a round of ``spec``, built by the package's builder; ``options`` go to ``build_round``."""
    return build_round(
        spec, connections(hot, catalog_properties, spark), writer=writer, catalog=catalog_handle, **options
    )


def lake_of(
    spec: TableSpec | LakeSpec, catalog_properties: Mapping[str, str], *, catalog_handle: CatalogHandle | None = None
) -> IcebergLake:
    """The lake table of a spec (or of its lake part)."""
    lake_spec = spec.lake if isinstance(spec, TableSpec) else spec
    return build_lake(lake_spec, catalog_handle or catalog(catalog_properties).handle())
