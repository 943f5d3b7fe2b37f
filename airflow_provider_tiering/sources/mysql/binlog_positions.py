"""A binlog position (a file of the server's binlog and an offset in it) as the one integer the change-stream kernel
orders positions by, and back.

A binlog's files are numbered (``binlog.000042``): the number goes up with every rotation, and an offset is below
4 GiB (``max_binlog_size`` is at most 1 GiB), so ``number << 32 | offset`` orders as the log does. The bytes between
two positions in different files are not their difference: :func:`log_bytes` takes the files' sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_tiering.core.errors import SourceError

_OFFSET_BITS = 32


@dataclass(frozen=True)
class BinlogFiles:
    """How the server names its binlog's files: the base name before the number, and the number's width."""

    base: str
    width: int = 6

    def name(self, number: int) -> str:
        return f"{self.base}.{number:0{self.width}d}"

    @classmethod
    def of(cls, file: str) -> BinlogFiles:
        base, _, number = file.rpartition(".")
        return cls(base, len(number))


def file_number(file: str) -> int:
    """The number of a binlog file (``binlog.000042`` -> 42).

    Raises:
        SourceError: a name without a number after its last dot.
    """
    _, _, number = file.rpartition(".")
    if not number.isdigit():
        raise SourceError(f"{file!r} is not the name of a binlog file (<base>.<number>)")
    return int(number)


def pack(file: str, offset: int) -> int:
    return file_number(file) << _OFFSET_BITS | offset


def unpack(position: int) -> tuple[int, int]:
    """``(file number, offset)``."""
    return position >> _OFFSET_BITS, position & ((1 << _OFFSET_BITS) - 1)


def describe(position: int, files: BinlogFiles | None) -> str:
    number, offset = unpack(position)
    return f"{files.name(number) if files is not None else f'binlog file {number}'}:{offset}"


def log_bytes(start: int, end: int, sizes: Mapping[int, int]) -> int:
    """The binlog's bytes between two positions, from its files' sizes by number (a file missing from ``sizes``
    counts as nothing)."""
    (first, at), (last, upto) = unpack(start), unpack(end)
    if (first, at) >= (last, upto):
        return 0
    if first == last:
        return upto - at
    between = sum(sizes.get(number, 0) for number in range(first + 1, last))
    return max(0, sizes.get(first, at) - at) + between + upto
