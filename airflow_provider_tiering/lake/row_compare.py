"""Whether the lake holds given rows of the hot table, value for value: a multiset comparison, for the checks a round
makes after the hot table's storage was replaced or a column's type promoted (``core/follow_shape.py``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_NULL = "\x00null"
_COUNT = "__rows"
_HELD = "__held"


def _as_text(table: pa.Table, names: list[str]) -> pa.Table:
    """Every column as text, nulls spelled apart from any value: values of one type compare equal as text, and a
    join then matches NULLs too."""
    null = pa.scalar(_NULL, pa.string())
    columns: dict[str, Any] = {name: pc.fill_null(table.column(name).cast(pa.string()), null) for name in names}
    return pa.table(columns)


def _shortfall(rows: pa.Table, held: pa.Table) -> tuple[pa.Table, Any]:
    """``rows``' distinct rows as text, and how many of each ``held`` lacks."""
    names = list(rows.schema.names)
    wanted = _as_text(rows, names).group_by(names).aggregate([([], "count_all")])
    wanted = wanted.rename_columns([*names, _COUNT])
    have = _as_text(held.select(names), names).group_by(names).aggregate([([], "count_all")])
    have = have.rename_columns([*names, _HELD])
    joined = wanted.join(have, keys=names, join_type="left outer")
    held_counts: Any = pc.fill_null(joined.column(_HELD), pa.scalar(0, pa.int64()))
    short: Any = pc.subtract(joined.column(_COUNT), held_counts)
    return joined, pc.max_element_wise(short, 0)


def missing_rows(rows: pa.Table, held: pa.Table) -> int:
    """How many of ``rows`` (counted with repeats) ``held`` lacks; ``held`` has at least ``rows``' columns, of the
    same types."""
    if rows.num_rows == 0:
        return 0
    _, short = _shortfall(rows, held)
    return int(pc.sum(short).as_py() or 0)


def keys_of_missing_rows(rows: pa.Table, held: pa.Table, key: list[str]) -> pa.Table:
    """The ``key`` columns of the rows of ``rows`` that ``held`` lacks, value for value, typed as ``rows`` types
    them (each key once)."""
    if rows.num_rows == 0:
        return rows.select(key)
    joined, short = _shortfall(rows, held)
    texts = joined.filter(pc.greater(short, pa.scalar(0, pa.int64()))).select(key).group_by(key).aggregate([])
    numbered = _as_text(rows, key).append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    first = numbered.join(texts, keys=key, join_type="inner").group_by(key).aggregate([("__row", "min")])
    rows_short = first.column("__row_min")
    return rows.select(key).take(pc.take(rows_short, pc.sort_indices(rows_short)))
