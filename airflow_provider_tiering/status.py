"""Every tiered table's status and history, and a quarantine reset.

The tables are the tiering group's assets in Airflow's metadata database; their state documents are read and
written through Airflow's configured state backend (``[state_store] backend``), so a custom backend is honoured.
For processes that may use the database: the CLI, the API server's plugin, scripts. Task code reads state
through the execution API instead (``context["asset_state_store"]``). Callers that act for a user pass
``readable``, which keeps only the assets that user may read (the plugin asks Airflow's auth manager).
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.documents import iso_time, to_document
from airflow_provider_tiering.core.errors import AmbiguousTable, TableNotFound
from airflow_provider_tiering.core.maintenance import MaintenanceStatus
from airflow_provider_tiering.core.offsets import cursor_lag_seconds
from airflow_provider_tiering.core.state import TableState, TableStatus, utcnow
from airflow_provider_tiering.hooks.asset_state import MAINTENANCE_KEY, STATE_KEY

ASSET_GROUP = "tiering"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TieringStatus:
    """One tiered table as the status surfaces show it; ``state`` is its whole state document."""

    asset_id: int
    asset_name: str
    asset_uri: str
    namespace: str
    lake_table: str
    dag_id: str | None
    task_id: str | None
    state: TableState
    maintenance: MaintenanceStatus | None = None

    @property
    def table(self) -> str:
        return self.state.table

    @property
    def status(self) -> TableStatus:
        return self.state.status

    @property
    def quarantined(self) -> bool:
        return self.state.quarantined_since is not None

    @property
    def last_round_rows(self) -> int | None:
        return None if self.state.last_round is None else self.state.last_round.rows

    @property
    def lag_seconds(self) -> float | None:
        """How far the lake's newest row is behind its round's end, for time cursors (from the last round)."""
        return None if self.state.last_round is None else self.state.last_round.lag_seconds

    @property
    def backlog_rows(self) -> int | None:
        """Rows the last round saw in the hot store beyond what it tiered (the per-round cap), where known."""
        return None if self.state.last_round is None else self.state.last_round.backlog_rows

    def newest_data_age_seconds(self, now: datetime | None = None) -> float | None:
        """How old the newest row in the lake is now, for time cursors (its cursor value); None for other cursors."""
        committed = self.state.committed
        return None if committed is None else cursor_lag_seconds(committed.end_offsets, now or utcnow())

    def staleness_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since the table was last tiered."""
        last = self.state.last_tiered_time
        return None if last is None else round(((now or utcnow()) - last).total_seconds(), 1)

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """The flat record of the REST API and the CLI."""
        state = self.state
        return {
            "table": self.table,
            "namespace": self.namespace,
            "lake_table": self.lake_table,
            "asset": self.asset_name,
            "asset_id": self.asset_id,
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "status": state.status.value,
            "epoch": state.epoch,
            "last_tiered_time": iso_time(state.last_tiered_time),
            "last_checked_time": iso_time(state.last_checked_time),
            "staleness_seconds": self.staleness_seconds(now),
            "lag_seconds": self.lag_seconds,
            "newest_data_age_seconds": self.newest_data_age_seconds(now),
            "backlog_rows": self.backlog_rows,
            "last_round_rows": self.last_round_rows,
            "committed_offsets": None if state.committed is None else state.committed.end_offsets,
            "snapshot_id": None if state.committed is None else state.committed.snapshot_id,
            "consecutive_failures": state.consecutive_failures,
            "next_retry_at": iso_time(state.next_retry_at),
            "quarantined": self.quarantined,
            "quarantined_since": iso_time(state.quarantined_since),
            "last_error": state.last_error,
            "last_error_time": iso_time(state.last_error_time),
            "watermark_blockers": state.watermark_blockers,
            "note": state.note,
            "last_round_evicted_rows": None if state.last_round is None else state.last_round.evicted_rows,
            "evicted_rows_total": state.evicted_rows_total,
            "eviction_note": state.eviction_note,
            "maintenance": _maintenance_json(self.maintenance),
            "mode": state.mode,
            "merge_key": state.merge_key,
            "last_round_inserted_rows": None if state.last_round is None else state.last_round.inserted_rows,
            "last_round_updated_rows": None if state.last_round is None else state.last_round.updated_rows,
            "last_round_deleted_rows": None if state.last_round is None else state.last_round.deleted_rows,
            "last_round_merge": _merge_json(state),
            "change_stream": state.change_stream,
            "in_place_changes": _in_place_json(state.in_place_changes),
            "shape_change": state.shape_change,
            "replaced_hot_table": state.replaced_hot_table,
        }


def _merge_json(state: TableState) -> dict[str, Any] | None:
    """Where and at what cost the last round's merge wrote files again."""
    merge = None if state.last_round is None else state.last_round.merge
    return None if merge is None else to_document(merge)


def _in_place_json(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """An append table's rows changed in place, without the raw counters they are computed from."""
    return None if found is None else {k: v for k, v in found.items() if k != "counters"}


def _maintenance_json(status: MaintenanceStatus | None) -> dict[str, Any] | None:
    """The maintenance fields of the status record (None before the table's first maintenance run)."""
    if status is None:
        return None
    compaction = status.last_compaction
    return {
        "last_run_at": iso_time(status.last_run_at),
        "last_outcome": status.last_outcome,
        "data_files": status.data_files,
        "snapshots": status.snapshots,
        "last_compaction_at": iso_time(status.last_compaction_at),
        "files_before_compaction": None if compaction is None else compaction.files_before,
        "files_after_compaction": None if compaction is None else compaction.files_after,
        "last_compaction_check": None if status.last_check is None else status.last_check.outcome,
        "snapshots_expired": status.snapshots_expired,
        "snapshots_expired_total": status.snapshots_expired_total,
        "orphans_removed": status.orphans_removed,
        "orphans_removed_total": status.orphans_removed_total,
        "consecutive_failures": status.consecutive_failures,
        "last_error": status.last_error,
        "last_error_time": iso_time(status.last_error_time),
    }


@dataclass(frozen=True)
class TieringRound:
    """One committed round of a table: from its asset event (``recovered`` when a later round announced it for a
    round that died first), or read from the lake's snapshot where no event announced it (``source="lake"``)."""

    timestamp: datetime
    epoch: int | None
    snapshot_id: int | None
    rows: int
    bytes: int
    files: int
    duration_seconds: float | None
    lag_seconds: float | None
    start_offsets: dict[str, Any] | None
    end_offsets: dict[str, Any] | None
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    recovered: bool = False
    source: str = "event"

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "timestamp": self.timestamp.isoformat()}


@contextmanager
def session_scope(session: Any | None) -> Iterator[Any]:
    if session is not None:
        yield session
        return
    from airflow.utils.session import create_session

    with create_session() as new:
        yield new


def _json(value: Any) -> Any:
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
        table = (_json(extra) or {}).get("tiered_table") or lake_table
        dag_id, task_id = producers.get(asset_id, (None, None))
        assets.append(TieredAsset(asset_id, name, uri, table, namespace, lake_table, dag_id, task_id))
    return assets


_IN_CHUNK = 500  # ids per IN (...) list: far below every metadata database's limit on bound parameters


def _stored_values(asset_ids: Sequence[int], session: Any) -> dict[tuple[int, str], Any]:
    """The state and maintenance documents of these assets, read through Airflow's configured state backend.

    ``BaseStoreBackend`` reads one key of one asset per call and has no bulk read. With Airflow's default backend,
    whose storage is the ``asset_state_store`` table, every document is read in one query per chunk of ids instead;
    any other backend (a subclass included: it may keep values elsewhere) is asked key by key.
    """
    from airflow.state import AssetScope, get_state_backend
    from airflow.state.metastore import MetastoreBackend

    keys = (STATE_KEY, MAINTENANCE_KEY)
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


def _statuses(assets: Sequence[TieredAsset], session: Any) -> list[TieringStatus]:
    values = _stored_values([a.id for a in assets], session)
    statuses = []
    for asset in assets:
        doc = values.get((asset.id, STATE_KEY))
        if doc is None:  # a table whose first round has not run yet
            continue
        maintenance = values.get((asset.id, MAINTENANCE_KEY))
        statuses.append(
            TieringStatus(
                asset.id,
                asset.name,
                asset.uri,
                asset.namespace,
                asset.lake_table,
                asset.dag_id,
                asset.task_id,
                TableState.from_json(_json(doc)),
                None if maintenance is None else MaintenanceStatus.from_json(_json(maintenance)),
            )
        )
    return sorted(statuses, key=lambda s: (s.namespace, s.lake_table, s.table))


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


def _readable(assets: Sequence[TieredAsset], readable: ReadableFilter | None) -> Sequence[TieredAsset]:
    return assets if readable is None or not assets else readable(assets)


def list_tiering_statuses(
    namespace: str | None = None,
    status: str | TableStatus | None = None,
    *,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> list[TieringStatus]:
    """Every tiered table that has a state document (of those ``readable`` keeps), sorted by namespace and table;
    optionally filtered."""
    with session_scope(session) as s:
        assets = [a for a in tiered_assets(s) if namespace is None or a.namespace == namespace]
        found = _statuses(_readable(assets, readable), s)
    if status is not None:
        wanted = TableStatus(str(status).upper())
        found = [t for t in found if t.status is wanted]
    return found


def get_tiering_status(
    table: str, *, readable: ReadableFilter | None = None, session: Any | None = None
) -> TieringStatus:
    """The status of one tiered table: ``table`` is its name in its DAG, ``namespace.table`` (its lake identifier),
    or its asset's name or URI. TableNotFound when no table (of those ``readable`` keeps) answers to it (the message
    says so, with the closest names), or when it has no state document yet (its first round has not run);
    AmbiguousTable, naming them, when several do (two DAGs tiering tables of the same name)."""
    with session_scope(session) as s:
        candidates = matching_assets(table, _readable(tiered_assets(s), readable))
        found = _statuses(candidates, s)
    if not found:
        where = "; ".join(a.describe() for a in candidates)
        raise TableNotFound(f"table {table!r} ({where}) has no state yet: its first round has not run")
    if len(found) > 1:
        by_id = {a.id: a for a in candidates}
        names = "; ".join(by_id[f.asset_id].describe() for f in found)
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
        events = s.scalars(
            select(AssetEvent)
            .where(AssetEvent.asset_id == found.asset_id)
            .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc())
            .limit(limit)
        ).all()
        rounds = []
        for event in events:
            extra = event.extra or {}
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


def reset_table(
    table: str,
    *,
    adopt_hot_table: bool = False,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> TableState:
    """Lift the quarantine of a tiered table so its next round runs again; ``table`` as for
    :func:`get_tiering_status` (an ambiguous name raises AmbiguousTable and resets nothing). With
    ``adopt_hot_table``, the hot table a round refused as another one (dropped and created again, truncated and
    reloaded) is tiered from its start, the lake's rows kept (ValueError when no round refused one).

    Writes the state document through Airflow's state backend. Raises TableNotFound when no tiered table of
    that name has a state document.
    """
    # Through the configured backend, as the execution API writes the tasks' asset state (Airflow 3.3's own
    # state-store REST endpoint writes to the default backend's table whatever is configured).
    from airflow.state import AssetScope, get_state_backend

    with session_scope(session) as s:
        found = get_tiering_status(table, readable=readable, session=s)
        state = found.state
        state.reset(utcnow(), adopt_hot_table=adopt_hot_table)
        get_state_backend().set(AssetScope(asset_id=found.asset_id), STATE_KEY, json.dumps(state.to_json()), session=s)
    return state
