"""A MariaDB or MySQL table's changes read from the server's row binlog, as the change-stream kernel's messages.

The binlog is read as a replica reads it, through ``mysql-replication`` (``BinLogStreamReader``): from a file and an
offset the lake holds (``resume_stream``; the library ignores a file and offset in its MariaDB GTID mode, so it reads
in file mode, which MariaDB serves too), non-blocking (the server ends the read at the binlog's end), as server id 0
by default (as ``mysqlbinlog`` reads: never registered as a replica, and never disconnecting one that has the same
id). Its events become messages: a GTID event (or MySQL's ``BEGIN``) begins a transaction at its group's start, an
XID event (or a ``COMMIT`` of a non-transactional table, or the end of a DDL's group) commits it, each table map of
the table a Relation (its columns' names from ``binlog_row_metadata = FULL``), each row of its rows events a Change
(row images decoded by ``row_images.py``). A write of the table's row to eviction's marker table marks the
transaction as eviction's (an Origin message): the stream skips it whole, while the server's replicas apply it.

A statement logged as text that changes the table's rows without a row event each (``binlog_statements.py``) stops
the read: a TRUNCATE becomes a Truncate message (the kernel refuses it), a DROP, RENAME TABLE or CREATE OR REPLACE
raises :class:`HotTableReplaced`, a DML statement logged by a session whose ``binlog_format`` is not ROW raises
:class:`ChangeStreamUnavailable`. So does a position the server no longer holds (purged), with what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
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
)
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, describe, pack, unpack
from airflow_provider_tiering.sources.mysql.binlog_statements import Effect, effect_on
from airflow_provider_tiering.sources.mysql.row_images import RowImages

log = logging.getLogger(__name__)

#: The origin eviction's transactions carry in the stream: skipped whole.
EVICTION_ORIGIN = "airflow_provider_tiering_eviction"
#: MariaDB's GTID event flag of a group that is one statement without a transaction (DDL): its query ends it.
_STANDALONE = 1
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
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from airflow_provider_tiering.sources.mysql.connections import connect

    number, offset = unpack(start)
    reader = BinLogStreamReader(
        connection_settings=settings.connection(),
        server_id=settings.server_id,
        log_file=files.name(number),
        log_pos=offset,
        resume_stream=True,
        blocking=False,
        only_schemas=[settings.database],
        only_tables=[settings.table, settings.marker_table],
        only_events=[
            MariadbGtidEvent,
            GtidEvent,
            QueryEvent,
            XidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        enable_logging=False,
        pymysql_wrapper=connect,
        # A table map is parsed once per table id, not before each rows event (most of the library's time in a
        # stream of small transactions); a file, or a statement, that may give an id another table is forgotten.
        freeze_schema=True,
    )
    table = _TableEvents(settings, old_key)
    reached = start
    file, in_file = None, 0
    try:
        for event in reader:
            if reader.log_file != file:  # a restart reuses table ids, and may leave no rotate event behind
                file, in_file = reader.log_file, pack(str(reader.log_file), 0)
                table.forget(reader)
            packet = event.packet
            at, reached = in_file | (packet.log_pos - packet.event_size), in_file | packet.log_pos
            if isinstance(event, (MariadbGtidEvent, GtidEvent)):
                yield table.begin(
                    at, standalone=isinstance(event, MariadbGtidEvent) and bool(event.flags & _STANDALONE)
                )
            elif isinstance(event, XidEvent):
                yield table.commit(reached)
            elif isinstance(event, QueryEvent):
                yield from table.statement(event, at, reached, files, reader)
            elif event.schema == settings.database:
                yield from table.rows(event)
    except pymysql.MySQLError as exc:
        raise _read_failed(settings, exc, start, files) from exc
    finally:
        reader.close()
    if end is not None and reached < end:
        raise SourceError(
            f"{settings.display_name}: the binlog read ended at {describe(reached, files)}, before "
            f"{describe(end, files)} (the server ended it early); the round is retried from the lake's position"
        )


class _TableEvents:
    """One read's state: the transaction it is in, and the table maps of the table it has described."""

    def __init__(self, settings: BinlogSettings, old_key: tuple[str, ...] | None) -> None:
        self.settings = settings
        self.old_key = old_key
        self.begun: Begin | None = None
        self.standalone = False
        #: table id -> (the table map's columns its images were described by, their names, their decoder).
        self.described: dict[int, tuple[list[Any], tuple[str, ...], RowImages]] = {}

    def begin(self, at: int, *, standalone: bool) -> Begin:
        self.begun, self.standalone = Begin(at), standalone
        return self.begun

    def commit(self, end: int) -> Commit:
        begun = self.begun
        self.begun, self.standalone = None, False
        return Commit(begun.commit_at if begun is not None else end, end)

    def forget(self, reader: Any) -> None:
        """Forget the tables described so far: their ids may name other tables, or other columns, from here on."""
        reader.table_map.clear()  # the reader's parsed table maps, by id (read before each event it parses)
        self.described.clear()

    def statement(
        self, event: Any, at: int, end: int, files: BinlogFiles, reader: Any
    ) -> Generator[Message, None, None]:
        query = str(event.query).strip()
        keyword = query[:6].upper()
        if keyword == "BEGIN" or query.upper() == "BEGIN":
            if self.begun is None:  # MySQL without GTIDs: the transaction starts here
                yield self.begin(at, standalone=False)
            return
        if query.upper() == "COMMIT":  # a non-transactional table's statement group
            yield self.commit(end)
            return
        self.forget(reader)  # a statement (DDL) may change any table's columns under the same id
        schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
        effect = effect_on(query, schema, self.settings.database, self.settings.table)
        if self.begun is None:  # a statement outside a group (an older server): one of its own
            yield self.begin(at, standalone=True)
        if effect is Effect.TRUNCATED:
            yield Truncate((0,))
        elif effect is Effect.REPLACED:
            raise HotTableReplaced(
                f"{self.settings.display_name} was dropped, renamed away, swapped with another table or created anew "
                f"(at {describe(at, files)} of the binlog: {query[:200]!r}): the rows under its name are not the ones "
                "the lake holds, and the binlog carries no delete for those it lost. Ways out: drop the lake table "
                "and reset the table to load it again; or keep the lake's rows as history and tier the table as it "
                "is now from its start: airflow tiering reset <table> --adopt-hot-table. Nothing was tiered"
            )
        elif effect is Effect.STATEMENT:
            raise ChangeStreamUnavailable(
                f"{self.settings.display_name} was changed by a statement logged as text (at {describe(at, files)}: "
                f"{query[:200]!r}): its session ran with binlog_format other than ROW, and a change stream reads rows. "
                "Set binlog_format = ROW for every session (it is a session setting too), then load the table again "
                "(drop the lake table, then reset the table). Nothing was tiered"
            )
        if self.standalone:
            yield self.commit(end)

    def rows(self, event: Any) -> Generator[Message, None, None]:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        settings = self.settings
        described = self.described.get(event.table_id)
        if described is None or described[0] is not event.columns:  # its table map was parsed anew
            names = tuple(str(c.name) for c in event.columns)
            old_key = self.old_key if event.table == settings.table else None
            described = (event.columns, names, RowImages(event.columns, settings.display_name, old_key))
            self.described[event.table_id] = described
            if event.table == settings.table:
                yield Relation(event.table_id, names, tuple(int(c.type) for c in event.columns))
        names, images = described[1], described[2]
        body = event.packet.read(event.event_size - event.packet.read_bytes)
        update = isinstance(event, UpdateRowsEvent)
        deleted = isinstance(event, DeleteRowsEvent)
        present = event.columns_present_bitmap
        rows = images.rows(body, present, event.columns_present_bitmap2 if update else None, old=deleted)
        if event.table == settings.marker_table:  # eviction marks its transactions by writing the table's row
            at = names.index("table_name") if "table_name" in names else None
            written = [after for _, after in rows] if update else [] if deleted else rows
            if at is not None and any(row[at] == settings.table for row in written):
                yield Origin(EVICTION_ORIGIN)
            return
        relation, whole = event.table_id, images.old_is_row
        if update:
            for before, after in rows:
                yield Change("U", relation, new=after, old=before, old_is_row=whole)
        elif deleted:
            for row in rows:
                yield Change("D", relation, old=row, old_is_row=whole)
        else:
            for row in rows:
                yield Change("I", relation, new=row)


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
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import QueryEvent

    from airflow_provider_tiering.sources.mysql.connections import connect

    number, offset = unpack(start)
    reader = BinLogStreamReader(
        connection_settings=settings.connection(), server_id=settings.server_id, log_file=files.name(number),
        log_pos=offset, resume_stream=True, blocking=False, only_events=[QueryEvent], enable_logging=False,
        pymysql_wrapper=connect,
    )  # fmt: skip
    found: list[str] = []
    try:
        for event in reader:
            schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
            query = str(event.query)
            if effect_on(query, schema, settings.database, settings.table) is Effect.ALTERED:
                found.append(query)
    except pymysql.MySQLError as exc:
        raise _read_failed(settings, exc, start, files) from exc
    finally:
        reader.close()
    return found
