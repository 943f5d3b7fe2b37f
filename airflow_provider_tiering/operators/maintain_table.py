"""``MaintainTableOperator``: lake maintenance of one tiered table (compaction, snapshot expiry, orphan removal)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_tiering.assets import table_asset
from airflow_provider_tiering.core.maintenance import record_failure_before_maintenance
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.hooks.asset_state import MaintenanceStateStore
from airflow_provider_tiering.run_conf import selected_tables


class MaintainTableOperator(BaseOperator):
    """Keep one tiered Iceberg table healthy: compact its small files (on Spark, in one snapshot that carries the
    committed tiering offsets on), expire old snapshots (never those the offsets are read from) and remove orphan
    files older than a safety age; all of it safe while the table's rounds run.

    It runs at most every ``maintenance.interval_seconds`` of the table's spec (skipping in between), and records
    what it did, or its error, under its own key of the table's asset state (``tiering_maintenance``), never in
    the tiering state. It reads the asset (an inlet) but emits no asset event: tiered-table consumers are not
    triggered by maintenance. A failure fails this task only (no retries by default: the next run tries again).
    """

    ui_color = "#e8f5e9"

    def __init__(self, *, table: TableSpec | Mapping[str, Any], **kwargs: Any) -> None:
        spec = TableSpec.parse(table)
        asset = table_asset(spec)
        kwargs.setdefault("task_id", f"{spec.name}.maintain")
        kwargs.setdefault("retries", 0)
        kwargs.setdefault("max_active_tis_per_dag", 1)
        kwargs["inlets"] = [*kwargs.get("inlets", []), asset]
        super().__init__(**kwargs)
        self.table_spec = spec
        self.table_asset = asset

    def execute(self, context: Any) -> dict[str, Any]:
        spec = self.table_spec
        selected = selected_tables(context)
        if selected is not None and spec.name not in selected:
            raise AirflowSkipException(f"{spec.name}: not among the tables this run names ({', '.join(selected)})")
        store = MaintenanceStateStore(context["asset_state_store"][self.table_asset])
        status = store.load()
        now = utcnow()
        if status is not None and not status.is_due(spec.maintenance, now) and selected is None:
            raise AirflowSkipException(
                f"{spec.name}: maintained at {status.last_run_at.isoformat() if status.last_run_at else '?'}; "
                f"next after {spec.maintenance.interval_seconds:g}s"
            )
        from airflow_provider_tiering.hooks.tiering import TieringHook

        hook = TieringHook(spec)
        try:
            parts = hook.build_maintenance()
        except Exception as exc:  # recorded like a failed step, so the status shows why maintenance does not run
            raise record_failure_before_maintenance(spec.name, store, exc, now=now, secrets=hook.secrets()) from exc
        # A failure raises MaintenanceFailed, already recorded, naming the step and its root cause.
        status = parts.run(store, now=now)
        check = status.last_check
        self.log.info(
            "%s: compaction %s (%s -> %s data files), %d snapshots expired, %d orphan files removed; "
            "now %s data files in %s snapshots",
            spec.name,
            check.outcome if check else "-",
            check.files_before if check else "-",
            check.files_after if check else "-",
            status.snapshots_expired,
            status.orphans_removed,
            status.data_files,
            status.snapshots,
        )
        return status.to_json()
