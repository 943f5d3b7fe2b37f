"""The Airflow asset of a tiered table: where its state document lives and what each round announces."""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from airflow_provider_tiering.core.spec import TableSpec


def table_asset(spec: TableSpec) -> Asset:
    """The Airflow asset of a tiered table: its state document lives in the asset state store and
    each tiering round emits an event on it."""
    return Asset(
        name=spec.asset_name,
        uri=f"iceberg://{spec.lake.catalog_conn_id}/{spec.lake.namespace}/{spec.lake.table}",
        group="tiering",
        extra={"tiered_table": spec.name},
    )


def recovered_events_alias(spec: TableSpec) -> AssetAlias:
    """The alias through which a round announces, on the table's asset, the commits of earlier rounds that died
    before announcing them (one task can emit only one event per asset directly)."""
    return AssetAlias(name=f"{spec.asset_name}/recovered", group="tiering")
