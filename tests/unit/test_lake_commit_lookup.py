"""Finding the committed offsets in a table's history (``lake/tiering_commits.py``) on stand-in tables."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.lake.tiering_commits import (
    END_PROPERTY,
    EPOCH_PROPERTY,
    LAST_COMMIT_PROPERTY,
    latest_tiering_commit,
)


class Summary(dict):
    def __missing__(self, key):
        return None


@dataclass
class Snapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    summary: Summary = field(default_factory=Summary)
    timestamp_ms: int = 1_700_000_000_000


def tiering(snapshot_id: int, parent: int | None, epoch: int, cursor: int) -> Snapshot:
    return Snapshot(
        snapshot_id, parent, Summary({EPOCH_PROPERTY: str(epoch), END_PROPERTY: json.dumps({"cursor": cursor})})
    )


@dataclass
class Table:
    snapshots: list[Snapshot]
    properties: dict[str, str] = field(default_factory=dict)

    def current_snapshot(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    def snapshot_by_id(self, snapshot_id: int) -> Snapshot | None:
        return next((s for s in self.snapshots if s.snapshot_id == snapshot_id), None)

    def name(self) -> tuple[str, str]:
        return ("ns", "t")


def test_other_writers_snapshots_on_top_are_passed_over():
    table = Table([tiering(1, None, 1, 10), tiering(2, 1, 2, 20), Snapshot(3, 2), Snapshot(4, 3)])
    commit = latest_tiering_commit(table)
    assert (commit.snapshot_id, commit.epoch, commit.end_offsets) == (2, 2, {"cursor": 20})


def test_a_table_never_tiered_has_no_commit():
    assert latest_tiering_commit(Table([])) is None
    assert latest_tiering_commit(Table([Snapshot(1, None), Snapshot(2, 1)])) is None


def test_expired_tiering_snapshots_leave_the_recorded_last_commit():
    recorded = {LAST_COMMIT_PROPERTY: json.dumps({"epoch": 7, "end-offsets": {"cursor": 70}, "attempt": "a"})}
    table = Table([Snapshot(9, None)], properties=recorded)  # pyiceberg's expiry clears the survivor's parent
    commit = latest_tiering_commit(table)
    assert (commit.snapshot_id, commit.epoch, commit.end_offsets) == (9, 7, {"cursor": 70})


def test_an_ancestry_cut_by_expiry_without_a_recorded_commit_refuses_to_guess():
    # An older tiering snapshot survives, but the ancestry of the current one ends at an expired snapshot that
    # may have been a newer tiering commit: its offsets must not be used, nor must tiering start over.
    table = Table([tiering(1, None, 1, 10), Snapshot(5, 4)])
    with pytest.raises(LakeError, match="expired parent 4"):
        latest_tiering_commit(table)
