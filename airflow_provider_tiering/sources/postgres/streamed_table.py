"""The table behind a change stream, as a bulk reader sees it: a PostgreSQL table without a cursor (``table.py``:
its columns, types and reads), and its eviction, walked in key order in sessions tagged with the table's replication
origin, so the stream skips eviction's deletes."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from datetime import time as dt_time
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.ports import HeldRows, KeyBatch, KeyValues
from airflow_provider_tiering.sources.postgres.table import PostgresTable

log = logging.getLogger(__name__)


class StreamedTable(PostgresTable):
    """The streamed table's columns, types and bulk reads; and its eviction, walked in key order, in sessions tagged
    with the table's eviction origin."""

    #: The replication origin eviction's deleting sessions set (None: not evicting; nothing is deleted then).
    eviction_origin: str | None = None

    def schema(self) -> pa.Schema:
        """The tiered columns in table order (the lake table's order, whatever order the spec names them in)."""
        if self._schema is None:
            found = self._load_schema()
            missing = [c for c in self.spec.columns or () if c not in found.names]
            if missing:
                raise SourceError(f"{self.display_name}: column(s) {', '.join(missing)} not found")
            self._schema = found
        return self._schema

    def column_values(self, columns: Sequence[str]) -> pa.Table:
        """``columns`` of every row of the table, in one snapshot (a promoted column's values, compared with the
        lake's after a rewrite)."""
        from airflow_provider_tiering.sources.conform import conform_batch

        schema = pa.schema([self.schema().field(c) for c in columns])
        select = ", ".join(self.select_expression(f) for f in schema)
        with self._snapshot() as run:
            batches = [conform_batch(b, schema) for b in run(f"SELECT {select} FROM {self.table_ref}", (), schema)]
        return pa.Table.from_batches(batches, schema=schema)

    @contextmanager
    def _deleting_session(self, cur: Any) -> Iterator[None]:
        """The eviction transaction's session carries the table's origin (pgoutput then tags the transaction with it
        and the change stream skips it whole); reset right after, so nothing else the session runs carries it."""
        origin = self.eviction_origin
        if origin is None:
            raise SourceError(f"{self.display_name}: eviction without its replication origin would reach the lake")
        try:
            cur.execute("SELECT count(*) FROM pg_replication_origin_session_setup($1)", parameters=(origin,))
            cur.fetchall()
            # Flushed at commit, whatever the server's default: the stream reads flushed WAL only, and the next
            # round moves the lake's LSN past eviction's transactions.
            cur.execute("SET synchronous_commit = on")
        except Exception as exc:
            raise SourceError(
                f"{self.display_name}: cannot set replication origin {origin} on eviction's session: {exc}; nothing "
                "was evicted"
            ) from exc
        try:
            yield
        finally:
            try:
                cur.execute("SELECT count(*) FROM pg_replication_origin_session_reset()")
                cur.fetchall()
            except Exception as exc:  # the session runs nothing but eviction's transactions and closes with it
                log.warning("%s: resetting the eviction origin failed: %s", self.display_name, exc)

    def evict_key_batch(
        self,
        key: Sequence[str],
        after: KeyValues | None,
        cutoff: datetime,
        age_column: str,
        limit: int,
        held: HeldRows,
    ) -> KeyBatch:
        field = self._age_field(age_column)
        schema = self.schema()
        columns = ", ".join(self.select_expression(f) for f in schema)
        bindings = self.bindings()
        conditions = [self._age_before(self.quote(field.name), field, cutoff, bindings)]
        key_list = ", ".join(self.quote(column) for column in key)
        if after is not None:
            values = ", ".join(
                f"CAST({bindings.bind(key_text(value))} AS {self.declared_type(column)})"
                for column, value in zip(key, after, strict=True)
            )
            conditions.append(f"({key_list}) > ({values})")
        select = (
            f"SELECT {self._row_id_sql()}, {columns} FROM {self.table_ref} WHERE {' AND '.join(conditions)} "
            f"ORDER BY {key_list} LIMIT {bindings.bind(int(limit))}"
        )
        rows, deleted = self.delete_locked_rows(select, bindings.values, schema, held)
        if rows.num_rows == 0:
            return KeyBatch(0, 0, None)
        last = tuple(rows.column(column)[rows.num_rows - 1].as_py() for column in key)
        return KeyBatch(rows.num_rows, deleted, last)


def key_text(value: Any) -> str:
    """A key value as PostgreSQL's input text of its type (cast on the server)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime, date, dt_time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)
