"""``TierTableOperator``: one exactly-once tiering round of one table, as one Airflow task."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, AirflowTaskTimeout

from airflow_provider_tiering.assets import (
    database_asset,
    database_events_alias,
    recovered_events_alias,
    stream_asset,
    table_asset,
)
from airflow_provider_tiering.core.database_state import table_state_key
from airflow_provider_tiering.core.errors import RoundTimedOut
from airflow_provider_tiering.core.round_result import RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.table_task import TableTask, TaskEnd, TaskOutcome
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.metrics import send as send_metrics
from airflow_provider_tiering.operators.retry_delay import task_retry_delay
from airflow_provider_tiering.run_conf import selected_tables

#: How many of the asset's newest events are read to find the newest announced epoch (other producers may add some).
ANNOUNCED_EVENTS_READ = 20
#: The same for a table of a declared database, whose asset holds every table's events.
DATABASE_EVENTS_READ = 200

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
    started with ``conf={"tables": [...]}`` tiers only the named tables, due or not; the others skip. With
    ``every_run_due=True`` the DAG's schedule is the table's clock (one DAG per table,
    :func:`~airflow_provider_tiering.dag_factory.build_table_dags`): every run is due, and still probes the hot store.
    What the task does is ``core/table_task.py``'s; this class maps how it ends to Airflow's task outcomes.

    A table of a declared database (``database``: its name; a mapped task of
    :func:`~airflow_provider_tiering.dag_factory.build_database_dag`, one per table its discovery runs) keeps its
    state document under a key of its own in the database's asset and announces its rounds on that asset, the event's
    ``extra`` naming the table; every run is due (the discovery is its clock).

    Hazard: two runs of the same table at once are safe (one is fenced and fails) but waste work;
    limit them with ``max_active_tis_per_dag=1`` (the DAG factory does).
    """

    ui_color = "#cfe8ff"

    def __init__(
        self,
        *,
        table: TableSpec | Mapping[str, Any],
        every_run_due: bool = False,
        database: str | None = None,
        **kwargs: Any,
    ) -> None:
        spec = TableSpec.parse(table)
        if database is None:
            asset, alias, self.state_key = table_asset(spec), recovered_events_alias(spec), None
        else:
            asset = database_asset(database, spec.lake.catalog_conn_id, spec.lake.namespace)
            alias, self.state_key, every_run_due = database_events_alias(database), table_state_key(spec.name), True
        self.database = database
        kwargs.setdefault("task_id", spec.name)
        kwargs.setdefault("retries", spec.retries)
        kwargs.setdefault("retry_delay", timedelta(seconds=spec.retry_delay_seconds))
        kwargs.setdefault("retry_exponential_backoff", spec.retry_exponential_backoff)
        kwargs.setdefault("max_retry_delay", timedelta(seconds=spec.max_retry_delay_seconds))
        kwargs.setdefault("max_active_tis_per_dag", 1)
        if spec.round_timeout_seconds is not None:
            kwargs.setdefault("execution_timeout", timedelta(seconds=spec.round_timeout_seconds))
        group = spec.source.stream_group()
        # A table of a stream group reads its group's state document (what the reader wrote of it) to probe.
        self.stream_asset = None if group is None else stream_asset(group)
        kwargs["inlets"] = _with(kwargs.get("inlets", []), asset, *([self.stream_asset] if self.stream_asset else []))
        kwargs["outlets"] = _with(kwargs.get("outlets", []), asset, alias)
        super().__init__(**kwargs)
        self.table_spec = spec
        self.every_run_due = every_run_due
        self.table_asset = asset
        self.recovered_alias = alias
        self._lineage: RoundLineage | None = None

    def execute(self, context: Any) -> dict[str, Any] | None:
        """Run the table's task (``core/table_task.py``) and map how it ends; whatever happens, send its metrics."""
        # Imported here, not at module level: DAG files are parsed often and need none of pyarrow,
        # pyiceberg or pyspark (measured: 0.68 s -> 0.45 s to parse a 200-table DAG).
        from airflow_provider_tiering.hooks.history_table import history_sink
        from airflow_provider_tiering.hooks.stream_group import AssetStreamStateStore, announced_by
        from airflow_provider_tiering.hooks.tiering import TieringHook

        announced = None
        if self.stream_asset is not None:
            announced = announced_by(AssetStreamStateStore(context["asset_state_store"][self.stream_asset]))
        task = TableTask(
            self.table_spec,
            self._state_store(context),
            TieringHook(self.table_spec, announced=announced),
            task_retry_delay(self, context),
            retried=context["ti"].try_number > 1,
            every_run_due=self.every_run_due,
            announced_epoch=lambda: self._announced_epoch(context),
            interrupted_by=(AirflowTaskTimeout,),
            interruption=self._timed_out,
            history=history_sink(self.table_spec.lake.catalog_conn_id),
            dag_id=self.dag_id,
            run_id=context.get("run_id"),
        )
        outcome: TaskOutcome | None = None
        failed = False
        try:
            task = replace(task, selected=selected_tables(context))
            outcome = task.run(tiered=self._keep_lineage)
        except (Exception, AirflowTaskTimeout):  # the round or its set-up failed (recorded as a failed round)
            failed = True
            raise
        finally:
            send_metrics(self.table_spec, self.dag_id, task.metrics(outcome, failed=failed))
        return self._ended(outcome, context)

    def _ended(self, outcome: TaskOutcome, context: Any) -> dict[str, Any] | None:
        if outcome.end is TaskEnd.SKIPPED:
            raise AirflowSkipException(outcome.reason) from outcome.cause
        if outcome.end is TaskEnd.FAILED:
            raise AirflowFailException(outcome.reason) from outcome.cause
        # The newest event directly on the asset, older ones through the alias (registered after it: order events
        # by their ``epoch``, not their timestamp).
        named = {} if self.database is None else {"table": self.table_spec.name}
        context["outlet_events"][self.table_asset].extra = {**outcome.announcements[-1], **named}
        for older in outcome.announcements[:-1]:
            context["outlet_events"][self.recovered_alias].add(self.table_asset, extra={**older, **named})
        return outcome.value

    def _state_store(self, context: Any) -> AssetStateStore:
        accessor = context["asset_state_store"][self.table_asset]
        return AssetStateStore(accessor) if self.state_key is None else AssetStateStore(accessor, self.state_key)

    def _timed_out(self) -> RoundTimedOut:
        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else 0
        return RoundTimedOut(
            f"the round ran past its timeout of {timeout:g} s (round_timeout_seconds) and was stopped, its Spark job "
            "cancelled; nothing was committed by it, its files are cleaned by the next round"
        )

    def _keep_lineage(self, parts: RoundParts, result: RoundResult) -> None:
        """What a round that tiered rows read and wrote, for :meth:`get_openlineage_facets_on_complete`."""
        from airflow_provider_tiering.lineage import RoundLineage, arrow_fields, lake_dataset

        spec = self.table_spec
        try:
            # The columns the round read: a landing zone's files may be gone since (``after_commit``).
            fields = () if result.read_schema is None else arrow_fields(result.read_schema)
            metrics = result.metrics
            self._lineage = RoundLineage(
                replace(parts.source.lineage_dataset(), fields=fields),
                lake_dataset(parts.lake.location(), spec.lake.namespace, spec.lake.table, fields),
                rows=metrics.rows if metrics else 0,
                bytes=metrics.bytes if metrics else 0,
                files=metrics.files if metrics else 0,
            )
        except Exception as exc:  # lineage is reporting: it never fails a round that committed
            self.log.warning("%s: no lineage for this round: %s", spec.name, exc)

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
        name = self.table_spec.name
        read = ANNOUNCED_EVENTS_READ if self.database is None else DATABASE_EVENTS_READ
        try:
            events = context["inlet_events"][self.table_asset].ascending(False).limit(read)
            extras = [e.extra for e in events if isinstance(e.extra, dict) and "epoch" in e.extra]
        except Exception as exc:  # reading history must never fail a round
            self.log.warning("%s: cannot read its asset events (%s); earlier rounds not checked", name, exc)
            return None
        if self.database is not None:
            mine = [int(extra["epoch"]) for extra in extras if extra.get("table") == name]
            # The database's other tables' events may hide this one's older ones: then announce only this round.
            return max(mine) if mine else (0 if len(extras) < read else None)
        return max((int(extra["epoch"]) for extra in extras), default=0)


def _with(assets: Any, *more: Any) -> list[Any]:
    """``assets`` and ``more``, each once (a mapped task's ``partial`` already names its database's asset)."""
    found = list(assets or [])
    for asset in more:
        if all(getattr(a, "name", None) != asset.name or type(a) is not type(asset) for a in found):
            found.append(asset)
    return found
