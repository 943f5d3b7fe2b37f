"""``docker-compose.yml`` parses (Debian's ``docker-compose config`` works offline; no engine runs here) and runs
the same services, commands and settings the tests start natively."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    tool = shutil.which("docker-compose")
    assert tool, "docker-compose is missing: scripts/setup.sh installs it (apt, --no-install-recommends)"
    done = subprocess.run(
        [tool, "-f", str(REPO / "docker-compose.yml"), "config"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_stack_has_every_service_with_health_checks(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "airflow-init",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
        "minio",
        "minio-init",
    }
    for name, service in services.items():
        assert name in ("airflow-init", "minio-init") or "healthcheck" in service, name
    (port,) = services["airflow-api-server"]["ports"]  # docker-compose 1.x prints the short syntax
    assert str(port).startswith("127.0.0.1:8080:")


def test_airflow_runs_as_in_the_e2e_tests(compose: dict) -> None:
    services = compose["services"]
    commands = {name: services[name]["command"][0] for name in services if name.startswith("airflow-")}
    assert commands == {
        "airflow-init": "db",
        "airflow-api-server": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    env = services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"  # as testbed/airflow_cluster.py
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "spark://spark-master"


def test_the_lake_is_on_the_object_store_the_stack_sets_up(compose: dict) -> None:
    """The catalog connection names MinIO's endpoint, a bucket minio-init creates and the key it creates; no
    container shares a warehouse volume any more (executors reach the store with the connection's properties)."""
    services = compose["services"]
    catalog = json.loads(services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_ICEBERG_DEFAULT"])["extra"]
    assert catalog["type"] == "sql" and catalog["uri"].startswith("postgresql+psycopg://")
    assert catalog["uri"].endswith("@postgres:5432/iceberg_catalog")
    bucket = catalog["warehouse"].removeprefix("s3://").split("/")[0]
    assert catalog["warehouse"].startswith("s3://") and catalog["s3.region"]
    host, port = catalog["s3.endpoint"].removeprefix("http://").split(":")
    minio = services[host]
    assert minio["command"][:2] == ["server", "/data"] and f":{port}" in minio["command"]
    setup = " ".join(services["minio-init"]["entrypoint"])
    assert f"mc mb --ignore-existing stack/{bucket} " in setup
    assert f"mc admin user add stack {catalog['s3.access-key-id']} {catalog['s3.secret-access-key']} " in setup
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"
    init_env = services["minio-init"]["environment"]
    assert init_env == minio["environment"] and init_env["MINIO_ROOT_USER"] != catalog["s3.access-key-id"]
    for name in ("airflow-scheduler", "airflow-api-server", "airflow-triggerer"):
        assert services[name]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully", name
    for name, service in services.items():
        assert not any(str(v).endswith(":/warehouse") for v in service.get("volumes", ())), name


def test_spark_runs_the_daemons_of_the_native_cluster_script(compose: dict) -> None:
    script = (REPO / "scripts" / "spark_standalone.sh").read_text()
    services = compose["services"]
    for name, daemon in (
        ("spark-master", "org.apache.spark.deploy.master.Master"),
        ("spark-worker-1", "org.apache.spark.deploy.worker.Worker"),
        ("spark-worker-2", "org.apache.spark.deploy.worker.Worker"),
    ):
        assert daemon in " ".join(services[name]["entrypoint"]) and daemon in script, name
