"""Numbers for people: durations, sizes, counts and times as the task log, the CLI and the demo print them."""

from __future__ import annotations

from datetime import UTC, datetime


def duration(seconds: float | None) -> str:
    """``0.4s``, ``12.3s``, ``31m 24s``, ``5h 02m``, ``3d 04h``; a dash for None."""
    if seconds is None:
        return "-"
    sign, s = ("-", -seconds) if seconds < 0 else ("", seconds)
    if s < 60:
        return f"{sign}{s:.1f}s" if s < 10 else f"{sign}{s:.0f}s"
    whole = int(round(s))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{sign}{days}d {hours:02d}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    return f"{sign}{minutes}m {secs:02d}s"


def size(num_bytes: int | None) -> str:
    """``512 B``, ``312.0 KiB``, ``1.2 GiB``; a dash for None."""
    if num_bytes is None:
        return "-"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{num_bytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def count(n: int | None) -> str:
    """``7,500``; a dash for None."""
    return "-" if n is None else f"{n:,}"


def timestamp(moment: datetime | None) -> str:
    """ISO 8601 to the second in UTC, ``2026-11-24T07:45:18Z``; a dash for None (naive times are taken as UTC)."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
