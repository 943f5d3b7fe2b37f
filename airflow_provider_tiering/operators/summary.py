"""The last task of a tiering DAG: one line per table, and a failed DAG run if any table failed or is stale."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_tiering.assets import stream_asset, table_asset
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import group_backlog_alert, staleness_alert
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.core.status_rows import StatusRow, status_row
from airflow_provider_tiering.core.stream_state import StreamGroupState
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.run_conf import selected_tables

OK_STATES = frozenset({"success", "skipped"})


class TieringSummaryOperator(BaseOperator):
    """Reports the outcome of every table task of the run by name (runs with ``trigger_rule="all_done"``), or, with
    no table tasks (the status DAG of :func:`~airflow_provider_tiering.dag_factory.build_table_dags`), every table's
    status. ``table_dag_ids``: the DAG that tiers each table, by name, where it is not this one.

    It fails when any table task did not succeed or skip, or any of ``tables`` is stale past its bound (even one
    whose rounds keep tiering some rows: ``core/staleness.py``), so the DAG run ends failed and alerts fire; the
    table tasks themselves have already run (or failed) independently of each other. Maintenance tasks' outcomes
    are listed too, and a failed one is logged as a warning: it never fails the run. Before it ends, whatever the
    outcome, it refreshes ``tables``' rows in their catalogs' status table (``sys.lake_tiering_status``,
    ``hooks/status_table.py``), which never fails the run either.
    """

    ui_color = "#eeeeee"

    def __init__(
        self,
        *,
        table_task_ids: Sequence[str],
        maintenance_task_ids: Sequence[str] = (),
        tables: Sequence[TableSpec] = (),
        table_dag_ids: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        self.tables = list(tables)
        groups = {g.name: g for spec in self.tables if (g := spec.source.stream_group()) is not None}
        self.stream_assets = {name: stream_asset(group) for name, group in groups.items()}
        kwargs["inlets"] = [
            *kwargs.get("inlets", []),
            *(table_asset(spec) for spec in self.tables),
            *self.stream_assets.values(),
        ]
        super().__init__(**kwargs)
        self.table_task_ids = list(table_task_ids)
        self.maintenance_task_ids = list(maintenance_task_ids)
        self.table_dag_ids = dict(table_dag_ids or {})

    def execute(self, context: Any) -> dict[str, str]:
        ti = context["ti"]
        task_ids = self.table_task_ids + self.maintenance_task_ids
        found = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
        states: dict[str, str] = {}
        for by_task in found.values():
            states.update({task_id: str(state) for task_id, state in by_task.items()})
        outcomes = {task_id: states.get(task_id, "unknown") for task_id in self.table_task_ids}
        selected = selected_tables(context)
        # The DAG factory passes tables and their tasks in the same order (a task id may be "<table>.tier").
        same_order = len(self.tables) == len(self.table_task_ids)
        names = dict(zip(self.table_task_ids, (s.name for s in self.tables), strict=True)) if same_order else {}
        width = max((len(t) for t in outcomes), default=5)
        for task_id, state in outcomes.items():
            label = {"success": "TIERED", "skipped": "NOTHING TO TIER"}.get(state, "FAILED")
            if state == "skipped" and selected is not None and names.get(task_id, task_id) not in selected:
                label = "NOT IN THIS RUN"  # a run of named tables (``conf={"tables": [...]}``): left out, not idle
            self.log.info("%s  %-15s (task %s)", task_id.ljust(width), label, state)
        for task_id in self.maintenance_task_ids:
            state = states.get(task_id, "unknown")
            if state in OK_STATES:
                self.log.info("%s  maintenance %s", task_id, state)
            else:
                self.log.warning("%s  maintenance %s (tiering is not affected; see the table's status)", task_id, state)
        failed = sorted(t for t, s in outcomes.items() if s not in OK_STATES)
        documents = self._state_documents(context)
        if not self.table_task_ids:  # the status DAG of tables on their own DAGs: their states, not task outcomes
            for spec, document in documents:
                status = "NEW" if document is None else document.status.value
                self.log.info("%s  %-11s epoch %s", spec.name, status, 0 if document is None else document.epoch)
        groups = self._stream_documents(context)
        stale = self._stale_tables(documents, groups)
        for alert in stale.values():
            self.log.error("%s", alert)
        self._refresh_status_tables(documents, groups)
        fail_on_problems(failed, len(outcomes), stale)
        return outcomes

    def _state_documents(self, context: Any) -> list[tuple[TableSpec, TableState | None]]:
        return [(spec, AssetStateStore(context["asset_state_store"][table_asset(spec)]).load()) for spec in self.tables]

    def _stream_documents(self, context: Any) -> dict[str, StreamGroupState | None]:
        """The state documents of the tables' stream groups, by group name (a group whose reader never ran: None)."""
        from airflow_provider_tiering.hooks.stream_group import AssetStreamStateStore

        return {
            name: AssetStreamStateStore(context["asset_state_store"][asset]).load()
            for name, asset in self.stream_assets.items()
        }

    def _stale_tables(
        self, states: list[tuple[TableSpec, TableState | None]], groups: Mapping[str, StreamGroupState | None]
    ) -> dict[str, str]:
        """The alert of each table stale past its bound, or with more changes waiting in its stream group's change
        log than the group's bound, by table name."""
        now, alerts = utcnow(), {}
        for spec, state in states:
            alert = staleness_alert(spec, state, now) or group_backlog_alert(spec, _group_of(spec, groups))
            if alert is not None:
                alerts[spec.name] = alert
        return alerts

    def _refresh_status_tables(
        self, states: list[tuple[TableSpec, TableState | None]], groups: Mapping[str, StreamGroupState | None]
    ) -> None:
        """The run's tables' rows in their catalogs' status tables, whatever the run's outcome (failed tables with
        their errors), then each catalog's history table tidied; a refresh or a tidy that fails is logged and counted,
        and never changes the run's outcome."""
        from airflow_provider_tiering.hooks.history_table import tidy_history_tables
        from airflow_provider_tiering.hooks.status_table import refresh_status_tables

        now = utcnow()
        rows: dict[str, list[StatusRow]] = defaultdict(list)
        for spec, state in states:
            rows[spec.lake.catalog_conn_id].append(
                status_row(
                    namespace=spec.lake.namespace, table=spec.lake.table, asset=spec.asset_name,
                    dag_id=self.table_dag_ids.get(spec.name, self.dag_id),
                    tiered_table=spec.name, state=state, now=now, group=_group_of(spec, groups),
                )
            )  # fmt: skip
        refresh_status_tables(rows)
        tidy_history_tables(rows)  # the rounds appended; once per run, not per round


def fail_on_problems(failed: Sequence[str], tables: int, stale: Mapping[str, str]) -> None:
    """End a summary task failed, naming the problems, when a table's task failed or a table is stale."""
    problems = []
    if failed:
        problems.append(f"{len(failed)} of {tables} table(s) failed: {', '.join(failed)}")
    if stale:
        problems.append(f"{len(stale)} table(s) stale: {'; '.join(stale.values())}")
    if problems:
        raise AirflowFailException("; ".join(problems))


def _group_of(spec: TableSpec, groups: Mapping[str, StreamGroupState | None]) -> StreamGroupState | None:
    group = spec.source.stream_group()
    return None if group is None else groups.get(group.name)
