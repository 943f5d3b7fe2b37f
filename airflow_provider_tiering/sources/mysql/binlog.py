"""A MariaDB or MySQL table's changes read from the server's row binlog, as the change-stream kernel's messages.

The binlog is dumped as a replica reads it (``binlog_events.py``): from a file and an offset the lake holds,
non-blocking (the server ends the read at the binlog's end), as server id 0 by default (as ``mysqlbinlog`` reads:
never registered as a replica, and never disconnecting one that has the same id). Its events become messages: a GTID
event (or MySQL's ``BEGIN``) begins a transaction at its group's start, an XID event (or a ``COMMIT`` of a
non-transactional table, or the end of a DDL's group) commits it, each table map of the table a Relation (its
columns' names from ``binlog_row_metadata = FULL``), each row of its rows events a Change (row images decoded by
``row_images.py``). A table map is parsed once for the same bytes, a table's rows decoded by one compiled decoder per
table map. A write of the table's row to eviction's marker table marks the transaction as eviction's (an Origin
message): the stream skips it whole, while the server's replicas apply it.

A statement logged as text that changes the table's rows without a row event each (``binlog_statements.py``) stops
the read: a TRUNCATE becomes a Truncate message (the kernel refuses it), a DROP, RENAME TABLE or CREATE OR REPLACE
raises :class:`HotTableReplaced`, a DML statement logged by a session whose ``binlog_format`` is not ROW raises
:class:`ChangeStreamUnavailable`. So does a position the server no longer holds (purged), with what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, HotTableReplaced, SourceError
from airflow_provider_tiering.sources.change_stream.messages import (
    Begin,
    Change,
    Commit,
    Message,
    Origin,
    Relation,
    Truncate,
    Unreadable,
)
from airflow_provider_tiering.sources.mysql import binlog_events as events
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, describe, pack, unpack
from airflow_provider_tiering.sources.mysql.binlog_statements import Effect, effect_on
from airflow_provider_tiering.sources.mysql.row_images import RowImages

log = logging.getLogger(__name__)

#: The origin eviction's transactions carry in the stream: skipped whole.
EVICTION_ORIGIN = "airflow_provider_tiering_eviction"
#: Error codes the server answers a binlog read with: a position it does not hold (purged, or not a position), a
#: missing privilege, another reader with the same server id.
_NOT_HELD, _DENIED, _SAME_SERVER_ID = 1236, 1227, 4052


@dataclass(frozen=True)
class BinlogSettings:
    """Where and how a table's binlog is read (picklable: Spark tasks read the binlog too)."""

    host: str
    port: int
    user: str | None
    password: str | None
    server_id: int
    database: str
    table: str
    marker_table: str
    display_name: str
    connect_timeout: int = 10
    #: A read that hears nothing from the server for this long fails (the server ends a non-blocking read itself).
    read_timeout: int = 600
    #: A stream group's read: the tables (database, table) whose changes it hands on (``table``'s alone when empty).
    #: A statement that changes one of them without row events becomes an :class:`Unreadable` message, not an error.
    group: frozenset[tuple[str, str]] = frozenset()

    def reads(self, schema: str, table: str) -> bool:
        """Whether the read hands on ``schema.table``'s changes."""
        if self.group:
            return (schema, table) in self.group
        return schema == self.database and table == self.table

    def connection(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password or "",
            "charset": "utf8mb4",
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
        }


def binlog_messages(
    settings: BinlogSettings, start: int, end: int | None, files: BinlogFiles, old_key: tuple[str, ...] | None = None
) -> Generator[Message, None, None]:
    """The table's messages from ``start`` (a transaction boundary: the lake's position, or a snapshot's) up to the
    binlog's end, or until the caller stops at a Begin at or past ``end``; the read is closed when the generator is.
    An update's or a delete's old row comes whole, or, with ``old_key``, these columns of it only (the others None).

    Raises:
        ChangeStreamUnavailable: the server no longer holds ``start`` (purged), or refuses the read (a privilege, a
            server id in use), or a statement the stream cannot apply changed the table.
        HotTableReplaced: the table was dropped, renamed away, swapped or created anew.
        SourceError: the read failed otherwise, or ended before ``end``.
    """
    import pymysql

    table = _TableEvents(settings, old_key)
    reached = start
    try:
        with closing(_dump(settings, start, files)) as dump:
            table.encodings, table.mariadb = dump.encodings, dump.mariadb
            for kind, file, at_offset, end_offset, data in dump:
                if file != table.file:
                    table.file, table.in_file = file, pack(file, 0)
                at, reached = table.in_file | at_offset, table.in_file | end_offset
                if kind in events.ROWS:
                    yield from table.rows(kind, data)
                elif kind == events.TABLE_MAP:
                    yield from table.table_map(data)
                elif kind == events.MARIADB_GTID:
                    yield table.begin(at, standalone=events.gtid_standalone(data))
                elif kind == events.MYSQL_GTID:
                    yield table.begin(at, standalone=False)
                elif kind == events.XID:
                    yield table.commit(reached)
                elif kind == events.QUERY:
                    yield from table.statement(data, at, reached, files)
    except pymysql.MySQLError as exc:
        raise _read_failed(settings, exc, start, files) from exc
    if end is not None and reached < end:
        raise SourceError(
            f"{settings.display_name}: the binlog read ended at {describe(reached, files)}, before "
            f"{describe(end, files)} (the server ended it early); the round is retried from the lake's position"
        )


class _TableEvents:
    """One read's state: the file it is in, the transaction it is in, and the tables its table maps described."""

    def __init__(self, settings: BinlogSettings, old_key: tuple[str, ...] | None) -> None:
        self.settings = settings
        self.old_key = old_key
        self.file: str | None = None
        self.in_file = 0
        self.encodings: dict[int, str] = {}
        self.mariadb = True
        self.begun: Begin | None = None
        self.standalone = False
        #: table id -> the table's database and name, its columns' names and its images' decoder: a table read's, or
        #: the marker table's (absent: another table's, whose rows are passed over).
        self.described: dict[int, tuple[tuple[str, str], tuple[str, ...], RowImages]] = {}
        #: A table map's bytes -> what they described (a table map comes before each rows event, most alike).
        self._seen: dict[bytes, tuple[tuple[str, str], tuple[str, ...], RowImages] | None] = {}
        #: The ids a group's read gives the tables a statement truncates (negative: no table map has them).
        self._statement_ids: dict[tuple[str, str], int] = {}

    def begin(self, at: int, *, standalone: bool) -> Begin:
        self.begun, self.standalone = Begin(at), standalone
        return self.begun

    def commit(self, end: int) -> Commit:
        begun = self.begun
        self.begun, self.standalone = None, False
        return Commit(begun.commit_at if begun is not None else end, end)

    def table_map(self, data: bytes) -> Generator[Message, None, None]:
        """A table map: the table's (a Relation when it describes the table anew) or the marker table's kept by its
        id; any other table's id forgotten."""
        key = events.body(data)
        number = events.table_id(data)
        if key in self._seen:
            described = self._seen[key]
        else:
            described = self._describe(events.table_map(data, self.encodings, self.mariadb))
            if len(self._seen) > 1000:  # a long read over many table definitions: keep the recent ones
                self._seen.clear()
            self._seen[key] = described
        if described is None:
            self.described.pop(number, None)
            return
        (schema, table), names, images = described
        if self.described.get(number) is not described and self.settings.reads(schema, table):
            yield Relation(number, names, images.type_ids, schema, table)
        self.described[number] = described

    def _describe(self, mapped: events.TableMap) -> tuple[tuple[str, str], tuple[str, ...], RowImages] | None:
        settings = self.settings
        read = settings.reads(mapped.schema, mapped.table)
        marker = not settings.group and mapped.schema == settings.database and mapped.table == settings.marker_table
        if not read and not marker:
            return None
        old_key = self.old_key if read else None
        images = RowImages(mapped.columns, settings.display_name, old_key)
        return (mapped.schema, mapped.table), images.names, images

    def statement(self, data: bytes, at: int, end: int, files: BinlogFiles) -> Generator[Message, None, None]:
        schema, query = events.query(data)
        query = query.strip()
        keyword = query[:6].upper()
        if keyword == "BEGIN" or query.upper() == "BEGIN":
            if self.begun is None:  # MySQL without GTIDs: the transaction starts here
                yield self.begin(at, standalone=False)
            return
        if query.upper() == "COMMIT":  # a non-transactional table's statement group
            yield self.commit(end)
            return
        if self.settings.group:
            yield from self._group_statement(query, schema, at, end, files)
            return
        effect = effect_on(query, schema, self.settings.database, self.settings.table)
        if self.begun is None:  # a statement outside a group (an older server): one of its own
            yield self.begin(at, standalone=True)
        if effect is Effect.TRUNCATED:
            yield Truncate((0,))
        elif effect is Effect.REPLACED:
            raise HotTableReplaced(replaced_reason(self.settings.display_name, query, describe(at, files)))
        elif effect is Effect.STATEMENT:
            raise ChangeStreamUnavailable(statement_reason(self.settings.display_name, query, describe(at, files)))
        if self.standalone:
            yield self.commit(end)

    def _group_statement(
        self, query: str, schema: str, at: int, end: int, files: BinlogFiles
    ) -> Generator[Message, None, None]:
        """A statement of a group's read: for each table it truncates, a Truncate; for each it replaced or changed
        by statement, an Unreadable message (the table's task fails there; the others go on)."""
        found = []
        for database, table in sorted(self.settings.group):
            effect = effect_on(query, schema, database, table)
            if effect in (Effect.TRUNCATED, Effect.REPLACED, Effect.STATEMENT):
                found.append((database, table, effect))
        if not found:
            return
        if self.begun is None:  # a statement outside a group (an older server): one of its own
            yield self.begin(at, standalone=True)
        where = describe(at, files)
        for database, table, effect in found:
            name = f"table {database}.{table}"
            if effect is Effect.TRUNCATED:
                number = self._statement_ids.setdefault((database, table), -1 - len(self._statement_ids))
                yield Relation(number, (), (), database, table)
                yield Truncate((number,))
            elif effect is Effect.REPLACED:
                yield Unreadable(database, table, True, replaced_reason(name, query, where))
            else:
                yield Unreadable(database, table, False, statement_reason(name, query, where))
        if self.standalone:
            yield self.commit(end)

    def rows(self, kind: int, data: bytes) -> Generator[Message, None, None]:
        relation = events.table_id(data)
        described = self.described.get(relation)
        if described is None:  # another table's
            return
        (_, table), names, images = described
        found = events.rows(data, kind)
        update, deleted = kind in events.UPDATES, kind in events.DELETES
        rows = images.rows(found.body, found.present, found.present_after, old=deleted)
        settings = self.settings
        if not settings.group and table == settings.marker_table:  # eviction marks its transactions by its row
            at = names.index("table_name") if "table_name" in names else None
            written = [after for _, after in rows] if update else [] if deleted else rows
            if at is not None and any(row[at] == settings.table for row in written):
                yield Origin(EVICTION_ORIGIN)
            return
        whole = images.old_is_row
        if update:
            for before, after in rows:
                yield Change("U", relation, new=after, old=before, old_is_row=whole)
        elif deleted:
            for row in rows:
                yield Change("D", relation, old=row, old_is_row=whole)
        else:
            for row in rows:
                yield Change("I", relation, new=row)


def replaced_reason(table: str, query: str, where: str) -> str:
    """Why a table's stream stops at a statement that dropped, renamed away, swapped or re-created it."""
    return (
        f"{table} was dropped, renamed away, swapped with another table or created anew (at {where} of the binlog: "
        f"{query[:200]!r}): the rows under its name are not the ones the lake holds, and the binlog carries no delete "
        "for those it lost. Ways out: drop the lake table and reset the table to load it again; or keep the lake's "
        "rows as history and tier the table as it is now from its start: airflow tiering reset <table> "
        "--adopt-hot-table. Nothing was tiered"
    )


def statement_reason(table: str, query: str, where: str) -> str:
    """Why a table's stream stops at its rows changed by a statement logged as text."""
    return (
        f"{table} was changed by a statement logged as text (at {where}: {query[:200]!r}): its session ran with "
        "binlog_format other than ROW, and a change stream reads rows. Set binlog_format = ROW for every session (it "
        "is a session setting too), then load the table again (drop the lake table, then reset the table). Nothing "
        "was tiered"
    )


def _dump(settings: BinlogSettings, start: int, files: BinlogFiles) -> events.BinlogDump:
    from airflow_provider_tiering.sources.mysql.connections import connect

    number, offset = unpack(start)
    connection = connect(**settings.connection())
    try:
        return events.BinlogDump(connection, settings.server_id, files.name(number), offset, settings.display_name)
    except BaseException:
        connection.close()
        raise


def _read_failed(settings: BinlogSettings, exc: Exception, start: int, files: BinlogFiles) -> SourceError:
    code = exc.args[0] if exc.args else None
    where = describe(start, files)
    if code == _NOT_HELD:
        return ChangeStreamUnavailable(
            f"{settings.display_name}: the server no longer holds the binlog from the lake's position {where} "
            f"({exc.args[1] if len(exc.args) > 1 else exc}): it was purged (PURGE BINARY LOGS, binlog_expire_logs_"
            "seconds or expire_logs_days) before the lake got its changes, which can no longer be read. Load the "
            "table again: drop the lake table, then reset the table (the next round takes a new snapshot); and keep "
            "the binlog longer than the table's rounds may fall behind. Nothing was tiered"
        )
    if code == _DENIED:
        return ChangeStreamUnavailable(
            f"{settings.display_name}: the server refused to send its binlog ({exc}): the connection's user needs "
            "GRANT REPLICATION SLAVE ON *.* (MariaDB 10.5+ also names it REPLICATION REPLICA). Nothing was tiered"
        )
    if code == _SAME_SERVER_ID:
        return ChangeStreamUnavailable(
            f"{settings.display_name}: another reader of the binlog took over server id {settings.server_id} ({exc}): "
            "give the table a server_id no replica and no other table uses, or 0 (the default: never registered, "
            "never clashing). Nothing was tiered"
        )
    return SourceError(f"{settings.display_name}: reading the binlog from {where} failed: {exc}")


def altering_statements(settings: BinlogSettings, start: int, files: BinlogFiles) -> list[str]:
    """The ALTER TABLE statements of the table logged after ``start``, in order (what changed its columns without a
    row event each: an instant ADD's default, a changed default)."""
    import pymysql

    found: list[str] = []
    try:
        with closing(_dump(settings, start, files)) as dump:
            for kind, _, _, _, data in dump:
                if kind == events.QUERY:
                    schema, query = events.query(data)
                    if effect_on(query, schema, settings.database, settings.table) is Effect.ALTERED:
                        found.append(query)
    except pymysql.MySQLError as exc:
        raise _read_failed(settings, exc, start, files) from exc
    return found
