"""The tiered tables as Airflow knows them: the tiering group's assets, what names each, and which DAG tiers it."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_tiering.core.errors import TableNotFound
from airflow_provider_tiering.hooks.asset_state import MAINTENANCE_KEY, STATE_KEY

ASSET_GROUP = "tiering"


def json_value(value: Any) -> Any:
    """A value stored as JSON text (or already decoded)."""
    return json.loads(value) if isinstance(value, str) else value


def _split_uri(uri: str) -> tuple[str, str]:
    _, namespace, table = uri.rstrip("/").rsplit("/", 2)
    return namespace, table


@dataclass(frozen=True)
class TieredAsset:
    """A tiered table's Airflow asset, what names it and which DAG tiers it: all known before its state is read."""

    id: int
    name: str
    uri: str
    table: str
    namespace: str
    lake_table: str
    dag_id: str | None
    task_id: str | None
    #: A table of a stream group: the group's asset (its state document lives there).
    stream_group: str | None = None
    #: The keys of its state and maintenance documents in its asset's state store (a declared database's table has
    #: its own under the database's asset), and that database's name.
    state_key: str = STATE_KEY
    maintenance_key: str = MAINTENANCE_KEY
    database: str | None = None

    @property
    def lake_identifier(self) -> str:
        return f"{self.namespace}.{self.lake_table}"

    def answers_to(self, ref: str) -> bool:
        """Whether ``ref`` names this table: its name in the DAG, ``namespace.table``, its asset's name or URI."""
        return ref in (self.table, self.lake_identifier, self.name, self.uri)

    def describe(self) -> str:
        return f"{self.lake_identifier} (asset {self.name}, DAG {self.dag_id or '?'})"


#: Keeps the assets a caller may read (the plugin asks Airflow's auth manager); None: every asset (CLI, scripts).
ReadableFilter = Callable[[Sequence[TieredAsset]], Sequence[TieredAsset]]


def tiered_assets(session: Any) -> list[TieredAsset]:
    """Every active asset of the tiering group, with the DAG and task that tier it (the newest reference wins).
    Active assets only: Airflow keeps names and URIs unique among those, and stops writing the state of others."""
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from sqlalchemy import select

    rows = session.execute(
        select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetModel.extra).where(
            AssetModel.group == ASSET_GROUP, AssetModel.active.has()
        )
    ).all()
    producers: dict[int, tuple[str, str]] = {}
    if rows:
        refs = session.execute(
            select(TaskOutletAssetReference.asset_id, TaskOutletAssetReference.dag_id, TaskOutletAssetReference.task_id)
            .join(AssetModel, AssetModel.id == TaskOutletAssetReference.asset_id)
            .where(AssetModel.group == ASSET_GROUP)
            .order_by(TaskOutletAssetReference.updated_at)
        ).all()
        producers = {asset_id: (dag_id, task_id) for asset_id, dag_id, task_id in refs}  # the newest wins
    assets = []
    for asset_id, name, uri, extra in rows:
        namespace, lake_table = _split_uri(uri)
        extra = json_value(extra) or {}
        table = extra.get("tiered_table") or lake_table
        dag_id, task_id = producers.get(asset_id, (None, None))
        group = extra.get("stream_group")
        assets.append(TieredAsset(asset_id, name, uri, table, namespace, lake_table, dag_id, task_id, group))
    return assets


def database_assets(session: Any) -> list[tuple[int, str, str, str | None]]:
    """Every active asset of a declared database: id, name, URI and the DAG that tiers its tables."""
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from sqlalchemy import select

    from airflow_provider_tiering.assets import DATABASE_ASSET_GROUP

    rows = session.execute(
        select(AssetModel.id, AssetModel.name, AssetModel.uri).where(
            AssetModel.group == DATABASE_ASSET_GROUP, AssetModel.active.has()
        )
    ).all()
    if not rows:
        return []
    refs = session.execute(
        select(TaskOutletAssetReference.asset_id, TaskOutletAssetReference.dag_id)
        .join(AssetModel, AssetModel.id == TaskOutletAssetReference.asset_id)
        .where(AssetModel.group == DATABASE_ASSET_GROUP)
        .order_by(TaskOutletAssetReference.updated_at)
    ).all()
    producers = dict(refs)  # the newest wins
    return [(asset_id, name, uri, producers.get(asset_id)) for asset_id, name, uri in rows]


def stream_group_ids(names: Sequence[str], session: Any) -> dict[str, int]:
    """The ids of the active assets of these stream groups, by name."""
    from airflow.models.asset import AssetModel
    from sqlalchemy import select

    from airflow_provider_tiering.assets import STREAM_ASSET_GROUP

    if not names:
        return {}
    rows = session.execute(
        select(AssetModel.id, AssetModel.name).where(
            AssetModel.group == STREAM_ASSET_GROUP, AssetModel.name.in_(sorted(set(names))), AssetModel.active.has()
        )
    ).all()
    return {name: asset_id for asset_id, name in rows}


def unknown_table(ref: str, assets: Sequence[TieredAsset]) -> TableNotFound:
    """The error for a name no tiered table answers to, with the closest known names (if any are close)."""
    names = sorted({name for a in assets for name in (a.table, a.lake_identifier)})
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    none = "" if assets else " (no tiered table is known yet: has its DAG been parsed?)"
    return TableNotFound(f"unknown table {ref!r}: no DAG tiers a table of that name{hint}{none}")


def matching_assets(ref: str, assets: Sequence[TieredAsset]) -> list[TieredAsset]:
    """The tiered tables ``ref`` names (see :meth:`TieredAsset.answers_to`); TableNotFound, with the closest
    names, when none does."""
    found = [a for a in assets if a.answers_to(ref)]
    if not found:
        raise unknown_table(ref, assets)
    return found


def readable_of(assets: Sequence[TieredAsset], readable: ReadableFilter | None) -> Sequence[TieredAsset]:
    return assets if readable is None or not assets else readable(assets)
