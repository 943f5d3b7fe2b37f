"""Reading every tiered table's status and history from Airflow's metadata database, through its configured state
backend; the history also from the lake, for commits no asset event announced."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow_provider_tiering.core.database_state import (
    DATABASE_STATE_KEY,
    DatabaseState,
    Discovery,
    table_maintenance_key,
    table_state_key,
)
from airflow_provider_tiering.core.errors import AmbiguousTable
from airflow_provider_tiering.core.maintenance import MaintenanceStatus
from airflow_provider_tiering.core.state import TableState, TableStatus
from airflow_provider_tiering.core.stream_state import STREAM_STATE_KEY, StreamGroupState
from airflow_provider_tiering.hooks.asset_state import MAINTENANCE_KEY, STATE_KEY
from airflow_provider_tiering.status.assets import (
    ReadableFilter,
    TieredAsset,
    database_assets,
    json_value,
    matching_assets,
    readable_of,
    stream_group_ids,
    tiered_assets,
)
from airflow_provider_tiering.status.records import DataAgeRound, DataAges, TieringRound
from airflow_provider_tiering.status.view import TieringStatus

log = logging.getLogger("airflow_provider_tiering.status")


@contextmanager
def session_scope(session: Any | None) -> Iterator[Any]:
    if session is not None:
        yield session
        return
    from airflow.utils.session import create_session

    with create_session() as new:
        yield new


#: A declared database's table's history is read from this many times ``limit`` of its database's newest events (the
#: lake's own commits fill in what they miss).
SHARED_EVENTS_READ = 20

_IN_CHUNK = 500  # ids per IN (...) list: far below every metadata database's limit on bound parameters


def _stored_values(
    asset_ids: Sequence[int], session: Any, keys: tuple[str, ...] = (STATE_KEY, MAINTENANCE_KEY)
) -> dict[tuple[int, str], Any]:
    """The state and maintenance documents of these assets, read through Airflow's configured state backend.

    ``BaseStoreBackend`` reads one key of one asset per call and has no bulk read. With Airflow's default backend,
    whose storage is the ``asset_state_store`` table, every document is read in one query per chunk of ids instead;
    any other backend (a subclass included: it may keep values elsewhere) is asked key by key.
    """
    from airflow.state import AssetScope, get_state_backend
    from airflow.state.metastore import MetastoreBackend

    backend = get_state_backend()
    found: dict[tuple[int, str], Any] = {}
    if type(backend) is MetastoreBackend:
        from airflow.models.asset_state_store import AssetStateStoreModel
        from sqlalchemy import select

        for start in range(0, len(asset_ids), _IN_CHUNK):
            rows = session.execute(
                select(AssetStateStoreModel.asset_id, AssetStateStoreModel.key, AssetStateStoreModel.value).where(
                    AssetStateStoreModel.key.in_(keys),
                    AssetStateStoreModel.asset_id.in_(asset_ids[start : start + _IN_CHUNK]),
                )
            ).all()
            found.update({(asset_id, key): value for asset_id, key, value in rows})
        return found
    for asset_id in asset_ids:
        for key in keys:
            value = backend.get(AssetScope(asset_id=asset_id), key, session=session)
            if value is not None:
                found[(asset_id, key)] = value
    return found


#: The note of a table listed before its first round.
NOT_RUN_YET = "no round has run yet"


def _stream_groups(assets: Sequence[TieredAsset], session: Any) -> dict[str, StreamGroupState]:
    """The state documents of the stream groups of these tables, by group asset name (one query for all)."""
    ids = stream_group_ids([a.stream_group for a in assets if a.stream_group], session)
    values = _stored_values(list(ids.values()), session, (STREAM_STATE_KEY,))
    found = {}
    for name, asset_id in ids.items():
        doc = values.get((asset_id, STREAM_STATE_KEY))
        if doc is not None:
            found[name] = StreamGroupState.from_json(json_value(doc))
    return found


def _database_values(asset_ids: Sequence[int], session: Any) -> dict[tuple[int, str], Any]:
    """Every document of these declared databases' assets (the database's, and each of its tables')."""
    from airflow.state import get_state_backend
    from airflow.state.metastore import MetastoreBackend

    if type(get_state_backend()) is not MetastoreBackend:  # a backend is asked key by key: the documents' keys first
        found = _stored_values(asset_ids, session, (DATABASE_STATE_KEY,))
        keys = {
            key
            for doc in found.values()
            for name in DatabaseState.from_json(json_value(doc)).tables
            for key in (table_state_key(name), table_maintenance_key(name))
        }
        return {**found, **_stored_values(asset_ids, session, tuple(sorted(keys)))}
    from airflow.models.asset_state_store import AssetStateStoreModel
    from sqlalchemy import select

    rows = session.execute(
        select(AssetStateStoreModel.asset_id, AssetStateStoreModel.key, AssetStateStoreModel.value).where(
            AssetStateStoreModel.asset_id.in_(asset_ids)
        )
    ).all()
    return {(asset_id, key): value for asset_id, key, value in rows}


def known_tables(session: Any) -> list[TieredAsset]:
    """Every tiered table: the tiering group's assets and each tiered table of each declared database."""
    return _known_tables(session)[0]


def _known_tables(session: Any) -> tuple[list[TieredAsset], dict[tuple[int, str], Any]]:
    """Every tiered table: the tiering group's assets, then each tiered table of each declared database (its state
    under the database's asset); with the declared databases' documents already read."""
    from airflow_provider_tiering.assets import TIER_TASK_ID

    assets = tiered_assets(session)
    databases = database_assets(session)
    values = _database_values([d[0] for d in databases], session) if databases else {}
    for asset_id, name, uri, dag_id in databases:
        doc = values.get((asset_id, DATABASE_STATE_KEY))
        if doc is None:
            continue
        state = DatabaseState.from_json(json_value(doc))
        catalog = uri.removeprefix("iceberg://").split("/", 1)[0]
        for table in state.tables.values():
            if table.discovery is not Discovery.TIERED or table.lake is None:
                continue
            namespace, lake_table = table.lake.split(".", 1)
            assets.append(
                TieredAsset(
                    asset_id, f"{name}/{table.name}", f"iceberg://{catalog}/{namespace}/{lake_table}", table.name,
                    namespace, lake_table, dag_id, TIER_TASK_ID, None, table_state_key(table.name),
                    table_maintenance_key(table.name), state.database,
                )
            )  # fmt: skip
    return assets, values


def _statuses(
    assets: Sequence[TieredAsset], session: Any, known: dict[tuple[int, str], Any] | None = None
) -> list[TieringStatus]:
    own = [a.id for a in assets if a.database is None]
    values = {**(known or {}), **_stored_values(own, session)}
    groups = _stream_groups(assets, session)
    statuses = []
    for asset in assets:
        doc = values.get((asset.id, asset.state_key))
        # A table whose first round has not run yet (its DAG paused, or not run since the table was added) is shown
        # as NEW, so that a table is listed from the moment its DAG is parsed.
        state = TableState(asset.table, note=NOT_RUN_YET) if doc is None else TableState.from_json(json_value(doc))
        maintenance = values.get((asset.id, asset.maintenance_key))
        statuses.append(
            TieringStatus(
                asset.id,
                asset.name,
                asset.uri,
                asset.namespace,
                asset.lake_table,
                asset.dag_id,
                asset.task_id,
                state,
                None if maintenance is None else MaintenanceStatus.from_json(json_value(maintenance)),
                None if asset.stream_group is None else groups.get(asset.stream_group),
                asset.state_key,
            )
        )
    return sorted(statuses, key=lambda s: (s.namespace, s.lake_table, s.table))


def list_tiering_statuses(
    namespace: str | None = None,
    status: str | TableStatus | None = None,
    *,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> list[TieringStatus]:
    """Every tiered table (of those ``readable`` keeps), sorted by namespace and table; optionally filtered. A table
    whose first round has not run yet is NEW, noted so."""
    with session_scope(session) as s:
        every, known = _known_tables(s)
        assets = [a for a in every if namespace is None or a.namespace == namespace]
        found = _statuses(readable_of(assets, readable), s, known)
    if status is not None:
        wanted = TableStatus(str(status).upper())
        found = [t for t in found if t.status is wanted]
    return found


def get_tiering_status(
    table: str, *, readable: ReadableFilter | None = None, session: Any | None = None
) -> TieringStatus:
    """The status of one tiered table: ``table`` is its name in its DAG, ``namespace.table`` (its lake identifier),
    or its asset's name or URI. TableNotFound when no table (of those ``readable`` keeps) answers to it (the message
    says so, with the closest names); AmbiguousTable, naming them, when several do (two DAGs tiering tables of the
    same name)."""
    with session_scope(session) as s:
        every, known = _known_tables(s)
        candidates = matching_assets(table, readable_of(every, readable))
        found = _statuses(candidates, s, known)
    if len(found) > 1:
        names = "; ".join(a.describe() for a in candidates)
        raise AmbiguousTable(
            f"{table!r} names {len(found)} tiered tables: {names}. Name one as <namespace>.<table> or by its asset name"
        )
    return found[0]


def tiering_history(
    table: str,
    limit: int = 50,
    *,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
    read_lake: bool = True,
) -> list[TieringRound]:
    """The table's most recent committed rounds, newest epoch first: its asset events, and, with ``read_lake``, the
    lake's tiering snapshots that no event announced (a round that died between its commit and its record, not
    yet announced by a later round). An unreachable catalog leaves the events alone (logged). ``table`` as for
    :func:`get_tiering_status`."""
    from airflow.models.asset import AssetEvent
    from sqlalchemy import select

    with session_scope(session) as s:
        found = get_tiering_status(table, readable=readable, session=s)
        shared = found.state_key != STATE_KEY  # a declared database's table: its asset holds every table's events
        events = s.scalars(
            select(AssetEvent)
            .where(AssetEvent.asset_id == found.asset_id)
            .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc())
            .limit(limit * SHARED_EVENTS_READ if shared else limit)
        ).all()
        rounds = []
        for event in events:
            extra = event.extra or {}
            if shared and extra.get("table") != found.table:
                continue
            if "epoch" not in extra:  # an event some other producer emitted on the asset
                continue
            rounds.append(
                TieringRound(
                    timestamp=event.timestamp,
                    epoch=extra.get("epoch"),
                    snapshot_id=extra.get("snapshot_id"),
                    rows=int(extra.get("rows") or 0),
                    bytes=int(extra.get("bytes") or 0),
                    files=int(extra.get("files") or 0),
                    duration_seconds=extra.get("duration_seconds"),
                    lag_seconds=extra.get("lag_seconds"),
                    start_offsets=extra.get("start_offsets"),
                    end_offsets=extra.get("end_offsets"),
                    dag_id=event.source_dag_id,
                    run_id=event.source_run_id,
                    task_id=event.source_task_id,
                    recovered=bool(extra.get("recovered")),
                )
            )
    if read_lake:
        rounds += _rounds_only_the_lake_knows(found, {r.epoch for r in rounds}, limit)
    return sorted(rounds, key=lambda r: (r.epoch or 0, r.timestamp), reverse=True)[:limit]


def _rounds_only_the_lake_knows(found: TieringStatus, announced: set[int | None], limit: int) -> list[TieringRound]:
    """The lake's newest tiering commits (at most ``limit``) that no event in ``announced`` covers."""
    from airflow_provider_tiering.core.spec import LakeSpec
    from airflow_provider_tiering.hooks.tiering import lake_of

    catalog_conn_id = found.asset_uri.split("://", 1)[1].split("/", 1)[0]
    try:
        lake = lake_of(LakeSpec(catalog_conn_id=catalog_conn_id, namespace=found.namespace, table=found.lake_table))
        commits = lake.tiering_commits(0)[-limit:]
    except Exception as exc:  # history stays readable without the catalog
        log.warning("%s: the lake's commits cannot be read: %s", found.table, exc)
        return []
    return [
        TieringRound(
            timestamp=commit.committed_at,
            epoch=commit.epoch,
            snapshot_id=commit.snapshot_id,
            rows=commit.rows,
            bytes=commit.bytes,
            files=commit.files,
            duration_seconds=None,
            lag_seconds=None,
            start_offsets=commit.start_offsets,
            end_offsets=commit.end_offsets,
            dag_id=None,
            run_id=None,
            task_id=None,
            source="lake",
        )
        for commit in commits
        if commit.epoch not in announced
    ]


def tiering_data_ages(
    table: str,
    *,
    hours: float = 24.0,
    limit: int = 500,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> DataAges:
    """The table's rounds of the last ``hours`` (at most ``limit``, the newest), oldest first, as its catalog's
    history table holds them (``sys.lake_tiering_history``, ``hooks/history_table.py``): the Tiering page's
    data-age chart. A history table that cannot be read gives no rounds and says why. ``table`` as for
    :func:`get_tiering_status`."""
    from airflow_provider_tiering.core.error_text import describe_error
    from airflow_provider_tiering.core.state import utcnow
    from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook
    from airflow_provider_tiering.hooks.status_table import status_namespace
    from airflow_provider_tiering.lake.history_table import LakeHistoryTable

    with session_scope(session) as s:
        found = get_tiering_status(table, readable=readable, session=s)
    namespace = status_namespace()
    if namespace is None:
        return DataAges(found.table, [], "the status namespace is off ([tiering] status_namespace): no history table")
    secrets: list[str] = []
    try:
        config = IcebergCatalogHook(found.catalog_conn_id).catalog_config()
        secrets = list(config.secrets)
        since = utcnow() - timedelta(hours=hours)
        rows = LakeHistoryTable(config.handle(), namespace).rounds_of(found.table, since, limit)
    except Exception as exc:  # a status surface: the rest of the page stays readable
        error = describe_error(exc, secrets)
        log.warning("%s: the history table cannot be read: %s", found.table, error)
        return DataAges(found.table, [], f"the history table cannot be read: {error}")
    rounds = [
        DataAgeRound(
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            outcome=row["outcome"],
            epoch=row["tiering_epoch"],
            rows_in=row["rows_in"],
            data_age_before_seconds=row["data_age_before_seconds"],
            data_age_after_seconds=row["data_age_after_seconds"],
        )  # fmt: skip
        for row in rows
    ]
    return DataAges(found.table, rounds)
