"""Values decoded from a binlog's row images (``row_images.py``) as the Arrow types the table's lake columns have
(``table.py: arrow_type``): the types and values a ``SELECT`` through the cursor source's reader gives.

Most values go to Arrow as they are (integers, floats, ``Decimal``, text, bytes; dates, timestamps and times as the
integers Arrow stores them as). MariaDB's UUID, INET4 and INET6 columns reach the binlog as their binary storage and
are printed here as the server prints them; a TIME must be a time of day, as the cursor source requires.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import SourceError, UnsupportedColumnType
from airflow_provider_tiering.sources.mysql.table import time_of_day

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1)


def _uuid_text(value: bytes) -> str:
    text = value.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _inet4_text(value: bytes) -> str:
    return str(ipaddress.IPv4Address(value))


def _inet6_text(value: bytes) -> str:
    # inet_ntop, as the server prints an INET6: an IPv4-mapped or -compatible address ends in dotted form.
    return socket.inet_ntop(socket.AF_INET6, value)


#: How a MariaDB type whose binlog form is its binary storage is printed, by its ``information_schema`` data type.
PRINTED: Mapping[str, Callable[[bytes], str]] = {"uuid": _uuid_text, "inet4": _inet4_text, "inet6": _inet6_text}


def as_stored(value: object, kind: pa.DataType) -> object:
    """A value as a bulk read gives it in Python (a lake's default, a key read back) in the form this module takes
    for ``kind`` (the form ``row_images.py`` decodes to): dates as days, timestamps and times as microseconds."""
    if value is None:
        return None
    if pa.types.is_date(kind) and isinstance(value, date):
        return (value - _EPOCH_DAY).days
    if pa.types.is_timestamp(kind) and isinstance(value, datetime):
        naive = value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
        return (naive - _EPOCH) // timedelta(microseconds=1)
    if pa.types.is_time(kind) and isinstance(value, time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value


def column_array(values: Sequence[object], field: pa.Field[Any], data_type: str | None, table: str) -> pa.Array[Any]:
    """One column's decoded values as an Arrow array of ``field``'s type.

    Raises:
        UnsupportedColumnType: a TIME that is no time of day.
        SourceError: a value that does not convert (a column's type changed under the round).
    """
    kind = field.type
    printed = PRINTED.get(data_type or "")
    if printed is not None and pa.types.is_string(kind):
        values = [None if v is None else printed(v) if isinstance(v, bytes) else v for v in values]
    try:
        if pa.types.is_time(kind):
            return time_of_day(pa.array(values, pa.int64()), field.name)
        return pa.array(values, kind)
    except UnsupportedColumnType as exc:
        raise UnsupportedColumnType(f"{table}: {exc}") from exc
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
        raise SourceError(
            f"{table}: a change's value of column {field.name!r} does not convert to {kind} ({exc}): the column's type "
            "changed under the round; the next round reads it again"
        ) from exc


def sql_literal(value: object, kind: pa.DataType) -> str:
    """A key value in the form ``row_images.py`` decodes it to, as a SQL literal of the column's type (keys read
    again by key: inlined, as connectorx reads a query without parameters; text escaped by PyMySQL's own escaping)."""
    import pymysql.converters

    if value is None:
        return "NULL"
    if isinstance(value, int) and pa.types.is_date(kind):
        return f"DATE '{_EPOCH_DAY + timedelta(days=value)}'"
    if isinstance(value, int) and pa.types.is_timestamp(kind):
        moment = _EPOCH + timedelta(microseconds=value)
        if kind.tz is not None:  # a TIMESTAMP: the session's time zone is UTC
            return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
        return f"CAST('{moment.isoformat(sep=' ')}' AS DATETIME(6))"
    if isinstance(value, bool) or isinstance(value, (int, Decimal, float)):
        return str(value)
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return f"'{pymysql.converters.escape_string(str(value))}'"
