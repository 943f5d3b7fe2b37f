"""Decode PostgreSQL's built-in ``pgoutput`` logical replication messages (protocol version 1).

The messages come from ``pg_logical_slot_peek_binary_changes`` one per row, in commit order; their layout is
PostgreSQL's "Logical Replication Message Formats" (chapter 55.9 in the 15 docs). They are decoded into the
change-stream kernel's messages (``sources/change_stream/messages.py``): a Begin's position is its commit record's
LSN, a Commit's end the LSN just past it. Written by hand: the kept
Python libraries for logical replication (psycopg2's replication connection, and those built on it) stream the
messages but none decodes them, and the format is small and stable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

from airflow_provider_tiering.sources.change_stream.messages import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    Message,
    Origin,
    Other,
    Relation,
    Truncate,
    Value,
)

#: A column an UPDATE left alone whose value is stored out of line (TOAST): the message does not carry it.
UNCHANGED_TOAST: Final = UNCHANGED


@dataclass(frozen=True)
class PgRelation(Relation):
    """A table as the stream describes it before its first change (and again after its definition changed): the
    kernel's Relation (each column's type id is its ``pg_type.oid``), with what pgoutput says beside it."""

    replica_identity: str = ""
    key_columns: tuple[str, ...] = ()


#: PostgreSQL's epoch (2000-01-01 UTC) in microseconds since 1970-01-01.
_POSTGRES_EPOCH_US = 946_684_800_000_000
_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_TEXT, _NULL, _UNCHANGED = ord("t"), ord("n"), ord("u")
_INSERT, _UPDATE, _DELETE = ord("I"), ord("U"), ord("D")
_NEW, _OLD_ROW = ord("N"), ord("O")


@dataclass
class _Reader:
    data: bytes
    pos: int = field(default=0)

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def int8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = struct.unpack_from("!h", self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = struct.unpack_from("!i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint64(self) -> int:
        (value,) = struct.unpack_from("!Q", self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        value = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return value


def _tuple_at(data: bytes, pos: int, text: str | None) -> tuple[tuple[Value, ...], int]:
    """The TupleData at ``pos``, and the position after it; ``text``: the whole message decoded, when it is ASCII
    (its values are then sliced from it: one object per value, not a bytes slice and its decoding; byte and
    character positions are the same in ASCII). The hot loop of decoding (a profile of 150k updates spent half its
    time here): locals, precompiled structs, byte values compared as integers."""
    (count,) = _INT16.unpack_from(data, pos)
    pos += 2
    values: list[Value] = []
    append = values.append
    unpack = _INT32.unpack_from
    for _ in range(count):
        kind = data[pos]
        if kind == _TEXT:
            (length,) = unpack(data, pos + 1)
            pos += 5
            append(text[pos : pos + length] if text is not None else data[pos : pos + length].decode("utf-8"))
            pos += length
        elif kind == _NULL:
            append(None)
            pos += 1
        elif kind == _UNCHANGED:
            append(UNCHANGED_TOAST)
            pos += 1
        else:  # "b" (binary) only comes when the slot is read with binary 'true', which tiering never asks for
            raise ValueError(f"unexpected tuple column kind {chr(kind)!r}")
    return tuple(values), pos


def _row_change(data: bytes) -> Change | None:
    """An insert, update or delete, decoded without a reader (they are nearly every message of a round); None for
    another kind."""
    kind = data[0]
    if kind not in (_UPDATE, _INSERT, _DELETE):
        return None
    (oid,) = _INT32.unpack_from(data, 1)
    text = data.decode("ascii") if data.isascii() else None
    if kind == _UPDATE:
        marker = data[5]
        if marker == _NEW:
            return Change("U", oid, new=_tuple_at(data, 6, text)[0])
        old, pos = _tuple_at(data, 6, text)  # "K" (the old key) or "O" (the old row), then "N"
        return Change("U", oid, new=_tuple_at(data, pos + 1, text)[0], old=old, old_is_row=marker == _OLD_ROW)
    if kind == _INSERT:
        return Change("I", oid, new=_tuple_at(data, 6, text)[0])
    return Change("D", oid, old=_tuple_at(data, 6, text)[0], old_is_row=data[5] == _OLD_ROW)


def decode(data: bytes) -> Message:
    """One pgoutput message.

    Raises:
        ValueError: the bytes are not a protocol version 1 message this module knows.
    """
    change = _row_change(data)
    if change is not None:
        return change
    reader = _Reader(bytes(data))
    kind = reader.byte()
    if kind == "B":
        final_lsn = reader.uint64()
        committed = reader.uint64() + _POSTGRES_EPOCH_US  # microseconds since 2000-01-01
        return Begin(final_lsn, reader.int32() & 0xFFFFFFFF, committed)
    if kind == "C":
        reader.int8()  # flags
        commit_lsn = reader.uint64()
        return Commit(commit_lsn, reader.uint64())
    if kind == "O":
        reader.uint64()
        return Origin(reader.string())
    if kind == "R":
        oid = reader.int32()
        namespace, name = reader.string(), reader.string()
        identity = reader.byte()
        columns: list[str] = []
        keys: list[str] = []
        type_ids: list[int] = []
        for _ in range(reader.int16()):
            flags = reader.int8()
            column = reader.string()
            type_ids.append(reader.int32() & 0xFFFFFFFF)  # an oid is unsigned
            reader.int32()  # type modifier
            columns.append(column)
            if flags & 1:
                keys.append(column)
        return PgRelation(oid, tuple(columns), tuple(type_ids), namespace, name, identity, tuple(keys))
    if kind == "T":
        count = reader.int32()
        reader.int8()  # options (CASCADE, RESTART IDENTITY)
        return Truncate(tuple(reader.int32() for _ in range(count)))
    if kind in ("Y", "M"):
        return Other(kind)
    raise ValueError(f"unknown pgoutput message kind {kind!r}")


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> an integer that orders like the LSN."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
