"""The row images of a binlog's rows events, decoded here into the values a round types (ADR 0019).

A Write, Update or Delete rows event carries, after its header, one image per row (two for an update: before, then
after), each a bitmap of NULL columns and then every present column's value in the server's binary form. Its table
map (``mysql-replication``'s ``TableMapEvent``, with ``binlog_row_metadata = FULL``) says each column's type, its
metadata (length bytes, precision and scale, fractional digits), signedness, charset, and ENUM and SET values. The
library reads the protocol, the events and the table maps; the images are decoded here because its own decoding
costs 44 µs of CPU per updated row of TPC-H ``orders`` (pure-Python, per value) and gives some values otherwise than a
``SELECT``: a negative TIME with a fraction is wrong, YEAR 0 reads as 1900, zero dates as None (or 1970 for a
TIMESTAMP), fixed-length binary strings lose their trailing zero bytes, BIT reads as a string of digits.

Values come out as the lake types take them from Python with the fewest objects made: integers, floats, ``Decimal``,
``str`` (text decoded with the column's charset, as MySQL converts it: latin1 is cp1252, with its five undefined bytes
kept as the code points of the same number), ``bytes`` (binary strings padded to their fixed length, BIT as its big-
endian bytes), ENUM as its value's name and SET as its names in definition order joined by commas (as a ``SELECT``
prints them), and times as integers: a DATE as days since 1970-01-01, a DATETIME as microseconds since then (its
wall-clock time), a TIMESTAMP as microseconds since the epoch (UTC), a TIME as signed microseconds. A value no lake type
holds (a zero date or a date with a zero part, a zero TIMESTAMP) raises :class:`UnsupportedColumnType` naming the
column, as the cursor source refuses such rows; so does a column type this module does not decode.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable, Sequence
from datetime import date
from decimal import Decimal
from typing import Any, Protocol

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, UnsupportedColumnType

#: A column's value reader: ``(data, position) -> (value, position after it)``.
Reader = Callable[[bytes, int], tuple[object, int]]

# Binlog column types (MySQL's ``enum_field_types``).
TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24, DATE, TIME, DATETIME, YEAR = (
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    10,
    11,
    12,
    13,
)
NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2, JSON, NEWDECIMAL = 14, 15, 16, 17, 18, 19, 245, 246
ENUM, SET, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (
    247, 248, 249, 250, 251, 252, 253, 254, 255,
)  # fmt: skip

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_MICROSECONDS = 86_400_000_000
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_INTEGERS = {
    (TINY, False): struct.Struct("<b"), (TINY, True): struct.Struct("<B"),
    (SHORT, False): struct.Struct("<h"), (SHORT, True): struct.Struct("<H"),
    (LONG, False): struct.Struct("<i"), (LONG, True): struct.Struct("<I"),
    (LONGLONG, False): struct.Struct("<q"), (LONGLONG, True): struct.Struct("<Q"),
}  # fmt: skip
_FLOAT, _DOUBLE = struct.Struct("<f"), struct.Struct("<d")
_UINT16 = struct.Struct("<H")


def _mysql_latin1(error: UnicodeError) -> tuple[str, int]:
    """MySQL's latin1 is cp1252 but for the five bytes cp1252 leaves undefined, which it maps to the code point of the
    same number (as ISO-8859-1 does)."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return error.object[error.start : error.end].decode("latin-1"), error.end


codecs.register_error("mysql_latin1", _mysql_latin1)


class ColumnMap(Protocol):
    """A column as a table map describes it (``pymysqlreplication.column.Column``'s attributes)."""

    type: int
    name: str | None
    unsigned: bool


class RowImages:
    """Decodes the row images of one table map's columns (see the module's description)."""

    def __init__(self, columns: Sequence[Any], table: str) -> None:
        self.table = table
        self.names = tuple(str(c.name) for c in columns)
        self._readers: tuple[Reader, ...] = tuple(_reader(c, table) for c in columns)

    def rows(self, body: bytes, present: bytes, present_after: bytes | None = None) -> list[Any]:
        """Every row image of a rows event's body, as tuples of values in the table map's column order: one tuple per
        row, or a pair ``(before, after)`` per row of an update (``present_after``: its after images' bitmap of
        present columns).

        Raises:
            ChangeStreamUnavailable: an image lacks a column (logged with ``binlog_row_image`` other than FULL).
            UnsupportedColumnType: a value no lake type holds.
        """
        self._check_full(present)
        if present_after is not None:
            self._check_full(present_after)
        image = self._image
        found: list[Any] = []
        append = found.append
        position, end = 0, len(body)
        if present_after is None:
            while position < end:
                row, position = image(body, position)
                append(row)
            return found
        while position < end:
            before, position = image(body, position)
            after, position = image(body, position)
            append((before, after))
        return found

    def _check_full(self, present: bytes) -> None:
        count = len(self._readers)
        if int.from_bytes(present, "little") & ((1 << count) - 1) != (1 << count) - 1:
            raise ChangeStreamUnavailable(
                f"{self.table}: a change in the binlog lacks columns (it was logged with binlog_row_image other than "
                "FULL, by a session that set it): the lake cannot get their values. Set binlog_row_image = FULL for "
                "every session, then load the table again (drop the lake table, then reset the table). Nothing was "
                "tiered"
            )

    def _image(self, data: bytes, position: int) -> tuple[tuple[object, ...], int]:
        readers = self._readers
        nulls_length = (len(readers) + 7) >> 3
        nulls = int.from_bytes(data[position : position + nulls_length], "little")
        position += nulls_length
        values: list[object] = []
        append = values.append
        for number, read in enumerate(readers):
            if nulls >> number & 1:
                append(None)
            else:
                value, position = read(data, position)
                append(value)
        return tuple(values), position


def _unsupported(table: str, column: Any, why: str) -> UnsupportedColumnType:
    return UnsupportedColumnType(
        f"{table}: column {column.name!r} reaches the binlog as {why}, which the change stream cannot decode: leave it "
        "out with the spec's source.columns, or tier the table by a cursor instead; nothing was tiered"
    )


def _reader(column: Any, table: str) -> Reader:
    """The value reader of one column of a table map."""
    kind = column.type
    unsigned = bool(column.unsigned)
    if (kind, unsigned) in _INTEGERS:
        return _fixed(_INTEGERS[(kind, unsigned)])
    if kind == INT24:
        return _int24(unsigned)
    if kind == FLOAT:
        return _fixed(_FLOAT)
    if kind == DOUBLE:
        return _fixed(_DOUBLE)
    if kind == YEAR:
        return _year
    if kind == NEWDECIMAL:
        return _decimal(int(column.precision), int(column.decimals))
    if kind in (DATE, NEWDATE):
        return _date(table, str(column.name))
    if kind == DATETIME2:
        return _datetime2(int(column.fsp), table, str(column.name))
    if kind == TIMESTAMP2:
        return _timestamp2(int(column.fsp), table, str(column.name))
    if kind == TIME2:
        return _time2(int(column.fsp))
    if kind == BIT:
        return _bytes_of(int(column.bytes))
    if kind == ENUM:
        return _enum(int(column.size), list(column.enum_values or [""]))
    if kind == SET:
        return _set(int(column.size), list(column.set_values or []))
    if kind in (VARCHAR, VAR_STRING, STRING):
        length = int(column.max_length)
        fixed = length if kind == STRING else None
        return _string(1 if length <= 255 else 2, column.character_set_name, fixed)
    if kind in (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        return _string(int(column.length_size), column.character_set_name, None)
    if kind in (TIMESTAMP, DATETIME, TIME):
        raise _unsupported(table, column, "a temporal type of before MySQL 5.6 (ALTER TABLE ... FORCE converts it)")
    if kind == JSON:
        raise _unsupported(table, column, "MySQL's binary JSON (MariaDB's JSON is text and is decoded)")
    raise _unsupported(table, column, f"binlog column type {kind}")


def _fixed(form: struct.Struct) -> Reader:
    unpack, size = form.unpack_from, form.size

    def read(data: bytes, position: int) -> tuple[object, int]:
        return unpack(data, position)[0], position + size

    return read


def _int24(unsigned: bool) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        return int.from_bytes(data[position : position + 3], "little", signed=not unsigned), position + 3

    return read


def _year(data: bytes, position: int) -> tuple[object, int]:
    value = data[position]
    return (1900 + value if value else 0), position + 1


def _decimal(precision: int, scale: int) -> Reader:
    """MySQL's binary DECIMAL: groups of nine digits in four bytes, big-endian, the leftover digits in fewer; the sign
    in the first bit (set: not negative), the whole value's bits inverted when negative."""
    integral = precision - scale
    whole_groups, whole_rest = divmod(integral, 9)
    fraction_groups, fraction_rest = divmod(scale, 9)
    sizes = (
        ([_DIG2BYTES[whole_rest]] if whole_rest else [])
        + [4] * whole_groups
        + [4] * fraction_groups
        + ([_DIG2BYTES[fraction_rest]] if fraction_rest else [])
    )
    widths = (
        ([10**whole_rest] if whole_rest else [])
        + [10**9] * (whole_groups + fraction_groups)
        + ([10**fraction_rest] if fraction_rest else [])
    )
    length = sum(sizes)
    parts = tuple(zip(sizes, widths, strict=True))

    def read(data: bytes, position: int) -> tuple[object, int]:
        raw = bytearray(data[position : position + length])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        unscaled, at = 0, 0
        for size, width in parts:
            unscaled = unscaled * width + int.from_bytes(raw[at : at + size], "big")
            at += size
        # From text: exact at any precision (arithmetic would round to the context's 28 digits).
        return Decimal(f"{'-' if negative else ''}{unscaled}E-{scale}"), position + length

    return read


def _zero_date(table: str, column: str, what: str) -> UnsupportedColumnType:
    return UnsupportedColumnType(
        f"{table}: column {column!r} holds {what}, which no lake type holds (the cursor source refuses such rows "
        "too): give the rows a real date, and keep such values out with sql_mode NO_ZERO_DATE and NO_ZERO_IN_DATE. "
        "The change stays in the binlog: once the rows are fixed, load the table again (drop the lake table, then "
        "reset the table). Nothing was tiered"
    )


def _days(table: str, column: str, year: int, month: int, day: int, shown: str) -> int:
    if not (year and month and day):
        raise _zero_date(table, column, f"the zero date or a date with a zero part ({shown})")
    try:
        return date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError as exc:
        raise _zero_date(table, column, f"an invalid date ({shown}: {exc})") from exc


def _date(table: str, column: str) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        value = int.from_bytes(data[position : position + 3], "little")
        year, month, day = value >> 9, value >> 5 & 15, value & 31
        return _days(table, column, year, month, day, f"{year:04d}-{month:02d}-{day:02d}"), position + 3

    return read


def _fraction(fsp: int) -> tuple[int, int]:
    """The bytes of a temporal value's fractional part, and what one unit of them is in microseconds."""
    return ((fsp + 1) // 2, 10 ** (6 - 2 * ((fsp + 1) // 2))) if fsp else (0, 0)


def _datetime2(fsp: int, table: str, column: str) -> Reader:
    """5 bytes big-endian, offset by 2^39: year*13+month (17 bits), day (5), hour (5), minute (6), second (6); then
    the fraction. The wall-clock time as microseconds since 1970-01-01 00:00."""
    fraction_bytes, unit = _fraction(fsp)
    length = 5 + fraction_bytes

    def read(data: bytes, position: int) -> tuple[object, int]:
        packed = int.from_bytes(data[position : position + 5], "big") - 0x8000000000
        ymd, hms = packed >> 17, packed & 0x1FFFF
        year, month = divmod(ymd >> 5, 13)
        day = ymd & 31
        shown = f"{year:04d}-{month:02d}-{day:02d}"
        days = _days(table, column, year, month, day, shown)
        seconds = days * 86400 + (hms >> 12) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)
        fraction = int.from_bytes(data[position + 5 : position + length], "big") * unit if fraction_bytes else 0
        return seconds * 1_000_000 + fraction, position + length

    return read


def _timestamp2(fsp: int, table: str, column: str) -> Reader:
    """4 bytes big-endian of seconds since the epoch (UTC), then the fraction; 0 is the zero TIMESTAMP."""
    fraction_bytes, unit = _fraction(fsp)
    length = 4 + fraction_bytes

    def read(data: bytes, position: int) -> tuple[object, int]:
        seconds = int.from_bytes(data[position : position + 4], "big")
        fraction = int.from_bytes(data[position + 4 : position + length], "big") * unit if fraction_bytes else 0
        if not seconds and not fraction:
            raise _zero_date(table, column, "the zero TIMESTAMP (0000-00-00 00:00:00)")
        return seconds * 1_000_000 + fraction, position + length

    return read


def _time2(fsp: int) -> Reader:
    """3 bytes big-endian, offset by 2^23, of hour (10 bits), minute (6) and second (6), then the fraction, the whole
    as one two's-complement number: signed microseconds (as MySQL's ``my_time_packed_from_binary`` reads it)."""
    fraction_bytes, unit = _fraction(fsp)
    length = 3 + fraction_bytes

    def read(data: bytes, position: int) -> tuple[object, int]:
        # The integer part and the fraction together are one signed number with the fraction in its low bits.
        packed = int.from_bytes(data[position : position + length], "big") - (0x800000 << (8 * fraction_bytes))
        negative = packed < 0
        magnitude = -packed if negative else packed
        hms, fraction = magnitude >> (8 * fraction_bytes), magnitude & ((1 << (8 * fraction_bytes)) - 1)
        seconds = (hms >> 12 & 0x3FF) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)
        micros = seconds * 1_000_000 + fraction * unit
        return (-micros if negative else micros), position + length

    return read


def _bytes_of(length: int) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        return data[position : position + length], position + length

    return read


def _enum(size: int, values: list[str]) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        index = int.from_bytes(data[position : position + size], "little")
        return (values[index] if index < len(values) else ""), position + size

    return read


def _set(size: int, values: list[str]) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        mask = int.from_bytes(data[position : position + size], "little")
        return ",".join(v for bit, v in enumerate(values) if mask >> bit & 1), position + size

    return read


def _string(length_bytes: int, encoding: str | None, fixed: int | None) -> Reader:
    """A length-prefixed string: text decoded with its charset's Python encoding, binary kept as bytes (a fixed-length
    BINARY padded with the zero bytes the binlog leaves out)."""
    binary = encoding in (None, "binary") or not _known_encoding(encoding)
    errors = "mysql_latin1" if encoding == "cp1252" else "strict"
    if length_bytes == 1:

        def read(data: bytes, position: int) -> tuple[object, int]:
            size = data[position]
            start = position + 1
            raw = data[start : start + size]
            if binary:
                return (raw.ljust(fixed, b"\x00") if fixed else raw), start + size
            return raw.decode(encoding, errors), start + size  # type: ignore[arg-type]  # not binary: a name

        return read
    if length_bytes == 2:

        def read2(data: bytes, position: int) -> tuple[object, int]:
            (size,) = _UINT16.unpack_from(data, position)
            start = position + 2
            raw = data[start : start + size]
            if binary:
                return (raw.ljust(fixed, b"\x00") if fixed else raw), start + size
            return raw.decode(encoding, errors), start + size  # type: ignore[arg-type]  # not binary: a name

        return read2

    def read_n(data: bytes, position: int) -> tuple[object, int]:
        size = int.from_bytes(data[position : position + length_bytes], "little")
        start = position + length_bytes
        raw = data[start : start + size]
        return (raw if binary else raw.decode(encoding, errors)), start + size  # type: ignore[arg-type]

    return read_n


def _known_encoding(name: str | None) -> bool:
    if name is None:
        return False
    try:
        codecs.lookup(name)
    except LookupError:
        return False
    return True
