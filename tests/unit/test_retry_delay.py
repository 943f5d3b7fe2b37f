from __future__ import annotations

from datetime import timedelta

from airflow_provider_tiering.operators.tier_table import earliest_retry_delay


def test_back_off_grows_and_is_capped():
    delays = [earliest_retry_delay(t, 5, timedelta(seconds=10), 2.0, timedelta(seconds=60)) for t in range(1, 7)]
    assert delays == [timedelta(seconds=s) for s in (10, 20, 40, 60, 60)] + [None]


def test_without_back_off_the_delay_is_constant():
    assert earliest_retry_delay(2, 3, timedelta(seconds=30), 0, None) == timedelta(seconds=30)


def test_no_retry_left():
    assert earliest_retry_delay(1, 0, timedelta(seconds=30), 2.0, None) is None
