"""A round's first step: make the table's state document agree with the lake, which wins every disagreement
(a crash between a commit and its record, a lake table dropped or maintained, an attempt that died)."""

from __future__ import annotations

import logging
from datetime import datetime

from airflow_provider_tiering.core.ports import Lake, LakeCommit, TieringCommit
from airflow_provider_tiering.core.state import CommittedSnapshot, TableState, TableStatus

log = logging.getLogger("airflow_provider_tiering.core.round")

#: At most this many unannounced commits are announced by one round (a lake tiered outside Airflow for long).
MAX_RECOVERED_EVENTS = 100


def reconcile_with_lake(state: TableState, lake: LakeCommit | None, now: datetime) -> None:
    """Make the state document agree with the lake's latest tiering commit ``lake`` (None: it holds none)."""
    if lake is None:
        if state.committed is not None:
            state.note = "the lake holds no tiering snapshot; tiering starts from the beginning"
        state.committed = None
    elif state.committed is None or state.committed.snapshot_id != lake.snapshot_id:
        # Lake maintenance (a compaction's replace snapshot) carries the same commit on: not a repair.
        maintained = state.committed is not None and (state.committed.epoch, state.committed.end_offsets) == (
            lake.epoch,
            lake.end_offsets,
        )
        committed_at = state.committed.committed_at if maintained and state.committed else lake.committed_at
        state.committed = CommittedSnapshot(lake.snapshot_id, lake.epoch, lake.end_offsets, committed_at)
        if not maintained:
            state.note = f"state repaired from lake snapshot {lake.snapshot_id} (epoch {lake.epoch})"
        if state.status is TableStatus.TIERING and lake.epoch >= state.epoch:
            state.transition(TableStatus.TIERED)
            state.last_tiered_time = lake.committed_at
            state.consecutive_failures = 0
    if lake is not None:
        state.epoch = max(state.epoch, lake.epoch)
    if state.status is TableStatus.TIERING:
        state.record_failure(
            f"attempt at epoch {state.epoch} ended without recording its outcome (its process died or was "
            "killed); the round is planned again from the lake's committed offsets",
            now,
        )


def unannounced_commits(
    lake: Lake, lake_commit: LakeCommit | None, announced_epoch: int | None
) -> tuple[TieringCommit, ...]:
    """The lake's commits above ``announced_epoch`` (the newest an asset event announced; None: unknown), made by
    rounds that died before announcing them, oldest first."""
    if announced_epoch is None or lake_commit is None or lake_commit.epoch <= announced_epoch:
        return ()
    commits = lake.tiering_commits(announced_epoch)
    if len(commits) > MAX_RECOVERED_EVENTS:
        log.warning(
            "%d lake commits were never announced; announcing the newest %d", len(commits), MAX_RECOVERED_EVENTS
        )
    return tuple(commits[-MAX_RECOVERED_EVENTS:])
