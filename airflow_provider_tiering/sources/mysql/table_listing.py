"""A MariaDB (or MySQL) database's tables in one query: columns, primary key and a fingerprint from
``information_schema.TABLES``.

InnoDB keeps no change counters a client can read, but it stamps a table's ``UPDATE_TIME`` when a transaction that
changed it commits (in memory: NULL after a restart, until the table's next change). The fingerprint joins the table's
``CREATE_TIME`` (dropped and created again, rebuilt), its ``UPDATE_TIME``, and its columns and key. ``UPDATE_TIME``
counts whole seconds, so a table stamped within the last two seconds of the server's clock, or not stamped at all,
has no fingerprint ("maybe"): a later commit in the same second cannot hide behind an unchanged stamp.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.discovery import ColumnKind, HotColumn, HotTable, Listing
from airflow_provider_tiering.core.errors import ConnectionNotUsable
from airflow_provider_tiering.sources.mysql.table import session_connect

_INTEGER = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_TEMPORAL = frozenset({"date", "datetime", "timestamp"})
#: Seconds of the server's clock within which a table's ``UPDATE_TIME`` is too recent to tell (its unit is a second).
RECENT_SECONDS = 2

LISTING_SQL = """
SELECT t.TABLE_SCHEMA, t.TABLE_NAME, CAST(t.CREATE_TIME AS CHAR), CAST(t.UPDATE_TIME AS CHAR),
       t.UPDATE_TIME IS NULL OR t.UPDATE_TIME >= NOW() - INTERVAL {recent} SECOND, c.cols, k.cols
  FROM information_schema.TABLES t
  LEFT JOIN (SELECT TABLE_SCHEMA, TABLE_NAME,
                    JSON_ARRAYAGG(JSON_ARRAY(COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE = 'NO')
                                  ORDER BY ORDINAL_POSITION) AS cols
               FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({schemas})
              GROUP BY TABLE_SCHEMA, TABLE_NAME) c
         ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME
  LEFT JOIN (SELECT TABLE_SCHEMA, TABLE_NAME, JSON_ARRAYAGG(COLUMN_NAME ORDER BY ORDINAL_POSITION) AS cols
               FROM information_schema.KEY_COLUMN_USAGE
              WHERE CONSTRAINT_NAME = 'PRIMARY' AND TABLE_SCHEMA IN ({schemas})
              GROUP BY TABLE_SCHEMA, TABLE_NAME) k
         ON k.TABLE_SCHEMA = t.TABLE_SCHEMA AND k.TABLE_NAME = t.TABLE_NAME
 WHERE t.TABLE_TYPE = 'BASE TABLE' AND t.TABLE_SCHEMA IN ({schemas})
"""


def _kind(data_type: str) -> ColumnKind:
    if data_type in _INTEGER:
        return ColumnKind.INTEGER
    return ColumnKind.TEMPORAL if data_type in _TEMPORAL else ColumnKind.OTHER


class MySqlTableLister:
    """:class:`~airflow_provider_tiering.core.discovery.TableLister` of a ``mysql`` (or ``mariadb``) connection; its
    schemas are databases (unset: the connection's own)."""

    def __init__(self, connection: ConnectionInfo) -> None:
        if not connection.schema:
            raise ConnectionNotUsable(
                f"connection {connection.describe()}: a mysql connection needs the database as its schema"
            )
        self.connection = connection

    def list_tables(self, schemas: Sequence[str] | None) -> Listing:
        databases = list(schemas or (str(self.connection.schema),))
        started = time.monotonic()
        conn = session_connect(self.connection, str(self.connection.schema), f"database {self.connection.schema}")
        try:
            with conn.cursor() as cursor:
                placeholders = ", ".join(["%s"] * len(databases))
                cursor.execute(LISTING_SQL.format(recent=RECENT_SECONDS, schemas=placeholders), databases * 3)
                rows = cursor.fetchall()
        finally:
            conn.close()
        return listing_of(rows, time.monotonic() - started, several=len(databases) > 1 or schemas is not None)


def listing_of(rows: Sequence[Sequence[Any]], seconds: float, several: bool) -> Listing:
    """The listing from the query's rows (a table's schema named only where the declaration names schemas)."""
    tables = []
    for schema, name, created, updated, unsure, columns, key in rows:
        column_list = json.loads(columns) if isinstance(columns, str) else columns or []
        key_list = json.loads(key) if isinstance(key, str) else key or []
        digest = hashlib.sha1(json.dumps([column_list, key_list]).encode()).hexdigest()[:16]
        fingerprint = None if unsure else f"{created}:{updated}:{digest}"
        tables.append(
            HotTable(
                schema if several else None, name,
                tuple(HotColumn(c[0], _kind(str(c[1]).lower()), bool(c[3])) for c in column_list),
                tuple(key_list), fingerprint,
            )
        )  # fmt: skip
    return Listing(tuple(tables), None, seconds, stream_kind="mysql_cdc")
