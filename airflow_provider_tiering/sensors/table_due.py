"""``TableDueSensor``: waits, deferred, until a table is due for a round and its hot store has new rows."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_tiering.assets import table_asset
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.schedule import due_at, record_not_due
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.run_conf import selected_tables
from airflow_provider_tiering.triggers.table_due import TableDueTrigger


class TableDueSensor(BaseSensorOperator):
    """Succeeds once a table is due: ``freshness_seconds`` have passed since its last tiered round and the
    hot store has rows beyond the committed offsets. Put it before the table's :class:`TierTableOperator`.

    Deferrable (the default): the worker reads the table's state document, records a not-due table as
    SCHEDULED, and hands the wait to :class:`~airflow_provider_tiering.triggers.table_due.TableDueTrigger`
    in the triggerer, so a waiting table holds no worker slot. The trigger cannot read the state (no
    metadata-database access in the triggerer): it gets the due time and committed offsets, and the worker
    checks the state again when it fires (a manual run may have tiered the table meanwhile).
    With ``deferrable=False`` it pokes like any sensor (``mode="poke"`` or ``"reschedule"``).

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
        if event.get("probe_error"):
            self.log.warning(
                "%s: probing the hot store failed, the round will tell: %s", self.table_spec.name, event["probe_error"]
            )
            return {"due": True, "reason": "probe failed"}
        if event.get("status") == "deadline":
            raise AirflowSkipException(f"{self.table_spec.name}: not due with new rows before {deadline}")
        return self._check_or_defer(context, datetime.fromisoformat(deadline))

    def _check_or_defer(self, context: Any, deadline: datetime) -> dict[str, Any]:
        spec = self.table_spec
        store = AssetStateStore(context["asset_state_store"][self.table_asset])
        state, now = store.load(), utcnow()
        decided = self._decide(context, state)
        if decided is not None:
            return decided
        when = due_at(state, spec.freshness_seconds)
        if when is not None and when > now:
            assert state is not None  # a due time comes from a state
            record_not_due(state, now)
            store.save(state)
            if when > deadline:
                raise AirflowSkipException(f"{spec.name}: not due until {when.isoformat()}, after {deadline}")
            self.log.info("%s: not due until %s; waiting in the triggerer", spec.name, when.isoformat())
        elif self._has_new_rows(state):
            return {"due": True, "reason": "due with new rows"}
        else:
            self.log.info("%s: due, no new rows yet; the triggerer probes every %ss", spec.name, self.poke_interval)
        self.defer(
            trigger=TableDueTrigger(
                table=spec.model_dump(mode="json"),
                due_at=when.isoformat() if when is not None and when > now else None,
                committed=_committed_offsets(state),
                poke_interval=self.poke_interval,
                deadline=deadline.isoformat(),
            ),
            method_name="execute_complete",
            kwargs={"deadline": deadline.isoformat()},
        )

    # -- poke path (deferrable=False) ------------------------------------------------------------
    def poke(self, context: Any) -> bool:
        store = AssetStateStore(context["asset_state_store"][self.table_asset])
        state, now = store.load(), utcnow()
        if self._decide(context, state) is not None:
            return True
        when = due_at(state, self.table_spec.freshness_seconds)
        if when is not None and when > now:
            assert state is not None
            record_not_due(state, now)
            store.save(state)
            return False
        return self._has_new_rows(state)

    # -- shared ------------------------------------------------------------------------------------
    def _decide(self, context: Any, state: TableState | None) -> dict[str, Any] | None:
        """Answers that need no wait: a run naming its tables, and a quarantined table."""
        spec = self.table_spec
        selected = selected_tables(context)
        if selected is not None:
            if spec.name not in selected:
                raise AirflowSkipException(f"{spec.name}: not among the tables this run tiers ({', '.join(selected)})")
            return {"due": True, "reason": "named in the run's conf"}
        if state is not None and state.quarantined_since is not None:
            raise AirflowSkipException(f"{spec.name}: {state.note or 'quarantined'}")
        return None

    def _has_new_rows(self, state: TableState | None) -> bool:
        from airflow_provider_tiering.hooks.tiering import TieringSourceHook

        try:
            return TieringSourceHook(self.table_spec.source).get_source().has_rows_after(_committed_offsets(state))
        except Exception as exc:  # let the round record, retry and show the error: it owns the table's state
            self.log.warning(
                "%s: probing the hot store failed, the round will tell: %s", self.table_spec.name, describe_error(exc)
            )
            return True


def _committed_offsets(state: TableState | None) -> dict[str, Any] | None:
    return None if state is None or state.committed is None else state.committed.end_offsets
