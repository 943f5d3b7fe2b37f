"""A SQLite database's tables: columns and primary keys. SQLite keeps no change counters, so the listing is blind
(every due table is probed by its own task, as a table declared alone is)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.discovery import ColumnKind, HotColumn, HotTable, Listing
from airflow_provider_tiering.core.errors import SourceError

BLIND = "SQLite keeps no change counters: each due table is probed by its own task"


def _kind(declared: str) -> ColumnKind:
    text = declared.upper()
    if "INT" in text:
        return ColumnKind.INTEGER
    return ColumnKind.TEMPORAL if "DATE" in text or "TIME" in text else ColumnKind.OTHER


class SqliteTableLister:
    """:class:`~airflow_provider_tiering.core.discovery.TableLister` of a ``sqlite`` connection (path as host)."""

    def __init__(self, connection: ConnectionInfo) -> None:
        path = connection.host or connection.schema
        if not path:
            raise SourceError(f"connection {connection.describe()}: a sqlite connection needs the database path (host)")
        self.path = path

    def list_tables(self, schemas: Sequence[str] | None) -> Listing:
        started = time.monotonic()
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise SourceError(f"cannot open {self.path}: {exc}") from exc
        try:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )]  # fmt: skip
            tables = []
            for name in names:
                info = conn.execute('SELECT name, type, "notnull", pk FROM pragma_table_info(?)', (name,)).fetchall()
                key = tuple(c[0] for c in sorted((c for c in info if c[3]), key=lambda c: c[3]))
                columns = tuple(HotColumn(c[0], _kind(c[1] or ""), bool(c[2]) or c[0] in key) for c in info)
                tables.append(HotTable(None, name, columns, key, None))
        finally:
            conn.close()
        return Listing(tuple(tables), BLIND, time.monotonic() - started)
