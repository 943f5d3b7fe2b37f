"""A PostgreSQL database's tables in one query: columns, primary key and a fingerprint from the statistics counters.

The fingerprint joins what changes when anything in a table may have changed: its oid (dropped and created again),
its relfilenode (truncated, rewritten), the cumulative insert, update and delete counters, its columns, and the
server's start time and the database's statistics reset time (counters lost or reset). The counters count a
transaction once it has ended, committed or not, so a change committed after a listing moves a later one. With
``track_counts`` off, or on a standby (whose counters do not count the primary's changes), the listing is blind:
every table is "maybe". A partitioned table's rows are counted on its partitions: its fingerprint is None (maybe).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.discovery import ColumnKind, HotColumn, HotTable, Listing
from airflow_provider_tiering.sources.postgres.table import libpq_conninfo, psycopg_connect

_INTEGER = frozenset({"int2", "int4", "int8"})
_TEMPORAL = frozenset({"timestamp", "timestamptz", "date"})

LISTING_SQL = """
SELECT n.nspname, c.relname, c.oid, c.relfilenode, c.relkind,
       pg_stat_get_tuples_inserted(c.oid), pg_stat_get_tuples_updated(c.oid), pg_stat_get_tuples_deleted(c.oid),
       (SELECT json_agg(json_build_array(a.attname, t.typname, format_type(a.atttypid, a.atttypmod), a.attnotnull)
                        ORDER BY a.attnum)
          FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
       (SELECT json_agg(a.attname ORDER BY array_position(i.indkey::int2[], a.attnum))
          FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
         WHERE i.indrelid = c.oid AND i.indisprimary),
       current_setting('track_counts'), pg_is_in_recovery(), pg_postmaster_start_time()::text,
       (SELECT stats_reset::text FROM pg_stat_database WHERE datname = current_database()),
       has_table_privilege(c.oid, 'SELECT')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname = ANY (%s)
"""


def _kind(type_name: str) -> ColumnKind:
    if type_name in _INTEGER:
        return ColumnKind.INTEGER
    return ColumnKind.TEMPORAL if type_name in _TEMPORAL else ColumnKind.OTHER


class PostgresTableLister:
    """:class:`~airflow_provider_tiering.core.discovery.TableLister` of a ``postgres`` connection."""

    def __init__(self, connection: ConnectionInfo) -> None:
        self.conninfo = libpq_conninfo(connection)
        self.display_name = f"database {connection.schema or 'postgres'}"

    def list_tables(self, schemas: Sequence[str] | None) -> Listing:
        started = time.monotonic()
        with psycopg_connect(self.display_name, self.conninfo) as conn:
            rows = conn.execute(LISTING_SQL, (list(schemas or ("public",)),)).fetchall()
        return listing_of(rows, time.monotonic() - started)


def listing_of(rows: Sequence[Sequence[Any]], seconds: float) -> Listing:
    """The listing from the query's rows."""
    tables, blind = [], None
    for schema, name, oid, filenode, relkind, ins, upd, dele, columns, key, track, standby, started, reset, can in rows:
        if track != "on":
            blind = "track_counts is off on the server: its statistics counters do not move"
        elif standby:
            blind = "the connection reaches a standby, whose statistics do not count the primary's changes"
        shape = json.dumps([columns, key])
        fingerprint = None
        if relkind == "r":
            digest = hashlib.sha1(shape.encode()).hexdigest()[:16]
            fingerprint = f"{oid}:{filenode}:{ins}:{upd}:{dele}:{digest}:{started}:{reset}"
        tables.append(
            HotTable(
                schema, name,
                tuple(HotColumn(c[0], _kind(c[1]), bool(c[3])) for c in columns or ()),
                tuple(key or ()), fingerprint, None if can else "the connection's role may not SELECT it",
            )
        )  # fmt: skip
    if blind is not None:
        tables = [HotTable(t.schema, t.table, t.columns, t.primary_key, None, t.unreadable) for t in tables]
    return Listing(tuple(tables), blind, seconds, stream_kind="postgres_cdc")
