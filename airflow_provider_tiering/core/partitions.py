"""Iceberg partition fields as a table spec declares them: ``"region"``, ``"day(ts)"``, ``"bucket(16, id)"``.

The syntax is Spark SQL's ``PARTITIONED BY`` (plural forms such as ``days(ts)`` are accepted too), so a
spec reads like the DDL an Iceberg user already knows. Parsed when the spec is built; the column's type is
checked against the transform when the lake table is created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TIME_TRANSFORMS = ("year", "month", "day", "hour")
_PLAIN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]{0,62})\s*$")
_UNARY = re.compile(r"^\s*(identity|years?|months?|days?|hours?)\s*\(\s*([A-Za-z_][A-Za-z0-9_]{0,62})\s*\)\s*$")
_WIDTH = re.compile(r"^\s*(bucket|truncate)\s*\(\s*(\d+)\s*,\s*([A-Za-z_][A-Za-z0-9_]{0,62})\s*\)\s*$")
_NAME_SUFFIX = {"bucket": "bucket", "truncate": "trunc"}


@dataclass(frozen=True)
class PartitionField:
    """One partition field: ``transform`` of ``column`` (``width`` for bucket and truncate)."""

    column: str
    transform: str = "identity"
    width: int | None = None

    @property
    def name(self) -> str:
        """The partition field's name in the Iceberg spec (Spark's defaults: ``ts_day``, ``id_bucket``)."""
        if self.transform == "identity":
            return self.column
        return f"{self.column}_{_NAME_SUFFIX.get(self.transform, self.transform)}"

    @property
    def iceberg_transform(self) -> str:
        """The transform as Iceberg writes it in table metadata: ``day``, ``bucket[16]``, ``truncate[4]``."""
        return f"{self.transform}[{self.width}]" if self.width is not None else self.transform

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"


def parse_partition_field(text: str) -> PartitionField:
    """Parse ``col``, ``identity(col)``, ``year|month|day|hour(col)``, ``bucket(N, col)`` or ``truncate(W, col)``."""
    if match := _PLAIN.match(text):
        return PartitionField(match.group(1))
    if match := _UNARY.match(text):
        transform = match.group(1).rstrip("s") if match.group(1) != "identity" else "identity"
        return PartitionField(match.group(2), transform)
    if match := _WIDTH.match(text):
        width = int(match.group(2))
        if width < 1:
            raise ValueError(f"{text!r}: the width of {match.group(1)} must be at least 1")
        return PartitionField(match.group(3), match.group(1), width)
    raise ValueError(
        f"{text!r} is not a partition field; use a column name, identity(col), year(col), month(col), "
        "day(col), hour(col), bucket(N, col) or truncate(W, col)"
    )
