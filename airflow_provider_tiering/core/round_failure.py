"""How a failed round is recorded in the table's state: FAILED with its ``last_error``, its retry time, and the
quarantine once it failed too often (``docs/design.md``, "Failure isolation and retries")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from airflow_provider_tiering.core.decisions import quarantine_reason
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.errors import DeploymentIncomplete, NotRetryable, QuarantinedError
from airflow_provider_tiering.core.ports import PlanT, Source, SplitT
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus, utcnow
from airflow_provider_tiering.core.state_store import StateStore

log = logging.getLogger("airflow_provider_tiering.core.round")

#: When the scheduler retries a round that failed with this error (None: it will not).
RetryDelay = Callable[[BaseException], timedelta | None]


def no_retry(error: BaseException) -> timedelta | None:
    return None


def refuse_if_quarantined(state: TableState, spec: TableSpec) -> None:
    if state.quarantined_since is not None:
        raise QuarantinedError(quarantine_reason(spec.name, state))


def record_failure(
    state: TableState,
    spec: TableSpec,
    exc: BaseException,
    secrets: Sequence[str],
    now: datetime,
    retry_delay: RetryDelay,
) -> None:
    """Record ``exc`` as the table's failed round in ``state`` (not saved): its error, its retry time, and the
    quarantine (at once for a :class:`NotRetryable` error, or once ``spec.max_consecutive_failures`` is reached)."""
    if state.status is not TableStatus.TIERING:
        state.walk_to_pending()
    if isinstance(exc, DeploymentIncomplete):
        # Installing what is missing cures it, whatever the table: shown, never counted towards the quarantine.
        state.record_failure(describe_error(exc, secrets), now, counted=False)
        state.next_retry_at = None
        return
    state.record_failure(describe_error(exc, secrets), now)
    if isinstance(exc, NotRetryable):
        state.quarantine_now(now)
    delay = None if isinstance(exc, NotRetryable) else retry_delay(exc)
    state.next_retry_at = None if delay is None else now + delay
    state.quarantine_if_exhausted(spec.max_consecutive_failures, now)
    if state.quarantined_since is not None:
        state.next_retry_at = None


def record_stream(state: TableState, source: Source[PlanT, SplitT], secrets: Sequence[str]) -> None:
    """Keep the change stream's slot status in the state document (best effort: it is reporting). A field the
    source left out this time (``Source.stream_status``) keeps its last known value: a round that failed before
    planning must not show a capped table's backlog as gone."""
    try:
        found = source.stream_status()
    except Exception as exc:
        log.warning("%s: cannot read its replication slot's status: %s", state.table, describe_error(exc, secrets))
        return
    if found is not None:
        state.change_stream = {**(state.change_stream or {}), **found}


def record_failure_before_round(
    spec: TableSpec,
    state_store: StateStore,
    exc: BaseException,
    *,
    secrets: Sequence[str] = (),
    retry_delay: RetryDelay = no_retry,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Record an error that stopped a round before it could start (say, its Airflow connection is missing)
    as a failed round of the table: FAILED, ``last_error``, counted towards the quarantine like any other, except a
    :class:`DeploymentIncomplete` one (a missing pip extra), which is shown but not counted.

    Raises :class:`QuarantinedError`, recording nothing, when the table is quarantined already: as
    ``run_round`` would, so a broken set-up does not keep failing tasks after the quarantine.
    """
    _record_outside_round(spec, state_store, exc, secrets, retry_delay, clock, refuse_quarantined=True)


def record_interrupted_round(
    spec: TableSpec,
    state_store: StateStore,
    exc: BaseException,
    *,
    secrets: Sequence[str] = (),
    retry_delay: RetryDelay = no_retry,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Record a round stopped from outside while it ran (a timeout): FAILED with ``exc`` as its error, like any
    failed round. Whatever it had written is cleaned by the next committed round, as for any failed attempt."""
    _record_outside_round(spec, state_store, exc, secrets, retry_delay, clock, refuse_quarantined=False)


def _record_outside_round(
    spec: TableSpec,
    state_store: StateStore,
    exc: BaseException,
    secrets: Sequence[str],
    retry_delay: RetryDelay,
    clock: Callable[[], datetime],
    *,
    refuse_quarantined: bool,
) -> None:
    state = state_store.load() or TableState(table=spec.name)
    if refuse_quarantined:
        refuse_if_quarantined(state, spec)
    record_failure(state, spec, exc, secrets, clock(), retry_delay)
    state_store.save(state)
