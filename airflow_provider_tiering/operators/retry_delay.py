"""When Airflow will retry a failed tier task: asked of Airflow itself, so a table's ``next_retry_at`` is the time
the scheduler will actually use."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tiering.core.round_failure import RetryDelay
from airflow_provider_tiering.core.state import utcnow

log = logging.getLogger(__name__)


def next_retry_delay(task: BaseOperator, context: Any, error: BaseException, now: datetime) -> timedelta | None:
    """How long after ``now`` Airflow retries ``task`` after ``error`` (None: it will not).

    The task's ``retry_policy`` decides first, as the task runner asks it (``RETRY`` with a delay, or ``FAIL``).
    Otherwise the delay is Airflow's own: ``TaskInstance.next_retry_datetime``, the scheduler's computation of
    exponential back-off with its deterministic jitter and ``max_retry_delay``. That is a method of the metadata
    database's model, run here on a stand-in with the task instance's fields (it reads no database): Airflow has
    no other public function for it.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions.retry_policy import RetryAction

    ti = context["ti"]
    if ti.try_number > (task.retries or 0):
        return None
    if task.retry_policy is not None:
        decision = task.retry_policy.evaluate(
            exception=error, try_number=ti.try_number, max_tries=task.retries or 0, context=context
        )
        if decision.action is RetryAction.FAIL:
            return None
        if decision.action is RetryAction.RETRY and decision.retry_delay is not None:
            return decision.retry_delay
    stand_in = SimpleNamespace(
        retry_delay_override=None,
        end_date=now,
        task=task,
        try_number=ti.try_number,
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        logical_date=context.get("logical_date"),
        log=log,
    )
    retry_at: datetime = TaskInstance.next_retry_datetime(stand_in)  # type: ignore[arg-type]
    return retry_at - now


def task_retry_delay(task: BaseOperator, context: Any) -> RetryDelay:
    """The round's :data:`~airflow_provider_tiering.core.round.RetryDelay`: Airflow's retry of this task instance."""

    def delay(error: BaseException) -> timedelta | None:
        try:
            return next_retry_delay(task, context, error, utcnow())
        except Exception as exc:  # the retry time is information: it must not hide the round's own error
            log.warning("%s: cannot tell when Airflow retries: %s", task.task_id, exc)
            return None

    return delay
