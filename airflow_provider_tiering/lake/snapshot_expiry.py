"""Snapshot expiry: remove snapshots older than a retention, never those the committed offsets are read from.

Never the current snapshot, nor the latest tiering snapshot, nor any snapshot between them (the committed offsets
are read along that ancestry); the newest ``keep_last`` always stay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.tiering_commits import EPOCH_PROPERTY


@dataclass
class ExpiryResult:
    expired: int
    kept: int
    protected: list[int] = field(default_factory=list)


def expire_snapshots(lake: IcebergLake, *, older_than: datetime, keep_last: int = 1) -> ExpiryResult:
    """Expire snapshots older than ``older_than``, keeping the ``keep_last`` newest, the current snapshot, and
    every snapshot from it down to the latest tiering snapshot (inclusive)."""
    table = lake.load_table()
    if table is None:
        return ExpiryResult(0, 0)
    protected: list[int] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:  # the ancestry down to the latest tiering snapshot
        protected.append(snapshot.snapshot_id)
        if snapshot.summary is not None and snapshot.summary.get(EPOCH_PROPERTY) is not None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    newest = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[:keep_last]
    protected.extend(s.snapshot_id for s in newest)
    cutoff = older_than.timestamp() * 1000
    doomed = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff and s.snapshot_id not in protected]
    if doomed:
        table.maintenance.expire_snapshots().by_ids(doomed).commit()
    return ExpiryResult(len(doomed), len(table.snapshots()) - len(doomed), sorted(set(protected)))
