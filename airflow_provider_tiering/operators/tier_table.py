"""``TierTableOperator``: one exactly-once tiering round of one table, as one Airflow task."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, AirflowTaskTimeout

from airflow_provider_tiering.assets import recovered_events_alias, table_asset
from airflow_provider_tiering.core.decisions import (
    TaskAction,
    TaskDecision,
    decide_task,
    probe_hot_store,
    record_decision,
)
from airflow_provider_tiering.core.errors import DeploymentIncomplete, NotRetryable, QuarantinedError, RoundTimedOut
from airflow_provider_tiering.core.in_place_changes import in_place_alert
from airflow_provider_tiering.core.round import (
    RetryDelay,
    RoundOutcome,
    RoundResult,
    record_failure_before_round,
    record_interrupted_round,
)
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import retained_wal_alert, staleness_alert
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.core.table_metrics import Metric, failed_round_metrics, round_metrics, table_gauges
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.metrics import send as send_metrics
from airflow_provider_tiering.operators.retry_delay import task_retry_delay
from airflow_provider_tiering.run_conf import selected_tables

#: How many of the asset's newest events are read to find the newest announced epoch (other producers may add some).
ANNOUNCED_EVENTS_READ = 20

if TYPE_CHECKING:
    from airflow_provider_tiering.build import RoundParts
    from airflow_provider_tiering.lineage import RoundLineage


class TierTableOperator(BaseOperator):
    """Tier one hot table into its Iceberg table: one round of plan, write, fenced commit, record.

    The task id defaults to the table's name, and ``retries``, ``retry_delay``,
    ``retry_exponential_backoff`` and ``max_retry_delay`` default to the spec's values. The table's
    state document is kept in Airflow's asset state store under the table's asset; a round that
    tiers rows emits an asset event whose ``extra`` holds rows, snapshot id, epoch and offsets.
    A round with nothing to tier is skipped (no Spark session, no asset event), unless it found commits of
    earlier rounds that died before announcing them: every round announces those (``"recovered": true``, through
    the alias :func:`~airflow_provider_tiering.assets.recovered_events_alias`) before its own, so the asset's
    events cover every commit; order them by ``epoch``. A failing round
    records its error in the state (FAILED, ``last_error``) and fails this task only; after
    ``max_consecutive_failures`` failed rounds the table is quarantined: a task that finds it so skips,
    with the reason (or fails without retrying, when its own earlier tries caused it), until the table
    is reset; an error no retry can cure (:class:`~airflow_provider_tiering.core.errors.NotRetryable`, such as a
    column of a type the lake cannot hold) fails the task without retries and quarantines the table at once, until
    it is fixed and reset (:func:`airflow_provider_tiering.status.reset_table`).
    A table is tiered once ``freshness_seconds`` have passed since its last tiered round; before that
    its task skips at once (status SCHEDULED), touching neither the hot store nor Spark. A DAG run
    started with ``conf={"tables": [...]}`` tiers only the named tables, due or not; the others skip.
    What the task does is decided in ``core/decisions.py``; this class maps the decision to its outcome.

    Hazard: two runs of the same table at once are safe (one is fenced and fails) but waste work;
    limit them with ``max_active_tis_per_dag=1`` (the DAG factory does).
    """

    ui_color = "#cfe8ff"

    def __init__(self, *, table: TableSpec | Mapping[str, Any], **kwargs: Any) -> None:
        spec = TableSpec.parse(table)
        asset = table_asset(spec)
        kwargs.setdefault("task_id", spec.name)
        kwargs.setdefault("retries", spec.retries)
        kwargs.setdefault("retry_delay", timedelta(seconds=spec.retry_delay_seconds))
        kwargs.setdefault("retry_exponential_backoff", spec.retry_exponential_backoff)
        kwargs.setdefault("max_retry_delay", timedelta(seconds=spec.max_retry_delay_seconds))
        kwargs.setdefault("max_active_tis_per_dag", 1)
        if spec.round_timeout_seconds is not None:
            kwargs.setdefault("execution_timeout", timedelta(seconds=spec.round_timeout_seconds))
        kwargs["inlets"] = [*kwargs.get("inlets", []), asset]
        alias = recovered_events_alias(spec)
        kwargs["outlets"] = [*kwargs.get("outlets", []), asset, alias]
        super().__init__(**kwargs)
        self.table_spec = spec
        self.table_asset = asset
        self.recovered_alias = alias
        self._lineage: RoundLineage | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        """Decide, maybe run a round, map the outcome; whatever happens, send the table's metrics."""
        state_store = AssetStateStore(context["asset_state_store"][self.table_asset])
        self._metrics: list[Metric] = []
        self._state_for_metrics: TableState | None = None
        self._settled = False  # the task's outcome is decided (a skip or a quarantine ends it too, not as a failure)
        try:
            return self._decide_and_run(context, state_store)
        except (Exception, AirflowTaskTimeout):
            if not self._settled:
                self._metrics += failed_round_metrics()
            raise
        finally:
            state = self._state_for_metrics if self._settled else self._load_quietly(state_store)
            gauges = [] if state is None else table_gauges(state, utcnow())
            send_metrics(self.table_spec, self.dag_id, [*self._metrics, *gauges])

    def _load_quietly(self, state_store: AssetStateStore) -> TableState | None:
        try:
            return state_store.load()
        except Exception as exc:  # metrics never hide the task's own outcome
            self.log.warning("%s: no state for the metrics: %s", self.table_spec.name, exc)
            return None

    def _decide_and_run(self, context: Any, state_store: AssetStateStore) -> dict[str, Any]:
        spec = self.table_spec
        state, now = state_store.load(), utcnow()
        decision = decide_task(spec, state, now=now, selected=selected_tables(context))
        # Imported here, not at module level: DAG files are parsed often and need none of pyarrow,
        # pyiceberg or pyspark (measured: 0.68 s -> 0.45 s to parse a 200-table DAG).
        from airflow_provider_tiering.hooks.tiering import TieringHook

        hook = TieringHook(spec)
        retry_delay = task_retry_delay(self, context)
        source = None
        if decision.action is TaskAction.PROBE:
            # Only the hot store is asked: loading an Iceberg catalog costs a fresh task process about 1.7
            # CPU-seconds, most of a nothing-to-tier round.
            with self._setup_failure_recorded(state_store, context, retry_delay):
                source = hook.get_source()
            decision = probe_hot_store(source.probe, decision)
        changed = record_decision(state, decision, now)
        if changed is not None:
            state_store.save(changed)
        if not decision.runs:
            self._state_for_metrics, self._settled = changed or state, True
            if decision.action is not TaskAction.NOT_SELECTED:
                self._fail_if_stale(changed or state)
            raise self._exit(decision, context)
        with self._setup_failure_recorded(state_store, context, retry_delay, hook.secrets):
            parts = hook.build_round(source)
        with parts:
            try:
                result = parts.run(
                    state_store,
                    retry_delay=retry_delay,
                    announced_epoch=self._announced_epoch(context),
                )
            except QuarantinedError as exc:
                self._state_for_metrics, self._settled = self._load_quietly(state_store), True
                self._fail_if_stale(self._state_for_metrics)
                raise self._quarantine_exit(str(exc), context) from exc
            except (NotRetryable, DeploymentIncomplete) as exc:
                # Recorded by the round already (a NotRetryable one quarantined the table): fail without Airflow's
                # retries, which cannot help.
                raise AirflowFailException(str(exc)) from exc
            except AirflowTaskTimeout:
                # Airflow's execution_timeout interrupts the round wherever it is (a BaseException, which the
                # round does not record): record it as the table's failed round; leaving ``with parts`` stops the
                # Spark session, which cancels its running job.
                timeout = self.execution_timeout.total_seconds() if self.execution_timeout else None
                record_interrupted_round(
                    spec,
                    state_store,
                    RoundTimedOut(
                        f"the round ran past its timeout of {timeout:g} s (round_timeout_seconds) and was stopped, "
                        "its Spark job cancelled; nothing was committed by it, its files are cleaned by the next "
                        "round"
                    ),
                    secrets=hook.secrets(),
                    retry_delay=retry_delay,
                )
                raise
        if result.outcome is RoundOutcome.TIERED:
            self._lineage = self._round_lineage(parts, result)
        self._metrics += round_metrics(result)
        self._state_for_metrics, self._settled = self._load_quietly(state_store), True
        return self._report(result, context)

    def _exit(self, decision: TaskDecision, context: Any) -> Exception:
        """The task outcome of a decision not to run a round: skipped with the reason (a quarantine fails instead,
        when this task's own tries caused it)."""
        if decision.action is TaskAction.QUARANTINED:
            return self._quarantine_exit(decision.reason, context)
        return AirflowSkipException(decision.reason)

    @contextmanager
    def _setup_failure_recorded(
        self,
        state_store: AssetStateStore,
        context: Any,
        retry_delay: RetryDelay,
        secrets: Callable[[], list[str]] = list,
    ) -> Iterator[None]:
        """An error before the round (a missing or unusable Airflow connection) is recorded as the table's
        failed round, so it shows in the status and counts towards the quarantine, and then fails the task. A
        missing pip extra (:class:`DeploymentIncomplete`) is recorded without counting and fails the task without
        Airflow's retries, its message naming the extra to install."""
        try:
            yield
        except Exception as exc:
            try:
                record_failure_before_round(
                    self.table_spec, state_store, exc, secrets=secrets(), retry_delay=retry_delay
                )
            except QuarantinedError as quarantined:
                raise self._quarantine_exit(str(quarantined), context) from quarantined
            if isinstance(exc, DeploymentIncomplete):
                raise AirflowFailException(f"{self.table_spec.name}: {exc}") from exc
            raise

    def _fail_if_stale(self, state: TableState | None) -> None:
        """Where the task would end skipped, fail it instead when the table is stale past its bound, so alerts
        fire, naming the table and what keeps it behind (``core/staleness.py``)."""
        alert = (
            staleness_alert(self.table_spec, state, utcnow())
            or retained_wal_alert(self.table_spec, state)
            or in_place_alert(self.table_spec, state)
        )
        if alert is not None:
            raise AirflowFailException(alert)

    @staticmethod
    def _quarantine_exit(reason: str, context: Any) -> Exception:
        if context["ti"].try_number > 1:
            # This task's own failed tries quarantined the table: fail loudly (so the run fails and
            # alerts fire) and stop retrying, rather than end "skipped".
            return AirflowFailException(reason)
        return AirflowSkipException(reason)

    def _round_lineage(self, parts: RoundParts, result: RoundResult) -> RoundLineage | None:
        """What the round read and wrote, for :meth:`get_openlineage_facets_on_complete` (None if unknown)."""
        from airflow_provider_tiering.lineage import RoundLineage, arrow_fields, lake_dataset

        spec = self.table_spec
        try:
            fields = arrow_fields(parts.source.schema())
            metrics = result.metrics
            return RoundLineage(
                replace(parts.source.lineage_dataset(), fields=fields),
                lake_dataset(parts.lake.location(), spec.lake.namespace, spec.lake.table, fields),
                rows=metrics.rows if metrics else 0,
                bytes=metrics.bytes if metrics else 0,
                files=metrics.files if metrics else 0,
            )
        except Exception as exc:  # lineage is reporting: it never fails a round that committed
            self.log.warning("%s: no lineage for this round: %s", spec.name, exc)
            return None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage input (the hot table) and output (the Iceberg table) of the round, with schema and row
        counts; called by Airflow's OpenLineage provider when it is installed and configured."""
        from airflow_provider_tiering.lineage import operator_lineage

        if self._lineage is None:
            from airflow.providers.openlineage.extractors.base import OperatorLineage

            return OperatorLineage()
        return operator_lineage(self._lineage)

    def _announced_epoch(self, context: Any) -> int | None:
        """The newest epoch an event on the table's asset announced (0: none), read through the execution API;
        None when it cannot be read (the round then announces only itself)."""
        try:
            events = context["inlet_events"][self.table_asset].ascending(False).limit(ANNOUNCED_EVENTS_READ)
            epochs = [int(e.extra["epoch"]) for e in events if isinstance(e.extra, dict) and "epoch" in e.extra]
        except Exception as exc:  # reading history must never fail a round
            name = self.table_spec.name
            self.log.warning("%s: cannot read its asset events (%s); earlier rounds not checked", name, exc)
            return None
        return max(epochs, default=0)

    def _report(self, result: RoundResult, context: Any) -> dict[str, Any]:
        extra = result.event_extra()
        announcements = result.announcements()
        for recovered in result.unannounced:
            self.log.warning(
                "%s: announcing epoch %s (snapshot %s, offsets %s -> %s), committed by a round that died before "
                "it announced it",
                result.table,
                recovered.epoch,
                recovered.snapshot_id,
                recovered.start_offsets,
                recovered.end_offsets,
            )
        if not announcements:
            self._fail_if_stale(self._state_for_metrics)
            reason = f"{result.table}: nothing to tier; the lake is at {result.end_offsets}"
            if result.blockers:
                reason += f"; waiting for open transactions {result.blockers}"
            raise AirflowSkipException(reason)
        alert = in_place_alert(self.table_spec, self._state_for_metrics)  # a skip checked it above
        if alert is not None:  # the commit stands; its event is announced by the next round ("recovered")
            raise AirflowFailException(alert)
        # The newest event directly on the asset, older ones through the alias (registered after it: order events
        # by their ``epoch``, not their timestamp).
        context["outlet_events"][self.table_asset].extra = announcements[-1]
        for older in announcements[:-1]:
            context["outlet_events"][self.recovered_alias].add(self.table_asset, extra=older)
        if result.outcome is RoundOutcome.NOTHING_TO_TIER:
            return announcements[-1]
        return extra
