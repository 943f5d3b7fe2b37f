"""A MariaDB or MySQL server's binlog read as a replica reads it, event by event, over a PyMySQL connection; and the
events a change stream needs parsed from their bytes (ADR 0020).

The read asks the server to dump its binlog from a file and an offset (``COM_BINLOG_DUMP``), non-blocking (the
server ends it at the binlog's end with an EOF packet), as a server id (0 by default: as ``mysqlbinlog`` reads, never
taking a replica's place). Every event is one packet: an OK byte, a 19-byte header (time, type, server id, size, the
end of the event in its file, flags), its body, and its CRC32, checked here. What the stream reads of the bodies:

* a ROTATE names the file the next events are in (the first one, sent before any other, the file asked for);
* a GTID event (MariaDB's, or MySQL's) begins a transaction; MariaDB flags a group that is one statement (DDL);
* a QUERY carries a statement and its default schema (``BEGIN``, ``COMMIT``, DDL, a DML logged as a statement);
* an XID commits a transaction;
* a TABLE_MAP describes a table's columns for the rows events after it (``TableMap``: their types, their metadata,
  and with ``binlog_row_metadata = FULL`` their names, signedness, character sets, ENUM and SET values);
* a WRITE, UPDATE or DELETE rows event (version 1, MariaDB's, or 2, MySQL's) carries rows of one table map, as row
  images ``row_images.py`` decodes.

Compressed events (MariaDB's ``log_bin_compress``, MySQL's ``binlog_transaction_compression``) and MySQL's partial
JSON updates carry rows this module cannot read: a read meeting one fails, rather than miss their rows.

Why not ``mysql-replication``, which reads the same: it parses every event into Python objects, table maps with
their metadata before each rows event, at 23 µs of CPU per one-row transaction against 4.5 µs for reading the
packets (``benchmarks/bench_binlog_decoding.py``). PyMySQL has no public API for a binlog dump: sending the command
and reading its packets uses two of its private methods, here only (``_execute_command``, ``_read_packet``; PyMySQL
pinned below 1.3, contract-tested in ``tests/unit/test_binlog_events.py``).
"""

from __future__ import annotations

import codecs
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable

# Event types (MySQL's and MariaDB's ``Log_event_type``).
QUERY, STOP, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, HEARTBEAT = 2, 3, 4, 15, 16, 19, 27
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
MYSQL_GTID, PARTIAL_UPDATE_ROWS, TRANSACTION_PAYLOAD = 33, 39, 40
MARIADB_GTID = 162
ROWS = frozenset({WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1, WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2})
UPDATES = frozenset({UPDATE_ROWS_V1, UPDATE_ROWS_V2})
DELETES = frozenset({DELETE_ROWS_V1, DELETE_ROWS_V2})
#: Events whose rows this module cannot read: MariaDB's compressed query and rows events, MySQL's compressed
#: transactions and partial JSON updates.
UNREADABLE = {
    **dict.fromkeys(range(165, 172), "a compressed event (MariaDB's log_bin_compress = ON: set it OFF)"),
    TRANSACTION_PAYLOAD: "a compressed transaction (MySQL's binlog_transaction_compression = ON: set it OFF)",
    PARTIAL_UPDATE_ROWS: "a partial JSON update (MySQL's binlog_row_value_options = PARTIAL_JSON: set it to '')",
}

_HEADER = struct.Struct("<IBIIIH")
_UINT32 = struct.Struct("<I")
_HEADER_END = 20  # the OK byte and the 19-byte header
_CHECKSUM = 4
_DUMP_NON_BLOCK = 1
_COM_BINLOG_DUMP = 0x12

# Column types (``enum_field_types``) whose table-map metadata and optional metadata differ.
_TINY, _SHORT, _LONG, _FLOAT, _DOUBLE, _LONGLONG, _INT24, _YEAR = 1, 2, 3, 4, 5, 8, 9, 13
_VARCHAR, _BIT, _TIMESTAMP2, _DATETIME2, _TIME2, _JSON, _NEWDECIMAL = 15, 16, 17, 18, 19, 245, 246
_ENUM, _SET, _BLOB, _VAR_STRING, _STRING, _GEOMETRY = 247, 248, 252, 253, 254, 255
_NUMERIC = frozenset({_TINY, _SHORT, _INT24, _LONG, _LONGLONG, _NEWDECIMAL, _FLOAT, _DOUBLE, _YEAR})
_TEXT = frozenset({_STRING, _VAR_STRING, _VARCHAR, _BLOB, _GEOMETRY})
_MYSQL_TEXT = _TEXT - {_GEOMETRY}
#: Python's names of MySQL's character sets where they differ (MySQL's latin1 is cp1252, as PyMySQL reads it).
_ENCODINGS = {"utf8mb4": "utf8", "utf8mb3": "utf8", "utf8": "utf8", "latin1": "cp1252", "koi8r": "koi8_r"}
_ENCODINGS |= {"koi8u": "koi8_u", "binary": "binary"}


@dataclass(slots=True)
class ColumnMap:
    """A column as a table map describes it: what ``row_images.py`` reads its values by."""

    type: int
    name: str | None = None
    unsigned: bool = False
    character_set_name: str | None = None
    max_length: int = 0
    length_size: int = 0
    precision: int = 0
    decimals: int = 0
    fsp: int = 0
    bytes: int = 0
    size: int = 0
    enum_values: list[str] | None = None
    set_values: list[str] | None = None


@dataclass(slots=True)
class TableMap:
    table_id: int
    schema: str
    table: str
    columns: list[ColumnMap] = field(default_factory=list)


class Rows(NamedTuple):
    """A rows event's rows: the bitmaps of the columns present (an update's after images have their own), and the
    images."""

    present: bytes
    present_after: bytes | None
    body: bytes


class BinlogDump:
    """One dump of a server's binlog, from ``file`` at ``offset`` to its end; iterating yields ``(event type, file,
    where the event starts, where it ends, its packet)`` for the events after the first ROTATE and the FORMAT
    DESCRIPTION, each packet's checksum checked (``body`` reads an event's body out of its packet)."""

    def __init__(self, connection: Any, server_id: int, file: str, offset: int, display_name: str) -> None:
        self.connection = connection
        self.file = file
        self.display_name = display_name
        with connection.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")  # events come with their CRC32
            cur.execute("SET @mariadb_slave_capability = 4")  # MariaDB: its GTID events, not BEGIN statements
            cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL")
            #: Collation id -> the character set's Python encoding ("binary" for bytes), as table maps name them.
            self.encodings = {int(id_): _encoding(str(name)) for id_, name in cur.fetchall()}
            cur.execute("SELECT @@version")
            self.mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
        request = struct.pack("<IHI", offset, _DUMP_NON_BLOCK, server_id) + file.encode()
        connection._execute_command(_COM_BINLOG_DUMP, request)  # PyMySQL's only way to send a command as bytes

    def __iter__(self) -> Iterator[tuple[int, str, int, int, bytes]]:
        read = self.connection._read_packet  # reads one packet, raising on an error packet
        header, checksum = _HEADER.unpack_from, _UINT32.unpack_from
        crc32 = zlib.crc32
        while True:
            data: bytes = read().get_all_data()
            if data[0] == 0xFE and len(data) < 9:  # EOF: the binlog's end (a non-blocking dump)
                return
            _, kind, _, size, end, _ = header(data, 1)
            if crc32(data[1:-_CHECKSUM]) != checksum(data, len(data) - _CHECKSUM)[0]:
                raise ChangeStreamUnavailable(
                    f"{self.display_name}: an event of the binlog in {self.file} ending at {end} arrived damaged (its "
                    "checksum differs); the round is retried from the lake's position"
                )
            if kind == ROTATE:
                self.file = data[_HEADER_END + 8 : -_CHECKSUM].decode()
                continue
            if kind in (FORMAT_DESCRIPTION, HEARTBEAT, STOP):
                continue
            if kind in UNREADABLE:
                raise ChangeStreamUnavailable(
                    f"{self.display_name}: the binlog holds {UNREADABLE[kind]} in {self.file} at {end - size}, whose "
                    "rows a change stream cannot read; after changing it, load the table again (drop the lake table, "
                    "then reset the table). Nothing was tiered"
                )
            yield kind, self.file, end - size, end, data

    def close(self) -> None:
        self.connection.close()


def body(data: bytes) -> bytes:
    """An event's body: its packet without the OK byte, the header and the checksum."""
    return data[_HEADER_END:-_CHECKSUM]


def gtid_standalone(data: bytes) -> bool:
    """Whether a MariaDB GTID event begins a group that is one statement without a transaction (a DDL): its
    flags, after the sequence number and the domain id."""
    return bool(data[_HEADER_END + 12] & 1)


def query(data: bytes) -> tuple[str, str]:
    """A QUERY event's default schema and statement."""
    at = _HEADER_END
    schema_length = data[at + 8]
    status_length = int.from_bytes(data[at + 11 : at + 13], "little")
    at += 13 + status_length
    schema = data[at : at + schema_length].decode(errors="replace")
    return schema, data[at + schema_length + 1 : -_CHECKSUM].decode(errors="replace")


def table_id(data: bytes) -> int:
    """The table map id a TABLE_MAP or a rows event names (6 bytes after the header)."""
    return int.from_bytes(data[_HEADER_END : _HEADER_END + 6], "little")


def rows(data: bytes, kind: int) -> Rows:
    """A rows event's parts (see :class:`Rows`)."""
    at = _HEADER_END + 8  # the table id and the flags
    if kind in (WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2):
        at += int.from_bytes(data[at : at + 2], "little")  # MySQL's extra data, its length counting itself
    count, at = _length(data, at)
    width = (count + 7) >> 3
    present, at = data[at : at + width], at + width
    present_after = None
    if kind in UPDATES:
        present_after, at = data[at : at + width], at + width
    return Rows(present, present_after, data[at:-_CHECKSUM])


def table_map(data: bytes, encodings: dict[int, str], mariadb: bool = True) -> TableMap:
    """A TABLE_MAP event's table and columns (``encodings``: collation id -> Python encoding, of the server; MariaDB
    gives a GEOMETRY column a character set, MySQL does not)."""
    at = _HEADER_END + 8
    schema, at = _name(data, at)
    table, at = _name(data, at)
    count, at = _length(data, at)
    columns = [ColumnMap(kind) for kind in data[at : at + count]]
    at += count
    size, at = _length(data, at)
    _column_metadata(columns, data[at : at + size])
    at += size + ((count + 7) >> 3)  # the metadata, then the NULL-able columns' bitmap
    _optional_metadata(columns, data, at, len(data) - _CHECKSUM, encodings, _TEXT if mariadb else _MYSQL_TEXT)
    return TableMap(table_id(data), schema, table, columns)


def _name(data: bytes, at: int) -> tuple[str, int]:
    size = data[at]
    return data[at + 1 : at + 1 + size].decode(), at + size + 2  # its length, the name, a NUL


def _length(data: bytes, at: int) -> tuple[int, int]:
    """A length-encoded integer and where it ends."""
    first = data[at]
    if first < 0xFB:
        return first, at + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[at + 1 : at + 1 + width], "little"), at + 1 + width


def _column_metadata(columns: list[ColumnMap], metadata: bytes) -> None:
    """Each column's part of the table map's metadata (its length, precision, fraction digits, real type...)."""
    at = 0
    for column in columns:
        kind = column.type
        if kind == _VARCHAR:
            column.max_length, at = int.from_bytes(metadata[at : at + 2], "little"), at + 2
        elif kind in (_FLOAT, _DOUBLE):
            at += 1
        elif kind in (_BLOB, _GEOMETRY, _JSON):
            column.length_size, at = metadata[at], at + 1
        elif kind in (_TIMESTAMP2, _DATETIME2, _TIME2):
            column.fsp, at = metadata[at], at + 1
        elif kind == _NEWDECIMAL:
            column.precision, column.decimals, at = metadata[at], metadata[at + 1], at + 2
        elif kind == _BIT:
            bits = metadata[at + 1] * 8 + metadata[at]
            column.bytes, at = (bits + 7) // 8, at + 2
        elif kind in (_STRING, _VAR_STRING):
            real, low = metadata[at], metadata[at + 1]
            at += 2
            if real in (_ENUM, _SET):
                column.type, column.size = real, low
            else:  # the length's high bits folded into the real type's byte (as MySQL's Field_string stores it)
                column.max_length = (((real << 4) & 0x300) ^ 0x300) + low


def _optional_metadata(
    columns: list[ColumnMap], data: bytes, at: int, end: int, encodings: dict[int, str], texts: frozenset[int]
) -> None:
    """The table map's optional metadata (``binlog_row_metadata = FULL``): type, length, value, until the end."""
    numeric = [c for c in columns if c.type in _NUMERIC]
    text = [c for c in columns if c.type in texts]
    enums_and_sets = [c for c in columns if c.type in (_ENUM, _SET)]
    enums = [c for c in columns if c.type == _ENUM]
    sets = [c for c in columns if c.type == _SET]
    while at < end:
        kind = data[at]
        size, at = _length(data, at + 1)
        value, at = data[at : at + size], at + size
        if kind == 1:  # signedness of the numeric columns, a bit each from the highest
            for number, column in enumerate(numeric):
                column.unsigned = bool(value[number >> 3] & (0x80 >> (number & 7)))
        elif kind in (2, 10):  # a default collation, and the columns (by number among them) that differ
            _charsets(text if kind == 2 else enums_and_sets, value, encodings, default=True)
        elif kind in (3, 11):  # a collation per column
            _charsets(text if kind == 3 else enums_and_sets, value, encodings, default=False)
        elif kind == 4:
            names = _strings(value)
            for column, name in zip(columns, names, strict=False):
                column.name = name
        elif kind == 5:
            for column, values in zip(sets, _string_lists(value), strict=False):
                column.set_values = values
        elif kind == 6:
            for column, values in zip(enums, _string_lists(value), strict=False):
                column.enum_values = ["", *values]  # index 0: the empty string MySQL gives a wrong value


def _charsets(columns: list[ColumnMap], value: bytes, encodings: dict[int, str], *, default: bool) -> None:
    ids: list[int] = []
    at = 0
    while at < len(value):
        number, at = _length(value, at)
        ids.append(number)
    if default:
        found = [ids[0]] * len(columns)
        for index, collation in zip(ids[1::2], ids[2::2], strict=False):
            found[index] = collation
        ids = found
    for column, collation in zip(columns, ids, strict=False):
        column.character_set_name = encodings.get(collation, f"collation {collation}")


def _strings(value: bytes) -> list[str]:
    found, at = [], 0
    while at < len(value):
        size, at = _length(value, at)
        found.append(value[at : at + size].decode(errors="replace"))
        at += size
    return found


def _string_lists(value: bytes) -> list[list[str]]:
    found: list[list[str]] = []
    at = 0
    while at < len(value):
        count, at = _length(value, at)
        names = []
        for _ in range(count):
            size, at = _length(value, at)
            names.append(value[at : at + size].decode(errors="replace"))
            at += size
        found.append(names)
    return found


def _encoding(charset: str) -> str:
    """A MySQL character set's Python encoding (``binary`` for bytes); its own name where Python knows it."""
    name = _ENCODINGS.get(charset.lower(), charset.lower())
    try:
        return name if name == "binary" else codecs.lookup(name).name
    except LookupError:
        return f"charset {charset}"
