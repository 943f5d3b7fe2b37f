"""A lake on object storage: an Iceberg SQL catalog whose warehouse is ``s3://`` on a real S3-compatible server
(moto's, started on 127.0.0.1, every request signed and checked), reached only with the catalog's properties.

Rounds (in this process, in Spark tasks, in a child process), a SIGKILL mid-write and the next round's cleanup,
compaction and orphan removal, wrong ambient AWS variables, wrong credentials in the catalog connection. The lake is
read back independently: pyiceberg's own scan through the same endpoint, and boto3 listings of the bucket.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyarrow import fs as pafs
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.hooks.tiering import TieringSourceHook
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.lake.live_files import live_data_files
from airflow_provider_tiering.lake.orphan_files import remove_orphan_files
from airflow_provider_tiering.lake.snapshot_expiry import expire_snapshots
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.crash_round import crash_round
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows, s3_client, s3_objects, unreferenced_data_files
from testbed.landing_files import COLUMNS as LANDING_COLUMNS
from testbed.landing_files import jsonl_rows, write_jsonl
from testbed.rounds import lake_of, round_parts
from testbed.s3_server import REGION, S3Server, wrong_aws_environment
from tests.fixtures_servers import LAKE_BUCKET

SPEC = {
    "name": "orders",
    # Insert-only rows: several splits per round (SQLite reads a consistent snapshot as one split).
    "source": {"conn_id": "unused", "table": "orders", "cursor_column": "id", "consistent_snapshot": False},
    "lake": {"namespace": "s3it", "table": "orders"},
    "target_rows_per_split": 1000,
}
IDENTIFIER = ("s3it", "orders")
MB = 1024 * 1024


@pytest.fixture
def s3_catalog(tmp_path: Path, s3_server: S3Server) -> dict[str, str]:
    """A SQL catalog on SQLite whose warehouse is a fresh prefix of the S3 server's bucket."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"s3://{LAKE_BUCKET}/{uuid.uuid4().hex[:12]}/warehouse",
        **s3_server.storage_properties(),
    }


def in_process_writer():
    """Rounds of one split written by this process, without Spark."""
    return build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)


def assert_lake_equals_hot(catalog: dict[str, str], hot: SqliteHot) -> int:
    lake = digest(lake_rows(catalog, IDENTIFIER, COLUMNS))
    assert lake == digest(hot.rows("orders"))
    return lake[0]


def table_of(catalog: dict[str, str]):
    return load_catalog("default", **catalog).load_table(IDENTIFIER)


def test_three_rounds_on_object_storage_reach_it_with_the_catalogs_properties_whatever_the_ambient_aws_variables(
    tmp_path, s3_server, s3_catalog, spark_writer, monkeypatch
):
    spec = TableSpec.parse(SPEC)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    store = JsonFileStateStore(tmp_path / "state.json")

    # 1. In this process, several splits written by Spark tasks.
    hot.insert("orders", 1, 3000)
    first = run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), spark_writer, store)
    assert first.outcome == "tiered" and first.metrics.rows == 3000 and first.metrics.splits > 1
    assert assert_lake_equals_hot(s3_catalog, hot) == 3000

    # 2. In a child process whose environment (driver, Spark's JVM and Python workers) holds wrong AWS variables.
    wrong = wrong_aws_environment()
    hot.insert("orders", 3001, 2500)
    done = crash_round(tmp_path, s3_catalog, "none", SPEC, env=wrong)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    state = store.load()
    assert state.status is TableStatus.TIERED and state.epoch == first.epoch + 1 and state.last_round.rows == 2500
    assert assert_lake_equals_hot(s3_catalog, hot) == 5500

    # 3. In this process, the same wrong variables set; one split written in-process.
    for name, value in wrong.items():
        monkeypatch.setenv(name, value)
    # The variables do matter to a client not given the catalog's credentials: this server refuses them.
    ambient = pafs.S3FileSystem(endpoint_override=s3_server.endpoint, region=REGION)
    with pytest.raises(OSError, match="ACCESS_DENIED|INVALID_ACCESS_KEY|SIGNATURE"):
        ambient.get_file_info(pafs.FileSelector(LAKE_BUCKET, recursive=False))
    hot.insert("orders", 5501, 400)
    third = run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), in_process_writer(), store)
    assert third.outcome == "tiered" and third.metrics.rows == 400 and third.epoch == first.epoch + 2
    assert assert_lake_equals_hot(s3_catalog, hot) == 5900

    table = table_of(s3_catalog)
    files = live_data_files(table)
    assert files and all(f.file_path.startswith(s3_catalog["warehouse"]) for f in files)
    stored = s3_objects(s3_catalog, table.location() + "/")
    assert {f.file_path for f in files} <= set(stored)  # the data files are objects of the bucket, sizes as committed
    assert all(stored[f.file_path]["Size"] == f.file_size_in_bytes for f in files)
    assert unreferenced_data_files(s3_catalog, IDENTIFIER) == []


def test_a_round_killed_mid_write_on_object_storage_leaves_nothing_visible_and_the_next_removes_its_objects(
    tmp_path, s3_catalog, spark_writer
):
    spec = TableSpec.parse(SPEC)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    hot.insert("orders", 1, 1000)
    store = JsonFileStateStore(tmp_path / "state.json")
    first = run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), spark_writer, store)
    hot.insert("orders", 1001, 12_000)  # 12 splits: a kill mid-write leaves some written, some not

    crashed = crash_round(tmp_path, s3_catalog, "writing", SPEC)

    assert crashed.returncode == -9, f"not killed: {crashed.returncode}\n{crashed.stdout}\n{crashed.stderr[-3000:]}"
    written_before_kill = set(json.loads((tmp_path / "killed-with-files.json").read_text()))
    assert written_before_kill and all(p.startswith("s3://") for p in written_before_kill)
    assert table_of(s3_catalog).current_snapshot().snapshot_id == first.snapshot_id  # nothing visible
    assert digest(lake_rows(s3_catalog, IDENTIFIER, COLUMNS)) == digest(r for r in hot.rows("orders") if r[0] <= 1000)
    dead_epoch_dir = f"{table_of(s3_catalog).location()}/data/tiering/epoch-{first.epoch + 1:010d}/"
    assert written_before_kill <= set(unreferenced_data_files(s3_catalog, IDENTIFIER))
    assert written_before_kill <= set(s3_objects(s3_catalog, dead_epoch_dir))

    hot.insert("orders", 13_001, 500)
    recovered = run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), spark_writer, store)

    assert recovered.outcome == "tiered" and recovered.epoch == first.epoch + 2
    assert recovered.metrics.rows == 12_500
    assert assert_lake_equals_hot(s3_catalog, hot) == 13_500
    assert s3_objects(s3_catalog, dead_epoch_dir) == {}  # the dead attempt's objects are gone
    assert unreferenced_data_files(s3_catalog, IDENTIFIER) == []
    assert store.load().committed.snapshot_id == recovered.snapshot_id


def test_compaction_expiry_and_orphan_removal_on_object_storage(tmp_path, s3_catalog, spark_writer):
    spec = TableSpec.parse(SPEC)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    store = JsonFileStateStore(tmp_path / "state.json")
    writer = in_process_writer()
    for round_number in range(15):
        hot.insert("orders", round_number * 10 + 1, 10)
        assert run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), writer, store).outcome == "tiered"
    small = {f.file_path for f in live_data_files(table_of(s3_catalog))}
    before = lake_of(spec, s3_catalog).committed()
    assert len(small) == 15

    result = compact(
        lake_of(spec, s3_catalog),
        spark_writer,
        target_file_bytes=128 * MB,
        small_file_bytes=8 * MB,
        max_small_files=10,
        table_name="orders",
    )

    assert result.outcome == "compacted" and result.rewritten_files == 15 and result.files_after == 1
    assert assert_lake_equals_hot(s3_catalog, hot) == 150
    after = lake_of(spec, s3_catalog).committed()
    assert (after.epoch, after.end_offsets) == (before.epoch, before.end_offsets)
    location = table_of(s3_catalog).location()
    rewritten = {uri for uri in s3_objects(s3_catalog, f"{location}/data/compaction/") if uri.endswith(".parquet")}
    assert rewritten == {f.file_path for f in live_data_files(table_of(s3_catalog))}  # no other attempt's file

    bucket, _, key = location.removeprefix("s3://").partition("/")
    stray = f"{key}/data/tiering/epoch-0000000099/attempt-dead/split-00000.parquet"
    s3_client(s3_catalog).put_object(Bucket=bucket, Key=stray, Body=b"a dead attempt's partial file")
    expired = expire_snapshots(lake_of(spec, s3_catalog), older_than=datetime.now(UTC) + timedelta(seconds=1))
    assert expired.expired > 0
    # Every object is old enough to be a candidate two hours from now.
    removed = set(
        remove_orphan_files(
            lake_of(spec, s3_catalog), min_age=timedelta(hours=1), now=datetime.now(UTC) + timedelta(hours=2)
        )
    )

    assert f"{bucket}/{stray}" in removed
    assert {p.removeprefix("s3://") for p in small} <= removed  # the 15 replaced small files
    table = table_of(s3_catalog)  # what the table reaches, read with pyiceberg alone
    reached = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snapshot in table.snapshots():
        reached.add(snapshot.manifest_list)
        reached.update(m.manifest_path for m in snapshot.manifests(table.io))
    # (pyarrow keeps empty "directory" marker objects, keys ending in "/": not files)
    metadata_objects = {uri for uri in s3_objects(s3_catalog, f"{location}/metadata/") if not uri.endswith("/")}
    assert metadata_objects == reached  # every metadata object left is reached, and all that is reached is there
    assert unreferenced_data_files(s3_catalog, IDENTIFIER) == []
    assert assert_lake_equals_hot(s3_catalog, hot) == 150
    hot.insert("orders", 151, 7)
    assert run_round(spec, hot.source(spec.source), lake_of(spec, s3_catalog), writer, store).metrics.rows == 7
    assert assert_lake_equals_hot(s3_catalog, hot) == 157


def test_wrong_credentials_in_the_catalog_connection_fail_that_round_with_the_secret_masked(
    tmp_path, s3_catalog, caplog
):
    spec = TableSpec.parse(SPEC)
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    hot.insert("orders", 1, 300)
    store = JsonFileStateStore(tmp_path / "state.json")
    writer = in_process_writer()
    first = round_parts(spec, hot, s3_catalog, writer=writer).run(store)
    assert first.outcome == "tiered"
    hot.insert("orders", 301, 200)
    wrong_secret = "Wr0ngSecretOfTheConnection+abcdefghijklmnop"
    wrong = {**s3_catalog, "s3.secret-access-key": wrong_secret}

    with pytest.raises(Exception) as failed:
        round_parts(spec, hot, wrong, writer=writer).run(store)

    state = store.load()
    assert state.status is TableStatus.FAILED and state.consecutive_failures == 1
    assert "SIGNATURE_DOES_NOT_MATCH" in state.last_error or "ACCESS_DENIED" in state.last_error, state.last_error
    assert wrong_secret not in state.last_error
    assert wrong_secret not in (tmp_path / "state.json").read_text()
    assert wrong_secret not in caplog.text
    assert "SIGNATURE_DOES_NOT_MATCH" in str(failed.value) or "ACCESS_DENIED" in str(failed.value)
    assert table_of(s3_catalog).current_snapshot().snapshot_id == first.snapshot_id
    assert digest(lake_rows(s3_catalog, IDENTIFIER, COLUMNS)) == digest(r for r in hot.rows("orders") if r[0] <= 300)

    again = round_parts(spec, hot, s3_catalog, writer=writer).run(store)
    assert again.outcome == "tiered" and again.metrics.rows == 200
    assert assert_lake_equals_hot(s3_catalog, hot) == 500


def test_a_landing_zone_on_object_storage_into_a_lake_on_it_and_the_probe_reads_its_log_with_the_catalogs_properties(
    tmp_path, s3_server, s3_catalog, spark_writer, monkeypatch
):
    landing = s3_catalog["warehouse"].removesuffix("/warehouse") + "/landing"
    bucket, _, landing_key = landing.removeprefix("s3://").partition("/")
    client = s3_client(s3_catalog)
    local = tmp_path / "files"

    def land(name: str, ids: range) -> Path:
        path = write_jsonl(local / name, ids)
        client.put_object(Bucket=bucket, Key=f"{landing_key}/{name}", Body=path.read_bytes())
        client.put_object(Bucket=bucket, Key=f"{landing_key}/{name}.done", Body=b"")
        return path

    spec = TableSpec.parse(
        {
            "name": "readings",
            "source": {
                "kind": "files",
                "conn_id": "landing_s3",
                "path": landing,
                "format": "jsonl",
                "columns": LANDING_COLUMNS,
                "marker_suffix": ".done",
            },
            "lake": {"catalog_conn_id": "iceberg_s3", "namespace": "s3it", "table": "readings"},
        }
    )
    landing_extra = {
        "endpoint_override": s3_server.endpoint,
        "access_key": s3_server.access_key_id,
        "secret_key": s3_server.secret_access_key,
        "region": REGION,
    }
    landing_connection = ConnectionInfo("aws", extra=landing_extra, conn_id="landing_s3")
    store = JsonFileStateStore(tmp_path / "state.json")
    files = [land("a.jsonl", range(0, 700)), land("day/b.jsonl", range(700, 1000))]

    first = round_parts(spec, landing_connection, s3_catalog, writer=spark_writer).run(store)

    assert first.outcome == "tiered" and first.metrics.rows == 1000 and first.end_offsets["files"] == 2
    log = first.end_offsets["log"]
    assert log.startswith(s3_catalog["warehouse"]) and log in s3_objects(s3_catalog, log)  # the log is in the bucket
    readings = ("s3it", "readings")
    assert digest(lake_rows(s3_catalog, readings, list(LANDING_COLUMNS))) == digest(jsonl_rows(files))

    # A probe (no catalog loaded) in a worker whose ambient AWS variables are wrong, connections from Airflow.
    for name, value in wrong_aws_environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW_CONN_LANDING_S3", json.dumps({"conn_type": "aws", "extra": landing_extra}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_S3", json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **s3_catalog}})
    )
    assert TieringSourceHook(spec.source, spec.lake).get_source().has_rows_after(first.end_offsets) is False
    with pytest.raises(SourceError, match="offsets log"):  # without the lake's properties, the log is out of reach
        TieringSourceHook(spec.source).get_source().has_rows_after(first.end_offsets)
    files.append(land("c.jsonl", range(1000, 1250)))
    assert TieringSourceHook(spec.source, spec.lake).get_source().has_rows_after(first.end_offsets) is True

    second = round_parts(spec, landing_connection, s3_catalog, writer=in_process_writer()).run(store)

    assert second.outcome == "tiered" and second.metrics.rows == 250 and second.end_offsets["files"] == 3
    assert digest(lake_rows(s3_catalog, readings, list(LANDING_COLUMNS))) == digest(jsonl_rows(files))
