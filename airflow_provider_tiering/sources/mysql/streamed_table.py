"""The table behind a MariaDB or MySQL change stream, as a bulk reader sees it: a MariaDB/MySQL table without a
cursor (``table.py``), its key (the primary key, else a unique key of NOT NULL columns, as InnoDB clusters by), and
its eviction, walked in key order in transactions that first write the table's row in eviction's marker table, so
the binlog carries the deletes to the server's replicas while the change stream skips them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.ports import HeldRows, KeyBatch
from airflow_provider_tiering.core.source_specs import MySqlCdcSourceSpec
from airflow_provider_tiering.sources.mysql.table import ACCESS_DENIED, MySqlTable, rows_batch


class MySqlStreamedTable(MySqlTable):
    """A MariaDB or MySQL table tiered from its binlog (see the module's description)."""

    spec: MySqlCdcSourceSpec

    def __init__(self, spec: MySqlCdcSourceSpec, connection: ConnectionInfo) -> None:
        super().__init__(spec, connection)
        self.display_name = f"mysql table {self.database}.{spec.table} (binlog)"
        self._unique_keys: list[tuple[str, tuple[str, ...], bool]] | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._unique_keys = None

    def schema(self) -> pa.Schema:
        """The tiered columns in table order (the lake table's order, whatever order the spec names them in)."""
        if self._schema is None:
            found = self._load_schema()
            missing = [c for c in self.spec.columns or () if c not in found.names]
            if missing:
                raise SourceError(f"{self.display_name}: column(s) {', '.join(missing)} not found")
            self._schema = found
        return self._schema

    def unique_keys(self) -> list[tuple[str, tuple[str, ...], bool]]:
        """The table's unique indexes: ``(name, columns in order, whether every column is NOT NULL)``, the primary key
        first."""
        if self._unique_keys is None:
            rows = self._query(
                "SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE FROM information_schema.STATISTICS s "
                "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA "
                "AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME "
                "WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0 "
                "ORDER BY s.INDEX_NAME <> 'PRIMARY', s.INDEX_NAME, s.SEQ_IN_INDEX",
                (self.database, self.spec.table),
            )
            keys: dict[str, tuple[list[str], bool]] = {}
            for index, column, nullable in rows:
                columns, not_null = keys.setdefault(str(index), ([], True))
                columns.append(str(column))
                keys[str(index)] = (columns, not_null and nullable != "YES")
            self._unique_keys = [(name, tuple(columns), not_null) for name, (columns, not_null) in keys.items()]
        return self._unique_keys

    def primary_key(self) -> tuple[str, ...]:
        """The primary key, else the first unique key of NOT NULL columns (InnoDB's clustered index); () when the
        table has neither."""
        for _, columns, not_null in self.unique_keys():
            if not_null:
                return columns
        return ()

    def column_values(self, columns: Sequence[str]) -> pa.Table:
        """``columns`` of every row of the table, in one snapshot."""
        from airflow_provider_tiering.sources.conform import conform_batch

        schema = pa.schema([self.schema().field(c) for c in columns])
        select = ", ".join(self.select_expression(f) for f in schema)
        with self._snapshot() as run:
            batches = [conform_batch(b, schema) for b in run(f"SELECT {select} FROM {self.table_ref}", (), schema)]
        return pa.Table.from_batches(batches, schema=schema)

    def column_default(self, column: str) -> tuple[str | None, bool]:
        """A column's default as ``information_schema`` prints it (``7``, ``'text'``, ``NULL``, an expression such as
        ``current_timestamp()``; None: none), and whether the column takes NULL."""
        rows = self._query(
            "SELECT COLUMN_DEFAULT, IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND COLUMN_NAME = %s",
            (self.database, self.spec.table, column),
        )
        if not rows:
            raise SourceError(f"{self.display_name}: column {column!r} not found")
        default, nullable = rows[0]
        return (None if default is None else str(default)), nullable == "YES"

    def default_value(self, column: str) -> Any:
        """A column's constant default, as the lake's type reads it (the server evaluates it: ``DEFAULT(column)``)."""
        from airflow_provider_tiering.sources.sql_table import first_value

        field = self.schema().field(column)
        ref = self.quote(column)
        evaluated = f"SELECT DEFAULT({ref}) AS {ref} FROM {self.table_ref} LIMIT 1"
        select = f"SELECT {self.select_expression(field)} FROM ({evaluated}) d"
        with self._snapshot() as run:
            batches = list(run(select, (), pa.schema([field])))
        return first_value(batches, field)

    def rows_rewritten(self, horizon: str, tiered: object) -> bool | None:
        return None  # MariaDB and MySQL keep no write time per row

    # -- eviction ------------------------------------------------------------------------------
    @property
    def marker_ref(self) -> str:
        return f"{self.quote(self.database)}.{self.quote(self.spec.eviction_marker_table)}"

    def ensure_marker_table(self) -> None:
        """Eviction's marker table, created when missing (one row per evicted table, written first by each of its
        transactions).

        Raises:
            SourceError: it is missing and the user may not create it (the statement to have it created is named).
        """
        import pymysql

        ddl = (
            f"CREATE TABLE IF NOT EXISTS {self.marker_ref} (table_name VARCHAR(64) NOT NULL PRIMARY KEY, "
            "batches BIGINT NOT NULL, last_evicted_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
        )
        try:
            self._query(ddl)
        except SourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, pymysql.MySQLError) and cause.args[:1] and cause.args[0] in ACCESS_DENIED:
                raise SourceError(
                    f"{self.display_name}: eviction writes each of its transactions' first row into "
                    f"{self.marker_ref}, so that the binlog's change stream skips its deletes while the replicas apply "
                    f"them; the table is missing and this user may not create it: have it created with {ddl}, and "
                    "GRANT INSERT, UPDATE on it. Nothing was evicted"
                ) from exc
            raise

    def evict_key_batch(
        self,
        key: Sequence[str],
        after: tuple[object, ...] | None,
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
            values = ", ".join(bindings.bind(value) for value in after)
            conditions.append(f"({key_list}) > ({values})")
        select = (
            f"SELECT {columns} FROM {self.table_ref} WHERE "
            f"{' AND '.join(conditions)} ORDER BY {key_list} LIMIT {bindings.bind(int(limit))} FOR UPDATE"
        )
        rows, deleted = self._delete_held(select, bindings.values, schema, key, held)
        if rows.num_rows == 0:
            return KeyBatch(0, 0, None)
        last = tuple(rows.column(column)[rows.num_rows - 1].as_py() for column in key)
        return KeyBatch(rows.num_rows, deleted, last)

    def _delete_held(
        self, select: str, params: Sequence[Any], schema: pa.Schema, key: Sequence[str], held: HeldRows
    ) -> tuple[pa.Table, int]:
        """In one transaction: the rows of ``select`` locked against change, handed to ``held`` (which rows the lake
        holds as they are), then the marker row and exactly those rows deleted by key."""
        import pymysql

        conn = self._evict_conn or self._connect()
        try:
            cur = conn.cursor()
            try:
                conn.begin()
                cur.execute(select, tuple(params))
                found = list(cur.fetchall())
            except pymysql.MySQLError as exc:
                conn.rollback()
                raise SourceError(f"{self.display_name}: reading rows to evict failed: {exc}") from exc
            rows = pa.Table.from_batches([rows_batch(found, schema)], schema=schema)
            at = [schema.names.index(column) for column in key]  # the key is tiered: its values as the server gave them
            try:
                chosen = [tuple(r[i] for i in at) for r, keep in zip(found, held(rows), strict=True) if keep]
                if chosen:
                    # The transaction's first change in the binlog (the locking read logs nothing): the stream knows
                    # the transaction for eviction's before it meets any of its deletes. A batch that deletes
                    # nothing writes nothing, so rounds with nothing to evict leave the binlog alone.
                    cur.execute(
                        f"INSERT INTO {self.marker_ref} (table_name, batches, last_evicted_at) VALUES (%s, 1, NOW(6)) "
                        "ON DUPLICATE KEY UPDATE batches = batches + 1, last_evicted_at = NOW(6)",
                        (self.spec.table,),
                    )
                    placeholders = ", ".join("(" + ", ".join(["%s"] * len(key)) + ")" for _ in chosen)
                    columns = ", ".join(self.quote(c) for c in key)
                    cur.execute(
                        f"DELETE FROM {self.table_ref} WHERE ({columns}) IN ({placeholders})",
                        [value for row_key in chosen for value in row_key],
                    )
                    if cur.rowcount != len(chosen):
                        raise SourceError(
                            f"{self.display_name}: an evicted batch matched {cur.rowcount} rows by key, not "
                            f"{len(chosen)}; nothing of it was evicted"
                        )
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            return rows, len(chosen)
        finally:
            if conn is not self._evict_conn:
                conn.close()
