"""Offsets, by kind: how far the lake holds a table's hot data. Then comparing them with a value a reader waits for.

Offsets are JSON: the lake keeps them in each tiering snapshot's properties, the state document keeps a copy. A
SQL table's are a cursor value, a change stream's a log position (PostgreSQL's WAL LSN; a binlog's file and offset),
a landing zone's a log of the files it tiered. The kernel passes them through without looking inside; each source
takes its own kind out with :func:`cursor_offsets`, :func:`lsn_offsets`, :func:`binlog_offsets` or
:func:`file_offsets`, which refuse another kind's offsets (a table whose spec moved from a cursor to a change stream
over a lake that holds cursor offsets) instead of misreading them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import (
    NotRequired,  # pydantic needs typing_extensions' TypedDict below Python 3.12
    TypeAlias,
    final,
)

from typing_extensions import TypedDict

from airflow_provider_tiering.core.errors import CursorNotComparable, OffsetsKindMismatch

#: A cursor value as offsets hold it: numbers stay numbers, times and dates are ISO text, strings are strings.
CursorValue: TypeAlias = int | float | str


@final
class CursorOffsets(TypedDict):
    """A SQL table's: every row with a cursor value up to ``cursor`` is in the lake."""

    cursor: CursorValue


@final
class LoadedSnapshot(TypedDict):
    """The snapshot a stream group's table was first loaded in (PostgreSQL's ``pg_current_snapshot()``: ``xmin``,
    ``xmax`` and the ids in progress ``xip``, 64-bit), and the WAL position ``until`` below which every transaction it
    saw committed: the change log's transactions committed before ``until`` that it saw are in the lake already."""

    xmin: int
    xmax: int
    xip: list[int]
    until: str


@final
class LsnOffsets(TypedDict):
    """A change stream's: every change committed up to WAL position ``lsn`` (PostgreSQL's ``X/Y`` text) is in the
    lake."""

    lsn: str
    #: Only in a safe end (``Source.safe_watermark``), never in the lake: the last WAL record boundary at or below
    #: ``lsn`` (the flushed position may lie inside a record); a plan that finds no commit of the table beyond it
    #: ends there.
    boundary: NotRequired[str | None]
    #: A stream group's table first loaded in a snapshot: besides every change up to ``lsn``, the lake holds the
    #: later transactions that snapshot saw (until the lake's position passes ``until``).
    loaded: NotRequired[LoadedSnapshot]


@final
class BinlogOffsets(TypedDict):
    """A MariaDB or MySQL change stream's: every transaction committed in the server's binlog up to ``binlog_pos`` of
    ``binlog_file`` (the end of the last one applied) is in the lake. ``gtid``: the server's GTID position there
    (MariaDB's ``BINLOG_GTID_POS``), where it has one, for operators; the file and offset are what rounds read from."""

    binlog_file: str
    binlog_pos: int
    gtid: NotRequired[str | None]


@final
class FileOffsets(TypedDict):
    """A landing zone's: the ``files`` it tiered (``bytes`` in all) are listed in the log at ``log``, whose content
    hashes to ``sha256``."""

    files: int
    bytes: int
    log: str
    sha256: str


#: How far the lake has a table's hot data (see the module description).
Offsets: TypeAlias = CursorOffsets | LsnOffsets | BinlogOffsets | FileOffsets


@final
class PendingFiles(TypedDict):
    """A landing zone's safe end: how many complete files (``pending_bytes`` in all) wait beyond the lake's log.
    Its plan lists them again and writes the offsets (``FileOffsets``) the lake will hold."""

    pending_files: int
    pending_bytes: int


#: How far a round may read (``SafeWatermark.end``, handed back to ``Source.plan``): offsets, or a landing zone's
#: count of pending files.
SafeEnd: TypeAlias = CursorOffsets | LsnOffsets | BinlogOffsets | FileOffsets | PendingFiles


def _mismatch(offsets: SafeEnd, wanted: str) -> OffsetsKindMismatch:
    return OffsetsKindMismatch(
        f"the lake's offsets {dict(offsets)} are not {wanted}: the lake table was tiered by another kind of source "
        "(did the table's spec change mode?). Restore the spec that tiered it, or tier the table into a new lake "
        "table"
    )


def cursor_offsets(offsets: SafeEnd) -> CursorOffsets:
    """``offsets`` as a SQL table's (raises :class:`OffsetsKindMismatch` for another kind's)."""
    if "cursor" in offsets:
        return offsets
    raise _mismatch(offsets, "a cursor value")


def cursor_of(offsets: Offsets | None) -> CursorValue | None:
    """The cursor value of a SQL table's offsets (None for none; raises :class:`OffsetsKindMismatch` for another
    kind's)."""
    return None if offsets is None else cursor_offsets(offsets)["cursor"]


def cursor_after(value: CursorValue, bound: CursorValue) -> bool:
    """Whether cursor ``value`` lies beyond ``bound``: numbers compare as numbers, text (times as fixed-format ISO
    text, strings) as text. Raises :class:`CursorNotComparable` for a number and a text."""
    if isinstance(value, str) and isinstance(bound, str):
        return value > bound
    if not isinstance(value, str) and not isinstance(bound, str):
        return value > bound
    raise CursorNotComparable(f"cursor values {value!r} and {bound!r} are not of one kind (a number and a text)")


def lsn_offsets(offsets: SafeEnd) -> LsnOffsets:
    """``offsets`` as a change stream's (raises :class:`OffsetsKindMismatch` for another kind's)."""
    if "lsn" in offsets:
        return offsets
    raise _mismatch(offsets, "a WAL position")


def binlog_offsets(offsets: SafeEnd) -> BinlogOffsets:
    """``offsets`` as a binlog change stream's (raises :class:`OffsetsKindMismatch` for another kind's)."""
    if "binlog_file" in offsets:
        return offsets
    raise _mismatch(offsets, "a binlog position")


def file_offsets(offsets: SafeEnd) -> FileOffsets:
    """``offsets`` as a landing zone's (raises :class:`OffsetsKindMismatch` for another kind's)."""
    if "log" in offsets:
        return offsets
    raise _mismatch(offsets, "a landing zone's file log")


def _as_utc(value: datetime) -> datetime:
    # Naive cursor values (timestamp without time zone) are compared as UTC, as the source writes them.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_datetime(value: object) -> datetime | None:
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


def cursor_reached(end_offsets: Offsets | None, target: object) -> bool:
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


def cursor_lag_seconds(end: Offsets | None, now: datetime) -> float | None:
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
