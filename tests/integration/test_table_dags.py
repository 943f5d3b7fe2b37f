"""``build_table_dags`` as Airflow's DagBag reads a DAG file: one DAG per table on its own schedule, the group's
status DAG and maintenance DAG, every DAG found without being assigned to a module global, a bad spec failing the
file's parse with the field named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from testbed.tiering_env import airflow_env

DAG_FILE = textwrap.dedent(
    """
    from airflow_provider_tiering.dag_factory import build_table_dags

    def table(name, freshness, **options):
        return {
            "name": name,
            "source": {"conn_id": "hot", "table": name, "cursor_column": "id"},
            "lake": {"namespace": "sales", "table": name},
            "freshness_seconds": freshness,
            **options,
        }

    build_table_dags("sales", [table("orders", 30), table("customers", 300, maintenance={"enabled": False})])
    """
)

READ_BAG = """
import json
from airflow.dag_processing.dagbag import DagBag

bag = DagBag({dags!r})
found = {{}}
for dag_id, dag in bag.dags.items():
    found[dag_id] = {{
        "schedule": str(getattr(dag.timetable, "every", dag.timetable)),
        "phase": dag.timetable.phase.total_seconds() if hasattr(dag.timetable, "phase") else None,
        "max_active_runs": dag.max_active_runs,
        "tasks": {{t.task_id: [type(t).__name__, getattr(t, "every_run_due", None)] for t in dag.tasks}},
    }}
print(json.dumps({{"dags": found, "errors": bag.import_errors}}))
"""


def read_bag(tmp_path: Path, source: str) -> dict:
    dags = tmp_path / "dags"
    dags.mkdir(exist_ok=True)
    (dags / "tables.py").write_text(source)
    out = subprocess.run(
        [sys.executable, "-c", READ_BAG.format(dags=str(dags))],
        env=airflow_env(tmp_path), capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def test_each_table_gets_its_own_dag_on_its_freshness_beside_the_groups_status_and_maintenance_dags(
    tmp_path: Path,
) -> None:
    bag = read_bag(tmp_path, DAG_FILE)
    assert bag["errors"] == {}
    dags = bag["dags"]
    assert set(dags) == {"sales.orders", "sales.customers", "sales", "sales_maintenance"}
    assert dags["sales.orders"]["tasks"] == {"orders": ["TierTableOperator", True]}
    assert dags["sales.customers"]["tasks"] == {"customers": ["TierTableOperator", True]}
    assert dags["sales.orders"]["schedule"] == "0:00:30" and dags["sales.customers"]["schedule"] == "0:05:00"
    assert 0 <= dags["sales.orders"]["phase"] < 30 and 0 <= dags["sales.customers"]["phase"] < 300
    assert dags["sales.orders"]["max_active_runs"] == dags["sales.customers"]["max_active_runs"] == 1
    assert dags["sales"]["tasks"] == {"tiering_summary": ["TieringSummaryOperator", None]}
    maintained = {"orders.maintain": ["MaintainTableOperator", None]}  # customers opted out
    assert dags["sales_maintenance"]["tasks"] == maintained


def test_a_bad_spec_fails_the_files_parse_naming_the_table_and_field(tmp_path: Path) -> None:
    bag = read_bag(tmp_path, DAG_FILE.replace('"freshness_seconds": freshness', '"freshness_seconds": -freshness'))
    assert bag["dags"] == {} and len(bag["errors"]) == 1
    message = next(iter(bag["errors"].values()))
    assert "InvalidTableSpec" in message and "table 'orders': field 'freshness_seconds'" in message
