"""``DiscoverTablesOperator``: a declared database's tables, and which of them run now, as one Airflow task."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_tiering.assets import DISCOVER_TASK_ID, TIER_TASK_ID, database_asset
from airflow_provider_tiering.core.database_spec import DatabaseSpec
from airflow_provider_tiering.operators.read_changes import STREAMED_KEY


class DiscoverTablesOperator(BaseOperator):
    """List a declared database's tables with one query (``sources/*/table_listing.py``), match them against the
    declaration (``core/discovery.py``) and decide which run now (``core/database_state.py``). Returns the specs of
    the tables to run, which the DAG maps its tier task over (one task instance per table, labelled by its name), and
    pushes those of every table in mode ``change_stream`` as XCom ``streamed`` (the database's change stream's reader
    reads them).

    The database's document (every matched table: tiered, skipped or dropped, with the reason) and its last probe live
    in the asset state store of the database's asset; this task is their only writer. It fails when the database
    cannot be listed (its tables then wait, their state untouched); a table the rules cannot tier never fails it: it is
    listed as skipped, with the reason. A DAG run with ``conf={"tables": [...]}`` runs exactly the tables named.
    When runs overlap, a table whose task instance in an earlier run has not finished starts no second one.
    """

    ui_color = "#e6f4ea"

    def __init__(self, *, database: DatabaseSpec | Mapping[str, Any], **kwargs: Any) -> None:
        spec = DatabaseSpec.parse(database)
        asset = database_asset(spec.name, spec.lake.catalog_conn_id, spec.lake.namespace)
        kwargs.setdefault("task_id", DISCOVER_TASK_ID)
        kwargs.setdefault("max_active_tis_per_dag", 1)
        kwargs["outlets"] = [*kwargs.get("outlets", []), asset]
        super().__init__(**kwargs)
        self.database = spec
        self.database_asset = asset

    def execute(self, context: Any) -> list[dict[str, Any]]:
        # Imported here: DAG files are parsed often and need none of the drivers.
        from airflow_provider_tiering.hooks.database import DatabaseHook
        from airflow_provider_tiering.run_conf import selected_tables

        ti = context["ti"]
        hook = DatabaseHook(self.database, context["asset_state_store"][self.database_asset])
        probe = hook.probe(
            selected=selected_tables(context), run_id=context["run_id"], task_states=lambda runs: tier_states(ti, runs)
        )
        for line in probe.report():
            self.log.info("%s", line)
        ti.xcom_push(key=STREAMED_KEY, value=probe.streamed())
        return probe.to_run()


def tier_states(ti: Any, runs: list[str]) -> dict[str, dict[int, str | None]]:
    """The states of the tier task's instances in ``runs``, by run and map index: a run still queued or running
    whose tier task has no instance yet (not expanded) is there with none; a run that has ended without one, or no
    longer exists, is left out."""
    found = ti.get_task_states(dag_id=ti.dag_id, task_ids=[TIER_TASK_ID], run_ids=runs)
    prefix = f"{TIER_TASK_ID}_"  # a mapped instance's key: the task id and its map index
    states: dict[str, dict[int, str | None]] = {}
    for run in runs:
        by_index = {
            int(key.removeprefix(prefix)): None if state is None else str(state)
            for key, state in found.get(run, {}).items()
            if key.startswith(prefix) and key.removeprefix(prefix).isdigit()
        }
        if by_index or ti.get_dr_count(dag_id=ti.dag_id, run_ids=[run], states=["queued", "running"]):
            states[run] = by_index
    return states
