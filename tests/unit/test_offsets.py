from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from airflow_provider_tiering.core.errors import TieringError
from airflow_provider_tiering.core.offsets import cursor_reached


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
