from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from airflow_provider_tiering.core.documents import from_document, to_document
from airflow_provider_tiering.core.errors import CursorNotComparable, NotRetryable, OffsetsKindMismatch, TieringError
from airflow_provider_tiering.core.offsets import (
    Offsets,
    PendingFiles,
    cursor_after,
    cursor_of,
    cursor_offsets,
    cursor_reached,
    file_offsets,
    lsn_offsets,
)
from airflow_provider_tiering.core.state import CommittedSnapshot


def test_integer_cursor_compares_numbers_and_rendered_templates() -> None:
    assert cursor_reached({"cursor": 3000}, 3000)
    assert cursor_reached({"cursor": 3000}, "2999")  # a rendered Jinja template is a string
    assert not cursor_reached({"cursor": 3000}, 3001)
    with pytest.raises(TieringError, match="not a number"):
        cursor_reached({"cursor": 3000}, "yesterday")
    with pytest.raises(TieringError, match="cannot be compared"):
        cursor_reached({"cursor": 3000}, datetime(2026, 1, 1, tzinfo=UTC))


def test_time_cursor_compares_instants_whatever_the_spelling() -> None:
    committed = {"cursor": "2026-11-01T08:00:00.000000"}  # naive: a timestamp without time zone, as UTC
    assert cursor_reached(committed, datetime(2026, 11, 1, 8, 0, tzinfo=UTC))
    assert cursor_reached(committed, "2026-11-01T09:00:00+01:00")
    assert not cursor_reached(committed, datetime(2026, 11, 1, 8, 0, 1))
    assert not cursor_reached(committed, datetime(2026, 11, 1, 8, 0, tzinfo=timezone(timedelta(hours=-1))))
    assert cursor_reached({"cursor": "2026-11-02"}, date(2026, 11, 2))


def test_string_cursor_and_empty_lake() -> None:
    assert cursor_reached({"cursor": "k-0200"}, "k-0150")
    assert not cursor_reached({"cursor": "k-0200"}, "k-0300")
    assert not cursor_reached(None, 1)
    assert not cursor_reached({"cursor": None}, 1)
    with pytest.raises(TieringError, match="is a time"):
        cursor_reached({"cursor": "k-0200"}, date(2026, 1, 1))
    with pytest.raises(TieringError, match="required"):
        cursor_reached({"cursor": 1}, None)


def test_a_source_takes_only_its_own_kind_of_offsets_out() -> None:
    cursor: Offsets = {"cursor": 42}
    lsn: Offsets = {"lsn": "0/16B3748"}
    files: Offsets = {"files": 2, "bytes": 10, "log": "file:///lake/_offsets/ab.txt.gz", "sha256": "ab"}
    assert cursor_offsets(cursor) == {"cursor": 42} and cursor_of(cursor) == 42 and cursor_of(None) is None
    assert lsn_offsets(lsn)["lsn"] == "0/16B3748"
    assert file_offsets(files)["files"] == 2
    with pytest.raises(OffsetsKindMismatch, match=r"offsets \{'lsn': '0/16B3748'\} are not a cursor value.*spec"):
        cursor_of(lsn)
    with pytest.raises(OffsetsKindMismatch, match="are not a WAL position"):
        lsn_offsets(cursor)
    with pytest.raises(OffsetsKindMismatch, match="are not a landing zone's file log"):
        file_offsets(PendingFiles(pending_files=1, pending_bytes=3))
    assert issubclass(OffsetsKindMismatch, NotRetryable)  # no retry of a round cures it: quarantined at once


def test_cursor_values_compare_within_their_kind_only() -> None:
    assert cursor_after(43, 42) and not cursor_after(42, 42) and cursor_after(2.5, 2)
    assert cursor_after("2026-11-02T00:00:00.000000", "2026-11-01T23:59:59.999999")
    with pytest.raises(CursorNotComparable, match="not of one kind"):
        cursor_after("43", 42)


def test_an_empty_committed_offsets_object_older_versions_wrote_reads_as_none() -> None:
    snapshot = from_document(CommittedSnapshot, {"snapshot_id": 1, "epoch": 2, "end_offsets": {}})
    assert snapshot.end_offsets is None
    kept = from_document(CommittedSnapshot, {"snapshot_id": 1, "epoch": 2, "end_offsets": {"lsn": "0/10"}})
    assert kept.end_offsets == {"lsn": "0/10"}
    assert to_document(kept)["end_offsets"] == {"lsn": "0/10"}
