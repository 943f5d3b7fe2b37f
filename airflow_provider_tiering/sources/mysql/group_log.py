"""A MariaDB stream group's log: one binlog dump, from the change log's position to the binlog's end, decoded for
every table of the group at once (``binlog.py`` with ``BinlogSettings.group``), instead of one dump per table, each
reading the whole binlog.

A table joins at the position the run reading it starts from: the dump hands on its changes from there. Nothing on the
server follows the change log (the server keeps its binlog by its own rules: ``binlog_expire_logs_seconds``), so a run
that finds the log's position purged fails, asking for the group to start again. A statement logged as text that
replaced one of the tables, or changed its rows without row events, is written to the change log for that table alone
(its task fails there, its siblings go on); a TRUNCATE as the table's truncate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ConnectionNotUsable, SourceError
from airflow_provider_tiering.core.offsets import BinlogOffsets, Offsets, SafeEnd, binlog_offsets
from airflow_provider_tiering.core.source_specs import ChangeStreamSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_reader import GroupLog
from airflow_provider_tiering.sources.change_stream.messages import Message, Relation
from airflow_provider_tiering.sources.change_stream.source import IDLE_ADVANCE_BYTES, closing_messages
from airflow_provider_tiering.sources.mysql.binlog import BinlogSettings, binlog_messages
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, describe, log_bytes, pack, unpack
from airflow_provider_tiering.sources.mysql.binlog_server import BinlogEnd, BinlogServer
from airflow_provider_tiering.sources.mysql.table import session_connect


class MySqlGroupLog(GroupLog):
    """A stream group's binlog dump on its MariaDB server (see the module's description)."""

    def __init__(self, group: StreamGroupSpec, connection: ConnectionInfo) -> None:
        super().__init__()
        if not connection.schema:
            raise ConnectionNotUsable(
                f"connection {connection.describe()}: a mysql connection needs the database as its schema"
            )
        self.group = group
        self.connection = connection
        self.database = connection.schema
        self.display_name = f"mysql stream group {group.name}"
        self.server = BinlogServer(self.display_name, self.database, "", group.server_id)
        self._settings = BinlogSettings(
            connection.host or "localhost", connection.port or 3306, connection.login, connection.password,
            group.server_id, self.database, "", "", self.display_name,
        )  # fmt: skip
        self._files: BinlogFiles | None = None
        self._end: BinlogEnd | None = None
        #: The change log's position as this run knows it (for the status).
        self._at: int | None = None
        self._keys: dict[str, tuple[str, ...]] = {}
        #: The tables the read in progress hands on.
        self._tables: frozenset[str] = frozenset()

    def table_name(self, source: ChangeStreamSpec) -> str:
        return f"{source.db_schema or self.database}.{source.table}"

    def _connect(self) -> Any:
        return session_connect(self.connection, self.database, self.display_name)

    def _read_end(self, conn: Any) -> BinlogEnd:
        self._end = self.server.end(conn)
        self._files = self._end.files
        return self._end

    # -- the server ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._connection() as conn:
            self.server.check(conn, None)

    def start(self) -> int:
        with self._connection() as conn:
            return self._read_end(conn).position

    def held_from(self, position: int) -> None:
        with self._connection() as conn:
            end = self._read_end(conn)
        self.server.held_from(end, position, describe(position, end.files))
        self._at = position

    def end(self) -> tuple[int, int | None]:
        with self._connection() as conn:
            position = self._read_end(conn).position
        return position, position

    def messages(
        self, start: int, end: int | None, tables: Sequence[str], budget: int | None = None
    ) -> AbstractContextManager[Iterator[Message]]:
        group = frozenset(tuple(t.split(".", 1)) for t in tables)
        settings = BinlogSettings(**{**self._settings.__dict__, "group": group})
        self._keys, self._tables = self._primary_keys(tables), frozenset(tables)
        # Whole old rows: each table's merge key is its own (a declared one may not be its primary key).
        return closing_messages(binlog_messages(settings, start, end, self._names()))

    def release(self, position: int) -> None:
        self._at = position  # the server keeps its binlog by its own rules: nothing to move

    # -- the group's tables ----------------------------------------------------------------------------
    def join(self, tables: Sequence[str], position: int, members: Sequence[str]) -> Mapping[str, int | str]:
        keys = self._primary_keys(tables)
        found: dict[str, int | str] = {}
        with self._connection() as conn, conn.cursor() as cur:
            for table in tables:
                database, name = table.split(".", 1)
                cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (database, name),
                )
                if cur.fetchone() is None:
                    found[table] = f"not joined: {table} does not exist (or the user may not see it)"
                elif not keys.get(table):
                    found[table] = (
                        f"not joined: {table} has no primary key nor a unique key of NOT NULL columns: its changes "
                        "could not be told apart by key (ALTER TABLE ... ADD PRIMARY KEY (...))"
                    )
                else:
                    found[table] = position  # the dump from this run's start hands its changes on
        return found

    def leave(self, tables: Sequence[str], members: Sequence[str]) -> None:
        return None  # nothing of the server's: the dump no longer hands them on

    def _primary_keys(self, tables: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Each table's primary key, else its first unique key of NOT NULL columns (the log's ``key``)."""
        if not tables:
            return {}
        found: dict[str, tuple[str, ...]] = {}
        wanted = {tuple(t.split(".", 1)) for t in tables}
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT s.TABLE_SCHEMA, s.TABLE_NAME, s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE "
                "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
                "ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME "
                "WHERE s.NON_UNIQUE = 0 AND s.TABLE_SCHEMA IN %s "
                "ORDER BY s.TABLE_SCHEMA, s.TABLE_NAME, s.INDEX_NAME <> 'PRIMARY', s.INDEX_NAME, s.SEQ_IN_INDEX",
                (sorted({d for d, _ in wanted}),),
            )
            indexes: dict[tuple[str, str, str], tuple[list[str], bool]] = {}
            for database, name, index, column, nullable in cur.fetchall():
                if (database, name) not in wanted:
                    continue
                columns, not_null = indexes.setdefault((database, name, index), ([], True))
                columns.append(str(column))
                indexes[(database, name, index)] = (columns, not_null and nullable != "YES")
        for (database, name, _), (columns, not_null) in indexes.items():
            table = f"{database}.{name}"
            if not_null and table not in found:
                found[table] = tuple(columns)
        return found

    # -- positions and relations -----------------------------------------------------------------------
    def table_of(self, relation: Relation) -> str | None:
        name = f"{relation.namespace}.{relation.name}"
        return name if name in self._tables else None

    def key_of(self, table: str, relation: Relation) -> Sequence[str]:
        return self._keys.get(table, ())

    def _names(self) -> BinlogFiles:
        if self._files is None:
            raise SourceError(f"{self.display_name}: the binlog's file names are not known yet")
        return self._files

    def offsets(self, position: int) -> Offsets:
        number, offset = unpack(position)
        file = self._names().name(number)
        with self._connection() as conn:
            gtid = self.server.gtid_at(conn, file, offset)
        found: BinlogOffsets = {"binlog_file": file, "binlog_pos": offset, "gtid": gtid}
        return found

    def position(self, offsets: SafeEnd) -> int:
        found = binlog_offsets(offsets)
        self._files = self._files or BinlogFiles.of(found["binlog_file"])
        return pack(found["binlog_file"], int(found["binlog_pos"]))

    def describe(self, position: int) -> str:
        return describe(position, self._files)

    def log_bytes(self, start: int, end: int) -> int:
        return log_bytes(start, end, self._end.sizes if self._end is not None else {})

    def idle_advance_bytes(self) -> int:
        return IDLE_ADVANCE_BYTES

    def status(self) -> JsonObject:
        """The binlog the change log still needs (from its position to the end), the oldest file and the expiry."""
        found: JsonObject = {"server_id": self.group.server_id}
        end, at = self._end, self._at
        if end is not None:
            number, offset = unpack(end.position)
            oldest = min(end.sizes, default=None)
            found.update(
                binlog_end=f"{end.files.name(number)}:{offset}",
                oldest_binlog_file=None if oldest is None else end.files.name(oldest),
                binlog_files=len(end.sizes),
            )
            with self._connection() as conn:
                found.update(self.server.expiry(conn))
            if at is not None:
                found["position"] = describe(at, end.files)
                found["log_needed_bytes"] = log_bytes(at, end.position, end.sizes)
        return found
