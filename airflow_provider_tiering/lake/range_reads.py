"""Read the rows of a cursor range from a lake table's current snapshot, for eviction's check of each batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.errors import LakeError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType

#: How much of the lake's decoded rows a reader keeps between calls (eviction's batches).
RANGE_CACHE_BYTES = 256 * 1024 * 1024


class CursorRangeReader:
    """Reads cursor ranges of one table; a file's rows, once decoded, are kept (up to ``RANGE_CACHE_BYTES``) for
    the next range of the same snapshot: eviction asks for consecutive batches of one round's file, which a row
    filter would decode again for each batch (70x slower than a plain delete for 200,000 rows in batches of
    5,000)."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._cache: dict[str, pa.Table] = {}

    def rows(self, table: Table | None, column: str, lower: Any, upper: Any, like: pa.Table) -> pa.Table:
        """The current snapshot's rows with ``lower <= column <= upper``, with the columns and types of ``like``;
        files outside the range are pruned by their statistics.

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThanOrEqual
        from pyiceberg.io.pyarrow import ArrowScan

        snapshot = None if table is None else table.current_snapshot()
        if table is None or snapshot is None:
            return like.schema.empty_table()
        names = tuple(like.schema.names)
        key = (snapshot.snapshot_id, names)
        if self._key != key:
            self._key, self._cache = key, {}
        field_type = table.schema().find_field(column).field_type
        bounds = [_iceberg_literal(v, field_type) for v in (lower, upper)]
        row_filter = And(
            GreaterThanOrEqual(term=column, value=bounds[0]), LessThanOrEqual(term=column, value=bounds[1])
        )
        projected = table.schema().select(*names)
        parts = []
        try:
            for task in table.scan(row_filter=row_filter, selected_fields=names).plan_files():
                rows = self._cache.pop(task.file.file_path, None)
                if rows is None:
                    # The scan's reader for one task: a scan's to_arrow would decode the file again per range.
                    rows = ArrowScan(table.metadata, table.io, projected, AlwaysTrue()).to_table([task])
                    rows = rows.select(list(names)).cast(like.schema)
                self._cache[task.file.file_path] = rows  # most recently used last
                parts.append(rows)
            while len(self._cache) > 1 and sum(t.nbytes for t in self._cache.values()) > RANGE_CACHE_BYTES:
                self._cache.pop(next(iter(self._cache)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError) as exc:
            raise LakeError(f"the lake's rows cannot be compared with the hot store's: {exc}") from exc
        if not parts:
            return like.schema.empty_table()
        found = pa.concat_tables(parts)
        values = found.column(column)
        cursor_type = like.schema.field(column).type
        low, high = pa.scalar(lower, cursor_type), pa.scalar(upper, cursor_type)
        keep = pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
        return found.filter(keep)


def _iceberg_literal(value: Any, field_type: IcebergType) -> Any:
    """A hot store's cursor value as a pyiceberg filter literal of the column's type (ints as they are; times as
    ISO text, with an offset for ``timestamptz``)."""
    from pyiceberg.types import TimestamptzType

    from airflow_provider_tiering.core.eviction import cursor_key

    key = cursor_key(value)
    if isinstance(key, str) and isinstance(field_type, TimestamptzType):
        return f"{key}+00:00"
    return key
