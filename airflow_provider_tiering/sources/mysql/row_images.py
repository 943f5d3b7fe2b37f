"""The row images of a binlog's rows events, decoded here into the values a round types (ADR 0020).

A Write, Update or Delete rows event carries, after its header, one image per row (two for an update: before, then
after), each a bitmap of NULL columns and then every present column's value in the server's binary form. Its table
map (``binlog_events.py: TableMap``, with ``binlog_row_metadata = FULL``) says each column's type, its metadata
(length bytes, precision and scale, fractional digits), signedness, character set, and ENUM and SET values.
``mysql-replication`` decodes images too, but at 44 µs of CPU per updated row of TPC-H ``orders`` (pure Python, a
call per value) and gives some values otherwise than a ``SELECT``: a negative TIME with a fraction is wrong, YEAR 0
reads as 1900, zero dates as None (or 1970 for a TIMESTAMP), fixed-length binary strings lose their trailing zero
bytes, BIT reads as a string of digits.

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
from dataclasses import dataclass
from datetime import date
from decimal import Context, Decimal, Inexact, Rounded
from typing import Any, cast

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


class RowImages:
    """Decodes the row images of one table map's columns (see the module's description)."""

    def __init__(self, columns: Sequence[Any], table: str, old_key: Sequence[str] | None = None) -> None:
        """``old_key``: the columns an old image (an update's before image, a delete's) is decoded for, the others
        skipped and None (a round needs an old row's key only); None, or a column the table map lacks: every one."""
        self.table = table
        self.names = tuple(str(c.name) for c in columns)
        self.type_ids = tuple(int(c.type) for c in columns)
        self._image = _compiled_image(columns, table)
        only = None if old_key is None or not set(old_key) <= set(self.names) else set(old_key)
        #: Old images come whole.
        self.old_is_row = only is None
        self._old_image = self._image if only is None else _compiled_image(columns, table, only)

    def rows(self, body: bytes, present: bytes, present_after: bytes | None = None, *, old: bool = False) -> list[Any]:
        """Every row image of a rows event's body, as tuples of values in the table map's column order: one tuple per
        row (``old``: old images, a delete's), or a pair ``(before, after)`` per row of an update (``present_after``:
        its after images' bitmap of present columns).

        Raises:
            ChangeStreamUnavailable: an image lacks a column (logged with ``binlog_row_image`` other than FULL).
            UnsupportedColumnType: a value no lake type holds.
        """
        self._check_full(present)
        if present_after is not None:
            self._check_full(present_after)
        image, old_image = self._image, self._old_image
        found: list[Any] = []
        append = found.append
        position, end = 0, len(body)
        if present_after is None:
            single = old_image if old else image
            while position < end:
                row, position = single(body, position)
                append(row)
            return found
        while position < end:
            before, position = old_image(body, position)
            after, position = image(body, position)
            append((before, after))
        return found

    def _check_full(self, present: bytes) -> None:
        count = len(self.names)
        if int.from_bytes(present, "little") & ((1 << count) - 1) != (1 << count) - 1:
            raise ChangeStreamUnavailable(
                f"{self.table}: a change in the binlog lacks columns (it was logged with binlog_row_image other than "
                "FULL, by a session that set it): the lake cannot get their values. Set binlog_row_image = FULL for "
                "every session, then load the table again (drop the lake table, then reset the table). Nothing was "
                "tiered"
            )


def _compiled_image(
    columns: Sequence[Any], table: str, only: set[str] | None = None
) -> Callable[[bytes, int], tuple[Any, int]]:
    """One image's decoder for these columns, ``(data, position) -> (values, position after it)``, compiled from
    Python source made for them: the columns' reads inlined in one function (integers beside each other in one
    ``struct`` read, strings sliced and decoded in place, dates looked up in a cache), a column of any other type
    through its reader; with ``only``, the other columns skipped (None). Why compiled (as ``dataclasses`` and
    ``namedtuple`` compile theirs): a call per value was most of a change's decoding, and an update carries every
    column twice."""
    count = len(columns)
    bitmap = (count + 7) >> 3
    names: dict[str, object] = {"DAYS": _DayCache()}
    steps = [
        _step(number, column, table, names) if only is None or column.name in only else _skip(number, column, table)
        for number, column in enumerate(columns)
    ]
    values = "".join(f"v{n}, " for n in range(count))
    lines = ["def image(data, p):"]
    lines.append(
        "    nulls = data[p]" if bitmap == 1 else f"    nulls = int.from_bytes(data[p:p + {bitmap}], 'little')"
    )
    lines.append(f"    p += {bitmap}")
    lines.append("    if not nulls:")
    lines.extend(f"        {line}" for line in _without_nulls(steps, names))
    lines.append(f"        return ({values}), p")
    for number, step in enumerate(steps):
        lines.append(f"    if nulls >> {number} & 1:")
        lines.append(f"        v{number} = None")
        lines.append("    else:")
        lines.extend(f"        {line}" for line in step.lines)
    lines.append(f"    return ({values}), p")
    exec(compile("\n".join(lines), f"<row images of {count} columns>", "exec"), names)  # our source
    return cast(Callable[[bytes, int], tuple[Any, int]], names["image"])


#: A string's length, read from its prefix of 1 or 2 bytes.
_LENGTHS = {1: "data[p]", 2: "(data[p] | data[p + 1] << 8)"}


def _length_width(column: Any) -> int:
    """The bytes of a CHAR's or VARCHAR's length prefix: 2 when its longest value is over 255 bytes."""
    return 1 if int(column.max_length) <= 255 else 2


@dataclass(frozen=True)
class _Step:
    """How one column's value is read in a compiled image: ``lines`` read it into ``v<number>`` and move ``p`` past
    it; ``fixed``, a ``struct`` format character when the value is a fixed-width number (read beside its neighbours
    when no column is NULL)."""

    number: int
    lines: tuple[str, ...]
    fixed: str | None = None
    size: int = 0


def _step(number: int, column: Any, table: str, names: dict[str, object]) -> _Step:
    """How a column's value is read: numbers, strings, decimals and dates inlined, any other type by its reader.

    Raises:
        UnsupportedColumnType: a type this module does not decode.
    """
    kind, unsigned, v = column.type, bool(column.unsigned), f"v{number}"
    form = _INTEGERS.get((kind, unsigned)) or {FLOAT: _FLOAT, DOUBLE: _DOUBLE}.get(kind)
    if form is not None:
        names[f"F{number}"] = form.unpack_from
        return _Step(number, (f"{v}, = F{number}(data, p)", f"p += {form.size}"), form.format[-1], form.size)
    if kind in (VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        if kind in (VARCHAR, VAR_STRING, STRING):
            width, fixed = _length_width(column), int(column.max_length) if kind == STRING else 0
        else:
            width, fixed = int(column.length_size), 0
        size = _LENGTHS.get(width) or f"int.from_bytes(data[p:p + {width}], 'little')"
        encoding = column.character_set_name
        if encoding not in (None, "binary") and not _known_encoding(encoding):
            raise _unsupported(table, column, f"text in {encoding}, which Python has no codec for")
        if encoding in (None, "binary"):
            value = f"data[p + {width}:p + {width} + n]" + (f".ljust({fixed}, b'\\x00')" if fixed else "")
        else:
            errors = "mysql_latin1" if encoding == "cp1252" else "strict"
            value = f"data[p + {width}:p + {width} + n].decode({encoding!r}, {errors!r})"
        return _Step(number, (f"n = {size}", f"{v} = {value}", f"p += {width} + n"))
    if kind == NEWDECIMAL:
        decimal = _DecimalForm.of(int(column.precision), int(column.decimals))
        names[f"M{number}"], names[f"E{number}"] = decimal.context.multiply, decimal.exponent
        every, length = (1 << 8 * decimal.length) - 1, decimal.length
        return _Step(
            number,
            (
                f"n = int.from_bytes(data[p:p + {length}], 'big')",
                f"if n & {decimal.sign}: n ^= {decimal.sign}; {v} = M{number}({decimal.unscaled('n')}, E{number})",
                f"else: n ^= {every ^ decimal.sign}; {v} = M{number}(-({decimal.unscaled('n')}), E{number})",
                f"p += {length}",
            ),
        )
    names[f"R{number}"] = _reader(column, table)
    if kind in (DATE, NEWDATE):  # its reader tells a missing date's days, or refuses a zero date
        return _Step(
            number,
            (
                "n = data[p] | data[p + 1] << 8 | data[p + 2] << 16",
                f"{v} = DAYS.get(n)",
                f"if {v} is None: {v} = DAYS.add(n, R{number}(data, p)[0])",
                "p += 3",
            ),
        )
    return _Step(number, (f"{v}, p = R{number}(data, p)",))


def _skip(number: int, column: Any, table: str) -> _Step:
    """How a column's value is passed over, left None: its length, or its bytes told by its length's prefix.

    Raises:
        UnsupportedColumnType: a type this module does not decode.
    """
    kind = column.type
    if kind in (VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        width = int(column.length_size) if kind not in (VARCHAR, VAR_STRING, STRING) else _length_width(column)
        size = _LENGTHS.get(width) or f"int.from_bytes(data[p:p + {width}], 'little')"
        return _Step(number, (f"v{number} = None", f"p += {width} + {size}"))
    form = _INTEGERS.get((kind, bool(column.unsigned))) or {FLOAT: _FLOAT, DOUBLE: _DOUBLE}.get(kind)
    if form is not None:
        return _Step(number, (f"v{number} = None", f"p += {form.size}"))
    return _Step(number, (f"v{number} = None", f"p += {_fixed_size(column, table)}"))


def _fixed_size(column: Any, table: str) -> int:
    """The bytes of a value of a fixed-width type other than a number's."""
    kind = column.type
    if kind == NEWDECIMAL:
        return _DecimalForm.of(int(column.precision), int(column.decimals)).length
    _reader(column, table)  # refuses a type this module does not decode
    fraction = (int(getattr(column, "fsp", 0) or 0) + 1) // 2
    sizes = {INT24: 3, YEAR: 1, DATE: 3, NEWDATE: 3, DATETIME2: 5 + fraction, TIMESTAMP2: 4 + fraction}
    sizes |= {TIME2: 3 + fraction}
    if kind == BIT:
        return int(column.bytes)
    if kind in (ENUM, SET):
        return int(column.size)
    return sizes[kind]


def _without_nulls(steps: list[_Step], names: dict[str, object]) -> list[str]:
    """The steps of an image with no NULL, neighbouring fixed-width numbers read by one ``struct``."""
    lines: list[str] = []
    run: list[_Step] = []

    def flush() -> None:
        if len(run) == 1:
            lines.extend(run[0].lines)
        elif run:
            form = struct.Struct("<" + "".join(str(step.fixed) for step in run))
            names[f"S{run[0].number}"] = form.unpack_from
            lines.append(f"{''.join(f'v{step.number}, ' for step in run)}= S{run[0].number}(data, p)")
            lines.append(f"p += {form.size}")
        run.clear()

    for step in steps:
        if step.fixed is not None:
            run.append(step)
            continue
        flush()
        lines.extend(step.lines)
    flush()
    return lines


class _DayCache(dict[int, int]):
    """A DATE's packed value -> its days since 1970 (dates repeat: a table's rows hold few of them); bounded."""

    limit = 1 << 16

    def add(self, packed: int, days: object) -> object:
        if len(self) >= self.limit:
            self.clear()
        self[packed] = cast(int, days)
        return days


def _unsupported(table: str, column: Any, why: str) -> UnsupportedColumnType:
    return UnsupportedColumnType(
        f"{table}: column {column.name!r} reaches the binlog as {why}, which the change stream cannot decode: leave it "
        "out with the spec's source.columns, or tier the table by a cursor instead; nothing was tiered"
    )


def _reader(column: Any, table: str) -> Reader:
    """The value reader of a column of a type :func:`_step` does not inline."""
    kind = column.type
    if kind == INT24:
        return _int24(bool(column.unsigned))
    if kind == YEAR:
        return _year
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
    if kind in (TIMESTAMP, DATETIME, TIME):
        raise _unsupported(table, column, "a temporal type of before MySQL 5.6 (ALTER TABLE ... FORCE converts it)")
    if kind == JSON:
        raise _unsupported(table, column, "MySQL's binary JSON (MariaDB's JSON is text and is decoded)")
    raise _unsupported(table, column, f"binlog column type {kind}")


def _int24(unsigned: bool) -> Reader:
    def read(data: bytes, position: int) -> tuple[object, int]:
        return int.from_bytes(data[position : position + 3], "little", signed=not unsigned), position + 3

    return read


def _year(data: bytes, position: int) -> tuple[object, int]:
    value = data[position]
    return (1900 + value if value else 0), position + 1


@dataclass(frozen=True)
class _DecimalForm:
    """MySQL's binary DECIMAL of a precision and scale: groups of nine digits in four bytes, big-endian, the leftover
    digits in fewer; the sign in the first bit (set: not negative), the whole value's bits inverted when negative."""

    length: int
    sign: int
    #: Each group of digits, from the last: (its bit mask, its bits' offset from the lowest, what a unit of it is worth
    #: in the unscaled value).
    groups: tuple[tuple[int, int, int], ...]
    exponent: Decimal
    #: Exact: holds the column's every digit, and traps any rounding.
    context: Context

    @classmethod
    def of(cls, precision: int, scale: int) -> _DecimalForm:
        whole_groups, whole_rest = divmod(precision - scale, 9)
        fraction_groups, fraction_rest = divmod(scale, 9)
        sizes = (
            ([_DIG2BYTES[whole_rest]] if whole_rest else [])
            + [4] * (whole_groups + fraction_groups)
            + ([_DIG2BYTES[fraction_rest]] if fraction_rest else [])
        )
        widths = (
            ([10**whole_rest] if whole_rest else [])
            + [10**9] * (whole_groups + fraction_groups)
            + ([10**fraction_rest] if fraction_rest else [])
        )
        groups, offset, worth = [], 0, 1
        for size, width in reversed(list(zip(sizes, widths, strict=True))):
            groups.append(((1 << 8 * size) - 1, offset, worth))
            offset, worth = offset + 8 * size, worth * width
        length = sum(sizes)
        context = Context(prec=max(precision, 1), traps=[Inexact, Rounded])
        return cls(length, 1 << (8 * length - 1), tuple(groups), Decimal(f"1E-{scale}"), context)

    def unscaled(self, name: str) -> str:
        """A Python expression of the unscaled value held by ``name``, its sign bit cleared."""
        return " + ".join(
            f"({name} >> {offset} & {mask}) * {unit}" if offset else f"({name} & {mask}) * {unit}"
            for mask, offset, unit in self.groups
        )


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


def _known_encoding(name: str | None) -> bool:
    if name is None:
        return False
    try:
        codecs.lookup(name)
    except LookupError:
        return False
    return True
