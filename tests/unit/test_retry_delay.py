"""The retry time a failed round records is the one Airflow's scheduler uses: its back-off with jitter, its cap,
the retries left, and a task's retry policy."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from airflow_provider_tiering.operators.retry_delay import next_retry_delay
from airflow_provider_tiering.operators.tier_table import TierTableOperator

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LOGICAL_DATE = datetime(2026, 11, 23, 11, 50, tzinfo=UTC)
TABLE = {
    "name": "orders",
    "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
    "lake": {"namespace": "n", "table": "orders"},
}


def operator(**spec) -> TierTableOperator:
    return TierTableOperator(table={**TABLE, **spec})


def context(try_number: int) -> dict:
    ti = SimpleNamespace(try_number=try_number, dag_id="tiering", task_id="orders")
    return {"ti": ti, "logical_date": LOGICAL_DATE}


def airflow_back_off(base: float, multiplier: float, cap: float, try_number: int) -> timedelta:
    """The scheduler's formula (TaskInstance.next_retry_datetime), written out: min_backoff, then a deterministic
    jitter of up to as much again from a hash of the task instance, capped."""
    min_backoff = max(1, math.ceil(base * multiplier ** (try_number - 1)))
    key = f"tiering#orders#{LOGICAL_DATE}#{try_number}".encode()
    jittered = min_backoff + int(hashlib.sha1(key, usedforsecurity=False).hexdigest(), 16) % min_backoff
    return min(timedelta(seconds=cap), timedelta(seconds=jittered))


def test_back_off_grows_with_airflows_jitter_and_is_capped():
    task = operator(retries=5, retry_delay_seconds=10, retry_exponential_backoff=2.0, max_retry_delay_seconds=60)
    delays = [next_retry_delay(task, context(t), RuntimeError("x"), NOW) for t in range(1, 7)]
    assert delays == [airflow_back_off(10, 2.0, 60, t) for t in range(1, 6)] + [None]
    assert all(timedelta(seconds=10 * 2 ** (t - 1)) <= d for t, d in zip(range(1, 4), delays))
    assert delays[3] == delays[4] == timedelta(seconds=60)


def test_without_back_off_the_delay_is_constant():
    task = operator(retries=3, retry_delay_seconds=30, retry_exponential_backoff=0)
    assert next_retry_delay(task, context(2), RuntimeError("x"), NOW) == timedelta(seconds=30)


def test_no_retry_left():
    task = operator(retries=0)
    assert next_retry_delay(task, context(1), RuntimeError("x"), NOW) is None


class SlowOnTimeouts(RetryPolicy):
    def evaluate(self, exception, try_number, max_tries, context=None) -> RetryDecision:
        if isinstance(exception, TimeoutError):
            return RetryDecision.retry(delay=timedelta(minutes=7))
        if isinstance(exception, PermissionError):
            return RetryDecision.fail("not retried")
        return RetryDecision.default()


def test_a_retry_policy_decides_first():
    task = TierTableOperator(
        table={**TABLE, "retries": 3, "retry_exponential_backoff": 0}, retry_policy=SlowOnTimeouts()
    )
    assert next_retry_delay(task, context(1), TimeoutError(), NOW) == timedelta(minutes=7)
    assert next_retry_delay(task, context(1), PermissionError(), NOW) is None
    assert next_retry_delay(task, context(1), RuntimeError(), NOW) == timedelta(seconds=30)
