"""What one table's task does, without Airflow: decide (``core/decisions.py``), maybe probe the hot store and run a
round, and say how the task ends (:class:`TaskOutcome`: succeeded with its asset events, skipped or failed without
retries, with its reason and metrics). ``operators/tier_table.py`` maps the outcome to Airflow's task outcomes.

An error of the round itself (recorded by the round as the table's failed round) is raised, so Airflow's retries
apply to it; so is an error before the round (a missing connection), once recorded the same way.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from airflow_provider_tiering.core.decisions import TaskAction, decide_task, probe_hot_store, record_decision
from airflow_provider_tiering.core.errors import DeploymentIncomplete, NotRetryable, QuarantinedError
from airflow_provider_tiering.core.in_place_changes import in_place_alert
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.core.round_failure import (
    RetryDelay,
    record_failure_before_round,
    record_interrupted_round,
)
from airflow_provider_tiering.core.round_history import HistorySink, history_row, record_history
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import retained_wal_alert, staleness_alert, stream_backlog_alert
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.core.state_store import StateStore
from airflow_provider_tiering.core.table_metrics import Metric, failed_round_metrics, round_metrics, table_gauges

log = logging.getLogger(__name__)


class TaskEnd(enum.StrEnum):
    """How a table's task ends."""

    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    #: Failed without the scheduler's retries, which cannot help (a quarantine, an error no retry cures, an alert).
    FAILED = "failed"


@dataclass(frozen=True)
class TaskOutcome:
    end: TaskEnd
    reason: str = ""
    #: The asset events the task emits, oldest first: the newest goes on the table's asset, older ones (commits of
    #: rounds that died before announcing them) through its ``recovered`` alias.
    announcements: tuple[dict[str, object], ...] = ()
    #: The task's return value (the round's event).
    value: dict[str, object] | None = None
    #: The error the task ends with (kept as the cause of Airflow's skip or failure).
    cause: BaseException | None = None
    #: The round the task ran, if it ran one.
    result: RoundResult | None = None
    #: What the task reports to the metrics (the table's gauges from its state are added by :meth:`metrics`).
    counted: tuple[Metric, ...] = ()
    #: The table's state as the task leaves it (for the gauges).
    state: TableState | None = None

    def metrics(self, now: datetime) -> list[Metric]:
        return [*self.counted, *([] if self.state is None else table_gauges(self.state, now))]


class BuiltRound(Protocol):
    """A round's parts (``build.RoundParts``): a context manager whose exit releases the writer's Spark session."""

    def run(self, state_store: StateStore, *, retry_delay: RetryDelay, announced_epoch: int | None) -> RoundResult: ...

    def __enter__(self) -> object: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None: ...


BuiltT = TypeVar("BuiltT", bound=BuiltRound)
BuiltT_co = TypeVar("BuiltT_co", bound=BuiltRound, covariant=True)


class RoundBuilder(Protocol[BuiltT_co]):
    """Builds a table's source and round from its connections (``hooks/tiering.py: TieringHook``)."""

    def get_source(self) -> AnySource: ...

    def build_round(self, source: AnySource | None = None) -> BuiltT_co: ...

    def secrets(self) -> list[str]: ...


@dataclass(frozen=True)
class _Started:
    """A round about to run: the table's state before it, and when."""

    state: TableState | None
    at: datetime


class _Ended(Exception):
    """Ends the task early with ``outcome`` (caught by :meth:`TableTask.run`)."""

    def __init__(self, outcome: TaskOutcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


@dataclass(frozen=True)
class TableTask(Generic[BuiltT]):
    """One table's task: the spec, its state store, how to build its round, and what its task instance knows."""

    spec: TableSpec
    state_store: StateStore
    builder: RoundBuilder[BuiltT]
    retry_delay: RetryDelay
    #: The tables the DAG run asked for (None: every table, when due).
    selected: Sequence[str] | None = None
    #: The DAG's schedule is the table's clock (one DAG per table): every run is due (``core/decisions.py``).
    every_run_due: bool = False
    #: The task instance is a retry: a quarantine its own earlier tries caused fails it instead of skipping it.
    retried: bool = False
    #: The newest epoch an asset event announced (0: none; None: unknown).
    announced_epoch: Callable[[], int | None] = lambda: None
    #: What stops a round from outside (Airflow's ``AirflowTaskTimeout``, a ``BaseException``), and the error it is
    #: recorded as (the round's parts are still held: their Spark job is cancelled after the record).
    interrupted_by: tuple[type[BaseException], ...] = ()
    interruption: Callable[[], Exception] | None = None
    clock: Callable[[], datetime] = field(default=utcnow)
    #: Where a round's row of the history table goes (None: nowhere), and the DAG run it ran in.
    history: HistorySink | None = None
    dag_id: str | None = None
    run_id: str | None = None

    def run(self, tiered: Callable[[BuiltT, RoundResult], None] = lambda parts, result: None) -> TaskOutcome:
        """Decide, maybe run a round, and say how the task ends; ``tiered`` is told of a round that tiered rows
        (with its parts: lineage is read from them). Raises the round's error, or an error before the round, once
        recorded as the table's failed round. A round that ran, ended or failed, leaves its row in the history."""
        started: list[_Started] = []
        outcome: TaskOutcome | None = None
        try:
            try:
                outcome = self._run(tiered, started)
            except _Ended as ended:
                outcome = ended.outcome
            return outcome
        finally:
            if started and self.history is not None:
                self._record_history(started[0], outcome)

    def _record_history(self, started: _Started, outcome: TaskOutcome | None) -> None:
        row = history_row(
            self.spec, dag_id=self.dag_id, run_id=self.run_id, before=started.state, after=self.load_quietly(),
            started_at=started.at, ended_at=self.clock(), result=None if outcome is None else outcome.result,
        )  # fmt: skip
        assert self.history is not None
        record_history(self.state_store, self.history, row)

    def _run(self, tiered: Callable[[BuiltT, RoundResult], None], started: list[_Started]) -> TaskOutcome:
        state, now = self.state_store.load(), self.clock()
        decision = decide_task(self.spec, state, now=now, selected=self.selected, every_run_due=self.every_run_due)
        source = None
        if decision.action is TaskAction.PROBE:
            # Only the hot store is asked: loading an Iceberg catalog costs a fresh task process about 1.7
            # CPU-seconds, most of a nothing-to-tier round.
            with self._setup_failure_recorded(started, _Started(state, now)):
                source = self.builder.get_source()
                # A probe's own errors mean "maybe" (``probe_hot_store``); a timeout while it waits (a hot table
                # locked) is recorded as the table's failed round.
                decision = probe_hot_store(source.probe, decision)
        changed = record_decision(state, decision, now)
        if changed is not None:
            self.state_store.save(changed)
        if decision.runs:
            log.info("%s", decision.reason)
        if not decision.runs:
            state = changed or state
            if decision.action is not TaskAction.NOT_SELECTED:
                self._fail_if_stale(state)
            if decision.action is TaskAction.QUARANTINED:
                return self._quarantined(decision.reason, state)
            return TaskOutcome(TaskEnd.SKIPPED, decision.reason, state=state)
        started.append(_Started(state, now))  # a round runs from here (its set-up failing is a failed round too)
        with self._setup_failure_recorded(started, started[0]):
            parts = self.builder.build_round(source)
        with parts:
            result = self._round(parts)
        if result.outcome is RoundOutcome.TIERED:
            tiered(parts, result)
        return self._reported(result)

    def _round(self, parts: BuiltRound) -> RoundResult:
        try:
            return parts.run(self.state_store, retry_delay=self.retry_delay, announced_epoch=self.announced_epoch())
        except QuarantinedError as exc:
            state = self.load_quietly()
            self._fail_if_stale(state)
            raise _Ended(self._quarantined(str(exc), state, cause=exc)) from exc
        except (NotRetryable, DeploymentIncomplete) as exc:
            # Recorded by the round already (a NotRetryable one quarantined the table): no retry can help.
            raise _Ended(self._failed_round(str(exc), exc)) from exc
        except BaseException as exc:
            self._record_interruption(exc)
            raise

    def _record_interruption(self, exc: BaseException) -> None:
        """A task stopped from outside (a timeout) wherever it was, its round or the probe before it (a hot table
        locked by another session): recorded as the table's failed round (its round's parts, if any, still held:
        their Spark job is cancelled after the record). Anything else is left to whoever raised it."""
        if self.interruption is None or not isinstance(exc, self.interrupted_by):
            return
        record_interrupted_round(
            self.spec, self.state_store, self.interruption(), secrets=self.builder.secrets(),
            retry_delay=self.retry_delay,
        )  # fmt: skip

    def _reported(self, result: RoundResult) -> TaskOutcome:
        state = self.load_quietly()
        counted = tuple(round_metrics(result))
        announcements = tuple(result.announcements())
        for recovered in result.unannounced:
            log.warning(
                "%s: announcing epoch %s (snapshot %s, offsets %s -> %s), committed by a round that died before "
                "it announced it",
                result.table, recovered.epoch, recovered.snapshot_id, recovered.start_offsets, recovered.end_offsets,
            )  # fmt: skip
        if not announcements:
            self._fail_if_stale(state, counted)
            reason = f"{result.table}: nothing to tier; the lake is at {result.end_offsets}"
            if result.blockers:
                reason += f"; waiting for open transactions {result.blockers}"
            return TaskOutcome(TaskEnd.SKIPPED, reason, result=result, counted=counted, state=state)
        alert = in_place_alert(self.spec, state)  # a skip checked it above
        if alert is not None:  # the commit stands; its event is announced by the next round ("recovered")
            return TaskOutcome(TaskEnd.FAILED, alert, result=result, counted=counted, state=state)
        value = announcements[-1] if result.outcome is RoundOutcome.NOTHING_TO_TIER else result.event_extra()
        return TaskOutcome(TaskEnd.SUCCEEDED, "", announcements, value, result=result, counted=counted, state=state)

    @contextmanager
    def _setup_failure_recorded(self, started: list[_Started], begun: _Started) -> Iterator[None]:
        """An error before the round (a missing or unusable connection) is recorded as the table's failed round,
        so it shows in the status, counts towards the quarantine and has its row in the history (from ``begun``),
        and then raised; a missing pip extra (:class:`DeploymentIncomplete`) is recorded without counting and fails
        the task without retries."""
        try:
            yield
        except BaseException as exc:
            if not started:
                started.append(begun)
            if not isinstance(exc, Exception):  # stopped from outside (a timeout): the table's failed round too
                self._record_interruption(exc)
                raise
            try:
                record_failure_before_round(
                    self.spec, self.state_store, exc, secrets=self.builder.secrets(), retry_delay=self.retry_delay
                )
            except QuarantinedError as quarantined:
                outcome = self._quarantined(str(quarantined), None, cause=quarantined, failed_round=True)
                raise _Ended(outcome) from quarantined
            if isinstance(exc, DeploymentIncomplete):
                raise _Ended(self._failed_round(f"{self.spec.name}: {exc}", exc)) from exc
            raise

    def _fail_if_stale(self, state: TableState | None, counted: tuple[Metric, ...] = ()) -> None:
        """Where the task would end skipped, it fails instead when the table is stale past its bound, so alerts
        fire, naming the table and what keeps it behind (``core/staleness.py``)."""
        alert = (
            staleness_alert(self.spec, state, self.clock())
            or retained_wal_alert(self.spec, state)
            or stream_backlog_alert(self.spec, state)
            or in_place_alert(self.spec, state)
        )
        if alert is not None:
            raise _Ended(TaskOutcome(TaskEnd.FAILED, alert, counted=counted, state=state))

    def _quarantined(
        self,
        reason: str,
        state: TableState | None,
        *,
        cause: BaseException | None = None,
        failed_round: bool = False,
    ) -> TaskOutcome:
        """A quarantined table skips, unless this task's own failed tries quarantined it: it then fails loudly (so
        the run fails and alerts fire) and stops retrying."""
        counted = tuple(failed_round_metrics()) if failed_round else ()
        state = state if state is not None else self.load_quietly()
        end = TaskEnd.FAILED if self.retried else TaskEnd.SKIPPED
        return TaskOutcome(end, reason, cause=cause, counted=counted, state=state)

    def _failed_round(self, reason: str, cause: BaseException) -> TaskOutcome:
        return TaskOutcome(
            TaskEnd.FAILED, reason, cause=cause, counted=tuple(failed_round_metrics()), state=self.load_quietly()
        )

    def metrics(self, outcome: TaskOutcome | None, *, failed: bool = False) -> list[Metric]:
        """What the task reports to the metrics; ``outcome`` None: the task raised, ``failed`` as a failed round
        (anything else that stopped it, say a termination, counts no round)."""
        if outcome is not None:
            return outcome.metrics(self.clock())
        state = self.load_quietly()
        counted = failed_round_metrics() if failed else []
        return [*counted, *([] if state is None else table_gauges(state, self.clock()))]

    def load_quietly(self) -> TableState | None:
        try:
            return self.state_store.load()
        except Exception as exc:  # reporting never hides the task's own outcome
            log.warning("%s: no state for the metrics: %s", self.spec.name, exc)
            return None
