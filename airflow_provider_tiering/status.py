"""Every tiered table's status and history, read from Airflow's metadata database; and a quarantine reset.

For processes that may use the database: the CLI, the API server's plugin, scripts. Task code reads
state through the execution API instead (``context["asset_state_store"]``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.documents import iso_time
from airflow_provider_tiering.core.errors import TableNotFound
from airflow_provider_tiering.core.maintenance import MaintenanceStatus
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
        }


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


def _load(session: Any) -> list[TieringStatus]:
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from airflow.models.asset_state_store import AssetStateStoreModel
    from sqlalchemy import select

    rows = session.execute(
        select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetStateStoreModel.value)
        .join(AssetStateStoreModel, AssetStateStoreModel.asset_id == AssetModel.id)
        .where(AssetStateStoreModel.key == STATE_KEY, AssetModel.group == ASSET_GROUP)
    ).all()
    producers: dict[int, tuple[str, str]] = {}
    if rows:
        refs = session.execute(
            select(TaskOutletAssetReference.asset_id, TaskOutletAssetReference.dag_id, TaskOutletAssetReference.task_id)
            .where(TaskOutletAssetReference.asset_id.in_([r[0] for r in rows]))
            .order_by(TaskOutletAssetReference.updated_at)
        ).all()
        producers = {asset_id: (dag_id, task_id) for asset_id, dag_id, task_id in refs}  # the newest wins
    maintenance: dict[int, MaintenanceStatus] = {}
    if rows:
        docs = session.execute(
            select(AssetStateStoreModel.asset_id, AssetStateStoreModel.value).where(
                AssetStateStoreModel.key == MAINTENANCE_KEY,
                AssetStateStoreModel.asset_id.in_([r[0] for r in rows]),
            )
        ).all()
        maintenance = {asset_id: MaintenanceStatus.from_json(_json(value)) for asset_id, value in docs}
    statuses = []
    for asset_id, name, uri, value in rows:
        namespace, lake_table = _split_uri(uri)
        dag_id, task_id = producers.get(asset_id, (None, None))
        state = TableState.from_json(_json(value))
        statuses.append(
            TieringStatus(asset_id, name, uri, namespace, lake_table, dag_id, task_id, state, maintenance.get(asset_id))
        )
    return sorted(statuses, key=lambda s: (s.namespace, s.lake_table, s.table))


def list_tiering_statuses(
    namespace: str | None = None, status: str | TableStatus | None = None, *, session: Any | None = None
) -> list[TieringStatus]:
    """Every tiered table that has a state document, sorted by namespace and table; optionally filtered."""
    with session_scope(session) as s:
        found = _load(s)
    if namespace is not None:
        found = [t for t in found if t.namespace == namespace]
    if status is not None:
        wanted = TableStatus(str(status).upper())
        found = [t for t in found if t.status is wanted]
    return found


def get_tiering_status(table: str, *, session: Any | None = None) -> TieringStatus:
    """The status of the tiered table named ``table`` (its name in the DAG); TableNotFound when unknown."""
    for found in list_tiering_statuses(session=session):
        if found.table == table:
            return found
    raise TableNotFound(f"no tiered table named {table!r} has a state document")


def tiering_history(
    table: str, limit: int = 50, *, session: Any | None = None, read_lake: bool = True
) -> list[TieringRound]:
    """The table's most recent committed rounds, newest epoch first: its asset events, and, with ``read_lake``, the
    lake's tiering snapshots that no event announced (a round that died between its commit and its record, not
    yet announced by a later round). An unreachable catalog leaves the events alone (logged)."""
    from airflow.models.asset import AssetEvent
    from sqlalchemy import select

    with session_scope(session) as s:
        found = get_tiering_status(table, session=s)
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


def reset_table(table: str, *, session: Any | None = None) -> TableState:
    """Lift the quarantine of a tiered table (by its name in the DAG) so its next round runs again.

    Writes the state document through Airflow's state backend. Raises TableNotFound when no tiered table of
    that name has a state document.
    """
    # The state backend is how the API server writes an asset's state (as its REST endpoint does); in Airflow 3.3
    # its scope type lives in a private module.
    from airflow._shared.state import AssetScope
    from airflow.state import get_state_backend

    with session_scope(session) as s:
        found = get_tiering_status(table, session=s)
        state = found.state
        state.reset(utcnow())
        get_state_backend().set(AssetScope(asset_id=found.asset_id), STATE_KEY, json.dumps(state.to_json()), session=s)
    return state
