"""The Airflow asset of a tiered table: where its state document lives and what each round announces."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec

#: The asset group of stream groups (a table's asset is in ``tiering``).
STREAM_ASSET_GROUP = "tiering_stream"
#: The asset group of declared databases.
DATABASE_ASSET_GROUP = "tiering_database"
#: A declared database's DAG: the task that lists its tables, and the mapped task that tiers each of those to run
#: (one instance per table, labelled by its name).
DISCOVER_TASK_ID = "discover"
TIER_TASK_ID = "tier"


def table_asset(spec: TableSpec) -> Asset:
    """The Airflow asset of a tiered table: its state document lives in the asset state store and
    each tiering round emits an event on it. A table of a stream group names its group's asset."""
    extra: dict[str, Any] = {"tiered_table": spec.name}
    group = spec.source.stream_group()
    if group is not None:
        extra["stream_group"] = group.asset_name
    return Asset(
        name=spec.asset_name,
        uri=f"iceberg://{spec.lake.catalog_conn_id}/{spec.lake.namespace}/{spec.lake.table}",
        group="tiering",
        extra=extra,
    )


def stream_asset(group: StreamGroupSpec) -> Asset:
    """The Airflow asset of a stream group, its change log: the group's state document lives in its asset state
    store (its reader writes it; its tables read it to probe), and each run of its reader that writes emits an
    event on it."""
    log = group.change_log
    return Asset(
        name=group.asset_name,
        uri=f"iceberg://{log.catalog_conn_id}/{log.namespace}/{group.change_log_table}",
        group=STREAM_ASSET_GROUP,
        extra={"stream_group": group.name},
    )


def recovered_events_alias(spec: TableSpec) -> AssetAlias:
    """The alias through which a round announces, on the table's asset, the commits of earlier rounds that died
    before announcing them (one task can emit only one event per asset directly)."""
    return AssetAlias(name=f"{spec.asset_name}/recovered", group="tiering")


def database_asset(name: str, catalog_conn_id: str, namespace: str) -> Asset:
    """The Airflow asset of a declared database (its tables' Iceberg namespace): the database's document and each of
    its tables' state documents live in its asset state store, under a key per table; each round of one of its tables
    emits an event on it, whose ``extra`` names the table."""
    return Asset(
        name=f"{DATABASE_ASSET_GROUP}/{name}",
        uri=f"iceberg://{catalog_conn_id}/{namespace}",
        group=DATABASE_ASSET_GROUP,
        extra={"tiered_database": name},
    )


def database_events_alias(name: str) -> AssetAlias:
    """The alias through which a round of a declared database's table announces commits of earlier rounds that died
    before announcing them (as :func:`recovered_events_alias` does for a table of its own)."""
    return AssetAlias(name=f"{DATABASE_ASSET_GROUP}/{name}/recovered", group="tiering")
