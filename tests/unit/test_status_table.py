"""``airflow tiering status`` for people (cli/status_table.py) and the units it prints in (core/units.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from airflow_provider_tiering.cli import status_table
from airflow_provider_tiering.core.state import (
    CommittedSnapshot,
    MergeRewriteMetrics,
    RoundMetrics,
    TableState,
    TableStatus,
)
from airflow_provider_tiering.core.units import count, duration, size, timestamp
from airflow_provider_tiering.status import TieringStatus

NOW = datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.42, "0.4s"),
        (12.3, "12s"),
        (1884.277818, "31m 24s"),
        (3600 * 5 + 120, "5h 02m"),
        (1884277.818, "21d 19h"),
        (-5.0, "-5.0s"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_sizes_counts_and_times() -> None:
    assert (size(512), size(319_488), size(3 * 1024**3)) == ("512 B", "312.0 KiB", "3.0 GiB")
    assert (count(None), count(7500), count(1_000_000)) == ("-", "7,500", "1,000,000")
    assert timestamp(NOW) == "2026-11-24T08:00:00Z"
    assert timestamp(NOW.astimezone(UTC).replace(tzinfo=None)) == "2026-11-24T08:00:00Z"  # naive: UTC
    tokyo = datetime(2026, 11, 24, 9, 0, tzinfo=UTC).astimezone(ZoneInfo("Asia/Tokyo"))
    assert timestamp(tokyo) == "2026-11-24T09:00:00Z"
    assert timestamp(None) == "-"


def _status(
    table: str,
    *,
    status: TableStatus = TableStatus.TIERED,
    cursor: object = 1500,
    rows: int = 1500,
    backlog: int = 0,
    error: str | None = None,
    error_age: timedelta = timedelta(hours=1),
    failures: int = 0,
    quarantined: bool = False,
    blockers: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    tiered = NOW - timedelta(minutes=31, seconds=24)
    state = TableState(table=table, status=status, epoch=3)
    state.last_tiered_time = tiered
    state.committed = CommittedSnapshot(4009648637044761027, 3, {"cursor": cursor}, tiered)
    state.last_round = RoundMetrics(
        rows=rows, bytes=1, files=1, splits=1, duration_seconds=1.0, lag_seconds=None, backlog_rows=backlog
    )
    state.consecutive_failures = failures
    state.last_error = error
    state.last_error_time = None if error is None else NOW - error_age
    state.quarantined_since = NOW if quarantined else None
    state.watermark_blockers = blockers or []
    found = TieringStatus(1, f"tiering/ns/{table}", f"tiering://ns/{table}", "ns", table, "dag", table, state)
    return found.to_json(NOW)


def test_the_list_fits_80_to_120_columns_in_human_units() -> None:
    long_error = "psycopg.OperationalError: connection failed: password authentication failed " * 5
    records = [
        _status("orders", rows=2_500, backlog=1_000_000),
        _status("page_views", cursor="2026-11-24 07:28:36.000000"),
        _status(
            "customers_with_a_rather_long_name_indeed",
            status=TableStatus.FAILED,
            error=long_error,
            failures=5,
            quarantined=True,
        ),
        _status("held", blockers=[{"pid": 4711, "age_seconds": 30.0}]),
    ]
    for width in (80, 100, 120):
        text = status_table.render(records, width)
        lines = text.splitlines()
        assert len(lines) == 5 and max(len(line) for line in lines) <= width, text
    text = status_table.render(records, 120)
    header, orders, views, failed, held = text.splitlines()
    assert header.split()[:3] == ["TABLE", "STATUS", "EPOCH"] and "LAST ERROR" in header
    assert "2026-11-24T07:28:36Z" in orders and "2,500" in orders and "1,000,000" in orders
    assert "31m 24s" in views  # the newest tiered row's age now, from its time cursor
    assert "31m" not in orders  # an integer cursor says nothing about time: a dash, not the time since the round
    assert "QUARANTINED" in failed and "psycopg.OperationalError" in failed and failed.endswith("…")
    assert " held " in held
    assert "1884" not in text and ".818" not in text and "+00:00" not in text  # no raw floats or microseconds
    assert "LAST ERROR" not in status_table.render(records, 80)  # no room: left to `status <table>`


def test_an_error_older_than_the_last_tiered_round_is_marked_past() -> None:
    # The error came before the last tiered round (an hour ago vs 31 minutes ago) and nothing failed since.
    healed = _status("orders", error="SourceError: server closed the connection", error_age=timedelta(hours=1))
    assert status_table.error_is_past(healed)
    assert status_table.error_cell(healed) == "(past) SourceError: server closed the connection"
    assert "last error            (past) 2026-11-24T07:00:00Z" in status_table.render_one(healed)
    failing = _status("orders", error="SourceError: again", error_age=timedelta(minutes=1), failures=1)
    assert not status_table.error_is_past(failing) and status_table.error_cell(failing) == "SourceError: again"


def test_one_table_field_by_field_with_its_whole_error() -> None:
    record = _status("orders", status=TableStatus.FAILED, error="first line\nsecond line", failures=2)
    text = status_table.render_one(record)
    assert "lake table            ns.orders" in text
    assert "last tiered           2026-11-24T07:28:36Z" in text
    assert text.endswith("first line\nsecond line")


def test_one_change_stream_table_shows_its_mode_key_changes_and_slot() -> None:
    state = TableState(table="orders", status=TableStatus.TIERED, mode="change_stream", merge_key=["id"])
    state.last_round = RoundMetrics(
        rows=12,
        bytes=1,
        files=1,
        splits=1,
        duration_seconds=1.0,
        backlog_rows=240_000,
        inserted_rows=5,
        updated_rows=4,
        deleted_rows=3,
        merge=MergeRewriteMetrics("spark", 7, 6, 48 * 1024**2, 47 * 1024**2),
    )
    state.change_stream = {
        "slot": "tiering_public_orders",
        "exists": True,
        "confirmed_flush_lsn": "0/1A2B3C",
        "retained_wal_bytes": 3 * 1024**3,
        "max_retained_wal_bytes": 1024**3,
        "backlog_wal_bytes": 512 * 1024**2,
    }
    record = TieringStatus(1, "tiering/shop/orders", "tiering://shop/orders", "shop", "orders", "d", "orders", state)
    text = status_table.render_one(record.to_json(NOW))
    assert "change stream, key id" in text
    assert "5 inserted, 4 updated, 3 deleted" in text
    assert "tiering_public_orders at 0/1A2B3C" in text
    assert "3.0 GiB (bound 1.0 GiB) — over the bound" in text
    assert "~240,000 changes in 512.0 MiB of WAL" in text
    assert "6 lake files, on Spark in 7 tasks: 48.0 MiB read, 47.0 MiB written" in text
    state.mode, state.change_stream, state.last_round = "append", None, None
    assert "mode" in status_table.render_one(record.to_json(NOW)) and "slot" not in status_table.render_one(
        record.to_json(NOW)
    )
