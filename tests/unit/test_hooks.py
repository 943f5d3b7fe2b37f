"""Connections -> source, catalog and Spark settings, resolved by Airflow from AIRFLOW_CONN_* variables."""

from __future__ import annotations

import json

import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_tiering.core.errors import ConnectionNotUsable
from airflow_provider_tiering.core.source_specs import FileSourceSpec, SqlSourceSpec
from airflow_provider_tiering.core.spec import SparkSpec
from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_provider_tiering.hooks.tiering import SqlSourceHook, TieringSourceHook, spark_settings
from airflow_provider_tiering.sources.files.source import FileSource
from airflow_provider_tiering.sources.postgres.cursor_source import PostgresSource
from airflow_provider_tiering.sources.sqlite import SqliteSource

SOURCE = SqlSourceSpec(conn_id="hot", table="orders", cursor_column="id")


def set_conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_postgres_connection_becomes_a_dsn_with_quoted_credentials(monkeypatch):
    set_conn(
        monkeypatch,
        "hot",
        conn_type="postgres",
        host="db.internal",
        port=5433,
        login="tier er",
        password="p@ss:w/rd",
        schema="sales",
        extra={"sslmode": "require"},
    )
    source = SqlSourceHook(SOURCE).get_source()
    assert isinstance(source, PostgresSource)
    # A libpq connection string, quoted by psycopg, that libpq reads back field for field.
    assert conninfo_to_dict(source.conninfo) == {
        "host": "db.internal",
        "port": "5433",
        "user": "tier er",
        "password": "p@ss:w/rd",
        "dbname": "sales",
        "sslmode": "require",
    }
    assert "p@ss:w/rd" in source.secrets()


def test_postgres_connection_extras_reach_libpq_and_airflows_own_stay_out(monkeypatch):
    extra = {"connect_timeout": 7, "options": "-c statement_timeout=5000", "sqlalchemy_scheme": "x", "iam": False}
    set_conn(monkeypatch, "hot", conn_type="postgres", host="db", login="u", password="p", schema="s", extra=extra)
    parameters = conninfo_to_dict(SqlSourceHook(SOURCE).get_source().conninfo)
    assert parameters["connect_timeout"] == "7" and parameters["options"] == "-c statement_timeout=5000"
    assert "sqlalchemy_scheme" not in parameters and "iam" not in parameters


def test_sqlite_connection_gives_the_database_path(monkeypatch, tmp_path):
    set_conn(monkeypatch, "hot", conn_type="sqlite", host=str(tmp_path / "hot.db"))
    source = SqlSourceHook(SOURCE).get_source()
    assert isinstance(source, SqliteSource) and source.path == str(tmp_path / "hot.db")


def test_unsupported_connection_type_is_a_clear_error(monkeypatch):
    set_conn(monkeypatch, "hot", conn_type="oracle", host="x")
    supported = "mariadb, mysql, postgres, postgresql, sqlite"
    with pytest.raises(ConnectionNotUsable, match=f"connection 'hot' has type 'oracle'; supported: {supported}"):
        SqlSourceHook(SOURCE).get_source()


def test_spark_defaults_to_local_mode_without_a_connection():
    settings = spark_settings(SparkSpec(conn_id="no_such_spark_conn", conf={"spark.x": "1"}))
    assert settings.master == "local[*]" and settings.remote is None and settings.conf == {"spark.x": "1"}


@pytest.mark.parametrize(
    ("fields", "master"),
    [
        ({"conn_type": "spark", "host": "spark://m1", "port": 7077}, "spark://m1:7077"),
        ({"conn_type": "spark", "host": "m1", "port": 7077}, "spark://m1:7077"),
        ({"conn_type": "spark", "host": "local[2]"}, "local[2]"),
        ({"conn_type": "spark", "host": "yarn"}, "yarn"),
    ],
)
def test_spark_connection_gives_the_master(monkeypatch, fields, master):
    set_conn(monkeypatch, "spark_default", **fields)
    assert spark_settings(SparkSpec()).master == master


def test_spark_connect_connection_gives_a_remote_url(monkeypatch):
    set_conn(
        monkeypatch, "spark_default", conn_type="spark_connect", host="connect.internal", port=15002, password="tok123"
    )
    settings = spark_settings(SparkSpec())
    assert settings.remote.startswith("sc://connect.internal:15002/") and "token=tok123" in settings.remote


def test_catalog_properties_come_from_the_extra_and_secrets_are_collected(monkeypatch):
    set_conn(
        monkeypatch,
        "iceberg_default",
        conn_type="iceberg",
        password="rest-token",
        extra={"type": "rest", "uri": "http://127.0.0.1:8181", "s3.secret-access-key": "s3-secret"},
    )
    hook = IcebergCatalogHook()
    properties = hook.catalog_properties()
    assert properties == {
        "type": "rest",
        "uri": "http://127.0.0.1:8181",
        "s3.secret-access-key": "s3-secret",
        "token": "rest-token",
    }
    assert {"rest-token", "s3-secret"} <= set(hook.secrets())


def official_hooks_properties(monkeypatch, conn_id: str) -> dict[str, str]:
    """The catalog properties Airflow's Iceberg provider's ``IcebergHook`` opens a connection's catalog with (its
    ``load_catalog`` call recorded instead of run: no catalog is reached)."""
    from airflow.providers.apache.iceberg.hooks import iceberg

    opened: dict[str, str] = {}
    monkeypatch.setattr(iceberg, "load_catalog", lambda name, **properties: opened.update(properties))
    iceberg.IcebergHook(conn_id).get_conn()
    return opened


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(
            {"host": "https://catalog.example.com/api/catalog/", "login": "client-id", "password": "client-S3cret"},
            id="rest-oauth2-client",
        ),
        pytest.param({"host": "https://catalog.example.com/api/catalog"}, id="rest-without-credentials"),
        pytest.param(
            {"extra": {"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/wh"}},
            id="sql-in-the-extra",
        ),
        pytest.param(
            {"extra": {"type": "glue", "glue.region": "eu-west-1"}, "login": "ignored", "password": "ignored"},
            id="glue-in-the-extra",
        ),
    ],
)
def test_a_connection_in_the_iceberg_providers_form_opens_the_catalog_its_hook_opens(monkeypatch, fields):
    extra = {"warehouse": "analytics", "s3.region": "eu-west-1", **fields.pop("extra", {})}
    set_conn(monkeypatch, "iceberg_default", conn_type="iceberg", extra=extra, **fields)
    ours = IcebergCatalogHook().catalog_config()
    assert ours.name == "iceberg_default"  # the Iceberg provider's name for it: the connection id
    assert dict(ours.properties) == official_hooks_properties(monkeypatch, "iceberg_default")
    if "login" in fields and extra.get("type") is None:
        assert ours.properties["credential"] == "client-id:client-S3cret"
        assert {"client-id:client-S3cret", "client-S3cret"} <= set(ours.secrets)


def test_this_providers_earlier_form_reads_as_it_did(monkeypatch):
    # A REST catalog's token as the password, the catalog named in the extra, a SQL catalog left untyped.
    set_conn(
        monkeypatch,
        "iceberg_default",
        conn_type="iceberg",
        password="bearer-T0ken",
        extra={"name": "lake", "type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "analytics"},
    )
    rest = IcebergCatalogHook().catalog_config()
    assert rest.name == "lake" and rest.properties["token"] == "bearer-T0ken" and "credential" not in rest.properties
    set_conn(monkeypatch, "iceberg_default", conn_type="iceberg", extra={"uri": "sqlite:////data/catalog.db"})
    assert "type" not in IcebergCatalogHook().catalog_config().properties  # pyiceberg infers "sql" from the uri


def test_a_host_and_an_extra_uri_naming_two_catalogs_are_refused(monkeypatch):
    set_conn(
        monkeypatch,
        "iceberg_default",
        conn_type="iceberg",
        host="https://one.example.com/catalog",
        extra={"type": "rest", "uri": "https://two.example.com/catalog"},
    )
    with pytest.raises(ConnectionNotUsable, match="two catalogs"):
        IcebergCatalogHook().catalog_config()


def test_the_iceberg_connection_type_is_left_to_airflows_iceberg_provider():
    from airflow_provider_tiering.get_provider_info import get_provider_info

    assert "connection-types" not in get_provider_info()


def test_a_catalogs_uri_password_and_an_oauth_client_secret_are_secrets_too(monkeypatch):
    set_conn(
        monkeypatch,
        "iceberg_default",
        conn_type="iceberg",
        extra={
            "type": "sql",
            "uri": "postgresql+psycopg://iceberg:p%40ss-w0rd@catalog-db:5432/iceberg_catalog",
            "credential": "tiering-client:client-Secret-9",
            "warehouse": "s3://lake/warehouse",
        },
    )
    secrets = set(IcebergCatalogHook().catalog_config().secrets)
    assert {"p%40ss-w0rd", "p@ss-w0rd", "tiering-client:client-Secret-9", "client-Secret-9"} <= secrets
    assert not any("s3://lake" in s or "tiering-client" == s for s in secrets)


LANDING = FileSourceSpec(kind="files", path="s3://landing/orders", format="parquet")


def test_a_local_landing_zone_needs_no_connection(tmp_path):
    spec = FileSourceSpec(kind="files", path=str(tmp_path), format="jsonl", columns={"id": "int64"})
    source = TieringSourceHook(spec).get_source()
    assert isinstance(source, FileSource) and source.filesystem_options == {} and source.secrets() == []
    assert source.display_name == f"landing zone {tmp_path} (jsonl)"


def test_a_landing_zone_connection_gives_filesystem_options_and_masks_its_secrets(monkeypatch):
    set_conn(
        monkeypatch,
        "landing",
        conn_type="aws",
        password="pw-1",
        extra={"region": "eu-west-1", "access_key": "AK", "secret_key": "SK-2"},
    )
    source = TieringSourceHook(LANDING.model_copy(update={"conn_id": "landing"})).get_source()
    assert isinstance(source, FileSource)
    assert source.filesystem_options == {"region": "eu-west-1", "access_key": "AK", "secret_key": "SK-2"}
    assert {"pw-1", "SK-2"} <= set(source.secrets()) and "eu-west-1" not in source.secrets()
    filesystem, root = source.filesystem()  # pyarrow's S3 filesystem, built from the options without a request
    assert filesystem.type_name == "s3" and filesystem.region == "eu-west-1" and root == "landing/orders"


def test_the_sql_source_hook_keeps_its_name():
    assert SqlSourceHook is TieringSourceHook
