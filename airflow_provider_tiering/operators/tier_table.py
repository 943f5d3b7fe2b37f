"""``TierTableOperator``: one exactly-once tiering round of one table, as one Airflow task."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_provider_tiering.assets import table_asset
from airflow_provider_tiering.core.errors import QuarantinedError
from airflow_provider_tiering.core.round import RoundResult, record_failure_before_round, run_round
from airflow_provider_tiering.core.schedule import due_at, is_due, record_not_due, settled_offsets
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.run_conf import selected_tables

if TYPE_CHECKING:
    from airflow_provider_tiering.sources.base import Source


def earliest_retry_delay(
    try_number: int, retries: int, retry_delay: timedelta, multiplier: float, max_retry_delay: timedelta | None
) -> timedelta | None:
    """The shortest wait Airflow takes before retrying a failed try (its back-off adds up to as much again
    as deterministic jitter); None when no retry is left."""
    if try_number > retries:
        return None
    if multiplier and multiplier != 1.0:
        delay = timedelta(seconds=max(1, math.ceil(retry_delay.total_seconds() * multiplier ** (try_number - 1))))
    else:
        delay = retry_delay
    return min(delay, max_retry_delay) if max_retry_delay else delay


class TierTableOperator(BaseOperator):
    """Tier one hot table into its Iceberg table: one round of plan, write, fenced commit, record.

    The task id defaults to the table's name, and ``retries``, ``retry_delay``,
    ``retry_exponential_backoff`` and ``max_retry_delay`` default to the spec's values. The table's
    state document is kept in Airflow's asset state store under the table's asset; a round that
    tiers rows emits an asset event whose ``extra`` holds rows, snapshot id, epoch and offsets.
    A round with nothing to tier is skipped (no Spark session, no asset event). A failing round
    records its error in the state (FAILED, ``last_error``) and fails this task only; after
    ``max_consecutive_failures`` failed rounds the table is quarantined: a task that finds it so skips,
    with the reason (or fails without retrying, when its own earlier tries caused it), until the table
    is reset (:func:`airflow_provider_tiering.status.reset_table`).
    A table is tiered once ``freshness_seconds`` have passed since its last tiered round; before that
    its task skips at once (status SCHEDULED), touching neither the hot store nor Spark. A DAG run
    started with ``conf={"tables": [...]}`` tiers only the named tables, due or not; the others skip.

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
        kwargs["inlets"] = [*kwargs.get("inlets", []), asset]
        kwargs["outlets"] = [*kwargs.get("outlets", []), asset]
        super().__init__(**kwargs)
        self.table_spec = spec
        self.table_asset = asset

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.table_spec
        selected = selected_tables(context)
        if selected is not None and spec.name not in selected:
            raise AirflowSkipException(f"{spec.name}: not among the tables this run tiers ({', '.join(selected)})")
        state_store = AssetStateStore(context["asset_state_store"][self.table_asset])
        state = state_store.load()
        if selected is None:
            self._skip_unless_due(state_store, state)
        # Imported here, not at module level: DAG files are parsed often and need none of pyarrow,
        # pyiceberg or pyspark (measured: 0.68 s -> 0.45 s to parse a 200-table DAG).
        from airflow_provider_tiering.hooks.tiering import IcebergCatalogHook, TieringSourceHook, spark_settings

        retry_delay = self._retry_delay(context)
        with self._setup_failure_recorded(state_store, context, retry_delay):
            source = TieringSourceHook(spec.source).get_source()
        self._skip_if_nothing_new(state_store, state, source)
        from airflow_provider_tiering.lake.iceberg import IcebergLake, LazyCatalog
        from airflow_provider_tiering.spark.write_job import SparkSplitWriter

        catalog_hook = IcebergCatalogHook(spec.lake.catalog_conn_id)
        with self._setup_failure_recorded(state_store, context, retry_delay, catalog_hook.secrets):
            catalog_hook.catalog_properties()  # resolves the connection and its secrets (masked in errors) up front
            settings = spark_settings(spec.spark)
        # The catalog itself is loaded inside the round, so a catalog that cannot be reached is the table's error.
        catalog = LazyCatalog(catalog_hook.get_conn, repr(spec.lake.catalog_conn_id))
        lake = IcebergLake(catalog, spec.lake.namespace, spec.lake.table, spec.lake.partition_by)
        writer = SparkSplitWriter(settings, local_single_split=spec.spark.local_single_split)
        rejects = None
        if getattr(spec.source, "on_bad_record", "fail") == "side_table":
            from airflow_provider_tiering.lake.rejects import RejectsTable

            rejects = RejectsTable(catalog, spec.lake.namespace, spec.lake.rejects_table_name)
        try:
            result = run_round(
                spec,
                source,
                lake,
                writer,
                state_store,
                secrets=catalog_hook.secrets(),
                retry_delay=retry_delay,
                observe=lambda phase: self.log.info("%s: %s", spec.name, phase),
                rejects=rejects,
            )
        except QuarantinedError as exc:
            raise self._quarantine_exit(exc, context) from None
        finally:
            writer.stop()
        if result.outcome == "tiered":
            self._lineage = self._round_lineage(source, lake, result)
        return self._report(result, context)

    def _retry_delay(self, context: Any) -> timedelta | None:
        return earliest_retry_delay(
            context["ti"].try_number,
            self.retries or 0,
            self.retry_delay,
            float(self.retry_exponential_backoff or 0),
            self.max_retry_delay,
        )

    @contextmanager
    def _setup_failure_recorded(
        self,
        state_store: AssetStateStore,
        context: Any,
        retry_delay: timedelta | None,
        secrets: Callable[[], list[str]] = list,
    ) -> Iterator[None]:
        """An error before the round (a missing or unusable Airflow connection) is recorded as the table's
        failed round, so it shows in the status and counts towards the quarantine, and then fails the task."""
        try:
            yield
        except Exception as exc:
            try:
                record_failure_before_round(
                    self.table_spec, state_store, exc, secrets=secrets(), retry_delay=retry_delay
                )
            except QuarantinedError as quarantined:
                raise self._quarantine_exit(quarantined, context) from None
            raise

    @staticmethod
    def _quarantine_exit(exc: QuarantinedError, context: Any) -> Exception:
        if context["ti"].try_number > 1:
            # This task's own failed tries quarantined the table: fail loudly (so the run fails and
            # alerts fire) and stop retrying, rather than end "skipped".
            return AirflowFailException(str(exc))
        return AirflowSkipException(str(exc))

    def _round_lineage(self, source: Source, lake: Any, result: RoundResult) -> Any:
        """What the round read and wrote, for :meth:`get_openlineage_facets_on_complete` (None if unknown)."""
        from airflow_provider_tiering.lineage import RoundLineage, arrow_fields, lake_dataset, source_dataset

        spec = self.table_spec
        try:
            fields = arrow_fields(source.schema())
            metrics = result.metrics
            return RoundLineage(
                source_dataset(source, spec, fields),
                lake_dataset(lake.table.location(), spec.lake.namespace, spec.lake.table, fields),
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

        lineage = getattr(self, "_lineage", None)
        if lineage is None:
            from airflow.providers.openlineage.extractors import OperatorLineage

            return OperatorLineage()
        return operator_lineage(lineage)

    def _skip_unless_due(self, state_store: AssetStateStore, state: TableState | None) -> None:
        now = utcnow()
        if state is None or is_due(state, self.table_spec.freshness_seconds, now):
            return
        record_not_due(state, now)
        state_store.save(state)
        when = due_at(state, self.table_spec.freshness_seconds)
        raise AirflowSkipException(
            f"{self.table_spec.name}: not due until {when.isoformat() if when else 'now'} "
            f"(freshness {self.table_spec.freshness_seconds:g}s since the last tiered round)"
        )

    def _skip_if_nothing_new(self, state_store: AssetStateStore, state: TableState | None, source: Source) -> None:
        """Skip before opening the lake when the hot store has no row beyond the recorded offsets.

        Loading an Iceberg catalog costs a fresh task process about 1.7 CPU-seconds (imports, first catalog
        query), most of a nothing-to-tier round. Safe: a lake ahead of the state (a crash between commit and
        record) has rows beyond the recorded offsets, so the full round runs and repairs the state.
        """
        offsets = settled_offsets(state)
        if state is None or offsets is None:
            return
        try:
            if source.has_rows_after(offsets):
                return
        except Exception:  # the round reports and records the error, with retries and quarantine
            return
        state.walk_to_idle()
        state.last_checked_time = utcnow()
        state_store.save(state)
        raise AirflowSkipException(
            f"{self.table_spec.name}: nothing to tier; the hot store has no row beyond {offsets}"
        )

    def _report(self, result: RoundResult, context: Any) -> dict[str, Any]:
        extra = result.event_extra()
        if result.outcome == "nothing_to_tier":
            reason = f"{result.table}: nothing to tier; the lake is at {result.end_offsets}"
            if result.blockers:
                reason += f"; waiting for open transactions {result.blockers}"
            raise AirflowSkipException(reason)
        context["outlet_events"][self.table_asset].extra = extra
        self.log.info(
            "%s: tiered %s rows in %s files, epoch %s, snapshot %s, offsets %s -> %s",
            result.table,
            extra["rows"],
            extra["files"],
            result.epoch,
            result.snapshot_id,
            result.start_offsets,
            result.end_offsets,
        )
        return extra
