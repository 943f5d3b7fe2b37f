"""Comparing a table's committed offsets with a value a reader waits for."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from airflow_provider_tiering.core.errors import CursorNotComparable


def _as_utc(value: datetime) -> datetime:
    # Naive cursor values (timestamp without time zone) are compared as UTC, as the source writes them.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _as_utc(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, str):
        try:
            return _as_utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def cursor_reached(end_offsets: dict[str, Any] | None, target: Any) -> bool:
    """Whether a lake whose committed end offsets are ``end_offsets`` holds every row up to cursor ``target``.

    ``target`` may be a number (integer cursors), a date/datetime or an ISO string (time cursors; naive
    values count as UTC), or any string (string cursors, compared as strings). Raises CursorNotComparable when the
    target cannot be compared with the cursor at all, rather than wait forever.
    """
    if target is None:
        raise CursorNotComparable("a cursor value to wait for is required")
    committed = None if end_offsets is None else end_offsets.get("cursor")
    if committed is None:
        return False
    if isinstance(committed, (int, float)) and not isinstance(committed, bool):
        if isinstance(target, str):
            try:
                target = float(target)
            except ValueError as exc:
                raise CursorNotComparable(f"cursor value {target!r} is not a number, but the cursor is") from exc
        if not isinstance(target, (int, float)) or isinstance(target, bool):
            raise CursorNotComparable(
                f"cursor value {target!r} cannot be compared with the numeric cursor {committed!r}"
            )
        return committed >= target
    committed_time, target_time = _as_datetime(committed), _as_datetime(target)
    if committed_time is not None and target_time is not None:
        return committed_time >= target_time
    if isinstance(target, (datetime, date)):
        raise CursorNotComparable(f"cursor value {target!r} is a time, but the cursor {committed!r} is not")
    return str(committed) >= str(target)


def cursor_lag_seconds(end: dict[str, Any] | None, now: datetime) -> float | None:
    """How old the newest row up to ``end`` is at ``now``, for a time cursor (ISO text); None for other cursors,
    whose values say nothing about time."""
    cursor = None if end is None else end.get("cursor")
    if not isinstance(cursor, str):
        return None
    try:
        moment = datetime.fromisoformat(cursor)
    except ValueError:
        return None
    if moment.tzinfo is None:  # naive times are taken as UTC
        moment = moment.replace(tzinfo=UTC)
    return round(max(0.0, (now - moment).total_seconds()), 3)
