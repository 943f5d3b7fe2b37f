"""An Airflow connection read as plain values: its fields (:func:`connection_info`), and for an ``iceberg``
connection the catalog it names (:func:`catalog_config`).

Below both hooks that read connections: ``hooks/tiering.py`` (a table's source, catalog and Spark) and
``hooks/iceberg_catalog.py`` (the Iceberg provider's hook, which imports pyiceberg: imported on first use) take these
from here, so neither imports the other. Importing this module imports no pyiceberg.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import ConnectionNotUsable

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_provider_tiering.build import CatalogConfig

# hooks/tiering.py's logger, where catalog_config logged before: logging configurations naming it still apply.
log = logging.getLogger("airflow_provider_tiering.hooks.tiering")


def connection_info(conn: Connection) -> ConnectionInfo:
    """An Airflow connection's fields as a :class:`ConnectionInfo`."""
    return ConnectionInfo(
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        extra=dict(conn.extra_dejson or {}),
        conn_id=conn.conn_id,
    )


def catalog_config(conn_id: str, conn: Connection) -> CatalogConfig:
    """pyiceberg catalog properties from an ``iceberg`` connection, and the secrets among them.

    Read as Airflow's Iceberg provider reads it (``IcebergHook.catalog``), so that one connection means one catalog
    to both: the extra holds the catalog's properties; the host, when set, is its ``uri``; ``type`` defaults to
    ``rest``; for a REST catalog, login and password are an OAuth2 client's id and secret (``credential``). Two
    additions, from this provider's earlier form of the connection, where the Iceberg provider reads nothing: a
    password without a login is a REST catalog's bearer ``token``, and a catalog whose ``uri`` is a SQL or Hive one
    (``sqlite:``, ``postgresql+psycopg:``, ``thrift:``...) is left to pyiceberg to type. The catalog is named
    ``extra["name"]``, else the connection id (the Iceberg provider's name for it): a pyiceberg SQL catalog keeps
    its tables per catalog name, so it must stay the same for the life of the tables.

    Raises:
        ConnectionNotUsable: the host and the extra's ``uri`` name two different catalogs.
    """
    from airflow_provider_tiering.build import CatalogConfig

    info = connection_info(conn)
    properties = {k: str(v) for k, v in info.extra.items()}
    host = (info.host or "").rstrip("/")
    if host:
        if properties.get("uri", host).rstrip("/") != host:
            raise ConnectionNotUsable(
                f"connection {conn_id!r}: its host {host!r} and its extra's uri {properties['uri']!r} name two "
                "catalogs; keep one (the host, as Airflow's Iceberg provider reads it)"
            )
        properties["uri"] = host
    if "type" not in properties and _rest_uri(properties.get("uri")):
        properties["type"] = "rest"
    if properties.get("type") == "rest":
        if info.login and info.password:
            properties["credential"] = f"{info.login}:{info.password}"
        elif info.password:
            properties.setdefault("token", info.password)
        elif info.login:
            log.warning("connection %r: a client id without its secret (the password) is not used", conn_id)
    secrets = ConnectionInfo(conn_type="iceberg", password=info.password, extra=properties).secrets()
    name = properties.pop("name", conn_id)
    return CatalogConfig(name, properties, repr(conn_id), tuple(secrets))


def _rest_uri(uri: str | None) -> bool:
    """Whether a catalog without a ``type`` is a REST one: no uri (the Iceberg provider's default) or an HTTP one."""
    return uri is None or uri.lower().startswith(("http://", "https://"))
