"""The last task of a declared database's DAG: one line per table its discovery ran, the tables it skipped and those
dropped, and a failed DAG run if any table failed or is stale."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tiering.assets import DISCOVER_TASK_ID, TIER_TASK_ID, database_asset
from airflow_provider_tiering.core.database_spec import DatabaseSpec
from airflow_provider_tiering.core.database_state import DATABASE_STATE_KEY, DatabaseState, Discovery, table_state_key
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.staleness import staleness_alert
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.core.status_rows import StatusRow, status_row
from airflow_provider_tiering.hooks.asset_state import AssetStateStore
from airflow_provider_tiering.operators.summary import OK_STATES, fail_on_problems

#: Skipped and dropped tables listed by name in the log; the rest are counted.
LISTED = 50


class DatabaseSummaryOperator(BaseOperator):
    """Reports a declared database's run (``trigger_rule="all_done"``): each table its discovery ran with its task's
    outcome, then the tables skipped and dropped with their reasons. It fails when a table's task did not succeed or
    skip, or a table that ran is stale past its bound, so that the DAG run ends failed and alerts fire; the tables'
    tasks have run independently of each other. Whatever the outcome, it refreshes the rows of the tables that ran in
    their catalog's status table (``sys.lake_tiering_status``), which never fails the run."""

    ui_color = "#eeeeee"

    def __init__(
        self,
        *,
        database: DatabaseSpec | Mapping[str, Any],
        discover_task_id: str = DISCOVER_TASK_ID,
        tier_task_id: str = TIER_TASK_ID,
        **kwargs: Any,
    ) -> None:
        spec = DatabaseSpec.parse(database)
        asset = database_asset(spec.name, spec.lake.catalog_conn_id, spec.lake.namespace)
        kwargs.setdefault("task_id", "tiering_summary")
        kwargs.setdefault("trigger_rule", "all_done")
        kwargs["inlets"] = [*kwargs.get("inlets", []), asset]
        super().__init__(**kwargs)
        self.database = spec
        self.database_asset = asset
        self.discover_task_id = discover_task_id
        self.tier_task_id = tier_task_id

    def execute(self, context: Any) -> dict[str, str]:
        ti = context["ti"]
        ran = [TableSpec.parse(doc) for doc in ti.xcom_pull(task_ids=self.discover_task_id) or []]
        found = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.tier_task_id], run_ids=[ti.run_id])
        states = {task: str(state) for by_task in found.values() for task, state in by_task.items()}
        outcomes = {spec.name: states.get(f"{self.tier_task_id}_{i}", "unknown") for i, spec in enumerate(ran)}
        width = max((len(name) for name in outcomes), default=5)
        for name, state in outcomes.items():
            label = {"success": "TIERED", "skipped": "NOTHING TO TIER"}.get(state, "FAILED")
            self.log.info("%s  %-15s (task %s)", name.ljust(width), label, state)
        accessor = context["asset_state_store"][self.database_asset]
        self._report_discovery(accessor)
        documents = [(spec, AssetStateStore(accessor, table_state_key(spec.name)).load()) for spec in ran]
        now = utcnow()
        stale = {spec.name: alert for spec, state in documents if (alert := staleness_alert(spec, state, now))}
        for alert in stale.values():
            self.log.error("%s", alert)
        self._refresh_status_tables(documents, ti.dag_id)
        fail_on_problems(sorted(n for n, state in outcomes.items() if state not in OK_STATES), len(outcomes), stale)
        return outcomes

    def _report_discovery(self, accessor: Any) -> None:
        doc = accessor.get(DATABASE_STATE_KEY, default=None)
        if not doc:
            return
        state = DatabaseState.from_json(doc)
        counts = state.counts()
        self.log.info(
            "database %s: %s tiered, %s skipped, %s dropped", state.database, counts["tiered"], counts["skipped"],
            counts["dropped"],
        )  # fmt: skip
        for discovery in (Discovery.SKIPPED, Discovery.DROPPED):
            tables = sorted((t for t in state.tables.values() if t.discovery is discovery), key=lambda t: t.name)
            for table in tables[:LISTED]:
                self.log.info("%s  %s: %s", table.name, discovery.value.upper(), table.reason)
            if len(tables) > LISTED:
                self.log.info("... and %s more %s table(s)", len(tables) - LISTED, discovery.value)

    def _refresh_status_tables(self, states: list[tuple[TableSpec, TableState | None]], dag_id: str) -> None:
        from airflow_provider_tiering.hooks.history_table import tidy_history_tables
        from airflow_provider_tiering.hooks.status_table import refresh_status_tables

        now = utcnow()
        rows: dict[str, list[StatusRow]] = defaultdict(list)
        for spec, state in states:
            rows[spec.lake.catalog_conn_id].append(
                status_row(
                    namespace=spec.lake.namespace, table=spec.lake.table, asset=self.database_asset.name,
                    dag_id=dag_id, tiered_table=spec.name, state=state, now=now, group=None,
                )
            )  # fmt: skip
        refresh_status_tables(rows)
        tidy_history_tables(rows)  # the rounds appended; once per run, not per round
