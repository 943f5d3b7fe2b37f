"""The provider as Airflow sees it: registered through its entry point, and DAG files validated at parse time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from testbed.tiering_env import airflow_env

BAD_DAG = textwrap.dedent(
    """
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    dag = build_tiering_dag(
        "bad_spec",
        [{"name": "orders", "source": {"conn_id": "hot", "table": "orders"}, "lake": {"namespace": "s", "table": "o"}}],
    )
    """
)


def airflow_json(tmp_path: Path, *args: str) -> list[dict]:
    """Run ``airflow <args> -o json`` in a fresh Airflow home and parse its output."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args, "-o", "json"],
        env=airflow_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out[out.index("[") :])


def test_provider_is_listed_by_airflow(tmp_path):
    packages = {p["package_name"]: p for p in airflow_json(tmp_path, "providers", "list")}
    assert "airflow-provider-tiering" in packages


def test_airflow_finds_the_tiering_plugin_with_default_settings(tmp_path: Path) -> None:
    """Through the package's ``airflow.plugins`` entry point: a provider's own "plugins" list is read only with
    ``[core] lazy_discover_providers = False``."""
    plugin = {p["name"]: p for p in airflow_json(tmp_path, "plugins")}["tiering"]
    assert "airflow.plugins" in plugin["source"]
    assert "/tiering" in str(plugin["fastapi_apps"])
    assert "'url_route': 'tiering'" in str(plugin["react_apps"])


def test_bad_table_spec_fails_dag_parsing_naming_the_field(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "bad_spec.py").write_text(BAD_DAG)
    code = (
        "from airflow.dag_processing.dagbag import DagBag; import json; "
        f"bag = DagBag({str(dags)!r}); print(json.dumps(bag.import_errors))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=airflow_env(tmp_path), capture_output=True, text=True, timeout=300, check=True
    ).stdout
    errors = json.loads(out.strip().splitlines()[-1])
    assert len(errors) == 1
    message = next(iter(errors.values()))
    assert "InvalidTableSpec" in message
    assert "table 'orders': field 'source.cursor_column': Field required" in message
