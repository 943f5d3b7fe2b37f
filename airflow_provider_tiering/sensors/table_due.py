"""``TableDueSensor``: waits, deferred, until a table is due for a round and its hot store has new rows."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_tiering.assets import table_asset
from airflow_provider_tiering.core.decisions import (
    TaskAction,
    TaskDecision,
    decide_task,
    probe_hot_store,
    record_decision,
)
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import Probe
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.run_conf import selected_tables
from airflow_provider_tiering.triggers.table_due import TableDueTrigger


class TableDueSensor(BaseSensorOperator):
    """Succeeds once a table is due: ``freshness_seconds`` have passed since its last tiered round and the
    hot store has rows beyond the committed offsets, or its hot table is no longer the one, in the shape, the last
    round recorded (dropped and created again, truncated, reshaped: the round follows it or refuses it). Put it before
    the table's :class:`TierTableOperator`.

    Deferrable (the default): the worker reads the table's state document, records a not-due table as
    SCHEDULED, and hands the wait to :class:`~airflow_provider_tiering.triggers.table_due.TableDueTrigger`
    in the triggerer, so a waiting table holds no worker slot. The trigger cannot read the state (no
    metadata-database access in the triggerer): it gets the due time and committed offsets, and the worker
    checks the state again when it fires (a manual run may have tiered the table meanwhile).
    With ``deferrable=False`` it pokes like any sensor (``mode="poke"`` or ``"reschedule"``).
    Both modes take the tier operator's decision (``core/decisions.py``).

    ``timeout`` bounds the wait: a table not due by then skips (so does its tier task), it is not a
    failure. A quarantined table skips at once. A run with ``conf={"tables": [...]}`` does not wait for
    the tables it names and skips the others.
    """

    ui_color = "#e6f0fa"

    def __init__(
        self,
        *,
        table: TableSpec | Mapping[str, Any],
        deferrable: bool = True,
        poke_interval: timedelta | float = 60,
        **kwargs: Any,
    ) -> None:
        spec = TableSpec.parse(table)
        asset = table_asset(spec)
        kwargs.setdefault("task_id", f"{spec.name}_due")
        # Retried as the table's task is: Airflow 3.3 can fail a deferred task whose trigger fires within seconds of
        # its deferral (a stale executor event, apache/airflow#71580); the retry decides again, from the state.
        kwargs.setdefault("retries", spec.retries)
        kwargs.setdefault("retry_delay", timedelta(seconds=spec.retry_delay_seconds))
        kwargs["inlets"] = [*kwargs.get("inlets", []), asset]
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.table_spec = spec
        self.table_asset = asset
        self.deferrable = deferrable

    # -- deferrable path -------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        deadline = utcnow() + timedelta(seconds=self.timeout)
        return self._check_or_defer(context, deadline)

    def execute_complete(self, context: Any, event: dict[str, Any], deadline: str) -> Any:
        self._keep_emptied_range(context, event.get("emptied_range"))
        if event.get("probe_error"):
            self.log.warning(
                "%s: probing the hot store failed, the round will tell: %s", self.table_spec.name, event["probe_error"]
            )
            return {"due": True, "reason": "probe failed"}
        if event.get("status") == "deadline":
            raise AirflowSkipException(f"{self.table_spec.name}: not due with new rows before {deadline}")
        return self._check_or_defer(context, datetime.fromisoformat(deadline))

    def _keep_emptied_range(self, context: Any, emptied: JsonObject | None) -> None:
        """Record a stretch the trigger found emptied below the offsets (it cannot write the state itself), so the
        next look counts the rows arriving in it from there."""
        if emptied is None:
            return
        store = AssetStateStore(context["asset_state_store"][self.table_asset])
        state = store.load()
        if state is not None and state.emptied_range is None:
            state.emptied_range = emptied
            store.save(state)

    def _check_or_defer(self, context: Any, deadline: datetime) -> dict[str, Any]:
        spec = self.table_spec
        decision = self._decide(context)
        if decision.runs:
            self.log.info("%s", decision.reason)
            return {"due": True, "reason": decision.reason}
        if decision.action in (TaskAction.NOT_SELECTED, TaskAction.QUARANTINED):
            raise AirflowSkipException(decision.reason)
        waiting_until = decision.due_at if decision.action is TaskAction.NOT_DUE else None
        if waiting_until is not None:
            if waiting_until > deadline:
                raise AirflowSkipException(f"{spec.name}: not due until {waiting_until.isoformat()}, after {deadline}")
            self.log.info("%s: not due until %s; waiting in the triggerer", spec.name, waiting_until.isoformat())
        else:
            self.log.info("%s: due, no new rows yet; the triggerer probes every %ss", spec.name, self.poke_interval)
        self.defer(
            trigger=TableDueTrigger(
                table=spec.model_dump(mode="json"),
                due_at=None if waiting_until is None else waiting_until.isoformat(),
                committed=decision.committed,
                emptied=decision.emptied,
                reconcile_at=None if decision.reconcile_at is None else decision.reconcile_at.isoformat(),
                hot_shape=decision.hot_shape,
                poke_interval=self.poke_interval,
                deadline=deadline.isoformat(),
            ),
            method_name="execute_complete",
            kwargs={"deadline": deadline.isoformat()},
        )

    # -- poke path (deferrable=False) ------------------------------------------------------------
    def poke(self, context: Any) -> bool:
        decision = self._decide(context)
        if decision.action in (TaskAction.NOT_SELECTED, TaskAction.QUARANTINED):
            raise AirflowSkipException(decision.reason)
        return decision.runs

    # -- shared ------------------------------------------------------------------------------------
    def _decide(self, context: Any) -> TaskDecision:
        """The table's decision now, with the hot store probed when it depends on new rows; recorded in its state."""
        store = AssetStateStore(context["asset_state_store"][self.table_asset])
        state, now = store.load(), utcnow()
        decision = decide_task(self.table_spec, state, now=now, selected=selected_tables(context))
        if decision.action is TaskAction.PROBE:
            from airflow_provider_tiering.hooks.tiering import TieringSourceHook

            def probe(committed: Offsets | None, emptied: JsonObject | None, shape: JsonObject | None) -> Probe:
                return (
                    TieringSourceHook(self.table_spec.source, self.table_spec.lake)
                    .get_source()
                    .probe(committed, emptied, shape)
                )

            decision = probe_hot_store(probe, decision)
        changed = record_decision(state, decision, now)
        if changed is not None:
            store.save(changed)
        return decision
