"""The binlog's events parsed from their bytes, without a server (``sources/mysql/binlog_events.py``): table maps with
their optional metadata, rows events of both versions, statements, a dump's packets (checksums, rotations, events
it cannot read); and the contract of PyMySQL's private methods the dump relies on."""

from __future__ import annotations

import inspect
import struct
import zlib
from typing import Any

import pymysql.connections
import pymysql.protocol
import pytest

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable
from airflow_provider_tiering.sources.mysql import binlog_events as e


def packet(kind: int, body: bytes, end: int = 1000) -> bytes:
    """An event's packet as a dump sends it: an OK byte, the header, the body, its CRC32."""
    header = struct.pack("<IBIIIH", 1_700_000_000, kind, 1, 19 + len(body) + 4, end, 0)
    event = header + body
    return b"\x00" + event + zlib.crc32(event).to_bytes(4, "little")


def lenenc(value: int) -> bytes:
    return bytes([value]) if value < 0xFB else b"\xfc" + value.to_bytes(2, "little")


def strings(*values: str) -> bytes:
    return b"".join(lenenc(len(v.encode())) + v.encode() for v in values)


def test_a_table_map_gives_each_column_its_type_metadata_name_signedness_charset_and_values() -> None:
    # id INT UNSIGNED, price DECIMAL(15,2), label VARCHAR(300) utf8mb4, code CHAR(10) latin1, kind ENUM('a','bb'),
    # flags SET('x','y'), bits BIT(10), at DATETIME(6), data BLOB
    types = bytes([3, 246, 15, 254, 254, 254, 16, 18, 252])
    metadata = (
        bytes([15, 2])  # DECIMAL: precision, scale
        + (1200).to_bytes(2, "little")  # VARCHAR: its longest value in bytes
        + bytes([254, 10])  # CHAR: real type STRING, 10 bytes
        + bytes([247, 1])  # ENUM in a STRING: real type, one byte
        + bytes([248, 1])  # SET
        + bytes([2, 1])  # BIT(10): 2 bits past a whole byte
        + bytes([6])  # DATETIME(6)
        + bytes([2])  # BLOB: a 2-byte length
    )
    optional = (
        bytes([1, 1, 0b10000000])  # signedness of the numeric columns (id, price): id unsigned
        + bytes([2]) + lenenc(3) + lenenc(45) + lenenc(1) + lenenc(8)  # default utf8mb4; the 2nd text column latin1
        + bytes([4]) + lenenc(len(strings("id", "price", "label", "code", "kind", "flags", "bits", "at", "data")))
        + strings("id", "price", "label", "code", "kind", "flags", "bits", "at", "data")
        + bytes([5]) + lenenc(len(lenenc(2) + strings("x", "y"))) + lenenc(2) + strings("x", "y")
        + bytes([6]) + lenenc(len(lenenc(2) + strings("a", "bb"))) + lenenc(2) + strings("a", "bb")
    )  # fmt: skip
    body = (
        (77).to_bytes(6, "little") + b"\x01\x00" + b"\x04shop\x00" + b"\x06orders\x00" + lenenc(len(types)) + types
        + lenenc(len(metadata)) + metadata + b"\xff\x01" + optional
    )  # fmt: skip
    mapped = e.table_map(packet(e.TABLE_MAP, body), {45: "utf-8", 8: "cp1252", 63: "binary"})
    assert (mapped.table_id, mapped.schema, mapped.table) == (77, "shop", "orders")
    by_name = {c.name: c for c in mapped.columns}
    assert by_name["id"].unsigned and not by_name["price"].unsigned
    assert (by_name["price"].precision, by_name["price"].decimals) == (15, 2)
    assert (by_name["label"].max_length, by_name["label"].character_set_name) == (1200, "utf-8")
    assert (by_name["code"].type, by_name["code"].max_length, by_name["code"].character_set_name) == (254, 10, "cp1252")
    assert (by_name["kind"].type, by_name["kind"].size, by_name["kind"].enum_values) == (247, 1, ["", "a", "bb"])
    assert (by_name["flags"].type, by_name["flags"].set_values) == (248, ["x", "y"])
    assert by_name["bits"].bytes == 2 and by_name["at"].fsp == 6
    assert (by_name["data"].length_size, by_name["data"].character_set_name) == (2, "utf-8")


def test_rows_events_of_both_versions_give_their_bitmaps_and_images() -> None:
    images = b"\x00\x01\x00\x00\x00" * 2
    v1 = (9).to_bytes(6, "little") + b"\x00\x00" + lenenc(1) + b"\x01" + b"\x01" + images
    found = e.rows(packet(e.UPDATE_ROWS_V1, v1), e.UPDATE_ROWS_V1)
    assert (e.table_id(packet(e.UPDATE_ROWS_V1, v1)), *found) == (9, b"\x01", b"\x01", images)
    v2 = (9).to_bytes(6, "little") + b"\x00\x00" + b"\x04\x00\xaa\xbb" + lenenc(1) + b"\x01" + images[:5]
    found = e.rows(packet(e.WRITE_ROWS_V2, v2), e.WRITE_ROWS_V2)  # MySQL's extra data passed over
    assert (found.present, found.present_after, found.body) == (b"\x01", None, images[:5])


def test_a_query_gives_its_schema_and_statement_and_a_gtid_its_standalone_flag() -> None:
    status = b"\x00\x01\x02"
    body = struct.pack("<IIBHH", 7, 0, 4, 0, len(status)) + status + b"shop\x00" + b"ALTER TABLE t ADD c INT"
    assert e.query(packet(e.QUERY, body)) == ("shop", "ALTER TABLE t ADD c INT")
    gtid = (5).to_bytes(8, "little") + (0).to_bytes(4, "little")
    assert e.gtid_standalone(packet(e.MARIADB_GTID, gtid + b"\x01")) and not e.gtid_standalone(
        packet(e.MARIADB_GTID, gtid + b"\x00")
    )


class FakePacket:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def get_all_data(self) -> bytes:
        return self.data


class FakeConnection:
    """A connection that answers a dump with the packets it holds (an in-memory fake of the server's side)."""

    def __init__(self, packets: list[bytes]) -> None:
        self.packets = [*packets, b"\xfe\x00\x00\x02\x00"]
        self.sent: list[tuple[int, bytes]] = []

    def cursor(self) -> Any:
        connection = self

        class Cursor:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def execute(self, statement: str) -> None:
                self.statement = statement

            def fetchall(self) -> list[tuple[int, str]]:
                return [(45, "utf8mb4"), (8, "latin1"), (63, "binary")]

            def fetchone(self) -> tuple[str]:
                return ("10.11.6-MariaDB",)

        del connection
        return Cursor()

    def _execute_command(self, command: int, sql: bytes) -> None:
        self.sent.append((command, sql))

    def _read_packet(self) -> FakePacket:
        return FakePacket(self.packets.pop(0))


def test_a_dump_asks_for_its_file_follows_rotations_and_refuses_what_it_cannot_read() -> None:
    rotate = packet(e.ROTATE, (4).to_bytes(8, "little") + b"binlog.000008", end=0)
    xid = packet(e.XID, (1).to_bytes(8, "little"), end=500)
    connection = FakeConnection([rotate, packet(e.FORMAT_DESCRIPTION, b"\x00" * 10), xid])
    dump = e.BinlogDump(connection, 0, "binlog.000007", 4, "t")
    assert connection.sent == [(0x12, struct.pack("<IHI", 4, 1, 0) + b"binlog.000007")]  # non-blocking, as id 0
    assert dump.encodings == {45: "utf-8", 8: "cp1252", 63: "binary"} and dump.mariadb
    assert [(kind, file, at, end) for kind, file, at, end, _ in dump] == [(e.XID, "binlog.000008", 469, 500)]

    damaged = bytearray(xid)
    damaged[25] ^= 1
    with pytest.raises(ChangeStreamUnavailable, match="checksum"):
        list(e.BinlogDump(FakeConnection([bytes(damaged)]), 0, "binlog.000007", 4, "t"))
    with pytest.raises(ChangeStreamUnavailable, match="log_bin_compress"):
        list(e.BinlogDump(FakeConnection([packet(169, b"\x00" * 12)]), 0, "binlog.000007", 4, "t"))


def test_pymysqls_private_methods_the_dump_uses_keep_their_contract() -> None:
    """PyMySQL (pinned below 1.3) sends a command's bytes with ``_execute_command(command, sql)``, sets the packet
    sequence for the reply, and reads one packet with ``_read_packet()``, raising on an error packet; a packet's
    bytes come from ``get_all_data()``."""
    assert list(inspect.signature(pymysql.connections.Connection._execute_command).parameters) == [
        "self", "command", "sql",
    ]  # fmt: skip
    read = inspect.signature(pymysql.connections.Connection._read_packet).parameters
    assert list(read)[0] == "self" and all(p.default is not p.empty for p in list(read.values())[1:])
    assert "raise_for_error" in inspect.getsource(pymysql.connections.Connection._read_packet)
    assert callable(pymysql.protocol.MysqlPacket.get_all_data)
    source = inspect.getsource(pymysql.connections.Connection._execute_command)
    assert "isinstance(sql, str)" in source and "_write_bytes" in source  # bytes are sent as they are
