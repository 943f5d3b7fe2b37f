"""An AWS Glue Data Catalog as the Iceberg catalog (pyiceberg's ``glue`` catalog), its warehouse on S3: moto's Glue
and S3, served on one endpoint on 127.0.0.1 with request authentication on (``testbed/s3_server.py``). The catalog
connection's properties alone reach both services, whatever the process's ambient AWS variables say.

Not covered: Glue's optimistic concurrency (moto's ``UpdateTable`` is what pyiceberg's commits go through; whether it
refuses a stale ``VersionId`` as AWS does is moto's business), IAM roles, Lake Formation.
"""

from __future__ import annotations

import uuid

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.rounds import round_parts
from testbed.s3_server import REGION, S3Server, wrong_aws_environment
from tests.fixtures_servers import LAKE_BUCKET


def glue_catalog(s3_server: S3Server, **overrides: str) -> dict[str, str]:
    """The extras of an ``iceberg`` connection to a Glue catalog whose tables live in the S3 server's bucket."""
    return {
        "type": "glue",
        "glue.endpoint": s3_server.endpoint,  # only for a Glue-compatible endpoint: AWS Glue needs no endpoint
        "glue.region": REGION,
        "glue.access-key-id": s3_server.access_key_id,
        "glue.secret-access-key": s3_server.secret_access_key,
        "warehouse": f"s3://{LAKE_BUCKET}/{uuid.uuid4().hex[:12]}/glue",
        **s3_server.storage_properties(),
        **overrides,
    }


def test_three_rounds_through_a_glue_catalog_with_the_lake_on_s3(tmp_path, s3_server, monkeypatch):
    database = f"tiering_{uuid.uuid4().hex[:8]}"
    spec = TableSpec.parse(
        {
            "name": "orders",
            "source": {"conn_id": "unused", "table": "orders", "cursor_column": "id"},
            "lake": {"namespace": database, "table": "orders"},
        }
    )
    catalog = glue_catalog(s3_server)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    store = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    for name, value in wrong_aws_environment().items():
        monkeypatch.setenv(name, value)

    for round_number, rows in enumerate((1200, 800, 50), start=1):
        hot.insert("orders", round_number * 10_000, rows)
        result = round_parts(spec, hot, catalog, writer=writer).run(store)
        assert result.outcome == "tiered" and result.metrics.rows == rows and result.epoch == round_number
        assert digest(lake_rows(catalog, (database, "orders"), COLUMNS)) == digest(hot.rows("orders"))

    # Independently: the table is in Glue (boto3's own client), its files are under the warehouse prefix.
    glue = s3_server.client("glue")
    entry = glue.get_table(DatabaseName=database, Name="orders")["Table"]
    assert entry["Parameters"]["table_type"].upper() == "ICEBERG"
    table = load_catalog("check", **catalog).load_table((database, "orders"))
    assert entry["Parameters"]["metadata_location"] == table.metadata_location
    assert table.location().startswith(catalog["warehouse"])
    assert unreferenced_data_files(catalog, (database, "orders")) == []
    assert store.load().committed.snapshot_id == table.current_snapshot().snapshot_id

    # A wrong Glue secret in the connection fails that round, the secret masked in the table's state.
    wrong_secret = "Wr0ngGlueSecret+abcdefghij0123456789"
    hot.insert("orders", 90_000, 10)
    with pytest.raises(Exception, match="403"):
        round_parts(spec, hot, glue_catalog(s3_server, **{"glue.secret-access-key": wrong_secret}), writer=writer).run(
            store
        )
    state = store.load()
    assert state.status is TableStatus.FAILED and "(403) when calling the GetTable operation" in state.last_error
    assert wrong_secret not in state.last_error
