"""Resolve a table spec's Airflow connections into a hot-store source, an Iceberg catalog and Spark settings.

Credentials only ever come from Airflow connections; every secret resolved here is also
returned so that errors stored in the state document can be masked.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseHook

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.spec import FileSourceSpec, SparkSpec, SqlSourceSpec
from airflow_provider_tiering.spark.session import DEFAULT_MASTER, SparkSettings

if TYPE_CHECKING:
    from airflow_provider_tiering.sources.base import Source

_SECRET_KEY = re.compile(r"pass|secret|token|credential|key", re.IGNORECASE)
POSTGRES_CONN_TYPES = frozenset({"postgres", "postgresql"})
SQLITE_CONN_TYPES = frozenset({"sqlite"})


def postgres_dsn(conn: Any) -> str:
    """A libpq URI from an Airflow connection (``extra`` keys become URI parameters, e.g. sslmode)."""
    auth = ""
    if conn.login:
        auth = quote(conn.login, safe="")
        if conn.password:
            auth += ":" + quote(conn.password, safe="")
        auth += "@"
    host = conn.host or "localhost"
    port = f":{conn.port}" if conn.port else ""
    database = quote(conn.schema or "postgres", safe="")
    params = {k: str(v) for k, v in (conn.extra_dejson or {}).items() if isinstance(v, (str, int, bool))}
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}{host}{port}/{database}{query}"


class TieringSourceHook(BaseHook):
    """Builds the :class:`Source` of a table's hot store from its spec and Airflow connection.

    SQL tables need their connection (postgres or sqlite); a landing zone of files needs one only
    for object-store credentials.
    """

    conn_name_attr = "conn_id"
    hook_name = "Tiering source"

    def __init__(self, spec: SqlSourceSpec | FileSourceSpec) -> None:
        super().__init__()
        self.spec = spec

    def get_source(self) -> Source:
        conn = None if self.spec.conn_id is None else self.get_connection(self.spec.conn_id)
        return _build_source(self.spec, conn)

    async def aget_source(self) -> Source:
        """:meth:`get_source` for triggers, which run in the triggerer's event loop."""
        conn = None if self.spec.conn_id is None else await self.aget_connection(self.spec.conn_id)
        return await asyncio.to_thread(_build_source, self.spec, conn)


#: The name of the hook before landing zones existed.
SqlSourceHook = TieringSourceHook


def _build_source(spec: SqlSourceSpec | FileSourceSpec, conn: Any | None) -> Source:
    if isinstance(spec, FileSourceSpec):
        return file_source_from_connection(spec, conn)
    return source_from_connection(spec, conn)


def file_source_from_connection(spec: FileSourceSpec, conn: Any | None) -> Source:
    """The :class:`Source` of a landing zone; the connection's extra (if any) holds the filesystem options."""
    from airflow_provider_tiering.sources.files import FileSource

    if conn is None:
        return FileSource(spec)
    options = dict(conn.extra_dejson or {})
    secrets = [str(v) for k, v in options.items() if _SECRET_KEY.search(k)]
    if conn.password:
        secrets.append(conn.password)
    return FileSource(spec, options, secrets)


def source_from_connection(spec: SqlSourceSpec, conn: Any) -> Source:
    """The :class:`Source` of a SQL hot table, given its (already resolved) Airflow connection."""
    conn_type = (conn.conn_type or "").lower()
    if conn_type in POSTGRES_CONN_TYPES:
        from airflow_provider_tiering.sources.postgres import PostgresSource

        return PostgresSource(spec, postgres_dsn(conn))
    if conn_type in SQLITE_CONN_TYPES:
        from airflow_provider_tiering.sources.sqlite import SqliteSource

        path = conn.host or conn.schema
        if not path:
            raise SourceError(f"connection {spec.conn_id!r}: a sqlite connection needs the database path as host")
        return SqliteSource(spec, path)
    raise SourceError(
        f"connection {spec.conn_id!r} has type {conn.conn_type!r}; "
        f"supported: {', '.join(sorted(POSTGRES_CONN_TYPES | SQLITE_CONN_TYPES))}"
    )


class IcebergCatalogHook(BaseHook):
    """An Iceberg catalog from an Airflow connection: ``extra`` holds the pyiceberg catalog properties.

    Example (the embedded default)::

        AIRFLOW_CONN_ICEBERG_DEFAULT='{"conn_type": "iceberg", "extra": {"type": "sql",
            "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/warehouse"}}'

    The connection's password, when set, is passed as the catalog's ``token`` (REST catalogs).
    The catalog's name is ``extra["name"]`` or else the connection id: a pyiceberg SQL catalog keeps
    tables per catalog name, so it must stay the same for the life of the tables.
    """

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = "iceberg_default"
    conn_type = "iceberg"
    hook_name = "Iceberg catalog"

    def __init__(self, iceberg_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.iceberg_conn_id = iceberg_conn_id
        self._secrets: list[str] = []

    def catalog_properties(self) -> dict[str, str]:
        properties, self._secrets = catalog_properties_from_connection(self.get_connection(self.iceberg_conn_id))
        return properties

    def get_conn(self) -> Any:
        from airflow_provider_tiering.lake.iceberg import load_catalog

        properties = self.catalog_properties()
        return load_catalog(properties.pop("name", self.iceberg_conn_id), properties)

    async def aget_conn(self) -> Any:
        """:meth:`get_conn` for triggers: the connection is looked up without blocking the event loop."""
        properties, self._secrets = catalog_properties_from_connection(await self.aget_connection(self.iceberg_conn_id))
        name = properties.pop("name", self.iceberg_conn_id)
        from airflow_provider_tiering.lake.iceberg import load_catalog

        return await asyncio.to_thread(load_catalog, name, properties)

    def secrets(self) -> list[str]:
        return list(self._secrets)


def catalog_properties_from_connection(conn: Any) -> tuple[dict[str, str], list[str]]:
    """pyiceberg catalog properties from an Airflow connection, and the secrets among them."""
    properties = {k: str(v) for k, v in (conn.extra_dejson or {}).items()}
    if conn.host and "uri" not in properties:
        properties["uri"] = conn.host
    if conn.password:
        properties.setdefault("token", conn.password)
    secrets = [v for k, v in properties.items() if _SECRET_KEY.search(k)]
    if conn.password:
        secrets.append(conn.password)
    return properties, secrets


def spark_settings(spec: SparkSpec) -> SparkSettings:
    """Spark settings from the Spark provider's connections: ``spark`` (a master URL) or ``spark_connect``.

    Without such a connection, Spark runs in local mode (``local[*]``).
    """
    from airflow.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(spec.conn_id)
    except AirflowNotFoundException:
        return SparkSettings(master=DEFAULT_MASTER, conf=dict(spec.conf), class_data_sharing=spec.class_data_sharing)
    if (conn.conn_type or "").lower() == "spark_connect":
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkSettings(remote=SparkConnectHook(conn_id=spec.conn_id).get_connection_url(), conf=dict(spec.conf))
    host = conn.host or DEFAULT_MASTER
    if "://" not in host and not host.startswith(("local", "yarn")):
        host = f"spark://{host}"
    if conn.port and host.startswith("spark://") and host.count(":") == 1:
        host = f"{host}:{conn.port}"
    return SparkSettings(master=host, conf=dict(spec.conf), class_data_sharing=spec.class_data_sharing)
