"""A REST catalog connection, as far as it goes without a REST catalog server (none installs here from PyPI or
Debian): a real HTTP endpoint on 127.0.0.1 (``testbed/rest_catalog_stub.py``) answers the requests a client makes
before it commits, and records them.

What the connection's extras become on the wire (warehouse, token, OAuth2 client credential, ``header.*``), a
refused credential failing the table's round with the secret masked, and a table whose storage credentials the
catalog vends: the lake's own file access (``LakeStorage``) and pyiceberg's reads use them, not the process's
ambient AWS variables. Not covered: commits through a REST catalog (the stub commits nothing).
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import parse_qs

import pyarrow as pa
import pytest
from pyarrow import fs as pafs
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.spec import LakeSpec, TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import SqliteHot
from testbed.rest_catalog_stub import PREFIX, RestCatalogStub
from testbed.rounds import lake_of, round_parts
from testbed.s3_server import REGION, wrong_aws_environment
from tests.fixtures_servers import LAKE_BUCKET

TOKEN = "conn-token-7Hq2xP"
CLIENT, CLIENT_SECRET = "tiering-client", "client-Secret-9w4K"


def set_connection(monkeypatch, conn_id: str, extra: dict[str, str], password: str | None = None) -> None:
    conn = {"conn_type": "iceberg", "extra": extra, **({"password": password} if password else {})}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_the_connections_token_warehouse_and_headers_reach_the_catalog(monkeypatch):
    with RestCatalogStub(tokens={TOKEN}) as stub:
        extra = {
            "type": "rest",
            "uri": stub.uri,
            "warehouse": "analytics",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
            "header.X-Tenant": "tiering",
        }
        set_connection(monkeypatch, "iceberg_rest", extra, password=TOKEN)
        catalog = IcebergCatalogHook("iceberg_rest").get_conn()

    assert stub.paths() == ["GET /v1/config"]
    (config,) = stub.requests
    assert config.query == {"warehouse": ["analytics"]}
    assert config.headers["Authorization"] == f"Bearer {TOKEN}"  # the connection's password, as the token
    assert config.headers["X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert config.headers["X-Tenant"] == "tiering"
    assert catalog.name == "iceberg_rest" and catalog.properties["prefix"] == PREFIX  # the server's override


def test_an_oauth2_client_credential_is_exchanged_for_a_token(monkeypatch):
    with RestCatalogStub(clients={CLIENT: CLIENT_SECRET}) as stub:
        extra = {
            "name": "lake",
            "type": "rest",
            "uri": stub.uri,
            "oauth2-server-uri": f"{stub.uri}/v1/oauth/tokens",
            "credential": f"{CLIENT}:{CLIENT_SECRET}",
            "scope": "PRINCIPAL_ROLE:ALL",
            "warehouse": "analytics",
        }
        set_connection(monkeypatch, "iceberg_oauth", extra)
        hook = IcebergCatalogHook("iceberg_oauth")
        catalog = hook.get_conn()

    # (pyiceberg 0.12 asks for a token per HTTP session it opens: one for the config request, one for the catalog's)
    assert sorted(set(stub.paths())) == ["GET /v1/config", "POST /v1/oauth/tokens"]
    grants = [r for r in stub.requests if r.method == "POST"]
    (config,) = [r for r in stub.requests if r.method == "GET"]
    for grant in grants:
        assert {k: v[0] for k, v in parse_qs(grant.body).items()} == {
            "grant_type": "client_credentials",
            "client_id": CLIENT,
            "client_secret": CLIENT_SECRET,
            "scope": "PRINCIPAL_ROLE:ALL",
        }
    assert config.headers["Authorization"] == f"Bearer {stub.issued_token(CLIENT)}"
    assert catalog.name == "lake"
    assert {f"{CLIENT}:{CLIENT_SECRET}", CLIENT_SECRET} <= set(hook.secrets())


def test_the_iceberg_providers_form_exchanges_the_same_client_credential_for_both_hooks(monkeypatch):
    """Host = the catalog's URI, login and password = the OAuth2 client: this provider's hook and Airflow's Iceberg
    provider's ``IcebergHook`` send the catalog the same requests."""
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

    def requests_of(hook_class: type[IcebergHook], stub: RestCatalogStub) -> list[tuple[str, dict[str, str]]]:
        conn = {"conn_type": "iceberg", "host": stub.uri, "login": CLIENT, "password": CLIENT_SECRET}
        conn["extra"] = {"warehouse": "analytics", "scope": "PRINCIPAL_ROLE:ALL"}
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps(conn))
        catalog = hook_class("iceberg_default").get_conn()
        assert catalog.name == "iceberg_default"
        return [
            (f"{r.method} {r.path}", {k: v[0] for k, v in (parse_qs(r.body) if r.body else r.query).items()})
            for r in stub.requests
        ]

    with RestCatalogStub(clients={CLIENT: CLIENT_SECRET}) as stub:
        ours = requests_of(IcebergCatalogHook, stub)
    with RestCatalogStub(clients={CLIENT: CLIENT_SECRET}) as stub:
        theirs = requests_of(IcebergHook, stub)
    assert ours == theirs
    assert ("POST /v1/oauth/tokens", {
        "grant_type": "client_credentials", "client_id": CLIENT, "client_secret": CLIENT_SECRET,
        "scope": "PRINCIPAL_ROLE:ALL",
    }) in ours  # fmt: skip
    assert ("GET /v1/config", {"warehouse": "analytics"}) in ours


def test_a_refused_credential_fails_the_tables_round_with_the_secret_masked(tmp_path):
    wrong_secret = "Wr0ng-client-secret-5tQ"
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    hot.insert("orders", 1, 50)
    spec = TableSpec.parse(
        {
            "name": "orders",
            "source": {"conn_id": "unused", "table": "orders", "cursor_column": "id"},
            "lake": {"namespace": "rest_ns", "table": "orders"},
        }
    )
    store = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    with RestCatalogStub(clients={CLIENT: CLIENT_SECRET}) as stub:
        properties = {
            "type": "rest",
            "uri": stub.uri,
            "oauth2-server-uri": f"{stub.uri}/v1/oauth/tokens",
            "credential": f"{CLIENT}:{wrong_secret}",
        }
        with pytest.raises(Exception, match="cannot be loaded"):
            round_parts(spec, hot, properties, writer=writer).run(store)
        assert stub.requests and all(r.path == "/v1/oauth/tokens" for r in stub.requests)
    assert wrong_secret in stub.requests[0].body  # the secret did go to the server, which quoted it back in its refusal

    state = store.load()
    assert state is not None and state.status is TableStatus.FAILED
    assert "invalid_client" in state.last_error and "unknown client 'tiering-client'" in state.last_error
    assert wrong_secret not in state.last_error


def test_vended_storage_credentials_are_what_the_lakes_files_are_opened_with(tmp_path, s3_server, monkeypatch):
    # A real table on the S3 server, made with pyiceberg and the server's key (as the catalog's own service would).
    warehouse = f"s3://{LAKE_BUCKET}/{uuid.uuid4().hex[:12]}/warehouse"
    owner = load_catalog(
        "owner", type="sql", uri=f"sqlite:///{tmp_path}/owner.db", warehouse=warehouse, **s3_server.storage_properties()
    )
    owner.create_namespace("rest_ns")
    rows = pa.table({"id": pa.array(range(1, 101), pa.int64()), "v": [f"row {i}" for i in range(1, 101)]})
    table = owner.create_table(("rest_ns", "orders"), schema=rows.schema)
    table.append(rows)
    metadata = json.loads(table.metadata.model_dump_json())
    vended = s3_server.storage_properties()
    for name, value in wrong_aws_environment().items():  # this process's ambient variables point elsewhere
        monkeypatch.setenv(name, value)

    with RestCatalogStub(tokens={TOKEN}) as stub:
        stub.add_table(("rest_ns", "orders"), table.metadata_location, metadata, vended)
        stub.add_table(
            ("rest_ns", "unvended"),
            table.metadata_location,
            metadata,
            {"s3.endpoint": s3_server.endpoint, "s3.region": REGION},
        )
        rest = {"type": "rest", "uri": stub.uri, "token": TOKEN, "warehouse": "analytics"}  # no storage keys

        lake = lake_of(LakeSpec(namespace="rest_ns", table="orders"), rest)
        storage = lake.lake_storage()
        assert storage.properties["s3.access-key-id"] == s3_server.access_key_id
        assert s3_server.secret_access_key not in repr(storage)
        filesystem, path = storage.filesystem_and_path(table.location() + "/data")
        listed = {info.path for info in filesystem.get_file_info(pafs.FileSelector(path, recursive=True))}
        data_files = {task.file.file_path.removeprefix("s3://") for task in table.scan().plan_files()}
        assert data_files and data_files <= listed
        read = load_catalog("rest", **rest).load_table(("rest_ns", "orders")).scan().to_arrow()
        assert sorted(read.to_pylist(), key=lambda r: r["id"]) == rows.to_pylist()

        # Without vended keys the same table falls back on the ambient chain, and this server refuses that.
        unvended = lake_of(LakeSpec(namespace="rest_ns", table="unvended"), rest).lake_storage()
        assert "s3.access-key-id" not in unvended.properties
        filesystem, path = unvended.filesystem_and_path(table.location() + "/data")
        with pytest.raises(OSError, match="ACCESS_DENIED|INVALID_ACCESS_KEY|SIGNATURE"):
            filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
    assert "GET /v1/tiering-wh/namespaces/rest_ns/tables/orders" in stub.paths()
