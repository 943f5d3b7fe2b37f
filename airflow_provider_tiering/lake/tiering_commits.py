"""How a lake table records what has been tiered: properties of its snapshots, and of the table itself.

Every tiering commit's snapshot carries ``tiering.epoch``, ``tiering.start-offsets`` and ``tiering.end-offsets``
in its summary; the same commit sets the table property ``tiering.last-commit`` (epoch and end offsets), which
outlives the snapshot when snapshot expiry removes it. The latest tiering commit is the single source of truth
for what the lake holds; a commit is fenced by it (:func:`check_fence`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import FencedError, LakeError
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import LakeCommit, TieringCommit

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

EPOCH_PROPERTY = "tiering.epoch"
START_PROPERTY = "tiering.start-offsets"
END_PROPERTY = "tiering.end-offsets"
TABLE_PROPERTY = "tiering.table"
ATTEMPT_PROPERTY = "tiering.attempt"
#: Set on snapshots that lake maintenance commits (e.g. "compaction"); tiering rounds' own snapshots lack it.
OPERATION_PROPERTY = "tiering.operation"
#: Set on the side table's snapshots (rejects) instead of ``EPOCH_PROPERTY``.
REJECTS_EPOCH_PROPERTY = "tiering.rejects-epoch"
#: Table property set by every tiering commit, in the same atomic swap: its epoch and end offsets. It outlives the
#: snapshot (snapshot expiry may remove the latest tiering snapshot from the current snapshot's ancestry).
LAST_COMMIT_PROPERTY = "tiering.last-commit"


def offsets_to_property(offsets: Offsets | None) -> str:
    """Offsets as a snapshot property: canonical JSON, so equal offsets compare equal as text."""
    return json.dumps(offsets, sort_keys=True, separators=(",", ":"))


def commit_properties(epoch: int, start: Offsets | None, end: Offsets, table_name: str, attempt: str) -> dict[str, str]:
    """The snapshot properties of a tiering commit."""
    return {
        EPOCH_PROPERTY: str(epoch),
        START_PROPERTY: offsets_to_property(start),
        END_PROPERTY: offsets_to_property(end),
        TABLE_PROPERTY: table_name,
        ATTEMPT_PROPERTY: attempt,
    }


def last_commit_property(epoch: int, end: Offsets, attempt: str) -> dict[str, str]:
    """The table property a tiering commit sets in the same swap."""
    return {LAST_COMMIT_PROPERTY: json.dumps({"epoch": epoch, "end-offsets": end, "attempt": attempt}, sort_keys=True)}


def tiering_epoch(snapshot: Snapshot) -> int | None:
    """The epoch of a tiering round's own snapshot (a compaction's snapshot carries the epoch on but added none of
    that round's files: None)."""
    summary = snapshot.summary
    if summary is None or summary.get(OPERATION_PROPERTY) is not None:
        return None
    epoch = summary.get(EPOCH_PROPERTY)
    return None if epoch is None else int(epoch)


def latest_tiering_commit(table: Table) -> LakeCommit | None:
    """The newest tiering snapshot among the current snapshot and its ancestors (other writers' snapshots, e.g.
    a compaction or an append, are passed over); None when the table has never been tiered.

    When snapshot expiry has removed every tiering snapshot of that ancestry, the epoch and offsets come from
    the table property that each tiering commit sets (``LAST_COMMIT_PROPERTY``).

    Raises:
        LakeError: without that property (a table last tiered by an older version), the ancestry visibly ends at
            an expired snapshot: tiering from the beginning, or from an older surviving tiering snapshot, would
            tier rows twice.
    """
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        epoch = summary[EPOCH_PROPERTY] if summary is not None else None
        if summary is not None and epoch is not None:
            return LakeCommit(
                snapshot_id=snapshot.snapshot_id,
                epoch=int(epoch),
                end_offsets=json.loads(summary[END_PROPERTY] or "null"),
                committed_at=datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC),
            )
        parent_id = snapshot.parent_snapshot_id
        parent = None if parent_id is None else table.snapshot_by_id(parent_id)
        if parent is None:
            return _commit_outliving_its_snapshot(table, snapshot, parent_id)
        snapshot = parent
    return None


def tiering_commits(table: Table, after_epoch: int) -> list[TieringCommit]:
    """The tiering commits with an epoch above ``after_epoch`` in the current snapshot's ancestry, oldest first."""
    found: list[TieringCommit] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        epoch = tiering_epoch(snapshot)
        if epoch is not None:
            if epoch <= after_epoch:
                break
            summary = snapshot.summary
            assert summary is not None  # a tiering epoch comes from the summary
            found.append(
                TieringCommit(
                    snapshot_id=snapshot.snapshot_id,
                    epoch=epoch,
                    start_offsets=json.loads(summary[START_PROPERTY] or "null"),
                    end_offsets=json.loads(summary[END_PROPERTY] or "null"),
                    rows=int(summary.get("added-records") or 0),
                    bytes=int(summary.get("added-files-size") or 0),
                    files=int(summary.get("added-data-files") or 0),
                    committed_at=datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC),
                )
            )
        parent_id = snapshot.parent_snapshot_id
        snapshot = None if parent_id is None else table.snapshot_by_id(parent_id)
    return found[::-1]


def _commit_outliving_its_snapshot(table: Table, oldest: Snapshot, missing_parent: int | None) -> LakeCommit | None:
    """The ancestry of the current snapshot ends at ``oldest`` without a tiering snapshot: either the table was
    never tiered, or snapshot expiry removed its tiering snapshots (pyiceberg's expiry also clears the parent
    id of the oldest survivor). The table property written with every tiering commit tells which."""
    recorded = table.properties.get(LAST_COMMIT_PROPERTY)
    head = table.current_snapshot()
    if recorded is not None and head is not None:
        last = json.loads(recorded)
        return LakeCommit(
            snapshot_id=head.snapshot_id,  # the snapshot that holds the tiered rows now
            epoch=int(last["epoch"]),
            end_offsets=last["end-offsets"],
            committed_at=datetime.fromtimestamp(head.timestamp_ms / 1000, tz=UTC),
        )
    if missing_parent is not None:
        raise LakeError(
            f"the committed offsets of Iceberg table {'.'.join(table.name())} are unknown: snapshot "
            f"{oldest.snapshot_id} (not a tiering commit) has an expired parent {missing_parent}, and no newer "
            "snapshot carries tiering offsets. Expire snapshots only up to the latest one with a "
            f"'{EPOCH_PROPERTY}' property; tiering stops here rather than tier rows twice"
        )
    return None


def check_fence(table: Table, *, epoch: int, start: Offsets | None) -> None:
    """Raise FencedError unless the table's latest tiering commit ends at ``start`` with an epoch below ``epoch``:
    otherwise another attempt committed since this one planned."""
    lake = latest_tiering_commit(table)
    lake_end = None if lake is None else lake.end_offsets
    lake_epoch = 0 if lake is None else lake.epoch
    if offsets_to_property(lake_end) != offsets_to_property(start) or lake_epoch >= epoch:
        raise FencedError(
            f"attempt at epoch {epoch} was fenced: the lake is at epoch {lake_epoch} with offsets "
            f"{offsets_to_property(lake_end)}, but this attempt started from {offsets_to_property(start)}; "
            "a newer attempt has committed, nothing was committed by this one"
        )
