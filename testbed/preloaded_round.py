"""Run in a fresh interpreter: import what the scheduler preloads (airflow_provider_tiering/plugins/preload.py), then
tier a SQLite table's first round through ``TierTableOperator.execute``, and print, as JSON, the modules the round
still imported: what a task process forked from a preloaded LocalExecutor worker would import itself.

    python -m testbed.preloaded_round WORKDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest


def main(workdir: Path) -> dict[str, object]:
    import airflow.sdk  # noqa: F401  a LocalExecutor's worker has Airflow imported before the scheduler's listener runs

    from airflow_provider_tiering.plugins.preload import ROUND_MODULES, import_all, source_modules

    imported, failed = import_all([*ROUND_MODULES, *source_modules()])
    before = set(sys.modules)
    from airflow_provider_tiering.operators.tier_table import TierTableOperator
    from testbed.airflow_context import saved_state, task_context
    from testbed.hot_tables import sqlite_events_table

    table = {
        "name": "events",
        "source": {"conn_id": "hot_sqlite", "table": "events", "cursor_column": "id"},
        "lake": {"namespace": "preloaded", "table": "events", "catalog_conn_id": "iceberg_preloaded"},
    }
    catalog = {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db", "warehouse": f"file://{workdir}/warehouse"}
    with pytest.MonkeyPatch.context() as env:
        sqlite_events_table(workdir, env, rows=50)
        connection = {"conn_type": "iceberg", "extra": {"name": "default", **catalog}}
        env.setenv("AIRFLOW_CONN_ICEBERG_PRELOADED", json.dumps(connection))
        operator = TierTableOperator(table=table)
        context = task_context(operator.table_asset, None)
        operator.execute(context)
        state = saved_state(context, operator.table_asset)
    return {
        "preloaded": imported,
        "not_preloaded": failed,
        "tiered_through": state.committed.end_offsets if state.committed else None,
        "imported_by_round": sorted(set(sys.modules) - before),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
